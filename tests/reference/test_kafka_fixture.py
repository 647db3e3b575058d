"""The reference broker answers as a single-node Kafka of the pinned version."""

from confluent_kafka.admin import AdminClient, NewTopic

from tests.reference.kafka_broker import KAFKA_VERSION, api_versions_answer


def test_kafka_reference_answers(kafka_broker, topic_name):
    assert KAFKA_VERSION == "4.4.0"
    assert api_versions_answer(kafka_broker.port)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(30)
    metadata = admin.list_topics(timeout=30)
    assert list(metadata.brokers) == [1]
    assert len(metadata.topics[topic_name].partitions) == 3
    assert "Kafka version: 4.4.0" in kafka_broker.log_text()
