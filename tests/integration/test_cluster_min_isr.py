"""min.insync.replicas on Produce, as Kafka 4.4's Partition.appendRecordsToLeader and
high watermark rule (`--nodes 3`, a follower of the partition stopped or cut off):
acks=all is refused with NOT_ENOUGH_REPLICAS before anything is appended, so neither
the log nor an idempotent producer's sequences change and a retry after the ISR heals
is written once; acks=1 is not refused; an acks=all produce whose ISR shrinks below
min.insync.replicas while it waits is held until the ISR heals, then succeeds."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.helpers import wait_until
from broker.wire.client import KafkaConnection
from protocol.records import build_batch
from tests.integration.test_cluster import assert_exactly_once, read_committed

pytestmark = pytest.mark.timeout(120)
PRODUCE, LIST_OFFSETS, INIT_PRODUCER_ID = 0, 2, 22
NOT_ENOUGH_REPLICAS = 19


def _every_node(cluster) -> str:
    return ",".join(f"127.0.0.1:{port}" for port in cluster.node_ports.values())


def _create(cluster, topic: str, min_insync_replicas: int) -> tuple[int, int]:
    """One partition on all three nodes; (its leader, a follower)."""
    admin = AdminClient({"bootstrap.servers": _every_node(cluster)})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": str(min_insync_replicas)})])[
        topic].result(10)
    state = next(p for p in cluster.control().cluster()["partitions"] if p["topic"] == topic)
    return state["leader"], next(r for r in state["replicas"] if r != state["leader"])


def _produce(topic: str, batch: bytes, acks: int) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 60000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def _answer(response) -> tuple[int, int, int]:
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.log_start_offset


async def _high_watermark(conn, topic: str) -> int:
    answer = await conn.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return answer.topics[0].partitions[0].offset


def _not_enough_replicas_answered(cluster) -> float:
    """Produce partitions the broker answered NOT_ENOUGH_REPLICAS (its error metric)."""
    with urllib.request.urlopen(cluster.admin_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kafka_network_requestmetrics_errors_total{") and 'request="Produce"' in line
               and 'error="NOT_ENOUGH_REPLICAS"' in line)


def test_acks_all_is_refused_before_the_append_and_an_idempotent_retry_is_written_once(broker_factory, topic_name):
    cluster = broker_factory({}, nodes=3, admin=True)
    control = cluster.control()
    leader, follower = _create(cluster, topic_name, min_insync_replicas=3)
    port = cluster.node_ports[leader]

    async def run() -> None:
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            init = await conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": -1,
                                                             "producer_id": -1, "producer_epoch": -1})
            assert init.error_code == 0
            idempotent = [bytes(build_batch([(None, f"idempotent-{s}".encode(), (), 1)], producer_id=init.producer_id,
                                            producer_epoch=init.producer_epoch, base_sequence=s)) for s in (0, 1)]
            control.node_stop(node_id=follower)  # the ISR: two of three, min.insync.replicas 3
            for _ in range(2):  # the client's retry meets the same refusal
                assert _answer(await conn.request(PRODUCE, 9, _produce(topic_name, idempotent[0], -1))) == (
                    NOT_ENOUGH_REPLICAS, -1, 0)
            plain = bytes(build_batch([(None, b"acks-1", (), 1)]))
            assert _answer(await conn.request(PRODUCE, 9, _produce(topic_name, plain, 1))) == (0, 0, 0)
            # readable at once: Kafka's high watermark would wait for the ISR (README, Differences)
            assert await _high_watermark(conn, topic_name) == 1
            control.node_start(node_id=follower)
            # sequence 0 was never taken: written now, at the log end, and a retry is its duplicate
            assert _answer(await conn.request(PRODUCE, 9, _produce(topic_name, idempotent[0], -1))) == (0, 1, 0)
            assert _answer(await conn.request(PRODUCE, 9, _produce(topic_name, idempotent[0], -1))) == (0, 1, 0)
            assert _answer(await conn.request(PRODUCE, 9, _produce(topic_name, idempotent[1], -1))) == (0, 2, 0)

    asyncio.run(run())
    assert_exactly_once(read_committed(_every_node(cluster), topic_name, 1, 3),
                        [b"acks-1", b"idempotent-0", b"idempotent-1"])


def test_transactional_producer_retries_not_enough_replicas_until_the_isr_heals(broker_factory, topic_name):
    cluster = broker_factory({}, nodes=3, admin=True)
    control = cluster.control()
    _, follower = _create(cluster, topic_name, min_insync_replicas=3)
    producer = Producer({"bootstrap.servers": _every_node(cluster), "transactional.id": f"{topic_name}-txn",
                         "retry.backoff.max.ms": 200})
    producer.init_transactions(30)
    control.node_stop(node_id=follower)
    sent = [f"txn-{i}".encode() for i in range(10)]
    producer.begin_transaction()
    for value in sent:
        producer.produce(topic_name, value, partition=0)

    def refused_twice() -> bool:  # and retried by the client, until the follower is back in the ISR
        producer.poll(0.1)
        return _not_enough_replicas_answered(cluster) >= 2

    wait_until(refused_twice, timeout=60)
    assert cluster.control().call("producers", topic=topic_name, partition=0)["producers"] == []  # nothing appended
    unrefused = Producer({"bootstrap.servers": _every_node(cluster), "acks": 1})
    unrefused.produce(topic_name, b"acks-1", partition=0)
    assert unrefused.flush(30) == 0
    control.node_start(node_id=follower)
    producer.commit_transaction(60)
    assert_exactly_once(read_committed(_every_node(cluster), topic_name, 1, len(sent) + 1), sent + [b"acks-1"])


def test_acks_all_waiting_when_the_isr_shrinks_below_min_insync_replicas_succeeds_once_it_heals(
        broker_factory, topic_name):
    """Kafka 4.4 holds the high watermark while the ISR is below min.insync.replicas: the
    produce is neither answered NOT_ENOUGH_REPLICAS_AFTER_APPEND nor lost."""
    cluster = broker_factory({"replica.lag.time.max.ms": 500}, nodes=3, admin=True)
    control = cluster.control()
    leader, _ = _create(cluster, topic_name, min_insync_replicas=2)
    port = cluster.node_ports[leader]

    async def run() -> tuple[int, int, int]:
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            for other in cluster.node_ports:
                if other != leader:
                    control.network_cut(source=leader, target=other, both=True)
            waiting = asyncio.ensure_future(
                conn.request(PRODUCE, 9, _produce(topic_name, bytes(build_batch([(None, b"held", (), 1)])), -1)))
            shrunk = f"{topic_name}-0: ISR shrunk to [{leader}]"
            while shrunk not in cluster.log_path.read_text():
                await asyncio.sleep(0.05)
            control.network_heal()
            return _answer(await waiting)

    assert asyncio.run(run()) == (0, 0, 0)
    assert_exactly_once(read_committed(_every_node(cluster), topic_name, 1, 1), [b"held"])
