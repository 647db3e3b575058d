"""The online-migration scenario of tests/integration/test_group_migration.py against
Apache Kafka: a classic (JoinGroup) member and a KIP-848 member share one group there
too, and the same assertions hold (so eosbroker's migration is Kafka's behaviour)."""

from tests.integration.test_group_migration import classic_member_joins_consumer_group


def test_classic_member_joins_consumer_group_on_kafka(kafka_broker, topic_name):
    classic_member_joins_consumer_group(kafka_broker.bootstrap, topic_name)


def test_group_becomes_classic_when_the_last_consumer_member_leaves_on_kafka(kafka_broker, topic_name):
    from tests.integration.test_group_migration import last_consumer_member_leaves

    assert last_consumer_member_leaves(kafka_broker.bootstrap, topic_name) == ["CONSUMER", "CLASSIC"]


def test_classic_group_upgraded_when_a_consumer_member_joins_on_kafka(kafka_broker, topic_name):
    from tests.integration.test_group_migration import consumer_member_joins_classic_group

    assert consumer_member_joins_classic_group(kafka_broker.bootstrap, topic_name) == ["CLASSIC", "CONSUMER"]
