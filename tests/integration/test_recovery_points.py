"""Crash recovery from the recovery points (meta/recovery-point-offset-checkpoint): after
kill -9 only what lies beyond a partition's recovery point is validated, and a torn tail
there is still cut off; committed transactions before and after it read back exactly once
under read_committed, and the transactional id carries on."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.log.recovery_points import FILE_NAME, read_recovery_points
from protocol.records import build_batch

PARTITIONS = 2


def _transaction(producer: Producer, topic: str, label: str) -> list[bytes]:
    values = [f"{label}-{i}".encode() for i in range(10)]
    producer.begin_transaction()
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % PARTITIONS)
    producer.commit_transaction(30)
    return values


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen, at_end = [], set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            seen.append(msg.value())
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, "did not reach the end of every partition"
    return seen


def test_kill_9_recovers_beyond_the_recovery_point_and_cuts_a_torn_tail(broker_factory, topic_name):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])[topic_name].result(10)
    tid = f"txn-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    before = _transaction(producer, topic_name, "before")
    producer.flush(10)
    del producer

    # A clean restart: every partition's recovery point is its log end from then on.
    assert broker.stop() == 0
    broker.start()
    points = read_recovery_points(broker.data_dir / "meta" / FILE_NAME)
    assert points[(topic_name, 0)] == points[(topic_name, 1)] == 6  # 5 records + a marker each

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    after = _transaction(producer, topic_name, "after")  # beyond the recovery points
    producer.flush(10)
    del producer
    broker.kill()

    # kill -9 in the middle of an append: half a batch at the end of partition 0
    [segment] = (broker.data_dir / f"{topic_name}-0").glob("*.log")
    torn = build_batch([(None, b"torn", (), 0)])
    with open(segment, "ab") as f:
        f.write(torn[: len(torn) // 2])
    seen = len(broker.log_text())
    broker.start()
    started = broker.log_text()[seen:]
    assert "after an unclean shutdown" in started

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    later = _transaction(producer, topic_name, "later")
    producer.flush(10)
    assert sorted(_read_committed(broker.bootstrap, topic_name)) == sorted(before + after + later)
    # cut when the partition was opened: at its first use or by the background validation
    assert f"{topic_name}-0: segment {segment.name}: truncating at position" in broker.log_text()[seen:]
