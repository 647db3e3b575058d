"""Nodes joining and leaving a running cluster, and a paused node losing its place.

- `node add`: the new node listens (its start line printed as at start-up), Metadata
  lists it, partitions can move to it and new topics spread over it;
- `node remove`: the node's replicas, leaderships and coordinators move first, then it
  stops and leaves Metadata; refused (409) where a partition would lose its last
  in-sync copy or the cluster its last node;
- a paused node (a hung machine) keeps its leaderships until it has been silent for
  `broker.session.timeout.ms` of the broker's clock, then is fenced as KRaft fences a
  broker that stops heartbeating: out of every ISR and Metadata's broker list, its
  leaderships and coordinators moved; resumed, it rejoins the ISRs.

Stock clients (confluent-kafka, kafka-python) run through each change and every test
ends with the exactly-once check.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from broker.control.api_client import ControlRefused
from tests.integration.test_cluster import assert_exactly_once, create, read_committed
from tests.integration.test_cluster_failover import _coordinator_of, confluent_producer, every_node, run_transaction

pytestmark = pytest.mark.timeout(240)
PARTITIONS = 3
HOST = "127.0.0.1"


@pytest.fixture
def cluster(broker_factory):
    return broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}, nodes=3, admin=True)


def brokers_seen(port: int) -> list[int]:
    return sorted(AdminClient({"bootstrap.servers": f"{HOST}:{port}"}).list_topics(timeout=10).brokers)


def partitions_of(cluster, topic: str) -> dict[int, dict]:
    return {p["partition"]: p for p in cluster.control().cluster()["partitions"] if p["topic"] == topic}


def holds_nothing(cluster_state: dict, node_id: int) -> bool:
    return all(node_id not in p["replicas"] and node_id not in p["isr"] and p["leader"] != node_id
               for p in cluster_state["partitions"]) and \
        all(c["node_id"] != node_id for c in cluster_state["coordinators"])


# -- add ------------------------------------------------------------------------------------


def test_an_added_node_listens_joins_metadata_and_takes_partitions(cluster, topic_name):
    answer = cluster.add_node()
    node = answer["node"]
    assert (node["node_id"], node["state"]) == (4, "running")
    # the process prints the new node's line as it printed the first ones'
    assert cluster.proc.stdout.readline().strip() == f"eosbroker node 4 listening on {HOST}:{node['port']}"
    assert cluster.node_ports[4] == node["port"]
    assert brokers_seen(node["port"]) == brokers_seen(cluster.node_ports[1]) == [1, 2, 3, 4]

    # the CLI adds one too, with the id it is given
    out = subprocess.run([sys.executable, "-m", "broker.program", "ctl", "--admin", cluster.admin_url, "node", "add", "7"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("node 7 (127.0.0.1:") and "running" in out.stdout
    assert cluster.proc.stdout.readline().startswith("eosbroker node 7 listening on ")
    assert brokers_seen(cluster.node_ports[1]) == [1, 2, 3, 4, 7]

    # a partition moves to the new node; a new topic spreads over all five
    create(every_node(cluster), topic_name, PARTITIONS)
    moved = cluster.control().partition_move(topic=topic_name, partition=0, replicas=[4, 1, 2], leader=4)
    assert moved["leader"] == 4
    spread = topic_name + "-spread"
    create(every_node(cluster), spread, 5)
    assert sorted(p["leader"] for p in partitions_of(cluster, spread).values()) == [1, 2, 3, 4, 7]

    producer = confluent_producer(cluster, f"add-{topic_name}")
    committed: list[bytes] = []
    run_transaction(producer, topic_name, "a", committed)  # partition 0 is written on node 4
    run_transaction(producer, topic_name, "b", committed, commit=False)
    run_transaction(producer, topic_name, "c", committed)
    assert_exactly_once(read_committed(f"{HOST}:{node['port']}", topic_name, PARTITIONS, len(committed)), committed)


def test_add_refusals_name_the_field(cluster):
    control = cluster.control()
    for args, status, field in [({"node_id": 2}, 409, "node_id"), ({"port": 70000}, 400, "port"),
                                ({"node_id": -1}, 400, "node_id"), ({"port": cluster.node_ports[1]}, 409, "port")]:
        with pytest.raises(ControlRefused) as refused:
            control.node_add(**args)
        assert (refused.value.status, refused.value.field) == (status, field), args
    assert [n["node_id"] for n in control.cluster()["nodes"]] == [1, 2, 3]  # nothing half-added


# -- remove ---------------------------------------------------------------------------------


def test_removing_the_coordinator_node_mid_transaction_moves_everything_first(cluster, topic_name):
    cluster.add_node()
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"rm-{topic_name}"
    producer = confluent_producer(cluster, txn_id)
    committed: list[bytes] = []
    run_transaction(producer, topic_name, "a", committed)
    coordinator = _coordinator_of(cluster, txn_id, 1)
    before = cluster.control().cluster()
    held = [p for p in before["partitions"] if coordinator in p["replicas"]]

    # the transaction is open on the coordinator's node when it is removed
    run_transaction(producer, topic_name, "b", committed, before_end=lambda: cluster.remove_node(coordinator))
    after = cluster.control().cluster()
    assert coordinator not in [n["node_id"] for n in after["nodes"]]
    assert holds_nothing(after, coordinator)
    # every partition keeps its replication factor (a spare node took the place)
    sizes = {(p["topic"], p["partition"]): len(p["replicas"]) for p in after["partitions"]}
    assert all(sizes[(p["topic"], p["partition"])] == len(p["replicas"]) for p in held)
    assert coordinator not in brokers_seen(next(iter(cluster.node_ports.values())))
    assert _coordinator_of(cluster, txn_id, 1) != coordinator

    # a partition leader goes too, with a transaction open on it
    leader = partitions_of(cluster, topic_name)[0]["leader"]
    run_transaction(producer, topic_name, "c", committed, before_end=lambda: cluster.remove_node(leader))
    assert partitions_of(cluster, topic_name)[0]["leader"] not in (leader, -1)
    run_transaction(producer, topic_name, "d", committed, commit=False)
    run_transaction(producer, topic_name, "e", committed)
    assert len(cluster.control().cluster()["nodes"]) == 2
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)


def test_kafka_python_idempotent_producer_while_a_node_is_removed(cluster, topic_name):
    from kafka import KafkaProducer

    create(every_node(cluster), topic_name, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=every_node(cluster), enable_idempotence=True, acks="all",
                             retries=2**31 - 1, request_timeout_ms=10000)
    values = [b"v%04d" % i for i in range(300)]
    for i, v in enumerate(values[:150]):
        producer.send(topic_name, v, partition=i % PARTITIONS)
    producer.flush(30)
    cluster.remove_node(partitions_of(cluster, topic_name)[1]["leader"])
    for i, v in enumerate(values[150:], 150):
        producer.send(topic_name, v, partition=i % PARTITIONS)
    producer.flush(60)
    producer.close(10)
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(values)), values)


def test_remove_is_refused_where_it_would_lose_the_last_copy_or_node(cluster, broker_factory, topic_name):
    control = cluster.control()
    create(every_node(cluster), topic_name, 1, replication=1)
    control.partition_move(topic=topic_name, partition=0, replicas=[2], leader=2)
    p = Producer({"bootstrap.servers": every_node(cluster), "enable.idempotence": True})
    values = [b"kept-%d" % i for i in range(20)]
    for v in values:
        p.produce(topic_name, v, partition=0)
    assert p.flush(30) == 0
    control.node_stop(node_id=2)  # its only copy is offline now
    with pytest.raises(ControlRefused) as refused:
        control.node_remove(node_id=2)
    assert (refused.value.status, refused.value.field) == (409, "node_id")
    assert f"{topic_name}-0" in refused.value.message
    with pytest.raises(ControlRefused) as refused:
        control.node_remove(node_id=9)
    assert (refused.value.status, refused.value.field) == (404, "node_id")

    control.node_start(node_id=2)  # back in sync: now it may go, its copy handed over first
    control.node_remove(node_id=2)
    assert partitions_of(cluster, topic_name)[0]["leader"] in (1, 3)
    assert_exactly_once(read_committed(every_node(cluster), topic_name, 1, len(values)), values)

    control.node_stop(node_id=3)
    with pytest.raises(ControlRefused) as refused:  # node 1 is the last one running
        control.node_remove(node_id=1)
    assert (refused.value.status, refused.value.field) == (409, "node_id") and "last live node" in refused.value.message
    control.node_remove(node_id=3)  # a stopped node whose partitions have copies elsewhere can go
    with pytest.raises(ControlRefused) as refused:
        control.node_remove(node_id=1)
    assert refused.value.status == 409 and "last node" in refused.value.message
    assert [n["node_id"] for n in control.cluster()["nodes"]] == [1]


# -- a paused node ----------------------------------------------------------------------------


def test_a_paused_node_is_fenced_after_the_session_timeout_of_the_broker_clock(cluster, topic_name):
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"ps-{topic_name}"
    producer = confluent_producer(cluster, txn_id)
    committed: list[bytes] = []
    run_transaction(producer, topic_name, "a", committed)
    control = cluster.control()
    coordinator = _coordinator_of(cluster, txn_id, 1)
    other = next(n for n in cluster.node_ports if n != coordinator)
    before = partitions_of(cluster, topic_name)
    led = [i for i, p in before.items() if p["leader"] == coordinator]
    assert led

    control.node_pause(node_id=coordinator)
    control.clock_advance(by="8s")  # within broker.session.timeout.ms (9 s): nothing moves
    assert partitions_of(cluster, topic_name) == before
    assert brokers_seen(cluster.node_ports[other]) == [1, 2, 3]

    control.clock_advance(by="2s")  # silent past the session timeout: fenced
    state = control.cluster()
    node = next(n for n in state["nodes"] if n["node_id"] == coordinator)
    assert (node["state"], node["fenced"]) == ("paused", True)
    after = partitions_of(cluster, topic_name)
    for i in led:
        assert after[i]["leader"] != coordinator and after[i]["leader_epoch"] == before[i]["leader_epoch"] + 1
    assert all(coordinator not in p["isr"] for p in after.values())
    assert all(c["node_id"] != coordinator for c in state["coordinators"] if c["kind"] == "transaction")
    assert coordinator not in brokers_seen(cluster.node_ports[other])
    assert _coordinator_of(cluster, txn_id, 1) != coordinator
    table = subprocess.run([sys.executable, "-m", "broker.program", "ctl", "--admin", cluster.admin_url, "cluster"],
                           capture_output=True, text=True, timeout=60).stdout
    assert any(line.split()[:1] == [str(coordinator)] and "paused (fenced)" in line for line in table.splitlines())

    # the producer carries on without the hung node (its requests there time out)
    run_transaction(producer, topic_name, "b", committed)
    run_transaction(producer, topic_name, "c", committed, commit=False)

    resumed = control.node_resume(node_id=coordinator)
    assert resumed["node"] == {**node, "state": "running", "fenced": False}
    assert all(coordinator in p["isr"] for p in partitions_of(cluster, topic_name).values())
    assert brokers_seen(cluster.node_ports[other]) == [1, 2, 3]
    control.leaders_elect()  # preferred leaders come back
    assert {i: p["leader"] for i, p in partitions_of(cluster, topic_name).items()} == \
        {i: p["leader"] for i, p in before.items()}
    run_transaction(producer, topic_name, "d", committed)
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)


def test_a_short_pause_keeps_every_leadership(cluster, topic_name):
    create(every_node(cluster), topic_name, PARTITIONS)
    control = cluster.control()
    before = partitions_of(cluster, topic_name)
    control.node_pause(node_id=2)
    control.clock_advance(by="5s")
    control.node_resume(node_id=2)
    control.clock_advance(by="30s")  # the session timer ended with the resume
    assert partitions_of(cluster, topic_name) == before
    assert not any(n["fenced"] for n in control.cluster()["nodes"])


def test_a_paused_coordinator_times_out_nothing_until_it_resumes(broker_factory, topic_name):
    """A hung machine's timers do not run: the transaction it coordinates outlives its
    timeout while the node is paused, and is aborted once the node resumes."""
    from broker.testing import wait_until

    cluster = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
                              "broker.session.timeout.ms": 600_000}, nodes=3, admin=True)
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"pt-{topic_name}"
    producer = Producer({"bootstrap.servers": every_node(cluster), "transactional.id": txn_id,
                         "transaction.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"held", partition=0)
    assert producer.flush(30) == 0

    def state() -> str:
        return next(t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id)

    coordinator = _coordinator_of(cluster, txn_id, 1)
    control = cluster.control()
    control.node_pause(node_id=coordinator)
    control.clock_advance(by="10s")  # five times the transaction's timeout
    control.clock_advance(by="1s")  # and the abort check has come round again since
    assert state() == "Ongoing"
    control.node_resume(node_id=coordinator)
    wait_until(lambda: state() in ("PrepareAbort", "CompleteAbort"), 15, message="the timeout abort")
    cluster.assert_topic_holds(topic_name, [], within=15)


def test_a_paused_coordinator_sends_no_markers_until_it_resumes(broker_factory, topic_name):
    """A hung machine sends nothing: the markers its coordinator was retrying stay on it
    while it is paused (no partition, on any node, takes its COMMIT marker) and go out
    once it resumes."""
    import json
    import time
    import urllib.request

    from broker.testing import wait_until

    cluster = broker_factory({"broker.session.timeout.ms": 600_000}, nodes=3, admin=True)
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"pm-{topic_name}"
    producer = confluent_producer(cluster, txn_id)
    coordinator = _coordinator_of(cluster, txn_id, 1)
    control = cluster.control()
    # every partition led by another node, so only the coordinator's sending is in question
    others = [n for n in (1, 2, 3) if n != coordinator]
    for p in range(PARTITIONS):
        leader = others[p % 2]
        control.partition_move(topic=topic_name, partition=p, leader=leader,
                               replicas=[leader, *(n for n in (1, 2, 3) if n != leader)])
    # the markers fail while this rule holds: EndTxn is answered after PREPARE_COMMIT
    control.fault_add(action="close_before", api_key=27, client_id=f"eosbroker-node-{coordinator}")
    committed: list[bytes] = []
    run_transaction(producer, topic_name, "p", committed)
    control.node_pause(node_id=coordinator)
    control.faults_clear()

    def open_partitions() -> list[int]:
        with urllib.request.urlopen(cluster.admin_url + "/console/state", timeout=30) as answer:
            state = json.load(answer)
        return [p["partition"] for p in state["partitions"]
                if p["topic"] == topic_name and p["last_stable_offset"] < p["high_watermark"]]

    time.sleep(1.0)  # ~20 marker retry rounds, were the node still sending
    assert open_partitions() == list(range(PARTITIONS))
    assert next(t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id) == "PrepareCommit"
    control.node_resume(node_id=coordinator)
    wait_until(lambda: not open_partitions(), 30, message="the markers after the resume")
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)
