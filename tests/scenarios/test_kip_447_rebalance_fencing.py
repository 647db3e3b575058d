"""Scenario kip-447-rebalance-fencing with confluent-kafka: the worker's session expires
as its TxnOffsetCommit arrives; the offsets with the old group metadata are refused
UNKNOWN_MEMBER_ID (abortable), the worker aborts, rejoins the group, reprocesses from
the committed offsets and commits: every input transformed exactly once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(120)


def test_the_old_generation_is_fenced_and_the_output_is_exactly_once(broker_factory):
    broker = broker_factory(scenario="kip-447-rebalance-fencing")
    source, sink = create_topic(broker), create_topic(broker)
    seed = Producer({"bootstrap.servers": bootstrap(broker)})
    for i in range(5):
        seed.produce(source, b"in%d" % i, partition=0)
    seed.flush(30)

    consumer = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": "ctp-group", "client.id": "worker-a",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    assignments: list[list[int]] = []
    consumer.subscribe([source], on_assign=lambda c, parts: assignments.append([p.partition for p in parts]))
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "worker-a-txn",
                         "client.id": "worker-a"})
    producer.init_transactions(30)
    errors: list[KafkaError] = []
    early: list = []  # records a poll returned while waiting for the new assignment
    try:
        for _ in range(2):
            batch = poll(consumer, 5, early)
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value().replace(b"in", b"out"), partition=0)
            try:
                producer.send_offsets_to_transaction([TopicPartition(source, 0, batch[-1].offset() + 1)],
                                                     consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                break
            except KafkaException as e:
                errors.append(e.args[0])
                producer.abort_transaction(30)
                rejoined = len(assignments)
                deadline = time.monotonic() + 30  # the consumer learns it was expired and rejoins
                while len(assignments) == rejoined and time.monotonic() < deadline:
                    m = consumer.poll(0.1)  # serves the rebalance, and may return a record after it
                    if m is not None and m.error() is None:
                        early.append(m)
                assert len(assignments) > rejoined, "the consumer did not rejoin the group"
        assert [(e.code(), e.fatal(), e.txn_requires_abort()) for e in errors] == [
            (KafkaError.UNKNOWN_MEMBER_ID, False, True)]
        committed = consumer.committed([TopicPartition(source, 0)], 30)
        assert committed[0].offset == 5
    finally:
        consumer.close()
    [trigger] = broker.scenario_state()["triggers"]
    assert trigger["fired"] == 1
    assert_exactly_once(broker, sink, 1, [b"out%d" % i for i in range(5)])


def poll(consumer: Consumer, count: int, early: list) -> list:
    out, early[:] = list(early), []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            out.append(m)
    assert len(out) == count, f"polled {len(out)} of {count} records"
    return out
