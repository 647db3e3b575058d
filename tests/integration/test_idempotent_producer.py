"""The idempotent producer against a real broker: stock clients, and a raw-wire client
that replays, skips and re-epochs batches on purpose."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.wire.client import KafkaConnection
from broker.errors import code
from protocol.records import build_batch
from tests.broker_process import wait_until

HOST = "127.0.0.1"
N = 5000


def _read_values(bootstrap: str, topic: str, expected: int, partition: int = 0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg.value())
    # anything beyond the expected count would be a duplicate
    extra = consumer.poll(1.0)
    consumer.close()
    if extra is not None and extra.error() is None:
        out.append(extra.value())
    return out


# --- stock clients --------------------------------------------------------------------------


def test_confluent_idempotent_producer_exactly_once_in_order(shared_broker, topic_name):
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.idempotence": True,
                         "max.in.flight.requests.per.connection": 5, "linger.ms": 1, "batch.num.messages": 100})
    errors = []
    for i in range(N):
        producer.produce(topic_name, b"%06d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    assert _read_values(shared_broker.bootstrap, topic_name, N) == [b"%06d" % i for i in range(N)]


def test_kafka_python_idempotent_producer_exactly_once_in_order(shared_broker, topic_name):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True,
                             max_in_flight_requests_per_connection=5, acks="all", linger_ms=1, batch_size=4096)
    futures = [producer.send(topic_name, b"%06d" % i, partition=0) for i in range(N)]
    producer.flush(30)
    assert [f.get(10).offset for f in futures] == list(range(N))
    producer.close()
    assert _read_values(shared_broker.bootstrap, topic_name, N) == [b"%06d" % i for i in range(N)]


async def test_aiokafka_idempotent_producer_exactly_once_in_order(shared_broker, topic_name):
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True,
                                linger_ms=1, max_batch_size=4096)
    await producer.start()
    try:
        futures = [await producer.send(topic_name, b"%06d" % i, partition=0) for i in range(N)]
        results = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert [r.offset for r in results] == list(range(N))
    assert await asyncio.to_thread(_read_values, shared_broker.bootstrap, topic_name, N) == [
        b"%06d" % i for i in range(N)]


# --- the raw wire ------------------------------------------------------------------------------


class Wire:
    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        self.conn = conn
        self.topic = topic

    async def create(self, configs=()):
        r = await self.conn.request(19, 5, {"topics": [{"name": self.topic, "num_partitions": 1,
                                                        "replication_factor": 1, "assignments": [],
                                                        "configs": [{"name": k, "value": v} for k, v in configs]}],
                                             "timeout_ms": 5000})
        assert r.topics[0].error_code == 0

    async def init_pid(self) -> tuple[int, int]:
        r = await self.conn.request(22, 2, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                            "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == 0
        return r.producer_id, r.producer_epoch

    async def produce(self, pid: int, epoch: int, seq: int, count: int = 1, tag: str = "v", timestamp: int = 1000):
        batch = build_batch([(None, f"{tag}{seq + i}".encode(), (), timestamp + i) for i in range(count)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        r = await self.conn.request(0, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                           "topic_data": [{"name": self.topic, "partition_data": [
                                               {"index": 0, "records": bytes(batch)}]}]})
        return r.responses[0].partition_responses[0]

    async def end_offset(self) -> int:
        r = await self.conn.request(2, 1, {"replica_id": -1, "topics": [{"name": self.topic, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]})
        return r.topics[0].partitions[0].offset

    async def delete_records(self, before: int) -> int:
        r = await self.conn.request(21, 1, {"topics": [{"name": self.topic, "partitions": [
            {"partition_index": 0, "offset": before}]}], "timeout_ms": 5000})
        return r.topics[0].partitions[0].low_watermark

    async def producers(self):
        r = await self.conn.request(61, 0, {"topics": [{"name": self.topic, "partition_indexes": [0]}]})
        return r.topics[0].partitions[0].active_producers


async def _wire(broker, topic) -> Wire:
    w = Wire(await KafkaConnection.connect(HOST, broker.port), topic)
    await w.create()
    return w


async def test_resent_batch_returns_original_offset_and_appends_nothing(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, epoch = await w.init_pid()
    first = await w.produce(pid, epoch, 0, count=3)
    second = await w.produce(pid, epoch, 3, count=2)
    again = await w.produce(pid, epoch, 0, count=3)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.base_offset, again.error_code, again.base_offset) == (3, 0, 0)
    assert await w.end_offset() == 5
    await w.conn.close()


async def test_sequence_gap_is_out_of_order(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, epoch = await w.init_pid()
    await w.produce(pid, epoch, 0, count=2)
    gap = await w.produce(pid, epoch, 5)
    assert gap.error_code == code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert gap.log_start_offset == 0
    assert await w.end_offset() == 2
    await w.conn.close()


async def test_old_epoch_is_invalid_producer_epoch_and_new_epoch_starts_at_zero(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, _ = await w.init_pid()
    assert (await w.produce(pid, 3, 0)).error_code == 0
    assert (await w.produce(pid, 2, 1)).error_code == code("INVALID_PRODUCER_EPOCH")
    assert (await w.produce(pid, 4, 7)).error_code == code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    bumped = await w.produce(pid, 4, 0)  # librdkafka's local epoch bump: accepted
    assert (bumped.error_code, bumped.base_offset) == (0, 1)
    assert await w.end_offset() == 2
    await w.conn.close()


async def test_sixth_oldest_batch_resent_is_out_of_order(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, epoch = await w.init_pid()
    for seq in range(6):
        assert (await w.produce(pid, epoch, seq)).base_offset == seq
    assert (await w.produce(pid, epoch, 1)).base_offset == 1  # 5th oldest: still cached
    assert (await w.produce(pid, epoch, 0)).error_code == code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert await w.end_offset() == 6
    await w.conn.close()


async def test_sequence_wraps_at_int32_max(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, epoch = await w.init_pid()
    assert (await w.produce(pid, epoch, 2**31 - 2, count=2)).error_code == 0  # ends at Int32.MAX
    assert (await w.produce(pid, epoch, 0)).error_code == 0
    assert await w.end_offset() == 3
    await w.conn.close()


async def test_producer_ids_are_unique_across_restart(broker_factory, topic_name):
    broker = broker_factory()
    w = await _wire(broker, topic_name)
    before = {(await w.init_pid())[0] for _ in range(5)}
    await w.conn.close()
    broker.kill()
    broker.start()
    w = Wire(await KafkaConnection.connect(HOST, broker.port), topic_name)
    after = {(await w.init_pid())[0] for _ in range(5)}
    await w.conn.close()
    assert len(before | after) == 10


async def test_describe_producers_lists_state(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, epoch = await w.init_pid()
    await w.produce(pid, epoch, 0, count=4)
    [p] = await w.producers()
    assert (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) == (pid, epoch, 3, -1)
    await w.conn.close()


# --- producer state outlives the data (KIP-360) and the version profile --------------------------


async def test_delete_records_then_continue_is_accepted_on_newest_profile(shared_broker, topic_name):
    w = await _wire(shared_broker, topic_name)
    pid, epoch = await w.init_pid()
    await w.produce(pid, epoch, 0, count=5)
    assert await w.delete_records(5) == 5
    cont = await w.produce(pid, epoch, 5)
    assert (cont.error_code, cont.base_offset) == (0, 5)
    await w.conn.close()


async def test_delete_records_then_continue_is_unknown_producer_id_on_2_4_profile(broker_factory, topic_name):
    broker = broker_factory({"emulate.kafka.version": "2.4"})
    w = await _wire(broker, topic_name)
    pid, epoch = await w.init_pid()
    await w.produce(pid, epoch, 0, count=5)
    assert await w.delete_records(5) == 5
    cont = await w.produce(pid, epoch, 5)
    assert cont.error_code == code("UNKNOWN_PRODUCER_ID")
    assert cont.log_start_offset == 5  # lets the client tell retention from real loss (seed 002)
    assert (await w.produce(pid, epoch, 0)).error_code == 0
    versions = await w.conn.request(18, 0, {})
    assert {k.api_key: k.max_version for k in versions.api_keys}[0] == 8  # Produce max as Kafka 2.4
    await w.conn.close()


async def test_producer_state_expires_after_inactivity(broker_factory, topic_name):
    # The broker's clock jumps past the expiration: with a short real expiration, a loaded
    # machine could expire the state before the test first looked at it.
    broker = broker_factory({"producer.id.expiration.ms": 60_000, "producer.id.expiration.check.interval.ms": 100},
                            admin=True)
    w = await _wire(broker, topic_name)
    pid, epoch = await w.init_pid()
    await w.produce(pid, epoch, 0, timestamp=int(time.time() * 1000))  # activity is the batch's timestamp
    assert len(await w.producers()) == 1
    await asyncio.to_thread(broker.control().clock_advance, by="2m")
    deadline = time.monotonic() + 10
    while await w.producers() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert await w.producers() == ()
    await w.conn.close()


async def test_producer_expiration_goes_by_the_batch_timestamp(broker_factory, topic_name):
    # Kafka takes a producer's last activity from its batch's max timestamp: one that
    # writes hour-old CreateTime timestamps loses its state at the next check.
    broker = broker_factory({"producer.id.expiration.ms": 600_000, "producer.id.expiration.check.interval.ms": 100})
    w = await _wire(broker, topic_name)
    old_pid, old_epoch = await w.init_pid()
    new_pid, new_epoch = await w.init_pid()
    now = int(time.time() * 1000)
    await w.produce(old_pid, old_epoch, 0, timestamp=now - 3_600_000)
    await w.produce(new_pid, new_epoch, 0, timestamp=now)
    deadline = time.monotonic() + 20
    while len(await w.producers()) == 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert [p.producer_id for p in await w.producers()] == [new_pid]
    # the expired producer is unknown now: it may go on at any sequence (KIP-360)
    assert (await w.produce(old_pid, old_epoch, 7, timestamp=now)).error_code == 0
    await w.conn.close()


async def test_state_survives_clean_restart_and_duplicates_are_still_detected(broker_factory, topic_name):
    broker = broker_factory()
    w = await _wire(broker, topic_name)
    pid, epoch = await w.init_pid()
    await w.produce(pid, epoch, 0, count=2)
    await w.conn.close()
    broker.restart()
    w = Wire(await KafkaConnection.connect(HOST, broker.port), topic_name)
    again = await w.produce(pid, epoch, 0, count=2)
    assert (again.error_code, again.base_offset) == (0, 0)
    assert (await w.produce(pid, epoch, 5)).error_code == code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert (await w.produce(pid, epoch, 2)).base_offset == 2
    await w.conn.close()


_STREAM = """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "enable.idempotence": True, "linger.ms": 2,
              "message.timeout.ms": 60000, "retry.backoff.ms": 50, "reconnect.backoff.ms": 50,
              "reconnect.backoff.max.ms": 200})
errors = []
for i in range(int(sys.argv[3])):
    p.produce(sys.argv[2], b"%06d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(str(e)))
    p.poll(0)
    if i % 200 == 0:
        p.flush(60)
left = p.flush(90)
print("left", left, "errors", len(errors), errors[:3], flush=True)
sys.exit(1 if left or errors else 0)
"""


def _high_watermark(port: int, topic: str) -> int:
    async def list_offsets() -> int:
        async with await KafkaConnection.connect(HOST, port) as conn:
            r = await conn.request(2, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        partitions = r.topics[0].partitions if r.topics else []
        return partitions[0].offset if partitions and partitions[0].error_code == 0 else 0

    return asyncio.run(list_offsets())


def test_kill_9_during_idempotent_stream_no_error_duplicate_or_gap(broker_factory, topic_name):
    broker = broker_factory({"log.segment.bytes": 16384})
    total = 20_000
    proc = subprocess.Popen([sys.executable, "-c", _STREAM, broker.bootstrap, topic_name, str(total)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # Killed mid-stream, whatever the time the producer process took to start.
    wait_until(lambda: _high_watermark(broker.port, topic_name) >= total // 10, 60, 0.02, "the stream to be under way")
    broker.kill()
    time.sleep(0.5)
    broker.start()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert _read_values(broker.bootstrap, topic_name, total) == [b"%06d" % i for i in range(total)]
