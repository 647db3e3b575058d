"""Scenario transactional-id-expiration with confluent-kafka: after eight idle days
the coordinator no longer knows the producer id; the next transaction's
AddPartitionsToTxn is refused INVALID_PRODUCER_ID_MAPPING (abortable), the producer
aborts, gets a new producer id and carries on; the refused record is never written."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic, kafka_error

pytestmark = pytest.mark.timeout(90)


def test_the_idle_producer_meets_an_expired_transactional_id(broker_factory):
    broker = broker_factory(scenario="transactional-id-expiration")
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "idle-app"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"before", partition=0)
    producer.commit_transaction(30)

    producer.begin_transaction()  # eight days later (the trigger moves the clock on)
    producer.produce(topic, b"refused", partition=0)
    error = kafka_error(producer.commit_transaction, 30)
    assert (error.code(), error.fatal(), error.txn_requires_abort()) == (
        KafkaError.INVALID_PRODUCER_ID_MAPPING, False, True)
    assert broker.control().clock()["offset_ms"] == 8 * 86_400_000
    assert "expired 1 idle producers" in broker.log_text()
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"after", partition=0)
    producer.commit_transaction(30)
    assert_exactly_once(broker, topic, 1, [b"before", b"after"])
