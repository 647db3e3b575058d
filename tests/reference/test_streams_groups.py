"""A Kafka Streams 4.4 application with group.protocol=streams (KIP-1071) and
exactly_once_v2, killed (SIGKILL) mid-run and started again (or its broker killed and
started again: extended set), reads back exactly once: every
input record is copied once, and the counts by key (through a repartition topic and a
changelog the group coordinator had the broker create) go 1, 2, ... n without a repeat or
a gap. The same runs against Apache Kafka 4.4 (extended reference set), and with the
classic protocol against eosbroker (extended set) for comparison, and Kafka 4.4's offline
upgrade from the classic protocol to the streams protocol through a kill, on both (extended set).

Both brokers get a 6 s streams session timeout, so the killed instance's tasks move to
the new one within seconds (Kafka's minimum is lowered to allow it)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import ConsumerGroupState, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.reference import streams_app
from tests.reference.kafka_broker import KafkaBroker

pytestmark = pytest.mark.timeout(300)

RECORDS = 3000
PARTITIONS = 2
KILL_AFTER = 600  # copies committed before the first instance is killed
STREAMS_SETTINGS = {"group.streams.session.timeout.ms": 6000, "group.streams.heartbeat.interval.ms": 1000,
                    "group.streams.initial.rebalance.delay.ms": 0, "group.streams.assignment.interval.ms": 0}
KAFKA_SETTINGS = {**STREAMS_SETTINGS, "group.streams.min.session.timeout.ms": 6000,
                  "group.streams.min.heartbeat.interval.ms": 1000}


def _create_topics(bootstrap: str, names) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, str(i).encode(), key=str(i).encode())
    assert producer.flush(30) == 0


class CommittedReader:
    """A read_committed view of a topic, read as it grows: (key, value) by partition."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "enable.partition.eof": True})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.records: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
        self.at_end: set[int] = set()

    def read(self, seconds: float = 0.5) -> int:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error() is None:
                self.records[msg.partition()].append((msg.key(), msg.value()))
                self.at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                self.at_end.add(msg.partition())
        return sum(len(r) for r in self.records.values())

    def close(self) -> None:
        self.consumer.close()


def _wait_for(reader: CommittedReader, count: int, app, log, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while reader.read() < count:
        if app.poll() is not None:
            raise AssertionError(f"the Streams application exited ({app.returncode}):\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} committed records not seen in {timeout} s (have "
                                 f"{reader.read(0)}):\n{log.read_text()[-4000:]}")


def _new_instance(first, start):
    """The application killed (SIGKILL); a new instance, with its own state directory as on
    another machine, takes over."""
    first.kill()
    first.wait(30)
    return start("state-2")


def _upgraded_offline(bootstrap: str, app_id: str):
    """Kafka 4.4's offline upgrade from the classic protocol: the classic instance killed,
    the new instance (streams protocol) started once the group is empty (its members'
    sessions ended), which the group coordinator then converts."""
    def interrupt(first, start):
        first.kill()
        first.wait(30)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while admin.describe_consumer_groups([app_id])[app_id].result(10).state != ConsumerGroupState.EMPTY:
            assert time.monotonic() < deadline, "the killed classic members stayed in the group"
            time.sleep(0.5)
        return start("state-2")

    return interrupt


def run_through_a_kill(bootstrap: str, tmp_path, protocol: str = "streams", interrupt=_new_instance,
                       app_id: str | None = None, then_protocol: str | None = None) -> None:
    """``interrupt(app, start)``: what happens mid-run; it returns the instance that goes on
    (``start(state dir name)`` starts one, on ``then_protocol`` if given)."""
    app_id = app_id or f"streams-{uuid.uuid4().hex[:8]}"
    topics = (f"{app_id}-input", f"{app_id}-copy", f"{app_id}-counts")
    _create_topics(bootstrap, topics)
    _produce(bootstrap, topics[0])
    log = tmp_path / f"{app_id}.log"
    copies, counts = CommittedReader(bootstrap, topics[1]), CommittedReader(bootstrap, topics[2])
    first = streams_app.start(bootstrap, app_id, topics, tmp_path / "state-1", log, protocol, delay_ms=2)
    second = None
    try:
        _wait_for(copies, KILL_AFTER, first, log)
        second = interrupt(first, lambda state: streams_app.start(bootstrap, app_id, topics, tmp_path / state, log,
                                                                  then_protocol or protocol))
        _wait_for(copies, RECORDS, second, log, timeout=180)
        expected_counts = RECORDS
        _wait_for(counts, expected_counts, second, log, timeout=60)
        while len(copies.at_end) < PARTITIONS or len(counts.at_end) < PARTITIONS:
            copies.read(), counts.read()
        copies.read(2), counts.read(2)  # a late duplicate would show now
    finally:
        for app in (first, second):
            if app is not None and app.poll() is None:
                app.kill()
                app.wait(30)
        copies.close()
        counts.close()
    copied = sorted(int(v) for records in copies.records.values() for _k, v in records)
    assert copied == list(range(RECORDS)), f"duplicates or gaps in the copy:\n{log.read_text()[-3000:]}"
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for records in counts.records.values():
        for key, value in records:
            by_key[key].append(int(value))
    assert sorted(by_key) == [f"k{i}".encode() for i in range(5)]
    for key, sequence in by_key.items():
        assert sequence == list(range(1, RECORDS // 5 + 1)), (key, sequence[:20])
    assert "STATE REBALANCING -> RUNNING" in log.read_text()


def test_streams_protocol_exactly_once_through_a_kill(broker_factory, tmp_path):
    broker = broker_factory({"emulate.kafka.version": "4.4", **STREAMS_SETTINGS})
    run_through_a_kill(broker.bootstrap, tmp_path)


@pytest.mark.reference_extended
def test_streams_protocol_exactly_once_through_a_broker_kill(broker_factory, tmp_path):
    """The broker killed (kill -9) and started again mid-run: the group comes back from its
    records in __consumer_offsets and the application goes on."""
    broker = broker_factory({"emulate.kafka.version": "4.4", **STREAMS_SETTINGS})

    def kill_broker(app, _start):
        broker.kill()
        broker.start()
        return app

    run_through_a_kill(broker.bootstrap, tmp_path, interrupt=kill_broker)


@pytest.mark.reference_extended
def test_classic_protocol_exactly_once_through_a_kill(broker_factory, tmp_path):
    broker = broker_factory({"emulate.kafka.version": "4.4", **STREAMS_SETTINGS})
    run_through_a_kill(broker.bootstrap, tmp_path, protocol="classic")


@pytest.mark.reference_extended
def test_streams_protocol_exactly_once_through_a_kill_on_kafka(tmp_path):
    kafka = KafkaBroker(tmp_path / "kafka", KAFKA_SETTINGS).start()
    try:
        run_through_a_kill(kafka.bootstrap, tmp_path)
    finally:
        kafka.stop()


def upgraded_offline_through_a_kill(bootstrap: str, tmp_path) -> None:
    app_id = f"streams-{uuid.uuid4().hex[:8]}"
    run_through_a_kill(bootstrap, tmp_path, protocol="classic", interrupt=_upgraded_offline(bootstrap, app_id),
                       app_id=app_id, then_protocol="streams")


@pytest.mark.reference_extended
def test_classic_to_streams_offline_upgrade_exactly_once(broker_factory, tmp_path):
    """Started on the classic protocol, killed, started again on the streams protocol: the
    streams group takes over the classic group's committed offsets, nothing is lost or
    repeated."""
    broker = broker_factory({"emulate.kafka.version": "4.4", **STREAMS_SETTINGS})
    upgraded_offline_through_a_kill(broker.bootstrap, tmp_path)


@pytest.mark.reference_extended
def test_classic_to_streams_offline_upgrade_exactly_once_on_kafka(tmp_path):
    kafka = KafkaBroker(tmp_path / "kafka", KAFKA_SETTINGS).start()
    try:
        upgraded_offline_through_a_kill(kafka.bootstrap, tmp_path)
    finally:
        kafka.stop()
