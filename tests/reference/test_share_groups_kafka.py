"""The share-group scenarios of tests/integration/test_share_groups.py against Apache
Kafka 4.4 with confluent-kafka's ShareConsumer: the same expectations hold there, so
eosbroker's share groups behave as Kafka's. Kafka's locks end on its own clock: the
lock-expiry scenarios wait for share.record.lock.duration.ms (15 s, the least Kafka
allows), so they are in make test-reference only."""

import time

import pytest

from tests.integration import test_share_groups as scenarios


def _let_lock_expire() -> None:
    time.sleep((scenarios.LOCK_MS + 1000) / 1000)


def test_delivery_with_implicit_acknowledgement_on_kafka(kafka_broker, topic_name):
    scenarios.delivery_with_implicit_acknowledgement(kafka_broker.bootstrap, topic_name)


def test_explicit_accept_release_reject_on_kafka(kafka_broker, topic_name):
    scenarios.explicit_accept_release_reject(kafka_broker.bootstrap, topic_name)


def test_delivery_count_limit_archives_on_kafka(kafka_broker, topic_name):
    scenarios.delivery_count_limit_archives(kafka_broker.bootstrap, topic_name)


def test_read_committed_around_transactions_on_kafka(kafka_broker, topic_name):
    scenarios.read_committed_around_transactions(kafka_broker.bootstrap, topic_name)


@pytest.mark.reference_extended
def test_redelivery_after_lock_expiry_on_kafka(kafka_broker, topic_name):
    scenarios.redelivery_after_lock_expiry(kafka_broker.bootstrap, topic_name, _let_lock_expire)


@pytest.mark.reference_extended
def test_redelivery_after_a_consumer_dies_on_kafka(kafka_broker, topic_name):
    scenarios.redelivery_after_a_consumer_dies(kafka_broker.bootstrap, topic_name, _let_lock_expire)


def test_a_killed_consumers_records_come_back_when_its_connection_closes_on_kafka(kafka_broker, topic_name):
    scenarios.redelivery_after_a_consumer_dies(kafka_broker.bootstrap, topic_name, lambda: None, lock_ms=60_000,
                                               timeout=30)
