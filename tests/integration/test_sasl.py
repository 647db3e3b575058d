"""SASL_PLAINTEXT with real clients: confluent-kafka, kafka-python and aiokafka log in with
PLAIN, SCRAM-SHA-512 and OAUTHBEARER; the principal each logs in as is what the ACLs see
(alice may write topic orders under transactional ids t-*, bob may only read it), so a
transaction alice commits is read back read_committed by bob, and bob's writes get the
authorization errors each client reports. Bad input (a wrong password, an unknown user,
an expired token, a request before authentication, a 100 MB token) ends only its own
connection, with a log line."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from tests.sasl_broker import (MECHANISMS, RawConnection, SaslBroker, aiokafka_settings, confluent_settings,
                               kafka_python_settings, rss_kib, token_for)
from tests.sasl_tokens import oauthbearer, plain, unsecured_jws

TOPIC = "orders"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, DESCRIBE_ACLS = 17, 36, 3, 29
GRANTS = [
    ("User:alice", ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, AclOperation.WRITE),
    ("User:alice", ResourceType.TRANSACTIONAL_ID, "t-", ResourcePatternType.PREFIXED, AclOperation.WRITE),
    ("User:bob", ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, AclOperation.READ),
    ("User:bob", ResourceType.GROUP, "g-", ResourcePatternType.PREFIXED, AclOperation.READ),
]


def _with_acls(tmp_path, nodes: int) -> SaslBroker:
    broker = SaslBroker(tmp_path, nodes, admin=nodes == 1, **{"authorizer.class.name": STANDARD_AUTHORIZER,
                                           "super.users": "User:admin"})
    admin = AdminClient(confluent_settings(broker.bootstrap, "SCRAM-SHA-512", "admin"))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(20)
    for f in admin.create_acls([AclBinding(rt, name, pt, who, "*", op, AclPermissionType.ALLOW)
                                for who, rt, name, pt, op in GRANTS]).values():
        f.result(20)
    return broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = _with_acls(tmp_path_factory.mktemp("sasl"), 1)
    yield b
    b.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    b = _with_acls(tmp_path_factory.mktemp("sasl3"), 3)
    yield b
    b.stop()


# -- each client writes as alice and reads as bob -------------------------------------------

def confluent_round_trip(bootstrap: str, mechanism: str) -> list[bytes]:
    values = [f"{mechanism}-{uuid.uuid4().hex[:8]}-{i}".encode() for i in range(3)]
    producer = Producer({**confluent_settings(bootstrap, mechanism, "alice"), "transactional.id": f"t-{values[0]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in values:
        producer.produce(TOPIC, v)
    producer.commit_transaction(30)
    consumer = Consumer({**confluent_settings(bootstrap, mechanism, "bob"), "group.id": f"g-{values[0]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([TOPIC])
    return _polled(consumer, values)


def _polled(consumer, values) -> list[bytes]:
    got = []
    try:
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() in values:
                got.append(msg.value())
                if len(got) == len(values):
                    break
    finally:
        consumer.close()
    return got


def kafka_python_round_trip(bootstrap: str, mechanism: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    values = [f"{mechanism}-{uuid.uuid4().hex[:8]}-{i}".encode() for i in range(3)]
    producer = KafkaProducer(**kafka_python_settings(bootstrap, mechanism, "alice"), transactional_id=f"t-{values[0]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for v in values:
            producer.send(TOPIC, v)
        producer.commit_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(TOPIC, **kafka_python_settings(bootstrap, mechanism, "bob"), group_id=f"g-{values[0]}",
                             auto_offset_reset="earliest", isolation_level="read_committed", consumer_timeout_ms=30000)
    got = []
    try:
        for record in consumer:
            if record.value in values:
                got.append(record.value)
                if len(got) == len(values):
                    break
    finally:
        consumer.close()
    return got


def aiokafka_round_trip(bootstrap: str, mechanism: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    values = [f"{mechanism}-{uuid.uuid4().hex[:8]}-{i}".encode() for i in range(3)]

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**aiokafka_settings(bootstrap, mechanism, "alice"),
                                    transactional_id=f"t-{values[0]}")
        await producer.start()
        try:
            async with producer.transaction():
                for v in values:
                    await producer.send(TOPIC, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(TOPIC, **aiokafka_settings(bootstrap, mechanism, "bob"),
                                    group_id=f"g-{values[0]}", auto_offset_reset="earliest",
                                    isolation_level="read_committed")
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                async for record in consumer:
                    if record.value in values:
                        got.append(record.value)
                        if len(got) == len(values):
                            break
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    return got if len(got) == 3 else []


ROUND_TRIPS = {"confluent": confluent_round_trip, "kafka-python": kafka_python_round_trip,
               "aiokafka": aiokafka_round_trip}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", ROUND_TRIPS)
def test_alice_commits_a_transaction_bob_reads_it_committed(broker, client, mechanism):
    got = ROUND_TRIPS[client](broker.bootstrap, mechanism)
    assert len(got) == 3 and len(set(got)) == 3
    broker.wait_for_log(f"authenticated as User:bob with {mechanism}")


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", ROUND_TRIPS)
def test_on_three_nodes_too(cluster, client, mechanism):
    got = ROUND_TRIPS[client](cluster.bootstrap, mechanism)
    assert len(got) == 3 and len(set(got)) == 3


# -- what bob may not do ------------------------------------------------------------------

def test_bob_may_only_read_confluent(broker):
    producer = Producer({**confluent_settings(broker.bootstrap, "PLAIN", "bob"), "transactional.id": "t-bob"})
    with pytest.raises(KafkaException) as e:
        producer.init_transactions(30)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    reports = []
    producer = Producer(confluent_settings(broker.bootstrap, "PLAIN", "bob"))
    producer.produce(TOPIC, b"bob", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert [r.code() for r in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    raw = RawConnection(broker.port)  # DescribeAcls wants DESCRIBE on the cluster, which bob lacks
    _handshake(raw, "PLAIN")
    assert raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": plain("bob", "bob-secret")}).error_code == 0
    answer = raw.request(DESCRIBE_ACLS, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                            "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                            "operation": 1, "permission_type": 1})
    assert answer.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    raw.close()
    admin = AdminClient(confluent_settings(broker.bootstrap, "OAUTHBEARER", "admin"))  # a super user, by its sub
    found = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                 AclOperation.ANY, AclPermissionType.ANY)).result(20)
    assert sorted((b.principal, b.name) for b in found) == sorted((who, name) for who, _, name, _, _ in GRANTS)


def test_bob_may_only_read_kafka_python(broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError, TransactionalIdAuthorizationFailedError

    producer = KafkaProducer(**kafka_python_settings(broker.bootstrap, "SCRAM-SHA-512", "bob"),
                             transactional_id="t-bob")
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(0)
    producer = KafkaProducer(**kafka_python_settings(broker.bootstrap, "SCRAM-SHA-512", "bob"), retries=0)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(TOPIC, b"bob").get(30)
    finally:
        producer.close(0)


def test_bob_may_only_read_aiokafka(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError, TransactionalIdAuthorizationFailed

    async def run():
        producer = AIOKafkaProducer(**aiokafka_settings(broker.bootstrap, "OAUTHBEARER", "bob"),
                                    transactional_id="t-bob")
        with pytest.raises(TransactionalIdAuthorizationFailed):
            await producer.start()
        await producer.stop()
        producer = AIOKafkaProducer(**aiokafka_settings(broker.bootstrap, "OAUTHBEARER", "bob"))
        await producer.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(TOPIC, b"bob")
        finally:
            await producer.stop()

    asyncio.run(run())


# -- bad input ----------------------------------------------------------------------------

def _login_error(settings: dict) -> str:
    errors = []
    producer = Producer({**settings, "error_cb": errors.append})
    for _ in range(60):
        producer.poll(0.5)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    return next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)


def _handshake(raw: RawConnection, mechanism: str, version: int = 1) -> None:
    answer = raw.request(SASL_HANDSHAKE, version, {"mechanism": mechanism})
    assert answer.error_code == 0 and "PLAIN" in answer.mechanisms


def test_bad_logins_end_only_their_own_connection(broker):
    # a producer logged in before: it goes on committing after every bad login below
    values = [b"before-and-after-1", b"before-and-after-2"]
    producer = Producer({**confluent_settings(broker.bootstrap, "PLAIN", "alice"), "transactional.id": "t-steady"})
    producer.init_transactions(30)

    wrong = {**confluent_settings(broker.bootstrap, "PLAIN", "alice"), "sasl.password": "wrong"}
    assert "Authentication failed: Invalid username or password" in _login_error(wrong)
    broker.wait_for_log("Authentication failed: Invalid username or password")
    unknown = {**confluent_settings(broker.bootstrap, "SCRAM-SHA-512", "alice"), "sasl.username": "mallory"}
    assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512") in _login_error(unknown)
    broker.wait_for_log("Authentication failed: Invalid user credentials")

    raw = RawConnection(broker.port)  # an expired token: Kafka's JSON challenge, then the failure
    _handshake(raw, "OAUTHBEARER")
    expired = oauthbearer(unsecured_jws({"sub": "alice", "exp": int(time.time()) - 60}))
    challenge = raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": expired})
    assert (challenge.error_code, challenge.auth_bytes) == (0, b'{"status":"invalid_token"}')
    failure = raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
    assert (failure.error_code, failure.error_message) == (58, '{"status":"invalid_token"}')
    assert raw.closed()
    broker.wait_for_log("was on or after the Expiration Time value")
    raw.close()

    raw = RawConnection(broker.port)  # a request before authentication: closed unanswered
    assert raw.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}) is None
    broker.wait_for_log("Unexpected Kafka request of type METADATA during SASL handshake.")

    raw = RawConnection(broker.port)  # after a v0 handshake a bare PLAIN token, refused
    _handshake(raw, "PLAIN", version=0)
    assert raw.bare(plain("alice", "wrong")) is None

    producer.begin_transaction()
    for v in values:
        producer.produce(TOPIC, v)
    producer.commit_transaction(30)
    consumer = Consumer({**confluent_settings(broker.bootstrap, "PLAIN", "bob"), "group.id": "g-steady",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([TOPIC])
    assert sorted(_polled(consumer, values)) == values


def test_a_bare_v0_token_logs_in(broker):
    raw = RawConnection(broker.port)
    _handshake(raw, "PLAIN", version=0)
    assert raw.bare(plain("alice", "alice-secret")) == b""
    answer = raw.request(METADATA, 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                        "allow_auto_topic_creation": False})
    assert answer.topics[0].error_code == 0  # alice may describe orders (WRITE implies DESCRIBE)
    # once authenticated (and without a session lifetime to re-authenticate in), the SASL
    # requests are Kafka's request handler's: ILLEGAL_SASL_STATE
    assert raw.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
    answer = raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": plain("alice", "alice-secret")})
    assert (answer.error_code, answer.error_message) == (34, "SaslAuthenticate request received after successful "
                                                             "authentication")
    raw.close()


def test_a_100_mb_token_is_refused_before_it_is_read(broker):
    before = rss_kib(broker.pid)
    raw = RawConnection(broker.port)
    _handshake(raw, "PLAIN")
    # a SaslAuthenticate frame announcing 100 MB: refused at its length (sasl.server.max.receive.size)
    raw.sock.sendall((100 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 65536)
    assert raw.closed()
    broker.wait_for_log("Failing SASL authentication due to invalid receive size (a frame of 104857600 bytes")
    assert rss_kib(broker.pid) - before < 16 * 1024
    assert len(confluent_round_trip(broker.bootstrap, "PLAIN")) == 3


# -- KIP-368 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    b = SaslBroker(tmp_path_factory.mktemp("reauth"), **{"connections.max.reauth.ms": "1500",
                                                         "connection.failed.authentication.delay.ms": "3000"})
    yield b
    b.stop()


def test_a_long_lived_connection_re_authenticates(reauth_broker):
    producer = Producer(confluent_settings(reauth_broker.bootstrap, "SCRAM-SHA-512", "alice"))
    reports = []
    for i in range(3):  # across several session lifetimes
        producer.produce("reauth", f"r{i}".encode(), on_delivery=lambda err, msg: reports.append(err))
        producer.flush(30)
        time.sleep(1.2)
    producer.produce("reauth", b"last", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert reports == [None] * 4
    log = reauth_broker.wait_for_log("re-authenticated as User:alice with SCRAM-SHA-512, session lifetime 1500 ms")
    assert "did not re-authenticate" not in log


def test_a_connection_that_does_not_re_authenticate_is_closed(reauth_broker):
    raw = RawConnection(reauth_broker.port)
    _handshake(raw, "PLAIN")
    answer = raw.request(SASL_AUTHENTICATE, 1, {"auth_bytes": plain("alice", "alice-secret")})
    assert (answer.error_code, answer.session_lifetime) == (0, __import__("datetime").timedelta(milliseconds=1500))
    time.sleep(1.6)  # past the session's end
    assert raw.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}) is None
    reauth_broker.wait_for_log("its SASL session expired and it did not re-authenticate")


# -- fuzz ---------------------------------------------------------------------------------

def test_mutated_logins_cost_only_their_connection(tmp_path):
    from torture import fuzz

    code, summary = fuzz.run(2000, 368, 4, tmp_path, sasl=True)
    assert code == 0, summary


def test_metrics_and_log_lines_name_the_principal(broker):
    import urllib.request

    confluent_round_trip(broker.bootstrap, "OAUTHBEARER")
    producer = Producer({**confluent_settings(broker.bootstrap, "PLAIN", "bob"), "transactional.id": "t-bob-2"})
    with pytest.raises(KafkaException):
        producer.init_transactions(30)
    broker.wait_for_log("Principal = User:bob is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = "
                        "TransactionalId:t-bob-2 for request = FindCoordinator")
    raw = RawConnection(broker.port)  # a failed login of this test's own, for the failure counter
    _handshake(raw, "PLAIN")
    assert raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": plain("alice", "wrong")}).error_code == 58
    raw.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert ('kafka_server_socket_server_metrics_successful_authentication_total{listener="SASL_PLAINTEXT",'
            'mechanism="OAUTHBEARER",principal="User:alice",reauthentication="false"}') in text
    assert 'kafka_server_socket_server_metrics_failed_authentication_total{listener="SASL_PLAINTEXT"' in text


def test_a_failed_login_is_answered_after_the_delay(reauth_broker):
    import socket

    raw = RawConnection(reauth_broker.port)
    _handshake(raw, "PLAIN")
    _, frame = raw.client.send(SASL_AUTHENTICATE, 2, {"auth_bytes": plain("alice", "wrong")})
    raw.sock.sendall(frame)
    raw.sock.settimeout(0.5)
    with pytest.raises(socket.timeout):  # held for connection.failed.authentication.delay.ms (3 s)
        raw.sock.recv(1)
    raw.sock.settimeout(15)
    answer = raw.read_response()
    assert (answer.error_code, answer.error_message) == (58, "Authentication failed: Invalid username or password")
    assert raw.closed()
    raw.close()


# -- signed tokens ------------------------------------------------------------------------

def test_signed_tokens_against_a_jwks(tmp_path):
    import json

    from tests.sasl_tokens import SigningKeys

    keys = SigningKeys()
    (tmp_path / "jwks.json").write_text(json.dumps(keys.jwks()))
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    jwks_broker = SaslBroker(tmp_path, **{
        prefix + "sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        prefix + "sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp_path / 'jwks.json'}",
        prefix + "sasl.oauthbearer.expected.audience": "kafka",
        prefix + "sasl.oauthbearer.expected.issuer": "https://issuer.example"})
    try:
        def signed(_config, issuer="https://issuer.example"):
            expiry = time.time() + 600
            return keys.sign({"sub": "alice", "iat": int(time.time()), "exp": expiry, "aud": "kafka",
                              "iss": issuer}), expiry

        settings = {"bootstrap.servers": jwks_broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "OAUTHBEARER"}
        producer = Producer({**settings, "oauth_cb": signed, "transactional.id": "t-signed"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("signed", b"v")
        producer.commit_transaction(30)
        jwks_broker.wait_for_log("authenticated as User:alice with OAUTHBEARER")
        # librdkafka's unsecured token: no signature where one is required
        unsigned = {**settings, "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=bob"}
        assert '{"status":"invalid_token"}' in _login_error(unsigned)
        jwks_broker.wait_for_log("The JWT is not signed, and a signature is required")
        # signed by the JWKS's key, but for another issuer
        elsewhere = {**settings, "oauth_cb": lambda config: signed(config, "https://elsewhere.example")}
        assert '{"status":"invalid_token"}' in _login_error(elsewhere)
        jwks_broker.wait_for_log("Issuer (iss) claim value (https://elsewhere.example) doesn't match expected value "
                                 "of https://issuer.example")
    finally:
        jwks_broker.stop()


# -- refused at start ---------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "SASL mechanism GSSAPI is not served by eosbroker"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": ""},
     "Could not find a 'sasl_plaintext.KafkaServer' or 'KafkaServer' entry in the JAAS configuration"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "x.Y required user_a=\"b\""},
     "JAAS config entry not terminated by semi-colon"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "requirement failed: sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when "
     "SASL is used for inter-broker communication"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
      "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
      "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": "file:/nonexistent/jwks.json",
      "sasl.oauthbearer.expected.audience": "kafka"},
     'The OAuth validator for the broker requires "sasl.oauthbearer.expected.issuer" to be configured so that the '
     'token\'s issuer ("iss") claim can be verified, but it was not set.'),
    ({"principal.builder.class": "com.example.Builder"},
     "principal.builder.class: eosbroker builds principals as Kafka's "
     "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder does"),
])
def test_sasl_settings_that_cannot_be_served_are_refused_at_start(tmp_path, overrides, message):
    import subprocess
    import sys

    from tests.sasl_broker import sasl_settings

    settings = {**sasl_settings(), "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "security.inter.broker.protocol": "SASL_PLAINTEXT", **overrides}
    args = [a for k, v in settings.items() if v != "" for a in ("--override", f"{k}={v}")]
    proc = subprocess.run([sys.executable, "-m", "broker.program", "serve", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_a_bad_scram_user_is_refused_at_start(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "broker.program", "serve", "--data-dir", str(tmp_path / "data"),
                           "--scram", "SCRAM-SHA-1=[name=a,password=b]"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "the mechanism must be one of SCRAM-SHA-256, SCRAM-SHA-512" in proc.stderr


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_across_session_lifetimes(reauth_broker, client):
    """kafka-python re-authenticates (KIP-368); aiokafka does not, so its connection is
    closed at its first request after the session's end, as Kafka closes it, and it
    reconnects: either way every record is written once."""
    topic = f"lifetimes-{client}"
    values = [f"{client}-{i}".encode() for i in range(4)]
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(**kafka_python_settings(reauth_broker.bootstrap, "SCRAM-SHA-512", "bob"))
        for v in values:
            producer.send(topic, v).get(30)
            time.sleep(0.8)  # four sends across more than one session lifetime (1.5 s)
        producer.close()
    else:
        from aiokafka import AIOKafkaProducer

        async def run():
            producer = AIOKafkaProducer(**aiokafka_settings(reauth_broker.bootstrap, "PLAIN", "admin"))
            await producer.start()
            try:
                for v in values:
                    await producer.send_and_wait(topic, v)
                    await asyncio.sleep(0.8)
            finally:
                await producer.stop()

        asyncio.run(run())
    consumer = Consumer({**confluent_settings(reauth_broker.bootstrap, "PLAIN", "alice"), "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    assert _polled(consumer, values) == values
    log = reauth_broker.log()
    if client == "kafka-python":
        assert "re-authenticated as User:bob with SCRAM-SHA-512" in log
    else:
        assert "(User:admin): its SASL session expired and it did not re-authenticate" in log


def test_scram_users_from_the_setting_log_in(tmp_path):
    # the users of the scram.users setting (KAFKA_SCRAM_USERS in a compose file) beside --scram's
    carol = SaslBroker(tmp_path, **{"scram.users": "SCRAM-SHA-512=[name=carol,password=carol-secret];"
                                                   "SCRAM-SHA-256=[name=dave,password=dave-secret]"})
    try:
        settings = {**confluent_settings(carol.bootstrap, "SCRAM-SHA-512", "alice"), "sasl.username": "carol",
                    "sasl.password": "carol-secret"}
        assert TOPIC not in AdminClient(settings).list_topics(timeout=20).topics
        carol.wait_for_log("authenticated as User:carol with SCRAM-SHA-512")
        alice = AdminClient(confluent_settings(carol.bootstrap, "SCRAM-SHA-512", "alice"))  # --scram's, too
        dave = alice.describe_user_scram_credentials(["dave"])["dave"].result(20)
        assert [(i.mechanism.name, i.iterations) for i in dave.scram_credential_infos] == [("SCRAM_SHA_256", 4096)]
        carol.wait_for_log("authenticated as User:alice with SCRAM-SHA-512")
    finally:
        carol.stop()


def test_a_request_in_mid_exchange_is_answered_illegal_sasl_state_then_closed(broker):
    raw = RawConnection(broker.port)
    _handshake(raw, "SCRAM-SHA-512")
    answer = raw.request(10, 4, {"key_type": 1, "coordinator_keys": ["t-x"]})  # FindCoordinator, not a token
    assert [c.error_code for c in answer.coordinators] == [34]
    assert raw.closed()
    raw.close()
    broker.wait_for_log("Unexpected Kafka request of type FIND_COORDINATOR during SASL authentication.")
