"""The reference broker answers as a single-node Kafka of the pinned version."""

from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.helpers import wait_until
from tests.reference.kafka_broker import KAFKA_VERSION, api_versions_answer


def test_kafka_reference_answers(kafka_broker, topic_name):
    assert KAFKA_VERSION == "4.4.0"
    assert api_versions_answer(kafka_broker.port)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(30)
    # Kafka answers CreateTopics once its controller committed; its broker's metadata
    # cache may name the topic a moment later (seen on a loaded machine)
    metadata = wait_until(lambda: (m := admin.list_topics(timeout=30)).topics.get(topic_name) and m,
                          timeout=30, message=f"Kafka's metadata naming {topic_name}")
    assert list(metadata.brokers) == [1]
    assert len(metadata.topics[topic_name].partitions) == 3
    assert "Kafka version: 4.4.0" in kafka_broker.log_text()
