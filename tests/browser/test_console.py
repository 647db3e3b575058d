"""The live console in a real browser (Debian's chromium driven by playwright-core,
headless): a transaction a client opens shows up with its partitions, and aborting it
from the page lets a read_committed reader get past it. `make console-test`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from broker.testing import wait_until

pytestmark = pytest.mark.browser
HERE = Path(__file__).resolve().parent
DRIVER = HERE / "console.mjs"


@pytest.fixture(scope="module")
def node_modules():
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        pytest.fail("playwright-core is not installed: run `make console-test` (npm install in tests/browser)")
    if not shutil.which(os.environ.get("CHROMIUM", "chromium")):
        pytest.fail("chromium is not installed: run `make console-test` (apt-get install chromium)")


def _lso_and_hw(broker, topic: str) -> tuple[int, int]:
    with urllib.request.urlopen(broker.admin_url + "/console/state", timeout=30) as answer:
        parts = {(p["topic"], p["partition"]): p for p in json.load(answer)["partitions"]}
    p = parts[(topic, 0)]
    return p["last_stable_offset"], p["high_watermark"]


def test_a_transaction_appears_and_is_aborted_from_the_page(node_modules, eosbroker_cluster, tmp_path):
    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    transactional_id = "console-" + topic
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, b"held-%d" % i, partition=0)
    assert producer.flush(10) == 0
    # the open transaction holds read_committed readers at its first offset
    assert broker.read_committed(topic) == []
    assert _lso_and_hw(broker, topic) == (0, 3)

    broker.fault("delay", api_key=3, delay_ms=1)  # Metadata 1 ms late: the faults section has a rule
    screenshot = Path(os.environ.get("CONSOLE_SCREENSHOT", tmp_path / "console.png"))
    run = subprocess.run(["node", str(DRIVER), broker.admin_url + "/", transactional_id, topic, str(screenshot)],
                         cwd=HERE, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert "Ongoing" in seen["row"] and f"{topic}-0" in seen["row"]
    assert "Abort" in seen["after"]  # PrepareAbort or CompleteAbort
    assert screenshot.stat().st_size > 0

    # the reader gets past the aborted records: the LSO reaches the high watermark
    wait_until(lambda: _lso_and_hw(broker, topic) == (4, 4), 15, message="the abort marker")
    later = Producer({"bootstrap.servers": broker.bootstrap_servers})
    later.produce(topic, b"after", partition=0)
    assert later.flush(10) == 0
    broker.assert_topic_holds(topic, ["after"])
    # and the client that opened it is fenced
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)


def test_the_console_with_an_admin_token_shows_faults_and_moves_the_clock(node_modules, tmp_path):
    from broker.control.api_client import ControlClient, ControlRefused
    from broker.testing import BrokerProcess

    token = "console-secret-token"
    broker = BrokerProcess(tmp_path / "data", nodes=2, admin=True, extra_args=["--admin-token", token]).start()
    try:
        control = ControlClient(broker.admin_url, token)
        rule = control.fault_add(action="delay", api_key=19, delay_ms=1)  # CreateTopics answered 1 ms late
        broker.create_topic()  # the rule fires
        fired = control.faults()["rules"][0]["fired"]
        assert fired >= 1
        with pytest.raises(urllib.error.HTTPError) as refused:  # the page's data needs the token
            urllib.request.urlopen(broker.admin_url + "/console/state", timeout=30)
        assert refused.value.code == 401

        run = subprocess.run(["node", str(HERE / "console_token.mjs"), broker.admin_url + "/", token,
                              str(rule["id"])], cwd=HERE, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        seen = json.loads(run.stdout.strip().splitlines()[-1])
        assert "delay" in seen["ruleText"] and "api_key=19" in seen["ruleText"] and str(fired) in seen["ruleText"]
        assert seen["nodes"] == 2 and not seen["promptedAgain"]
        assert seen["cookies"] == 0 and not any(token in u for u in seen["urls"])  # only ever in a header
        assert control.clock()["offset_ms"] == 3_600_000
        with pytest.raises(ControlRefused):
            ControlClient(broker.admin_url, "wrong").clock()
    finally:
        broker.kill()
