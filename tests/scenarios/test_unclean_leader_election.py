"""Scenario unclean-leader-election with confluent-kafka on three nodes: an unclean
election truncates the partition under an idempotent producer, losing its second,
acknowledged record; its third batch is refused OUT_OF_ORDER_SEQUENCE_NUMBER, which
librdkafka raises as fatal. Exactly the truncated record is lost."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(90)


def test_the_lost_acknowledged_record_makes_the_next_batch_out_of_order(broker_factory):
    broker = broker_factory(scenario="unclean-leader-election")
    topic = create_topic(broker, name="events")
    producer = Producer({"bootstrap.servers": bootstrap(broker), "enable.idempotence": True, "client.id": "sensor",
                         "linger.ms": 0})
    offsets = []
    for value in (b"a", b"b"):
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: offsets.append((err, msg.offset())))
        producer.flush(30)
    assert offsets == [(None, 0), (None, 1)]  # both acknowledged
    producer.produce(topic, b"c", partition=0)
    with pytest.raises(KafkaException) as failed:  # the producer's fatal error
        producer.flush(30)
    error = failed.value.args[0]
    assert (error.code(), error.fatal()) == (KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, True)
    [trigger] = broker.scenario_state()["triggers"]
    assert (trigger["fired"], trigger["errors"]) == (1, [])
    [partition] = [p for p in broker.control().cluster()["partitions"] if p["topic"] == "events"]
    assert partition["leader_epoch"] == 1  # the election
    assert_exactly_once(broker, topic, 1, [b"a"])  # lost: exactly b, acknowledged at offset 1
