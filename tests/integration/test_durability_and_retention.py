"""Restarts, torn writes, segment roll, retention and DeleteRecords against a real broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import wait_until
from tests.segment_files import log_bytes


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **conf) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **conf})
    offsets: list[int] = []

    def done(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for v in values:
        producer.produce(topic, v, partition=partition, on_delivery=done)
    assert producer.flush(20) == 0
    return offsets


def _consume_all(bootstrap: str, topic: str, start: int = 0, partition: int = 0, timeout: float = 15) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, partition, start)])
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    out = []
    deadline = time.monotonic() + timeout
    while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline and high > start:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append((msg.offset(), msg.value()))
    consumer.close()
    return out


def _create(bootstrap: str, topic: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(10)


def test_restart_keeps_everything_acknowledged_and_offsets_continue(broker_factory, topic_name):
    broker = broker_factory()
    _create(broker.bootstrap, topic_name)
    first = [f"a{i}".encode() for i in range(500)]
    assert _produce(broker.bootstrap, topic_name, first) == list(range(500))
    broker.restart()
    second = [f"b{i}".encode() for i in range(300)]
    assert _produce(broker.bootstrap, topic_name, second) == list(range(500, 800))
    assert [v for _, v in _consume_all(broker.bootstrap, topic_name)] == first + second


def test_kill_9_keeps_acknowledged_writes(broker_factory, topic_name):
    broker = broker_factory()
    _create(broker.bootstrap, topic_name)
    values = [f"v{i}".encode() for i in range(1000)]
    _produce(broker.bootstrap, topic_name, values, acks="all")
    broker.kill()
    broker.start()
    assert [v for _, v in _consume_all(broker.bootstrap, topic_name)] == values


def test_torn_tail_is_truncated_on_start(broker_factory, topic_name):
    broker = broker_factory()
    _create(broker.bootstrap, topic_name)
    values = [f"v{i}".encode() for i in range(50)]
    for v in values:  # one batch each
        _produce(broker.bootstrap, topic_name, [v])
    broker.stop()
    segment = sorted((broker.data_dir / f"{topic_name}-0").glob("*.log"))[-1]
    data = segment.read_bytes()
    segment.write_bytes(data + data[-40:][:25])  # half a batch after the last good one
    broker.start()
    assert "truncat" in broker.log_text().lower()
    assert [v for _, v in _consume_all(broker.bootstrap, topic_name)] == values
    assert _produce(broker.bootstrap, topic_name, [b"after"]) == [50]


def test_segment_roll_and_delete_records_move_log_start(broker_factory, topic_name):
    broker = broker_factory()
    _create(broker.bootstrap, topic_name, config={"segment.bytes": "2048"})
    values = [f"{i:04d}".encode() * 25 for i in range(200)]
    for chunk in range(0, 200, 10):
        _produce(broker.bootstrap, topic_name, values[chunk:chunk + 10])
    segments = list((broker.data_dir / f"{topic_name}-0").glob("*.log"))
    assert len(segments) > 3

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic_name, 0, 120)])
    result = futures[TopicPartition(topic_name, 0, 120)].result(10)
    assert result.low_watermark == 120
    assert len(list((broker.data_dir / f"{topic_name}-0").glob("*.log"))) < len(segments)

    got = _consume_all(broker.bootstrap, topic_name, start=120)
    assert [o for o, _ in got] == list(range(120, 200))

    # below the log start offset: OFFSET_OUT_OF_RANGE
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic_name, 0, 5)])
    err = None
    deadline = time.monotonic() + 10
    while err is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            err = msg.error()
    low, _ = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    consumer.close()
    assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET
    assert low == 120
    broker.restart()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)[0] == 120
    consumer.close()


def test_retention_by_size_moves_log_start(broker_factory, topic_name):
    broker = broker_factory({"log.retention.check.interval.ms": 200})
    _create(broker.bootstrap, topic_name, config={"segment.bytes": "1024", "retention.bytes": "3000"})
    for i in range(40):
        _produce(broker.bootstrap, topic_name, [b"x" * 200])
    partition_dir = broker.data_dir / f"{topic_name}-0"
    # a retention pass may run mid-stream: wait for one after the last append
    wait_until(lambda: log_bytes(partition_dir, "*.log") <= 3000 + 1024,
               timeout=15, message="retention to bring the log under retention.bytes + one segment")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5)
    consumer.close()
    assert 0 < low < high == 40


def test_retention_by_time(broker_factory, topic_name):
    broker = broker_factory({"log.retention.check.interval.ms": 200})
    _create(broker.bootstrap, topic_name, config={"segment.bytes": "1024", "retention.ms": "1000"})
    old = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic_name, b"y" * 200, partition=0, timestamp=old)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    low = wait_until(lambda: consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5)[0] or None,
                     timeout=15, message="time retention")
    consumer.close()
    assert low > 0


def test_log_append_time_topic_sets_timestamps(shared_broker, topic_name):
    _create(shared_broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    _produce(shared_broker.bootstrap, topic_name, [b"a", b"b"], **{"linger.ms": 50})
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "g"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    msgs = []
    deadline = time.monotonic() + 10
    while len(msgs) < 2 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            msgs.append(m)
    consumer.close()
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    assert [m.value() for m in msgs] == [b"a", b"b"]
    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= int(time.time() * 1000) + 1000
