"""Link faults between nodes with a stock client (confluent-kafka): the acks=all
replication wait (REQUEST_TIMED_OUT while a follower is cut off, success once the ISR
shrinks after replica.lag.time.max.ms on the virtual clock, the ISR growing back when
the link heals; acks=1 never waits), a paused follower, delayed and lossy links, and
markers retried until a cut link heals, the transaction held in PrepareCommit."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import KafkaError, Producer

from broker.control.api_client import ControlRefused
from broker.testing.helpers import wait_until
from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(broker_factory):
    return broker_factory(nodes=3, admin=True)


def _partition(control, topic: str, index: int = 0) -> dict:
    return next(p for p in control.cluster()["partitions"] if p["topic"] == topic and p["partition"] == index)


def _arrived(control, client_id: str):
    """A rule that only counts (a 1 ms delay): tells when a client's Produce reached the broker."""
    rule = control.fault_add(action="delay", delay_ms=1, api_key=0, client_id=client_id)
    return lambda n=1: wait_until(lambda: _rule(control, rule["id"])["matched"] >= n, timeout=30)


def _rule(control, rule_id: int) -> dict:
    return next(r for r in control.faults()["rules"] if r["id"] == rule_id)


def _send(producer: Producer, topic: str, value: bytes, results: list) -> None:
    producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: results.append(err))
    producer.poll(0)


def test_acks_all_times_out_while_a_follower_is_cut_off_then_succeeds_once_the_isr_shrinks(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    state = _partition(control, topic_name)
    leader, follower = state["leader"], next(r for r in state["replicas"] if r != state["leader"])
    control.network_cut(source=leader, target=follower, both=True)

    acks_one = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": 0})
    one: list = []
    _send(acks_one, topic_name, b"acks-1", one)
    assert acks_one.flush(30) == 0 and one == [None]  # acks=1 never waits for followers

    arrived = _arrived(control, "acks-all")
    acks_all = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "client.id": "acks-all",
                         "enable.idempotence": False, "retries": 0, "linger.ms": 0,
                         "request.timeout.ms": 5000, "message.timeout.ms": 120000})
    timed_out: list = []
    _send(acks_all, topic_name, b"timed-out", timed_out)
    arrived(1)
    assert acks_all.poll(0.5) == 0 and timed_out == []  # waiting for the cut-off follower
    control.clock_advance(by="6s")  # past the request's timeout, not yet replica.lag.time.max.ms
    assert acks_all.flush(30) == 0
    assert [e.code() for e in timed_out] == [KafkaError.REQUEST_TIMED_OUT]
    assert follower in _partition(control, topic_name)["isr"]

    patient = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "client.id": "acks-all",
                        "enable.idempotence": False, "retries": 0, "linger.ms": 0,
                        "request.timeout.ms": 120000, "message.timeout.ms": 180000})
    waiting: list = []
    _send(patient, topic_name, b"after-shrink", waiting)
    arrived(2)
    control.clock_advance(by="30s")  # the follower has been behind for 36 s: it leaves the ISR
    assert patient.flush(30) == 0 and waiting == [None]
    assert follower not in _partition(control, topic_name)["isr"]

    control.network_heal(source=leader, target=follower, both=True)
    assert follower in _partition(control, topic_name)["isr"]  # caught up again: back in the ISR
    assert control.cluster()["links"] == []
    # the timed-out record was appended before the wait, as in Kafka: it is in the log, once
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 3), [b"acks-1", b"timed-out", b"after-shrink"])


def test_an_acks_all_produce_waits_for_a_paused_follower_until_it_resumes(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    state = _partition(control, topic_name)
    follower = next(r for r in state["replicas"] if r != state["leader"])
    arrived = _arrived(control, "idempotent")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "client.id": "idempotent", "linger.ms": 0})
    results: list = []
    _send(producer, topic_name, b"before", results)
    assert producer.flush(30) == 0 and results == [None]
    control.node_pause(node_id=follower)
    _send(producer, topic_name, b"while-paused", results)
    arrived(2)
    assert producer.poll(0.5) == 0 and results == [None]
    control.node_resume(node_id=follower)
    assert producer.flush(30) == 0 and results == [None, None]
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 2), [b"before", b"while-paused"])


def test_delayed_and_lossy_links_slow_acks_all_but_lose_nothing(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    state = _partition(control, topic_name)
    leader = state["leader"]
    links = control.network_link(source=leader, delay_ms="100ms", both=False)["links"]
    assert links == [{"source": leader, "target": None, "cut": False, "delay_ms": 100, "loss": 0.0, "seed": None}]
    follower = next(r for r in state["replicas"] if r != leader)
    lossy = control.network_link(source=follower, target=leader, loss=0.5, seed=11)["links"]
    assert {"source": follower, "target": leader, "cut": False, "delay_ms": 0, "loss": 0.5, "seed": 11} in lossy
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    values = [b"l%d" % i for i in range(5)]
    results: list = []
    for v in values:
        _send(producer, topic_name, v, results)
        producer.flush(30)
    assert producer.flush(30) == 0 and results == [None] * 5
    assert set(_partition(control, topic_name)["isr"]) == set(state["replicas"])  # slow is not behind
    control.network_heal()
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 5), values)


def test_markers_to_a_cut_off_leader_are_retried_until_the_link_heals(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"m-{topic_name}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    [txn] = [t for t in cluster.transactions() if t["transactional_id"] == txn_id]
    coordinator = txn["coordinator"]
    leader = _partition(control, topic_name)["leader"]
    if leader == coordinator:
        other = next(r for r in _partition(control, topic_name)["replicas"] if r != coordinator)
        control.partition_move(topic=topic_name, partition=0, leader=other)
        leader = other
    producer.begin_transaction()
    producer.produce(topic_name, b"held-back", partition=0)
    assert producer.flush(30) == 0
    control.network_cut(source=coordinator, target=leader)
    # The cut-off node leaves the ISRs first (replica.lag.time.max.ms): EndTxn is then
    # answered once PREPARE_COMMIT is in the ISR left, at once
    control.clock_advance(by="31s")  # within the transaction's timeout (60 s)
    producer.commit_transaction(30)
    wait_until(lambda: [t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id]
               == ["PrepareCommit"], timeout=30)
    assert read_committed(cluster.bootstrap, topic_name, 1, 1, timeout=3) == []  # the LSO is held
    control.clock_advance(by="1m")  # markers keep being retried, not given up
    assert [t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id] == ["PrepareCommit"]
    # find-hanging shows it as awaiting its marker, not as hanging (aborting it would undo a commit)
    found = subprocess.run([sys.executable, "-m", "broker.program", "transactions", "--bootstrap-server",
                            cluster.bootstrap, "find-hanging", "--max-transaction-timeout", "0"],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    table, note = found.stdout.split("\n\n")
    assert len(table.splitlines()) == 1  # no hanging transaction: only the header
    assert note.startswith(f"Not hanging, awaiting its COMMIT marker: {topic_name}-0 from offset 0, "
                           f"transactional id {txn_id} (PrepareCommit on coordinator {coordinator}")
    control.network_heal()
    wait_until(lambda: [t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id]
               == ["CompleteCommit"], timeout=30)
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 1), [b"held-back"])


def test_bad_link_faults_are_refused_naming_the_field(cluster):
    control = cluster.control()
    for call, args, field, status in [
        ("network_link", {"source": 1}, "delay_ms", 400),
        ("network_link", {"source": 1, "loss": 1.5}, "loss", 400),
        ("network_link", {"source": 1, "delay_ms": "soon"}, "delay_ms", 400),
        ("network_link", {"source": 1, "delay_ms": 5, "seed": 3}, "seed", 400),
        ("network_link", {"source": 1, "target": 1, "delay_ms": 5}, "target", 400),
        ("network_cut", {"source": 9}, "source", 404),
        ("network_cut", {"source": 1, "both": "yes"}, "both", 400),
        ("network_heal", {"source": 1, "target": 2}, "source", 404),
        ("network_heal", {"target": 2}, "source", 400),
    ]:
        with pytest.raises(ControlRefused) as refused:
            control.call(call, **args)
        assert (refused.value.status, refused.value.field) == (status, field), (call, args)
    assert control.cluster()["links"] == []


def test_link_faults_from_the_command_line(cluster):
    ctl = [sys.executable, "-m", "broker.program", "ctl", "--admin", cluster.admin_url, "--json", "network"]

    def run(*args):
        return subprocess.run([*ctl, *args], capture_output=True, text=True, timeout=30)

    slowed = run("link", "1", "--target", "2", "--delay-ms", "50ms", "--loss", "0.25", "--seed", "5", "--both")
    assert slowed.returncode == 0, slowed.stderr
    assert cluster.control().cluster()["links"] == [
        {"source": 1, "target": 2, "cut": False, "delay_ms": 50, "loss": 0.25, "seed": 5},
        {"source": 2, "target": 1, "cut": False, "delay_ms": 50, "loss": 0.25, "seed": 6}]
    refused = run("link", "1")
    assert refused.returncode != 0 and "refused (400)" in refused.stderr and "[field: delay_ms]" in refused.stderr
    assert run("cut", "3").returncode == 0
    assert run("heal", "1", "--target", "2", "--both").returncode == 0
    assert [(link["source"], link["cut"]) for link in cluster.control().cluster()["links"]] == [(3, True)]
    assert run("heal").returncode == 0 and cluster.control().cluster()["links"] == []


def test_markers_cross_delayed_and_lossy_links(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"d-{topic_name}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    [txn] = [t for t in cluster.transactions() if t["transactional_id"] == txn_id]
    coordinator = txn["coordinator"]
    state = _partition(control, topic_name)
    if state["leader"] == coordinator:
        control.partition_move(topic=topic_name, partition=0,
                               leader=next(r for r in state["replicas"] if r != coordinator))
    leader = _partition(control, topic_name)["leader"]

    def state_of():
        return [t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id]

    def commit(value: bytes) -> None:
        producer.begin_transaction()
        producer.produce(topic_name, value, partition=0)
        assert producer.flush(30) == 0
        producer.commit_transaction(30)

    control.network_link(source=coordinator, target=leader, delay_ms=200, both=True)
    commit(b"delayed")  # markers arrive late, but arrive
    wait_until(lambda: state_of() == ["CompleteCommit"], timeout=30)
    # written first: the verification's answer would cross the lossy link too
    producer.begin_transaction()
    producer.produce(topic_name, b"lost-then-retried", partition=0)
    assert producer.flush(30) == 0
    control.network_link(source=coordinator, target=leader, loss=1.0, seed=3)  # every marker lost
    control.clock_advance(by="31s")  # the coordinator's node cannot fetch either: it leaves the ISR
    assert coordinator not in _partition(control, topic_name)["isr"]
    producer.commit_transaction(30)
    control.clock_advance(by="31s")  # the marker request times out and is sent again: lost again
    assert state_of() == ["PrepareCommit"]
    control.network_heal()
    assert coordinator in _partition(control, topic_name)["isr"]
    control.clock_advance(by="31s")  # the pending attempt times out; the next one arrives
    wait_until(lambda: state_of() == ["CompleteCommit"], timeout=30)
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 2), [b"delayed", b"lost-then-retried"])
