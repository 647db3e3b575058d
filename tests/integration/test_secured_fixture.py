"""The pytest plugin's secured brokers: each security set-up started, and the client
settings it hands out work as given: a confluent-kafka transaction committed and read
back read_committed (by the handle's own helpers, logged in as admin), kafka-python and
aiokafka likewise on SASL_SSL (SCRAM, OAUTHBEARER) and mTLS."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Producer

SETUPS = [("PLAINTEXT", None), ("SSL", None), ("MTLS", None), ("SASL_PLAINTEXT", "PLAIN"),
          ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "OAUTHBEARER")]


def ids(setups):
    return [f"{p}-{m}" if m else p for p, m in setups]


@pytest.mark.parametrize("protocol,mechanism", SETUPS, ids=ids(SETUPS))
def test_confluent_kafka_settings_commit_a_transaction(eosbroker_secured, protocol, mechanism):
    broker = eosbroker_secured(protocol, mechanism)
    topic = broker.create_topic(partitions=2)
    producer = Producer({**broker.confluent_kafka("alice"), "transactional.id": f"t-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    del producer
    broker.assert_topic_holds(topic, [f"v{i}" for i in range(4)])


PYTHON_CLIENT_SETUPS = [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "OAUTHBEARER"), ("MTLS", None)]


@pytest.mark.parametrize("protocol,mechanism", PYTHON_CLIENT_SETUPS, ids=ids(PYTHON_CLIENT_SETUPS))
def test_settings_for_kafka_python_and_aiokafka(eosbroker_secured, protocol, mechanism):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    broker = eosbroker_secured(protocol, mechanism)
    topic = broker.create_topic()
    producer = KafkaProducer(**broker.kafka_python("bob"), transactional_id="t-kafka-python")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"from-kafka-python")
    producer.commit_transaction()
    producer.close()

    async def aio():
        p = AIOKafkaProducer(**broker.aiokafka("alice"), transactional_id="t-aiokafka")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"from-aiokafka")
        finally:
            await p.stop()

    asyncio.run(aio())
    broker.assert_topic_holds(topic, [b"from-kafka-python", b"from-aiokafka"])


def test_a_wrong_password_fails_the_login_with_kafkas_error(eosbroker_secured):
    from spark_client.security import ClientSecurity
    from spark_client.wire import Client, KafkaError

    broker = eosbroker_secured("SASL_SSL", "PLAIN")
    options = broker.spark_options("alice")
    options["kafka.sasl.jaas.config"] = options["kafka.sasl.jaas.config"].replace("alice-secret", "wrong")
    with pytest.raises(KafkaError) as refused:
        with Client(broker.bootstrap_servers, security=ClientSecurity.parse(options)) as cluster:
            cluster.partition_count("anything")
    assert refused.value.error.name == "sasl_authentication_failed"
    assert "Invalid username or password" in str(refused.value)


def test_the_data_source_client_re_authenticates_before_its_session_ends(eosbroker_secured):
    """KIP-368: with connections.max.reauth.ms the broker closes a connection whose session
    ended; spark_client's connection logs in again on the same socket before that."""
    import time

    from spark_client.security import ClientSecurity
    from spark_client.wire import Client

    broker = eosbroker_secured("SASL_SSL", "SCRAM-SHA-512", settings={"connections.max.reauth.ms": 1500})
    topic = broker.create_topic()
    with Client(broker.bootstrap_servers, security=ClientSecurity.parse(broker.spark_options("bob"))) as cluster:
        connection = cluster.any_connection()
        for _ in range(16):  # 4 s: past two session lifetimes
            cluster.refresh_metadata([topic])
            time.sleep(0.25)
        assert cluster.any_connection() is connection
    assert "SASL session expired" not in broker.log_text()


def test_a_broker_certificate_the_truststore_does_not_vouch_for_is_refused(eosbroker_secured):
    """Without the development CA (the system's CAs only) the data source's client refuses the broker."""
    from spark_client.preflight import PreflightError, partition_counts
    from spark_client.security import ClientSecurity

    broker = eosbroker_secured("SSL")
    options = {k: v for k, v in broker.spark_options().items() if not k.startswith("kafka.ssl.truststore")}
    with pytest.raises(PreflightError, match="CERTIFICATE_VERIFY_FAILED"):
        partition_counts(broker.bootstrap_servers, ("t",), ClientSecurity.parse(options))
    assert partition_counts(broker.bootstrap_servers, (broker.create_topic(),),
                            ClientSecurity.parse(broker.spark_options()))


@pytest.mark.parametrize("protocol,mechanism", [("SASL_SSL", "OAUTHBEARER"), ("MTLS", None)], ids=["SASL_SSL", "MTLS"])
def test_three_nodes(eosbroker_secured, protocol, mechanism):
    """Three nodes: every client's settings reach each partition leader and coordinator
    through the secured listener (the handle's reads log in to every node)."""
    broker = eosbroker_secured(protocol, mechanism, nodes=3)
    topic = broker.create_topic(partitions=3)
    producer = Producer({**broker.confluent_kafka("alice"), "transactional.id": "t-three-nodes"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=f"n{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)
    del producer
    records = broker.assert_topic_holds(topic, [f"n{i}" for i in range(6)])
    assert {r.partition for r in records} == {0, 1, 2}
