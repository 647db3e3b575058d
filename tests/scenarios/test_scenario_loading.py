"""Loading scenarios: `ctl scenario`, the control API and `serve --scenario`; bad
scenarios are refused whole, naming the field, and leave nothing behind."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from broker.control.api_client import ControlRefused
from broker.wire.client import KafkaConnection

pytestmark = pytest.mark.timeout(90)

FILE = """
name = "my-incident"
[[faults]]
action = "close_before"
api = "Fetch"
count = 2
[[triggers]]
when = { api = "EndTxn", committed = false }
do = [{ op = "clock_advance", by = "1h" }]
"""


def ctl(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.program", "ctl", "--admin", broker.admin_url, "scenario", *args],
                          capture_output=True, text=True, timeout=60)


def test_ctl_lists_loads_and_unloads(broker_factory, tmp_path):
    broker = broker_factory(admin=True)
    listed = ctl(broker, "list")
    assert listed.returncode == 0 and "zombie-fencing" in listed.stdout and "transaction-timeout" in listed.stdout
    shown = ctl(broker, "show", "lost-produce-response")
    assert shown.returncode == 0 and 'action = "drop_response"' in shown.stdout
    path = tmp_path / "mine.toml"
    path.write_text(FILE)
    loaded = ctl(broker, "load", str(path))
    assert loaded.returncode == 0, loaded.stderr
    assert "scenario my-incident loaded" in loaded.stdout and "1 fault rule(s)" in loaded.stdout
    [rule] = broker.control().faults()["rules"]
    assert (rule["action"], rule["api_key"], rule["count"]) == ("close_before", 1, 2)
    state = broker.scenario_state()
    assert state["name"] == "my-incident" and state["triggers"][0]["when"]["committed"] is False
    # loading another replaces it: the first one's rule goes
    assert ctl(broker, "load", "lost-produce-response").returncode == 0
    assert [r["action"] for r in broker.control().faults()["rules"]] == ["drop_response"]
    assert ctl(broker, "unload").returncode == 0
    assert broker.control().faults()["rules"] == [] and broker.scenario_state() is None


HOLDING = """
name = "holding"
[[faults]]
action = "hold"
api = "ListGroups"
"""


async def test_unloading_a_scenario_releases_the_requests_its_rules_hold(broker_factory):
    """A held request waits until its rule releases it, is removed or cleared: unloading
    the scenario removes its rules, so what they held is answered."""
    broker = broker_factory(admin=True)
    control = broker.control()
    await asyncio.to_thread(control.scenario_load, toml=HOLDING)
    conn = await KafkaConnection.connect("127.0.0.1", broker.port)
    try:
        answer = conn.send(16, 4, {"states_filter": ()})
        for _ in range(300):
            [rule] = (await asyncio.to_thread(control.faults))["rules"]
            if rule["held"]:
                break
            await asyncio.sleep(0.1)
        assert rule["held"] == 1 and not answer.done()
        await asyncio.to_thread(control.scenario_unload)
        assert (await asyncio.wait_for(answer, 30)).error_code == 0
        assert (await asyncio.to_thread(control.faults))["rules"] == []
    finally:
        await conn.close()


def test_bad_scenarios_are_refused_whole(broker_factory):
    broker = broker_factory(admin=True)
    control = broker.control()
    control.fault_add(action="delay", api_key=0, delay_ms=5)  # the operator's own rule stays
    cases = [
        ({"scenario": "zombie-fensing"}, 404, "scenario", "did you mean 'zombie-fencing'"),
        ({"toml": FILE.replace("committed = false", "commited = false")}, 400, "triggers[0].when.commited",
         "neither a trigger key"),
        ({"toml": FILE.replace('by = "1h"', 'by = "an hour"')}, 400, "triggers[0].do[0].by", "duration"),
        ({"toml": "nodes = 3\n" + FILE}, 409, "nodes", "needs 3 node(s)"),
        ({"toml": FILE.replace("[[faults]]", "[settings]\n\"transaction.max.timeout.ms\" = 1000\n[[faults]]")}, 409,
         "settings.transaction.max.timeout.ms", "serve it with"),
        ({"toml": "name = "}, 400, "toml", "not valid TOML"),
        ({}, 400, "scenario", "exactly one"),
    ]
    for args, status, field, words in cases:
        with pytest.raises(ControlRefused) as refused:
            control.scenario_load(**args)
        assert (refused.value.status, refused.value.field) == (status, field), refused.value
        assert words in refused.value.message
    assert [r["action"] for r in control.faults()["rules"]] == ["delay"]
    assert control.scenario() == {"loaded": None}
    failed = ctl(broker, "load", "zombie-fensing")
    assert failed.returncode == 1 and "refused (404)" in failed.stderr and "did you mean" in failed.stderr


def test_serve_refuses_an_unknown_scenario(tmp_path):
    served = subprocess.run([sys.executable, "-m", "broker.program", "serve", "--port", "0", "--data-dir",
                             str(tmp_path / "d"), "--scenario", "no-such-thing"],
                            capture_output=True, text=True, timeout=60)
    assert served.returncode == 2 and "no scenario 'no-such-thing'" in served.stderr


def test_serve_with_a_scenario_runs_it(tmp_path):
    from broker.testing import BrokerProcess

    broker = BrokerProcess(tmp_path / "d", extra_args=["--scenario", "transaction-timeout"], admin=True).start()
    try:
        assert broker.scenario_state()["name"] == "transaction-timeout"
        assert broker.control().clock()["virtual"]
    finally:
        broker.stop()


def test_an_in_process_broker_runs_a_scenario_on_a_virtual_clock(broker_factory):
    broker = broker_factory(scenario="transaction-timeout", in_process=True)
    assert broker.scenario_state()["name"] == "transaction-timeout"
    assert broker.control().clock()["virtual"]
    assert broker.broker.triggers is not None


def test_the_catalogue_without_a_broker():
    from broker.faults.scenarios import catalogue

    listed = subprocess.run([sys.executable, "-m", "broker.program", "scenarios"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == sorted(catalogue())
    shown = subprocess.run([sys.executable, "-m", "broker.program", "scenarios", "zombie-fencing"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout == catalogue()["zombie-fencing"]
    unknown = subprocess.run([sys.executable, "-m", "broker.program", "scenarios", "zombie"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 1 and "no scenario 'zombie'" in unknown.stderr and "zombie-fencing" in unknown.stderr
