"""File descriptors as a bounded resource: a broker under ``ulimit -n 256`` serves 2,000
partitions, every one written and read back, through its pool of open files; and when
the process is out of descriptors anyway, the partition that needed one is answered
KAFKA_STORAGE_ERROR, the connection stays open and the log says what to raise."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.wire.client import KafkaConnection
from broker.errors import code
from broker.testing import BrokerProcess
from broker.testing.helpers import HOST
from protocol.records import build_batch

LIMIT = 256
# the shell's ulimit sets soft and hard: nothing for the broker to raise the limit to
UNDER_LIMIT = ["sh", "-c", f'ulimit -n {LIMIT} && exec "$@"', "sh"]


@pytest.fixture
def limited_broker(tmp_path):
    started: list[BrokerProcess] = []

    def make(overrides: dict | None = None) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / "data", overrides, wrapper=UNDER_LIMIT)
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        if broker.alive:
            broker.kill()


def _open_descriptors(broker: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


def test_2000_partitions_under_ulimit_256_are_written_and_read_back(limited_broker):
    broker = limited_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [f"fd-{uuid.uuid4().hex[:6]}-{t}" for t in range(4)]
    partitions = 500
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(60)
    wanted = {(t, p): f"{t}/{p}".encode() for t in topics for p in range(partitions)}

    # one producer, its records batched into few Produce requests
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "acks": "all"})
    failed = []
    for (t, p), value in wanted.items():
        producer.produce(t, value, partition=p, on_delivery=lambda err, msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failed == []
    assert _open_descriptors(broker) < LIMIT

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fd-reader",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(t, p, 0) for t, p in wanted])
    got: dict[tuple[str, int], bytes] = {}
    deadline = time.monotonic() + 120
    while len(got) < len(wanted) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            assert (msg.topic(), msg.partition()) not in got, "a record read twice"
            got[(msg.topic(), msg.partition())] = msg.value()
    consumer.close()
    assert got == wanted
    text = broker.log_text()
    assert "out of file descriptors" not in text and "Traceback" not in text
    assert f"soft limit {LIMIT}, hard limit {LIMIT}" in text


def test_out_of_descriptors_answers_kafka_storage_error_and_keeps_the_connection(limited_broker):
    # a cap above what the limit allows: the process runs out before the pool closes anything
    broker = limited_broker({"log.open.files.max": 100_000})
    topic = f"emfile-{uuid.uuid4().hex[:6]}"
    partitions = 2 * LIMIT

    async def run():
        conn = await KafkaConnection.connect(HOST, broker.port)
        r = await conn.request(19, 5, {"topics": [{"name": topic, "num_partitions": partitions,
                                                   "replication_factor": 1, "assignments": [], "configs": []}],
                                        "timeout_ms": 5000})
        assert r.topics[0].error_code == 0
        batch = bytes(build_batch([(None, b"v", (), 1000)]))
        r = await conn.request(0, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": batch} for p in range(partitions)]}]})
        errors = [p.error_code for p in r.responses[0].partition_responses]
        # the connection is still served
        metadata = await conn.request(3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
        await conn.close()
        return errors, metadata

    errors, metadata = asyncio.run(run())
    assert set(errors) == {0, code("KAFKA_STORAGE_ERROR")}, set(errors)
    first_failed = errors.index(code("KAFKA_STORAGE_ERROR"))
    assert first_failed > 0  # partitions were served until the limit
    assert 0 in errors[first_failed:]  # the pool gave descriptors back: the next ones were served
    assert len(metadata.topics[0].partitions) == partitions
    text = broker.log_text()
    assert "out of file descriptors" in text and "raise the limit" in text
    assert "Traceback" not in text
