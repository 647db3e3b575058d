"""Exactly once while nodes fail: stock clients (confluent-kafka, aiokafka, kafka-python)
against `--nodes 3` while the transaction coordinator's node is stopped, killed or
paused around EndTxn, a partition leader stops with a transaction open, and the group
coordinator moves under a consume-transform-produce loop. Each test ends with the
exactly-once check: every committed record once, nothing aborted, nothing lost."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(180)
PARTITIONS = 3


@pytest.fixture
def cluster(broker_factory):
    return broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}, nodes=3, admin=True)


def _coordinator_of(cluster, key: str, key_type: int) -> int:
    """The node FindCoordinator names for a group (0) or transactional id (1)."""
    import asyncio

    from broker.wire.client import KafkaConnection

    live = next(n for n in cluster.control().cluster()["nodes"] if n["state"] == "running")

    async def ask() -> int:
        async with await KafkaConnection.connect("127.0.0.1", live["port"]) as conn:
            r = await conn.request(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
            return r.coordinators[0].node_id

    return asyncio.run(ask())


def every_node(cluster) -> str:
    """A bootstrap list naming every node, so a client starts even when one is down."""
    return ",".join(f"127.0.0.1:{port}" for port in cluster.node_ports.values())


def confluent_producer(cluster, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": every_node(cluster), "transactional.id": txn_id,
                  "transaction.timeout.ms": 60000, "socket.timeout.ms": 10000, "message.timeout.ms": 60000})
    p.init_transactions(30)
    return p


def run_transaction(producer: Producer, topic: str, tag: str, committed: list[bytes], commit: bool = True,
                    before_end=None) -> None:
    producer.begin_transaction()
    values = [f"{tag}-{p}".encode() for p in range(PARTITIONS)]
    for p, v in enumerate(values):
        producer.produce(topic, v, partition=p)
    producer.flush(30)
    if before_end is not None:
        before_end()
    if commit:
        producer.commit_transaction(60)
        committed.extend(values)
    else:
        producer.abort_transaction(60)


@pytest.mark.parametrize("action", ["stop", "kill"])
def test_coordinator_node_fails_before_during_and_after_end_txn(cluster, topic_name, action):
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"x-{topic_name}"
    producer = confluent_producer(cluster, txn_id)
    committed: list[bytes] = []
    control = cluster.control()
    run_transaction(producer, topic_name, "a", committed)
    # before EndTxn: the coordinator's node goes away with the transaction open
    first = _coordinator_of(cluster, txn_id, 1)
    run_transaction(producer, topic_name, "b", committed,
                    before_end=lambda: getattr(control, f"node_{action}")(node_id=first))
    second = _coordinator_of(cluster, txn_id, 1)
    assert second != first
    control.node_start(node_id=first)
    # during EndTxn, after PREPARE_COMMIT is written: the markers cannot leave the
    # coordinator's node; it fails and the next coordinator sends them
    # (a fault rule on the markers alone: a cut link would also stop replication)
    control.fault_add(action="close_before", api_key=27, client_id=f"eosbroker-node-{second}")
    run_transaction(producer, topic_name, "c", committed)
    getattr(control, f"node_{action}")(node_id=second)
    control.faults_clear()
    # after EndTxn: the next transaction goes to yet another coordinator
    run_transaction(producer, topic_name, "d", committed)
    run_transaction(producer, topic_name, "e", committed, commit=False)
    control.node_start(node_id=second)
    control.leaders_elect()
    run_transaction(producer, topic_name, "f", committed)
    producer.flush(10)
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)


def test_coordinator_node_paused_during_end_txn(cluster, topic_name):
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"p-{topic_name}"
    producer = confluent_producer(cluster, txn_id)
    committed: list[bytes] = []
    control = cluster.control()
    run_transaction(producer, topic_name, "a", committed)
    coordinator = _coordinator_of(cluster, txn_id, 1)
    control.node_pause(node_id=coordinator)
    resume = threading.Timer(2.0, lambda: control.node_resume(node_id=coordinator))
    resume.start()
    try:
        run_transaction(producer, topic_name, "b", committed)  # answered once the node resumes
    finally:
        resume.join()
    run_transaction(producer, topic_name, "c", committed)
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)


def test_partition_leader_stops_with_a_transaction_open(cluster, topic_name):
    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"l-{topic_name}"
    producer = confluent_producer(cluster, txn_id)
    committed: list[bytes] = []
    control = cluster.control()
    coordinator = _coordinator_of(cluster, txn_id, 1)
    leaders = {p["partition"]: p["leader"] for p in control.cluster()["partitions"] if p["topic"] == topic_name}
    victim = next(leader for leader in leaders.values() if leader != coordinator)
    producer.begin_transaction()
    values = [f"open-{p}".encode() for p in range(PARTITIONS)]
    for p, v in enumerate(values):
        producer.produce(topic_name, v, partition=p)
    producer.flush(30)
    control.node_stop(node_id=victim)
    more = [f"more-{p}".encode() for p in range(PARTITIONS)]
    for p, v in enumerate(more):
        producer.produce(topic_name, v, partition=p)  # retried on the partition's new leader
    producer.commit_transaction(60)
    committed += values + more
    run_transaction(producer, topic_name, "aborted", committed, commit=False)
    run_transaction(producer, topic_name, "next", committed)
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)


def test_consume_transform_produce_while_the_group_coordinator_moves(cluster, topic_name):
    src, dst, group = topic_name, topic_name + "-out", topic_name + "-g"
    create(every_node(cluster), src, PARTITIONS)
    create(every_node(cluster), dst, PARTITIONS)
    feeder = Producer({"bootstrap.servers": every_node(cluster)})
    inputs = [b"%04d" % i for i in range(300)]
    for i, v in enumerate(inputs):
        feeder.produce(src, v, partition=i % PARTITIONS)
    assert feeder.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": every_node(cluster), "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
    producer = confluent_producer(cluster, f"ctp-{topic_name}")
    consumer.subscribe([src])
    control = cluster.control()
    moves = iter([1, 2, 3, 1])
    done = 0
    deadline = time.monotonic() + 120
    while done < len(inputs) and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(50, 1.0) if m.error() is None]
        if not batch:
            continue
        try:
            producer.begin_transaction()
            for m in batch:
                producer.produce(dst, m.value().upper(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
            done += len(batch)
        except KafkaException as e:
            if not e.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(60)
            _rewind(consumer)
        target = next(moves, None)
        if target is not None:  # the group's coordinator moves between transactions
            control.coordinator_move(group_id=group, to=target)
    consumer.close()
    assert done >= len(inputs)
    got = read_committed(every_node(cluster), dst, PARTITIONS, len(inputs))
    assert_exactly_once(got, [v.upper() for v in inputs])


def _rewind(consumer: Consumer) -> None:
    committed = consumer.committed(consumer.assignment(), 30)
    for tp in committed:
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def test_kafka_python_transactions_while_the_coordinator_moves(cluster, topic_name):
    from kafka import KafkaProducer

    create(every_node(cluster), topic_name, PARTITIONS)
    txn_id = f"kp-{topic_name}"
    producer = KafkaProducer(bootstrap_servers=every_node(cluster), transactional_id=txn_id,
                             request_timeout_ms=10000)
    producer.init_transactions()
    control = cluster.control()
    committed: list[bytes] = []
    for n in range(4):
        producer.begin_transaction()
        values = [f"{n}-{p}".encode() for p in range(PARTITIONS)]
        for p, v in enumerate(values):
            producer.send(topic_name, v, partition=p)
        if n == 1:
            control.coordinator_move(transactional_id=txn_id, to=(_coordinator_of(cluster, txn_id, 1) % 3) + 1)
        if n == 2:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            committed += values
    producer.close()
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)


async def test_aiokafka_transactions_while_a_leader_stops(cluster, topic_name):
    from aiokafka import AIOKafkaProducer

    create(every_node(cluster), topic_name, PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=every_node(cluster), transactional_id=f"ak-{topic_name}",
                                request_timeout_ms=10000)
    await producer.start()
    control = cluster.control()
    committed: list[bytes] = []
    try:
        for n in range(4):
            async with producer.transaction():
                values = [f"{n}-{p}".encode() for p in range(PARTITIONS)]
                for p, v in enumerate(values):
                    await producer.send_and_wait(topic_name, v, partition=p)
            committed += values
            if n == 1:
                leaders = {p["leader"] for p in control.cluster()["partitions"] if p["topic"] == topic_name}
                control.node_stop(node_id=max(leaders))
    finally:
        await producer.stop()
    assert_exactly_once(read_committed(every_node(cluster), topic_name, PARTITIONS, len(committed)), committed)

