"""The reference broker's secured listeners work as the security tests use them: on each
(SASL_PLAINTEXT and SASL_SSL with every mechanism, MTLS) confluent-kafka logs in as alice,
commits a transaction and reads it back read_committed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.security import MECHANISMS

LOGINS = [("SASL_PLAINTEXT", m) for m in MECHANISMS] + [("SASL_SSL", m) for m in MECHANISMS] + [("MTLS", None)]


@pytest.mark.parametrize("listener,mechanism", LOGINS, ids=[f"{l}-{m}" if m else l for l, m in LOGINS])
def test_transaction_over_secured_listener(kafka_broker, listener, mechanism):
    settings = {"bootstrap.servers": kafka_broker.bootstrap_for(listener),
                **kafka_broker.security(listener, mechanism).confluent_kafka("alice")}
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer({**settings, "transactional.id": f"t-{topic}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"{listener}-{i}".encode())
    producer.commit_transaction(60)
    consumer = Consumer({**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values = []
    try:
        while len(values) < 3:
            message = consumer.poll(30)
            assert message is not None, f"nothing read back over {listener}; read {values}"
            assert message.error() is None, message.error()
            values.append(message.value().decode())
    finally:
        consumer.close()
    assert values == [f"{listener}-{i}" for i in range(3)]
    del producer, admin
