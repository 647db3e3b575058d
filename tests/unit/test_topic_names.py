"""Topic names and the throttled-replicas lists, checked with patterns re compiles on
first use (not at start-up): legal and illegal values, as Kafka's Topic.validate and
ConfigDef validators judge them."""

from __future__ import annotations

import pytest

from broker.cluster.topic_configs import TOPIC_CONFIGS, InvalidTopicConfig
from broker.cluster.topics import MAX_TOPIC_LENGTH, TopicError, validate_topic_name


@pytest.mark.parametrize("name", ["t", "orders.v2", "a_b-c", "X" * MAX_TOPIC_LENGTH, "__consumer_offsets"])
def test_legal_topic_names_pass(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "a/b", "tópico", "a\n", "X" * (MAX_TOPIC_LENGTH + 1)])
def test_illegal_topic_names_are_invalid_topic_exception(name):
    with pytest.raises(TopicError) as e:
        validate_topic_name(name)
    assert e.value.error_name == "INVALID_TOPIC_EXCEPTION"


@pytest.mark.parametrize("config", ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"])
def test_throttled_replicas_take_the_wildcard_or_partition_broker_pairs(config):
    definition = TOPIC_CONFIGS[config]
    for good in ("*", "", "0:1", " 0:1 , 1:2 "):
        definition.parse(good)
    for bad in ("x", "0", "0:1,", "*,0:1", "0:1;1:2"):
        with pytest.raises(InvalidTopicConfig, match="wildcard"):
            definition.parse(bad)
