"""Each client over each secured set-up, against eosbroker on 1 and 3 nodes and Apache Kafka
4.4 alike (secured_targets.py): SASL_SSL with PLAIN, SCRAM-SHA-512 and OAUTHBEARER, mTLS and
SSL without a client certificate.

- alice commits a transaction into orders and bob reads it back read_committed (on SSL
  both are User:ANONYMOUS);
- bob, who may only read, gets the errors each client reports for a transactional id and
  a write, the same on every broker (asserted as Kafka's answers);
- a long-lived connection logging in with SCRAM-SHA-256, whose sessions last 2 s,
  re-authenticates (KIP-368) as each client can: the Java client (its reauthentication
  metric), librdkafka and kafka-python (their logs: no connection closed by the broker)
  do; aiokafka does not, so the broker closes its connection at its first request after
  the session's end and it reconnects. Either way every record is written once.

kafkajs runs the same matrix in tests/kafkajs/test_kafkajs_matrix.py (make kafkajs-test).
Outside make test: three brokers and a JVM client per case; make test-reference runs it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.reference import java_driver
from tests.reference.secured_targets import REAUTH_MS, SETUP_IDS, SETUPS, TOPIC

pytestmark = pytest.mark.reference_extended

BOB_SETUPS = [(listener, mechanism) for listener, mechanism in SETUPS if listener != "SSL"]  # SSL: anonymous
BOB_IDS = [i for i in SETUP_IDS if i != "SSL"]


def _names() -> tuple[str, str, list[str]]:
    tag = uuid.uuid4().hex[:8]
    return f"t-{tag}", f"g-{tag}", [f"{tag}-{i}" for i in range(3)]


def _log_offset(target) -> int:
    return len(target.log_text()) if target.kind != "kafka" else 0


# -- confluent-kafka (librdkafka) ---------------------------------------------------------

def _confluent(target, listener, mechanism, user) -> dict:
    return {"bootstrap.servers": target.bootstrap_for(listener),
            **target.security(listener, mechanism).confluent_kafka(user)}


def _confluent_read_committed(settings: dict, group: str, values: list[str]) -> list[str]:
    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    got = []
    try:
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.value().decode() in values:
                got.append(message.value().decode())
                if len(got) == len(values):
                    break
    finally:
        consumer.close()
    return sorted(got)


@pytest.mark.parametrize("listener,mechanism", SETUPS, ids=SETUP_IDS)
def test_confluent_kafka_alice_commits_bob_reads_committed(secured_target, listener, mechanism):
    tid, group, values = _names()
    producer = Producer({**_confluent(secured_target, listener, mechanism, "alice"), "transactional.id": tid})
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(TOPIC, value.encode())
    producer.commit_transaction(60)
    del producer
    assert _confluent_read_committed(_confluent(secured_target, listener, mechanism, "bob"), group, values) == values


@pytest.mark.parametrize("listener,mechanism", BOB_SETUPS, ids=BOB_IDS)
def test_confluent_kafka_bob_may_only_read(secured_target, listener, mechanism):
    settings = _confluent(secured_target, listener, mechanism, "bob")
    producer = Producer({**settings, "transactional.id": f"t-bob-{uuid.uuid4().hex[:6]}"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(60)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    del producer
    reports = []
    producer = Producer(settings)  # librdkafka: not idempotent by default
    producer.produce(TOPIC, b"bob", on_delivery=lambda err, msg: reports.append(err and err.code()))
    producer.flush(60)
    assert reports == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


# -- kafka-python -------------------------------------------------------------------------

def _kafka_python(target, listener, mechanism, user) -> dict:
    return {"bootstrap_servers": target.bootstrap_for(listener),
            **target.security(listener, mechanism).kafka_python(user)}


def _kafka_python_read_committed(settings: dict, group: str, values: list[str]) -> list[str]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(TOPIC, **settings, group_id=group, auto_offset_reset="earliest",
                             isolation_level="read_committed", enable_auto_commit=False, consumer_timeout_ms=30000)
    got = []
    try:
        for record in consumer:
            if record.value.decode() in values:
                got.append(record.value.decode())
                if len(got) == len(values):
                    break
    finally:
        consumer.close()
    return sorted(got)


@pytest.mark.parametrize("listener,mechanism", SETUPS, ids=SETUP_IDS)
def test_kafka_python_alice_commits_bob_reads_committed(secured_target, listener, mechanism):
    from kafka import KafkaProducer

    tid, group, values = _names()
    producer = KafkaProducer(**_kafka_python(secured_target, listener, mechanism, "alice"), transactional_id=tid)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for value in values:
            producer.send(TOPIC, value.encode())
        producer.commit_transaction()
    finally:
        producer.close()
    read = _kafka_python_read_committed(_kafka_python(secured_target, listener, mechanism, "bob"), group, values)
    assert read == values


@pytest.mark.parametrize("listener,mechanism", BOB_SETUPS, ids=BOB_IDS)
def test_kafka_python_bob_may_only_read(secured_target, listener, mechanism):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError, TransactionalIdAuthorizationFailedError

    settings = _kafka_python(secured_target, listener, mechanism, "bob")
    producer = KafkaProducer(**settings, transactional_id=f"t-bob-{uuid.uuid4().hex[:6]}")
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(0)
    producer = KafkaProducer(**settings, retries=0)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(TOPIC, b"bob").get(60)
    finally:
        producer.close(0)


# -- aiokafka -----------------------------------------------------------------------------

def _aiokafka(target, listener, mechanism, user) -> dict:
    return {"bootstrap_servers": target.bootstrap_for(listener),
            **target.security(listener, mechanism).aiokafka(user)}


async def _aiokafka_read_committed(settings: dict, group: str, values: list[str]) -> list[str]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(TOPIC, **settings, group_id=group, auto_offset_reset="earliest",
                                isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    got = []
    try:
        async with asyncio.timeout(60):
            while len(got) < len(values):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value.decode() for r in records if r.value.decode() in values]
    finally:
        await consumer.stop()
    return sorted(got)


@pytest.mark.parametrize("listener,mechanism", SETUPS, ids=SETUP_IDS)
def test_aiokafka_alice_commits_bob_reads_committed(secured_target, listener, mechanism):
    from aiokafka import AIOKafkaProducer

    tid, group, values = _names()

    async def run() -> list[str]:
        producer = AIOKafkaProducer(**_aiokafka(secured_target, listener, mechanism, "alice"), transactional_id=tid)
        await producer.start()
        try:
            async with producer.transaction():
                for value in values:
                    await producer.send(TOPIC, value.encode())
        finally:
            await producer.stop()
        return await _aiokafka_read_committed(_aiokafka(secured_target, listener, mechanism, "bob"), group, values)

    assert asyncio.run(run()) == values


@pytest.mark.parametrize("listener,mechanism", BOB_SETUPS, ids=BOB_IDS)
def test_aiokafka_bob_may_only_read(secured_target, listener, mechanism):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError, TransactionalIdAuthorizationFailed

    settings = _aiokafka(secured_target, listener, mechanism, "bob")

    async def run():
        producer = AIOKafkaProducer(**settings, transactional_id=f"t-bob-{uuid.uuid4().hex[:6]}")
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await producer.start()
        finally:
            await producer.stop()
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(TOPIC, b"bob")
        finally:
            await producer.stop()

    asyncio.run(run())


# -- the Java client (kafka-clients 4.4.0) ------------------------------------------------

def _java_properties(tmp_path, target, listener, mechanism, user):
    path = tmp_path / f"{user}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in target.security(listener, mechanism).java(user).items()))
    return path


def _java_round_trip(tmp_path, target, listener, mechanism, transactions: int = 1,
                     pause_ms: int = 0) -> tuple[dict, list[str]]:
    """What the driver reports, and the values alice's transactions wrote."""
    tid, group, _ = _names()
    reader = _java_properties(tmp_path, target, listener, mechanism, "bob")
    out = java_driver.run("secured-round-trip", target.bootstrap_for(listener), tid, TOPIC, group, str(reader),
                          str(transactions), str(pause_ms),
                          client_properties=_java_properties(tmp_path, target, listener, mechanism, "alice"))
    return out, sorted(f"{tid}-{t}-{i}" for t in range(transactions) for i in range(3))


@pytest.mark.parametrize("listener,mechanism", SETUPS, ids=SETUP_IDS)
def test_java_client_alice_commits_bob_reads_committed(secured_target, tmp_path, listener, mechanism):
    out, written = _java_round_trip(tmp_path, secured_target, listener, mechanism)
    assert out.get("read") == written, out


@pytest.mark.parametrize("listener,mechanism", BOB_SETUPS, ids=BOB_IDS)
def test_java_client_bob_may_only_read(secured_target, tmp_path, listener, mechanism):
    bob = _java_properties(tmp_path, secured_target, listener, mechanism, "bob")
    bootstrap = secured_target.bootstrap_for(listener)
    refused = java_driver.run("init-transactions", bootstrap, f"t-bob-{uuid.uuid4().hex[:6]}", client_properties=bob)
    assert (refused["error"], refused["message"]) == ("TransactionalIdAuthorizationException",
                                                      "Transactional Id authorization failed."), refused
    write = java_driver.run("produce-one", bootstrap, "bob", TOPIC, client_properties=bob)
    assert (write["error"], write["message"]) == JAVA_BOBS_WRITE, write


# The Java producer is idempotent by default: bob, who may write no topic, lacks
# IDEMPOTENT_WRITE on the cluster for its producer id
JAVA_BOBS_WRITE = ("ClusterAuthorizationException", "Cluster authorization failed.")


# -- KIP-368: one long-lived connection across session lifetimes ---------------------------

class _Lines(logging.Handler):
    """The messages a client logs (the broker closing a connection shows there)."""

    def __init__(self, logger: str) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.logger = logging.getLogger(logger)

    def emit(self, record) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> "_Lines":
        self.logger.addHandler(self)
        self.level, self.propagate = self.logger.level, self.logger.propagate
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)
        self.logger.propagate = self.propagate


def _confluent_long_lived(target, values: list[str]) -> int:
    """The connections the broker closed under the producer (librdkafka's log)."""
    with _Lines(f"librdkafka-{uuid.uuid4().hex[:6]}") as log:
        producer = Producer({**_confluent(target, "SASL_SSL", "SCRAM-SHA-256", "alice"), "logger": log.logger})
        reports = []
        for value in values:
            producer.produce(TOPIC, value.encode(), on_delivery=lambda err, msg: reports.append(err))
            producer.flush(60)
            time.sleep(REAUTH_MS / 1000 * 0.75)
        producer.poll(0.5)
        del producer
    assert reports == [None] * len(values)
    return sum("Disconnected" in line for line in log.lines)


def _kafka_python_long_lived(target, values: list[str]) -> int:
    from kafka import KafkaProducer

    with _Lines("kafka") as log:
        producer = KafkaProducer(**_kafka_python(target, "SASL_SSL", "SCRAM-SHA-256", "alice"))
        try:
            for value in values:
                producer.send(TOPIC, value.encode()).get(60)
                time.sleep(REAUTH_MS / 1000 * 0.75)
        finally:
            producer.close()
    return sum("Connection lost" in line for line in log.lines)


def _aiokafka_long_lived(target, values: list[str]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(**_aiokafka(target, "SASL_SSL", "SCRAM-SHA-256", "alice"))
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(TOPIC, value.encode())
                await asyncio.sleep(REAUTH_MS / 1000 * 0.75)
        finally:
            await producer.stop()

    asyncio.run(run())


LONG_LIVED = {"confluent": _confluent_long_lived, "kafka-python": _kafka_python_long_lived,
              "aiokafka": _aiokafka_long_lived}
RE_AUTHENTICATES = {"confluent": True, "kafka-python": True, "aiokafka": False}


@pytest.mark.parametrize("client", LONG_LIVED)
def test_a_long_lived_connection_across_session_lifetimes(secured_target, client):
    _, group, values = _names()
    values += [f"{values[0]}-{i}" for i in range(3)]  # six writes: 3 s, past one session's end
    before = _log_offset(secured_target)
    closed_by_broker = LONG_LIVED[client](secured_target, values)
    read = _confluent_read_committed(_confluent(secured_target, "SASL_SSL", "PLAIN", "bob"), group, values)
    assert read == sorted(values)  # every record once
    if RE_AUTHENTICATES[client]:
        assert closed_by_broker == 0
    if secured_target.kind != "kafka":
        log = secured_target.log_text()[before:]
        if RE_AUTHENTICATES[client]:
            assert "re-authenticated as User:alice with SCRAM-SHA-256" in log
            assert "did not re-authenticate" not in log
        else:
            assert "(User:alice): its SASL session expired and it did not re-authenticate" in log


def test_java_client_re_authenticates_a_long_lived_connection(secured_target, tmp_path):
    before = _log_offset(secured_target)
    out, written = _java_round_trip(tmp_path, secured_target, "SASL_SSL", "SCRAM-SHA-256", transactions=3,
                                    pause_ms=int(REAUTH_MS * 0.75))
    assert out.get("read") == written, out
    assert out["successful_reauthentications"] > 0, out
    if secured_target.kind != "kafka":
        log = secured_target.log_text()[before:]
        assert "re-authenticated as User:alice with SCRAM-SHA-256" in log
        assert "did not re-authenticate" not in log
