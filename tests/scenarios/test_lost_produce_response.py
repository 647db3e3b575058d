"""Scenario lost-produce-response: the first Produce answer is dropped after the batch
was appended; confluent-kafka's idempotent producer times the request out, retries
the same batch, and the broker answers it as a duplicate: every record once."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(90)


def test_the_idempotent_retry_is_deduplicated(broker_factory):
    broker = broker_factory(scenario="lost-produce-response")
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "enable.idempotence": True,
                         "socket.timeout.ms": 1500, "message.timeout.ms": 60000, "linger.ms": 0})
    reports = []
    values = [b"r%d" % i for i in range(5)]
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(60) == 0
    # every record acknowledged without an error, at offsets 0..4: the retried batch
    # got the offsets of its first, unanswered append
    assert [err for err, _ in reports] == [None] * 5
    assert sorted(offset for _, offset in reports) == [0, 1, 2, 3, 4]
    [rule] = broker.control().faults()["rules"]
    assert rule["fired"] == 1 and rule["matched"] >= 2
    assert_exactly_once(broker, topic, 1, values)
    assert "fault rule" in broker.log_text() and "drop_response" in broker.log_text()
