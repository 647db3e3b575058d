"""Stock clients against a real broker process: create, produce (acks, codecs), consume,
seek by timestamp, list offsets."""

from __future__ import annotations

import asyncio
import time

import pytest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 200


def _values(tag: str) -> list[bytes]:
    return [f"{tag}-{i:05d}".encode() for i in range(N)]


# --- confluent-kafka (librdkafka) ---------------------------------------------------


def test_confluent_create_produce_consume_all_acks_and_codecs(shared_broker, topic_name):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)])
    futures[topic_name].result(10)
    metadata = admin.list_topics(topic_name, timeout=10)
    assert len(metadata.topics[topic_name].partitions) == 3

    expected = []
    for acks in ("0", "1", "all"):
        for codec in CODECS:
            producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": acks,
                                 "compression.type": codec, "linger.ms": 5, "enable.idempotence": False})
            delivered = []
            values = _values(f"{acks}-{codec}")
            for v in values:
                producer.produce(topic_name, v, partition=0,
                                 on_delivery=lambda err, msg: delivered.append(err))
            assert producer.flush(15) == 0
            assert delivered == [None] * N
            expected += values

    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": f"g-{topic_name}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(expected) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.value()))
    low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    consumer.close()
    assert [v for _, v in got] == expected
    assert [o for o, _ in got] == list(range(len(expected)))
    assert (low, high) == (0, len(expected))


def test_confluent_offsets_for_times(shared_broker, topic_name):
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce(topic_name, f"v{i}".encode(), partition=0, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record: lookup has to refine inside and across batches
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": f"g-{topic_name}"})
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 4500)], timeout=10)
    assert found[0].offset == 5
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 99_000)], timeout=10)
    assert found[0].offset == -1  # nothing at or after: end
    consumer.assign([TopicPartition(topic_name, 0, 7)])
    msg = None
    deadline = time.monotonic() + 10
    while msg is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
    consumer.close()
    assert msg is not None and msg.value() == b"v7" and msg.timestamp()[1] == base + 7000


# --- kafka-python ---------------------------------------------------------------------


def test_kafka_python_produce_consume_codecs_and_offsets(shared_broker, topic_name):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])
    admin.close()
    expected = []
    for acks in (0, 1, "all"):
        for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
            producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks=acks, compression_type=codec,
                                     linger_ms=5, enable_idempotence=False)
            values = _values(f"{acks}-{codec}")
            futures = [producer.send(topic_name, v, partition=1) for v in values]
            producer.flush(15)
            for f in futures:
                f.get(10)
            producer.close()
            expected += values
    tp = TopicPartition(topic_name, 1)
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [m.value for m in consumer]
    assert got == expected
    assert consumer.end_offsets([tp])[tp] == len(expected)
    assert consumer.beginning_offsets([tp])[tp] == 0
    ts = consumer.offsets_for_times({tp: 0})[tp]
    assert ts.offset == 0
    consumer.close()


# --- aiokafka -------------------------------------------------------------------------


async def test_aiokafka_produce_consume_codecs_and_seek(shared_broker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)])
    await admin.close()
    expected = []
    for acks in (0, 1, "all"):
        for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
            producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks=acks,
                                        compression_type=codec, linger_ms=5)
            await producer.start()
            values = _values(f"{acks}-{codec}")
            futures = [await producer.send(topic_name, v, partition=0, timestamp_ms=1_000 + len(expected) + i)
                       for i, v in enumerate(values)]
            await producer.flush()
            await asyncio.gather(*futures)
            await producer.stop()
            expected += values
    tp = TopicPartition(topic_name, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < len(expected):
            batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 10)
            got += [m.value for m in batch.get(tp, [])]
        assert got == expected
        offsets = await consumer.offsets_for_times({tp: 1_000 + 350})
        assert offsets[tp].offset == 350
        assert (await consumer.end_offsets([tp]))[tp] == len(expected)
        consumer.seek(tp, 350)
        batch = await consumer.getmany(tp, timeout_ms=5000, max_records=1)
        assert batch[tp][0].value == expected[350]
    finally:
        await consumer.stop()


async def test_fetch_long_poll_wakes_on_append(shared_broker, topic_name):
    """A consumer waiting at the end gets a new record as soon as it is appended."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    await producer.start()
    await producer.send_and_wait(topic_name, b"first", partition=0)
    tp = TopicPartition(topic_name, 0)
    # The fetch would wait 60 s for data: an answer within half of that can only come from
    # the append waking it (no elapsed-time assertion, which a loaded machine could break).
    consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, fetch_max_wait_ms=60_000,
                                request_timeout_ms=90_000, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 1)
        waiting = asyncio.create_task(consumer.getone())
        await asyncio.sleep(0.5)
        await producer.send_and_wait(topic_name, b"second", partition=0)
        msg = await asyncio.wait_for(waiting, 30)
        assert msg.value == b"second"
    finally:
        await consumer.stop()
        await producer.stop()


def test_confluent_consumer_reads_answers_larger_than_the_socket_buffer(shared_broker, topic_name):
    # Fetch answers of megabytes fill the connection's write buffer: the broker pauses
    # reading until the client drains them, then must read its next Fetch (a mix-up of
    # the read and write pause flags once left the connection silent after the first).
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.read_to_end import read_to_end

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)])[topic_name].result(10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 5})
    values = [b"%06d" % i + bytes(1000) for i in range(12_000)]
    for i, v in enumerate(values):
        while True:
            try:
                producer.produce(topic_name, v, partition=i % 3)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(30) == 0
    assert read_to_end(shared_broker.bootstrap, [topic_name], 3, "read_uncommitted", settle=0.5) == values
