"""The pytest plugin the package ships (broker/testing/plugin.py), as a user meets it:
pytest runs of small test files that use its fixtures, in a subprocess each."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker.testing import InProcessBroker, topic_difference, wait_until
from broker.testing.helpers import ConsumedRecord

pytest_plugins = ["pytester"]

_FIRST_TEST = """
    from confluent_kafka import Producer

    def test_exactly_once(eosbroker):
        topic = eosbroker.create_topic(partitions=3)
        p = Producer({"bootstrap.servers": eosbroker.bootstrap_servers, "transactional.id": "tx-1"})
        p.init_transactions(10)
        p.begin_transaction()
        for v in ("a", "b", "c"):
            p.produce(topic, v.encode())
        p.commit_transaction(10)
        p.begin_transaction()
        p.produce(topic, b"aborted")
        p.abort_transaction(10)
        eosbroker.assert_topic_holds(topic, ["a", "b", "c"])
"""


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_user=textwrap.dedent(source))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=120)


def test_a_first_test_with_the_session_broker(pytester):
    _run(pytester, _FIRST_TEST).assert_outcomes(passed=1)


def test_the_first_test_in_the_docs(pytester):
    docs = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    first_test = docs.split("```python\n", 1)[1].split("```", 1)[0]
    assert "def test_first(eosbroker)" in first_test
    pytester.makepyfile(test_first=first_test)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120).assert_outcomes(passed=1)


def test_in_process_broker_when_asked(pytester):
    result = _run(pytester, _FIRST_TEST + """
    def test_it_runs_in_this_process(eosbroker):
        assert eosbroker.broker is not None and eosbroker.broker.port == eosbroker.port
    """, "--eosbroker-in-process")
    result.assert_outcomes(passed=2)


def test_one_broker_per_xdist_worker(pytester, monkeypatch):
    pytester.makeini("[pytest]\neosbroker_settings =\n    num.partitions=2\n")
    source = """
        import os

        def _note(eosbroker):
            path = os.path.join(os.environ["NOTES"], os.environ.get("PYTEST_XDIST_WORKER", "main"))
            with open(path, "a") as f:
                f.write(eosbroker.bootstrap_servers + "\\n")
    """ + "".join(f"""
        def test_{i}(eosbroker):
            _note(eosbroker)
            topic = eosbroker.create_topic()
            eosbroker.assert_topic_holds(topic, [])
    """ for i in range(4))
    notes = pytester.mkdir("notes")
    pytester.makepyfile(test_user=textwrap.dedent(source))
    monkeypatch.setenv("NOTES", str(notes))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", timeout=120)
    result.assert_outcomes(passed=4)
    per_worker = {p.name: set(p.read_text().split()) for p in notes.iterdir()}
    assert set(per_worker) == {"gw0", "gw1"}
    assert all(len(addresses) == 1 for addresses in per_worker.values())  # one broker per worker
    assert per_worker["gw0"] != per_worker["gw1"]


def test_owned_brokers_get_their_settings_and_survive_restarts(pytester):
    _run(pytester, """
        def test_restart(eosbroker_cluster, eosbroker):
            b = eosbroker_cluster({"num.partitions": 4})
            assert b.bootstrap_servers != eosbroker.bootstrap_servers
            topic = b.create_topic("auto", partitions=4)
            from confluent_kafka import Producer
            p = Producer({"bootstrap.servers": b.bootstrap_servers, "enable.idempotence": True})
            for i in range(10):
                p.produce(topic, str(i).encode(), partition=i % 4)
            assert p.flush(10) == 0
            b.kill()
            b.start()
            records = b.assert_topic_holds(topic, [str(i) for i in range(10)])
            assert {r.partition for r in records} == {0, 1, 2, 3}
    """).assert_outcomes(passed=1)


def test_a_failed_assertion_names_what_is_missing_and_what_is_duplicated(pytester):
    result = _run(pytester, """
        from confluent_kafka import Producer

        def test_duplicated(eosbroker):
            topic = eosbroker.create_topic()
            p = Producer({"bootstrap.servers": eosbroker.bootstrap_servers})
            for v in (b"x", b"x", b"y"):
                p.produce(topic, v)
            assert p.flush(10) == 0
            eosbroker.assert_topic_holds(topic, ["x", "z"])
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*(3 read, 2 expected)*", "*missing: b'z'*",
                                 "*unexpected (or duplicated): b'x', b'y'*"])


def test_bad_settings_are_a_clear_error(pytester):
    pytester.makeini("[pytest]\neosbroker_settings =\n    no.such.setting=1\n")
    result = _run(pytester, """
        def test_never_runs(eosbroker):
            pass
    """)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*broker did not start*", "*unknown setting 'no.such.setting'*"])


def test_a_test_that_leaks_a_client_is_named_in_a_warning(pytester):
    result = _run(pytester, """
        from confluent_kafka import Producer

        KEPT = []

        def test_leaks(eosbroker_cluster):
            b = eosbroker_cluster()
            KEPT.append(Producer({"bootstrap.servers": b.bootstrap_servers}))

        def test_closes(eosbroker_cluster):
            b = eosbroker_cluster()
            p = Producer({"bootstrap.servers": b.bootstrap_servers})
            p.flush(1)
    """)
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*ClientLeakWarning: test_user.py::test_leaks: 1 confluent-kafka client(s) "
                                 "outlived the test*"])
    assert "test_user.py::test_closes: " not in result.stdout.str()


# -- the helpers directly -------------------------------------------------------------


def _rec(value, key=None):
    return ConsumedRecord("t", 0, 0, key, value, (), 0)


def test_topic_difference_is_a_multiset_comparison():
    records = [_rec(b"a"), _rec(b"a"), _rec(b"b")]
    assert topic_difference(records, ["a", "a", "b"]) == ({}, {})
    missing, unexpected = topic_difference(records, ["a", "b", "c"])
    assert dict(missing) == {b"c": 1} and dict(unexpected) == {b"a": 1}
    keyed = [_rec(b"1", b"k1"), _rec(None, b"k2")]
    assert topic_difference(keyed, [("k1", "1"), (b"k2", None)]) == ({}, {})
    with pytest.raises(TypeError, match="mix"):
        topic_difference(records, ["a", ("k", "v")])


def test_in_process_broker_shows_its_state_and_restarts(tmp_path):
    b = InProcessBroker(tmp_path / "data", {"num.partitions": 2}).start()
    try:
        topic = b.create_topic(partitions=2)
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "in-process"})
        p.init_transactions(10)
        p.begin_transaction()
        p.produce(topic, b"v", partition=1)
        p.commit_transaction(10)
        partition = b.broker.cluster.partitions[(topic, 1)]
        wait_until(lambda: partition.high_watermark == 2, message="the record and its commit marker")
        b.restart()
        b.assert_topic_holds(topic, ["v"])
        with pytest.raises(RuntimeError, match="cannot be killed"):
            b.kill()
    finally:
        b.stop()
    assert not b.alive


@pytest.mark.parametrize("in_process", [False, True])
def test_a_cluster_with_its_control_api(eosbroker_cluster, in_process):
    b = eosbroker_cluster(nodes=3, admin=True, in_process=in_process)
    topic = b.create_topic(partitions=3)
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "plugin-" + topic})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    assert p.flush(10) == 0
    (txn,) = [t for t in b.transactions() if t["transactional_id"] == "plugin-" + topic]
    assert txn["state"] == "Ongoing" and txn["partitions"] == [f"{topic}-0"]
    assert b.stop_node(2)["node"]["state"] == "stopped"
    assert b.start_node(2)["node"]["state"] == "running"
    p.commit_transaction(30)
    b.assert_topic_holds(topic, ["open"], within=15)


def test_clock_and_fault_handles(eosbroker_cluster):
    b = eosbroker_cluster(admin=True)
    topic = b.create_topic()
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "clock-" + topic,
                  "transaction.timeout.ms": 60_000})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"held", partition=0)
    assert p.flush(10) == 0
    b.advance_clock("2m")  # past the transaction's timeout: the coordinator aborts it
    wait_until(lambda: [t["state"] for t in b.transactions() if t["transactional_id"] == "clock-" + topic]
               == ["CompleteAbort"], 15, message="the timeout abort")
    rule = b.fault("close_before", api_key=3)  # Metadata
    assert rule["action"] == "close_before"
