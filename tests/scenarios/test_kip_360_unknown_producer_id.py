"""Scenario kip-360-unknown-producer-id with confluent-kafka: after DeleteRecords removed
an idempotent producer's only batch, a 2.4 broker answers its next batch
UNKNOWN_PRODUCER_ID; librdkafka sees the log start offset past its last acknowledged
offset, knows the error is spurious, resets its sequence and retries: the record is
written once. A 4.0 broker (KIP-360) keeps the producer's state and takes the batch at
once. Either way exactly the deleted record is gone."""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(90)


def _write_delete_write(broker) -> tuple[str, list]:
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "enable.idempotence": True, "linger.ms": 0})
    reports: list = []
    on_delivery = lambda err, msg: reports.append((str(err), msg.value(), msg.offset()))  # noqa: E731
    producer.produce(topic, b"first", partition=0, on_delivery=on_delivery)
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": bootstrap(broker)})
    [deleted] = admin.delete_records([TopicPartition(topic, 0, 1)]).values()
    assert deleted.result(30).low_watermark == 1  # the producer's only batch is gone
    producer.produce(topic, b"second", partition=0, on_delivery=on_delivery)
    producer.flush(30)
    return topic, reports


def _produce_errors(broker) -> dict[str, float]:
    with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_errors_total{") and 'request="Produce"' in line:
            error = line.split('error="', 1)[1].split('"', 1)[0]
            out[error] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_2_4_broker_answers_unknown_producer_id_and_the_client_recovers(broker_factory):
    broker = broker_factory(scenario="kip-360-unknown-producer-id")
    topic, reports = _write_delete_write(broker)
    assert reports == [("None", b"first", 0), ("None", b"second", 1)]
    assert _produce_errors(broker) == {"NONE": 2.0, "UNKNOWN_PRODUCER_ID": 1.0}
    assert_exactly_once(broker, topic, 1, [b"second"])  # lost: exactly the deleted record


def test_a_4_0_broker_keeps_the_producer_state(broker_factory):
    broker = broker_factory(admin=True)  # the default profile, without the scenario
    topic, reports = _write_delete_write(broker)
    assert reports == [("None", b"first", 0), ("None", b"second", 1)]
    assert _produce_errors(broker) == {"NONE": 2.0}
    assert_exactly_once(broker, topic, 1, [b"second"])
