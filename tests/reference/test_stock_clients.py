"""The Python clients on both brokers: the same transactional work, the same records at
the same offsets for read_committed and read_uncommitted consumers.

confluent-kafka (librdkafka) writes a committed and an aborted transaction around plain
records; each client's consumer then reads the topic in both isolation levels.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.reference.wire import Wire

PARTITIONS = 2


async def _prepare(bootstrap: str, topic: str, txn_id: str) -> None:
    wire = await Wire.connect(int(bootstrap.rsplit(":", 1)[1]))
    try:
        assert await wire.create_topic(topic, PARTITIONS) == "NONE"
        plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        txn.init_transactions(60)
        for i in range(4):
            plain.produce(topic, value=f"plain-{i}".encode(), partition=i % 2)
        plain.flush(30)
        for commit in (True, False, True):
            txn.begin_transaction()
            for i in range(4):
                txn.produce(topic, value=f"{'c' if commit else 'a'}-{i}".encode(), partition=i % 2)
            txn.flush(30)
            txn.commit_transaction(60) if commit else txn.abort_transaction(60)
            # Kafka answers EndTxn before writing the markers: let them land first.
            for _ in range(400):
                if (await wire.describe_transaction(txn_id))["state"].startswith("Complete"):
                    break
                await asyncio.sleep(0.05)
        for i in range(4, 6):
            plain.produce(topic, value=f"plain-{i}".encode(), partition=i % 2)
        plain.flush(30)
    finally:
        await wire.close()


def _confluent(bootstrap: str, topic: str, isolation: str) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out, eof, deadline = [], set(), time.monotonic() + 60
    while len(eof) < PARTITIONS and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            continue
        out.append((m.partition(), m.offset(), m.value()))
    c.close()
    return sorted(out)


def _kafka_python(bootstrap: str, topic: str, isolation: str) -> list[tuple]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as TP

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    tps = [TP(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning()
    ends = c.end_offsets(tps)
    out, deadline = [], time.monotonic() + 60
    while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for records in c.poll(500).values():
            out += [(r.partition, r.offset, r.value) for r in records]
    c.close()
    return sorted(out)


def _aiokafka(bootstrap: str, topic: str, isolation: str) -> list[tuple]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as TP

    async def read():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            tps = [TP(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            await c.seek_to_beginning()
            ends = await c.end_offsets(tps)
            out, deadline = [], time.monotonic() + 60
            async def behind() -> bool:
                return any([await c.position(tp) < ends[tp] for tp in tps])

            while await behind() and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    out += [(r.partition, r.offset, r.value) for r in records]
            return sorted(out)
        finally:
            await c.stop()

    return asyncio.run(read())


@pytest.fixture(scope="module")
def topics(eos_reference, kafka_broker):
    topic = f"clients-{uuid.uuid4().hex[:8]}"
    for broker in (eos_reference, kafka_broker):
        asyncio.run(_prepare(broker.bootstrap, topic, f"{topic}-txn"))
    return {"eosbroker": (eos_reference.bootstrap, topic), "kafka": (kafka_broker.bootstrap, topic)}


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize("client", [_confluent, _kafka_python, _aiokafka], ids=["confluent", "kafka-python", "aiokafka"])
def test_same_records_at_the_same_offsets(topics, client, isolation):
    seen = {name: client(bootstrap, topic, isolation) for name, (bootstrap, topic) in topics.items()}
    assert seen["eosbroker"] == seen["kafka"]
    values = sorted(v for _, _, v in seen["kafka"])
    expected = [f"c-{i}".encode() for i in range(4)] * 2 + [f"plain-{i}".encode() for i in range(6)]
    if isolation == "read_uncommitted":
        expected += [f"a-{i}".encode() for i in range(4)]
    assert values == sorted(expected)
