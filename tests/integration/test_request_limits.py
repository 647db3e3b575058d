"""Requests that would make the broker allocate without bound are refused with Kafka's
error, and the broker keeps serving."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


def test_create_topics_over_ten_thousand_partitions_is_a_policy_violation(shared_broker, topic_name):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic_name, 6000, 1), NewTopic(topic_name + "-b", 5000, 1)])
    for f in futures.values():
        with pytest.raises(KafkaException) as e:
            f.result(30)
        assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
        assert "Excessively large number of partitions" in e.value.args[0].str()
    assert topic_name not in admin.list_topics(timeout=10).topics
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)  # still serving


def test_create_partitions_over_ten_thousand_new_partitions_is_a_policy_violation(shared_broker, topic_name):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    with pytest.raises(KafkaException) as e:
        admin.create_partitions([NewPartitions(topic_name, 20000)])[topic_name].result(30)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 1
