"""Scenario coordinator-power-loss with confluent-kafka on three nodes: the commit's
EndTxn is held by a paused coordinator node; the request times out and
commit_transaction raises the retriable _TIMED_OUT; after the node resumes the
retried commit succeeds and every record is committed once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic, kafka_error

pytestmark = pytest.mark.timeout(120)


def test_the_commit_times_out_then_completes_after_resume(broker_factory):
    broker = broker_factory(scenario="coordinator-power-loss")
    topic = create_topic(broker, 3)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "orders",
                         "socket.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    values = [b"o%d" % p for p in range(3)]
    for p, value in enumerate(values):
        producer.produce(topic, value, partition=p)
    error = kafka_error(producer.commit_transaction, 5)
    assert (error.code(), error.retriable(), error.fatal(), error.txn_requires_abort()) == (
        KafkaError._TIMED_OUT, True, False, False)
    control = broker.control()
    [paused] = [n["node_id"] for n in control.cluster()["nodes"] if n["state"] == "paused"]
    control.node_resume(node_id=paused)
    producer.commit_transaction(30)  # "retry call to resume": the same commit completes
    producer.begin_transaction()
    producer.produce(topic, b"next", partition=0)
    producer.commit_transaction(30)
    [trigger] = broker.scenario_state()["triggers"]
    assert trigger["fired"] == 1 and trigger["matched"] >= 2
    assert_exactly_once(broker, topic, 3, [*values, b"next"])

