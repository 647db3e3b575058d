"""The console's transaction timeline in a real browser (Debian's chromium, headless):
the hanging-transaction scenario runs and the page draws the late-app transaction's
aborted bar with its ABORT marker, the delayed write's fault firing and the clock
jump, and the partition's held LSO as a gap naming late-app; its log browser strikes
the aborted record through and shows the ABORT control batch. `make console-test`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.browser.test_console import DRIVER, node_modules  # noqa: F401 (the fixture)
from tests.integration.test_event_history import group_story
from tests.scenarios.helpers import create_topic
from tests.scenarios.test_hanging_transaction import _abort_with_a_late_write

pytestmark = pytest.mark.browser
TIMELINE = DRIVER.parent / "timeline.mjs"
GROUPS = DRIVER.parent / "groups.mjs"


def test_the_timeline_shows_the_hanging_transaction_and_who_holds_the_lso(node_modules, broker_factory,  # noqa: F811
                                                                          tmp_path):
    broker = broker_factory(scenario="hanging-transaction", admin=True)
    topic = create_topic(broker)
    late = asyncio.run(_abort_with_a_late_write(broker, topic))
    assert late["late_write"] == ("NONE", 2)  # after its ABORT marker: the LSO stops at 2

    screenshot = Path(os.environ.get("TIMELINE_SCREENSHOT", tmp_path / "timeline.png"))
    log_screenshot = Path(os.environ.get("LOG_SCREENSHOT", tmp_path / "log.png"))
    run = subprocess.run(["node", str(TIMELINE), broker.admin_url + "/", "late-app", f"{topic}-0", str(screenshot),
                          str(log_screenshot)],
                         cwd=TIMELINE.parent, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    late_bars = [b for b in seen["bars"] if b["id"] == "late-app"]
    assert [b["outcome"] for b in late_bars] == ["aborted"]
    assert late_bars[0]["partitions"] == f"{topic}-0"
    assert any(m.startswith("ABORT marker of late-app") for m in seen["markers"])
    assert any("delay" in f and "Produce" in f for f in seen["faults"]), seen["faults"]
    assert any(c.startswith("clock_advance") for c in seen["controls"]), seen["controls"]
    # held by the aborted transaction while it was open, then by its late write for good
    assert seen["gaps"][-1] == f"{topic}-0: LSO held at 2 (high watermark 3) by late-app", seen["gaps"]
    assert screenshot.stat().st_size > 0

    # the log browser: the aborted record struck through, its ABORT marker, the late write past the LSO
    records = {r["offset"]: r for r in seen["log"]["records"]}
    assert [(o, r["read_committed"], r["value"]) for o, r in sorted(records.items())] == [
        (0, "aborted", "aborted"), (2, "past-lso", "late")]
    assert records[0]["decoration"] == "line-through" and records[2]["decoration"] == "none"
    assert float(records[2]["opacity"]) < 1
    assert len(seen["log"]["controls"]) == 1 and "ABORT marker (coordinator epoch 0)" in seen["log"]["controls"][0]


def test_the_console_shows_a_groups_offsets_lag_and_rebalances_and_zooms(node_modules, eosbroker_cluster,  # noqa: F811
                                                                         tmp_path):
    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    group = "console-group-" + topic
    group_story(broker, topic, group, "console-offsets-" + topic)

    screenshot = Path(os.environ.get("GROUPS_SCREENSHOT", tmp_path / "groups.png"))
    run = subprocess.run(["node", str(GROUPS), broker.admin_url + "/", group, str(screenshot)],
                         cwd=GROUPS.parent, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    # committed 5; the LSO (7) trails the high watermark (8) behind the open transaction
    assert seen["lag"] == [[group, f"{topic}-0", "5", "", "7", "8", "2", "3"]]
    # the rebalance from its start (PreparingRebalance) to its end (Stable): a band; then the member leaves
    assert seen["lane"] == 1 and len(seen["rebalances"]) == 4
    assert "classic group PreparingRebalance (rebalance started), generation" in seen["rebalances"][0]
    assert "1 member; joined: " in seen["rebalances"][0]
    assert "classic group Stable (rebalance ended)" in seen["rebalances"][2]
    assert "0 members; left: " in seen["rebalances"][3]
    assert seen["bands"] == [True]  # one rebalance, ended
    assert [state for state, _ in seen["commits"]] == ["committed", "pending", "committed"]
    assert f"(transaction console-offsets-{topic})" in seen["commits"][1][1]
    assert seen["committedLines"] == [f"{topic}-0"]

    windows = seen["windows"]
    span = lambda w: w[1] - w[0]  # noqa: E731
    assert span(windows["zoomed"]) < span(windows["all"]) / 3
    assert windows["back"][0] < windows["zoomed"][0] and span(windows["back"]) == span(windows["zoomed"])
    assert span(windows["wheeled"]) > span(windows["back"])
    assert windows["again"][0] == windows["all"][0] and span(windows["again"]) >= span(windows["all"])


def test_the_console_shows_a_share_groups_records_in_flight_and_members(node_modules, eosbroker_cluster,  # noqa: F811
                                                                         tmp_path):
    from confluent_kafka import AcknowledgeType

    from tests.integration.test_share_groups import PROFILE, consumer, create, new_group, poll_until, produce

    broker = eosbroker_cluster(PROFILE, admin=True)
    topic = "console-share-" + tmp_path.name[-8:]
    create(broker.bootstrap_servers, topic)
    group = new_group(broker.bootstrap_servers)
    produce(broker.bootstrap_servers, topic, [b"s%d" % i for i in range(3)])
    reader = consumer(broker.bootstrap_servers, group, topic, explicit=True)
    got = poll_until(reader, lambda ms: len(ms) >= 3)
    reader.acknowledge(got[0], AcknowledgeType.REJECT)  # archived; the other two stay acquired
    reader.commit_sync()
    try:
        run = subprocess.run(["node", str(GROUPS), broker.admin_url + "/", group, "", "share"],
                             cwd=GROUPS.parent, capture_output=True, text=True, timeout=120)
    finally:
        reader.close()
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    # group, partition, leader, start offset, in flight, available, acquired, acknowledged, archived
    assert seen["shares"] == [[group, f"{topic}-0", "1", "1", "2", "0", "2", "0", "0"]], seen["shares"]
    assert seen["groupRow"][1:3] == ["share", "Stable"]
    assert seen["lane"] == 1 and "share group Stable, epoch" in seen["rebalances"][0]
    assert "1 member; joined: " in seen["rebalances"][0]
