"""The reference broker's secured listeners work as the security tests use them: on each
(SASL_PLAINTEXT and SASL_SSL with every mechanism, MTLS, SSL) confluent-kafka logs in as alice,
commits a transaction and reads it back read_committed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.security import LOGIN_MODULES, MECHANISMS

LOGINS = ([("SASL_PLAINTEXT", m) for m in MECHANISMS] + [("SASL_SSL", m) for m in MECHANISMS]
          + [("MTLS", None), ("SSL", None)])


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


@pytest.fixture(scope="module")
def eos_sasl_ssl(tmp_path_factory):
    """eosbroker serving SASL_SSL with every mechanism (the reference's SASL_SSL listener)."""
    from broker.testing.security import SecuredBroker, Security, sasl_listener_settings, scram_users

    workdir = tmp_path_factory.mktemp("eos-sasl-ssl")
    security = Security.of("SASL_SSL", "PLAIN", certs_dir=workdir / "certs")
    broker = SecuredBroker(workdir / "data", security, sasl_listener_settings("SASL_SSL"))
    broker.extra_args = [arg for entry in scram_users() for arg in ("--scram", entry)]
    yield broker.start()
    broker.stop()


BAD_LOGINS = [("PLAIN", "alice", "wrong"), ("PLAIN", "mallory", "x"), ("SCRAM-SHA-256", "alice", "wrong"),
              ("SCRAM-SHA-512", "mallory", "x")]


@pytest.mark.parametrize("mechanism,user,password", BAD_LOGINS, ids=[f"{m}-{u}" for m, u, _ in BAD_LOGINS])
def test_failed_logins_of_the_data_source_client_same_as_kafka(kafka_broker, eos_sasl_ssl, mechanism, user, password):
    """What the Spark data source's client reports for a failed login, on both brokers:
    Kafka's error code and message."""
    from spark_client.security import ClientSecurity
    from spark_client.wire import Client, KafkaError

    seen = {}
    for name, bootstrap, security in (
            ("kafka", kafka_broker.bootstrap_for("SASL_SSL"), kafka_broker.security("SASL_SSL", mechanism)),
            ("eosbroker", eos_sasl_ssl.bootstrap_servers, eos_sasl_ssl.security)):
        options = security.spark_options("alice")
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = f'{LOGIN_MODULES[mechanism]} required username="{user}" password="{password}";'
        with pytest.raises(KafkaError) as failure:
            with Client(bootstrap, security=ClientSecurity.parse(options)) as cluster:
                cluster.partition_count("anything")
        seen[name] = (failure.value.error.name, failure.value.context.split(": ", 1)[1])
    assert seen["eosbroker"] == seen["kafka"]
    assert seen["kafka"][0] == "sasl_authentication_failed"
