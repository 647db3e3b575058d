"""Scenario transaction-timeout with confluent-kafka: the coordinator aborts the open
transaction at its timeout; the producer's commit is refused with a fatal fencing
error, a new instance takes the transactional id over; the timed-out record is never
visible."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic, kafka_error

pytestmark = pytest.mark.timeout(90)


def test_the_timed_out_transaction_is_aborted_and_the_producer_fenced(broker_factory):
    broker = broker_factory(scenario="transaction-timeout")
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "slow-app",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"timed-out", partition=0)
    producer.flush(30)  # acknowledged: the trigger moves the clock two minutes on
    assert broker.control().clock()["offset_ms"] == 120_000
    error = kafka_error(producer.commit_transaction, 30)
    # EndTxn with the epoch the timeout bumped past: librdkafka's fatal _FENCED
    assert (error.code(), error.fatal()) == (KafkaError._FENCED, True)
    assert "aborting timed-out transaction" in broker.log_text()
    # a fatal error ends the instance; the next one takes the transactional id over
    restarted = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "slow-app"})
    restarted.init_transactions(30)
    restarted.begin_transaction()
    restarted.produce(topic, b"after", partition=0)
    restarted.commit_transaction(30)
    assert [t["fired"] for t in broker.scenario_state()["triggers"]] == [1]  # only the first answer
    assert_exactly_once(broker, topic, 1, [b"after"])
