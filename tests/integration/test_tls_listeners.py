"""SSL listeners with real clients over real TCP: confluent-kafka, kafka-python and
aiokafka, over TLS (a PEM key store given as values) and mTLS (PKCS12 stores, client
certificates required), each committing a transaction and reading it back
read_committed, on 1 and 3 nodes; ACLs naming the certificate's mapped principal; and
bad input on the TLS and plaintext ports, each closed with a log line while the
connections already open carry on; SASL_SSL with each client and mechanism; the control
API over HTTPS."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from broker.security.certs import write_certificates
from broker.security.tls import INTERNAL_ERROR_ALERT
from broker.testing.helpers import HOST, free_port_block, wait_until
from tests.sasl_broker import PASSWORDS, aiokafka_settings, confluent_settings, kafka_python_settings, sasl_settings
from tests.tls_setup import TlsBroker

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certificates(tmp_path_factory.mktemp("certs"), clients=("alice", "bob", "admin"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory):
    """A client certificate signed by another CA."""
    return write_certificates(tmp_path_factory.mktemp("stranger"), clients=("mallory",))


@pytest.fixture(scope="module", params=[1, 3], ids=["1-node", "3-nodes"])
def tls_broker(request, tmp_path_factory, certs):
    broker = TlsBroker(tmp_path_factory.mktemp("tls") / "data", certs, nodes=request.param)
    yield broker
    broker.stop()


def _names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"orders-{tag}", f"t-{tag}", f"g-{tag}"


def _confluent_read_committed(bootstrap: str, settings: dict, topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, **settings, "group.id": group,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
                if len(got) == count:
                    break
    finally:
        consumer.close()
    return got


def test_confluent_kafka_transaction_over_mtls_read_back_over_tls(tls_broker, certs):
    topic, tid, group = _names()
    producer = Producer({"bootstrap.servers": tls_broker.bootstrap("MTLS"), **certs.confluent_kafka("alice"),
                         "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    producer.commit_transaction(30)
    got = _confluent_read_committed(tls_broker.bootstrap("SSL"), certs.confluent_kafka(), topic, group, 3)
    assert got == [b"v0", b"v1", b"v2"]


def test_kafka_python_transaction_over_mtls_read_back_over_tls(tls_broker, certs):
    from kafka import KafkaConsumer, KafkaProducer

    topic, tid, group = _names()
    producer = KafkaProducer(bootstrap_servers=tls_broker.bootstrap("MTLS"), **certs.kafka_python("alice"),
                             transactional_id=tid)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"v{i}".encode())
        producer.commit_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=tls_broker.bootstrap("SSL"), **certs.kafka_python(),
                             group_id=group, auto_offset_reset="earliest", isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=20000)
    try:
        got = []
        for record in consumer:
            got.append(record.value)
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == [b"v0", b"v1", b"v2"]


async def test_aiokafka_transaction_over_mtls_read_back_over_tls(tls_broker, certs):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, tid, group = _names()
    producer = AIOKafkaProducer(bootstrap_servers=tls_broker.bootstrap("MTLS"), **certs.aiokafka("alice"),
                                transactional_id=tid)
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(3):
                await producer.send_and_wait(topic, f"v{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=tls_broker.bootstrap("SSL"), **certs.aiokafka(),
                                group_id=group, auto_offset_reset="earliest", isolation_level="read_committed",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        got = []
        async with asyncio.timeout(30):
            while len(got) < 3:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
    finally:
        await consumer.stop()
    assert got == [b"v0", b"v1", b"v2"]


# ---- ACLs by the certificate's mapped principal ---------------------------------------


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory, certs):
    """One node, the authorizer on, User:admin (the admin certificate, mapped) a super user;
    alice may write transactional ids t-* and the topic orders, bob may only read it."""
    broker = TlsBroker(tmp_path_factory.mktemp("acl") / "data", certs, settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("MTLS"), **certs.confluent_kafka("admin")})

    def allow(principal, kind, name, operation, pattern_type=ResourcePatternType.LITERAL):
        return AclBinding(kind, name, pattern_type, principal, "*", operation, AclPermissionType.ALLOW)

    bindings = [allow("User:alice", ResourceType.TRANSACTIONAL_ID, "t-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
                allow("User:alice", ResourceType.TRANSACTIONAL_ID, "t-", AclOperation.DESCRIBE,
                      ResourcePatternType.PREFIXED),
                allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.WRITE),
                allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.DESCRIBE),
                allow("User:bob", ResourceType.TOPIC, "orders", AclOperation.READ),
                allow("User:bob", ResourceType.TOPIC, "orders", AclOperation.DESCRIBE),
                allow("User:bob", ResourceType.GROUP, "bob-", AclOperation.READ, ResourcePatternType.PREFIXED)]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    from confluent_kafka.admin import NewTopic

    for future in admin.create_topics([NewTopic("orders", 1, 1)]).values():
        future.result(30)
    yield broker
    broker.stop()


def test_acls_name_the_certificates_mapped_principal(acl_broker, certs):
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap("MTLS"), **certs.confluent_kafka("admin")})
    described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                     AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert {b.principal for b in described} == {"User:alice", "User:bob"}

    alice = Producer({"bootstrap.servers": acl_broker.bootstrap("MTLS"), **certs.confluent_kafka("alice"),
                      "transactional.id": "t-alice"})
    alice.init_transactions(30)
    alice.begin_transaction()
    alice.produce("orders", b"from alice")
    alice.commit_transaction(30)

    # bob's certificate maps to User:bob: no transactional id, no write
    bob = Producer({"bootstrap.servers": acl_broker.bootstrap("MTLS"), **certs.confluent_kafka("bob"),
                    "transactional.id": "t-bob"})
    with pytest.raises(KafkaException) as denied:
        bob.init_transactions(30)
    assert denied.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    errors = []
    writer = Producer({"bootstrap.servers": acl_broker.bootstrap("MTLS"), **certs.confluent_kafka("bob"),
                       "enable.idempotence": False, "acks": "all",
                       "error_cb": lambda e: errors.append(e.code())})
    delivered = []
    writer.produce("orders", b"from bob", on_delivery=lambda err, msg: delivered.append(err and err.code()))
    writer.flush(30)
    assert delivered == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    got = _confluent_read_committed(acl_broker.bootstrap("MTLS"), certs.confluent_kafka("bob"), "orders",
                                    "bob-readers", 1)
    assert got == [b"from alice"]

    # the same client without a certificate, on the TLS-only listener, is User:ANONYMOUS: nothing
    anonymous = Producer({"bootstrap.servers": acl_broker.bootstrap("SSL"), **certs.confluent_kafka(),
                          "transactional.id": "t-anon"})
    with pytest.raises(KafkaException) as denied:
        anonymous.init_transactions(30)
    assert denied.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# ---- bad input --------------------------------------------------------------------------

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, -1)  # header v1: api key, version, correlation, no client id


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.fixture(scope="module")
def one_node(tmp_path_factory, certs):
    broker = TlsBroker(tmp_path_factory.mktemp("bad") / "data", certs)
    yield broker
    broker.stop()


@pytest.fixture
def open_session(one_node, certs):
    """An mTLS transaction begun before the bad input: it must commit after it."""
    topic, tid, group = _names()
    producer = Producer({"bootstrap.servers": one_node.bootstrap("MTLS"), **certs.confluent_kafka("alice"),
                         "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"before")
    producer.flush(30)
    yield  # (the producer stays here: the client-leak check wants no other reference)
    producer.produce(topic, b"after")
    producer.commit_transaction(30)
    del producer
    got = _confluent_read_committed(one_node.bootstrap("SSL"), certs.confluent_kafka(), topic, group, 2)
    assert got == [b"before", b"after"]


def _log_grows(broker: TlsBroker, text: str, before: int) -> None:
    wait_until(lambda: text in broker.log()[before:], timeout=20, message=f"log line {text!r}")


def test_plaintext_client_on_a_tls_port_is_closed(one_node, open_session):
    before = len(one_node.log())
    with socket.create_connection((HOST, one_node.ports["SSL"])) as sock:
        sock.sendall(_frame(API_VERSIONS_V0))
        answer = _read_until_closed(sock)
    assert answer == INTERNAL_ERROR_ALERT  # Kafka's answer: a fatal TLS alert, no Kafka response
    _log_grows(one_node, "listener SSL): SSL handshake failed", before)


def test_garbage_instead_of_a_client_hello_is_closed(one_node, open_session):
    before = len(one_node.log())
    with socket.create_connection((HOST, one_node.ports["MTLS"])) as sock:
        sock.sendall(bytes(range(256)) * 8)
        assert _read_until_closed(sock) == INTERNAL_ERROR_ALERT
    _log_grows(one_node, "listener MTLS): SSL handshake failed", before)


def test_tls_client_on_a_plaintext_port_is_closed(one_node, open_session, certs):
    before = len(one_node.log())
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection((HOST, one_node.ports["PLAINTEXT"])) as raw:
        # the ClientHello's first bytes read as a frame size far over socket.request.max.bytes
        with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout, OSError)):
            raw.settimeout(30)
            context.wrap_socket(raw, server_hostname="localhost")
    _log_grows(one_node, "exceeds socket.request.max.bytes", before)


@pytest.mark.parametrize("client", [None, "mallory"], ids=["no-certificate", "another-ca"])
def test_client_certificate_missing_or_not_signed_by_the_ca_is_refused(one_node, open_session, certs, stranger,
                                                                       client):
    before = len(one_node.log())
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client:
        context.load_cert_chain(stranger.cert(client), stranger.key(client))
    with socket.create_connection((HOST, one_node.ports["MTLS"])) as raw:
        raw.settimeout(30)
        # TLS 1.3: the client's side of the handshake ends before the broker checks its
        # certificate; the refusal, a TLS alert as Kafka sends, meets its first read
        with pytest.raises(ssl.SSLError, match="ALERT"):
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(_frame(API_VERSIONS_V0))
                if not tls.recv(4):
                    raise ConnectionResetError("closed without an answer")
    reason = "certificate verify failed" if client else "peer did not return a certificate"
    _log_grows(one_node, f"listener MTLS): SSL handshake failed: {reason}", before)


# ---- the control API and console over HTTPS -----------------------------------------


def test_control_api_and_console_over_https(tmp_path, certs):
    import urllib.error
    import urllib.request

    from broker.control.api_client import ControlClient
    from broker.testing import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", admin=True, extra_args=[
        "--admin-tls-cert", str(certs.cert()), "--admin-tls-key", str(certs.key())]).start()
    try:
        url = f"https://{HOST}:{broker.admin_port}"
        assert ControlClient(url, ca=str(certs.ca)).call("cluster")["nodes"][0]["node_id"] == 1
        page = urllib.request.urlopen(url + "/", context=ssl.create_default_context(cafile=str(certs.ca)), timeout=30)
        assert b"<html" in page.read().lower()
        ctl = subprocess.run([sys.executable, "-m", "broker.program", "ctl", "--admin", url, "--ca", str(certs.ca),
                              "--json", "cluster"], capture_output=True, text=True, timeout=60)
        assert ctl.returncode == 0 and '"node_id": 1' in ctl.stdout, ctl.stderr
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP gets no answer
            urllib.request.urlopen(f"http://{HOST}:{broker.admin_port}/", timeout=30).read()
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            ControlClient(url).call("cluster")  # the development CA is not the system's
    finally:
        broker.stop()


def test_control_api_tls_options_refused_alone(tmp_path, certs):
    served = subprocess.run([sys.executable, "-m", "broker.program", "serve", "--data-dir", str(tmp_path / "data"),
                             "--port", "0", "--admin-port", "0", "--admin-tls-cert", str(certs.cert())],
                            capture_output=True, text=True, timeout=60)
    assert served.returncode == 2
    assert "--admin-tls-cert and --admin-tls-key go together, with --admin-port" in served.stderr


# ---- SASL_SSL: the SASL exchange over the TLS transport ------------------------------


def test_sasl_ssl_transaction_and_a_wrong_password(tmp_path, certs):
    """A SASL_SSL listener (PLAIN and SCRAM-SHA-512) whose client certificates are
    required as well: the principal is SASL's user, not the certificate's subject."""
    port = free_port_block(2)
    args = [sys.executable, "-m", "broker.program", "serve", "--data-dir", str(tmp_path / "data"),
            "--scram", "SCRAM-SHA-512=[name=bob,password=bob-secret]"]
    for key, value in {
        "listeners": f"PLAINTEXT://{HOST}:{port},SECURE://{HOST}:{port + 1}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "security.inter.broker.protocol": "PLAINTEXT",
        **certs.broker_settings("SECURE", "PKCS12", "required"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.secure.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-secret";',
        "listener.name.secure.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:carol;User:bob",
    }.items():
        args += ["--override", f"{key}={value}"]
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert "listening on" in proc.stdout.readline(), log_path.read_text()
        bootstrap = f"{HOST}:{port + 1}"
        tls = certs.confluent_kafka("alice", "SASL_SSL")  # a certificate too: required by the listener
        topic, tid, group = _names()
        # the super users are SASL's names: carol may do everything, the certificate's alice nothing
        producer = Producer({"bootstrap.servers": bootstrap, **tls, "sasl.mechanism": "PLAIN",
                             "sasl.username": "carol", "sasl.password": "carol-secret", "transactional.id": tid})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"over sasl_ssl")
        producer.commit_transaction(30)
        got = _confluent_read_committed(bootstrap, {**tls, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
                                                    "sasl.password": "bob-secret"}, topic, group, 1)
        assert got == [b"over sasl_ssl"]

        errors = []
        wrong = Producer({"bootstrap.servers": bootstrap, **tls, "sasl.mechanism": "PLAIN", "sasl.username": "carol",
                          "sasl.password": "wrong", "error_cb": lambda e: errors.append(e.code())})
        wrong.produce(topic, b"never")

        def refused() -> bool:
            wrong.poll(0.2)  # serves error_cb
            return KafkaError._AUTHENTICATION in errors

        wait_until(refused, timeout=30, message="an authentication error")
        assert len(wrong) == 1  # nothing was delivered
        del wrong
        assert "User:carol with PLAIN" in log_path.read_text()
        assert "Failed authentication with" in log_path.read_text()
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()


def test_a_certificate_no_mapping_rule_names_is_closed(tmp_path, certs):
    """Without DEFAULT among the rules, a subject outside OU=clients (the broker's own
    certificate, used as a client's) names no user: the connection is closed, logged."""
    broker = TlsBroker(tmp_path / "data", certs, settings={
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=clients,.*$/$1/"})
    try:
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.load_cert_chain(certs.cert(), certs.key())
        with socket.create_connection((HOST, broker.ports["MTLS"])) as raw:
            raw.settimeout(30)
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(_frame(API_VERSIONS_V0))
                assert _read_until_closed(tls) == b""  # closed unanswered
        wait_until(lambda: "failed to map the client certificate's name based on ssl.principal.mapping.rules: "
                           "No rules apply to CN=localhost,OU=broker" in broker.log(), timeout=20,
                   message="the mapping failure logged")
        # alice's certificate maps: served
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap("MTLS"),
                                **certs.confluent_kafka("alice")}).list_topics(timeout=30)
        assert [b.port for b in metadata.brokers.values()] == [broker.ports["MTLS"]]
    finally:
        broker.stop()


def _tls_session(port: int, certs, client: str | None = "alice") -> ssl.SSLSocket:
    """A TLS connection that has had an ApiVersions answer (the broker admitted it)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client:
        context.load_cert_chain(certs.cert(client), certs.key(client))
    tls = context.wrap_socket(socket.create_connection((HOST, port), timeout=30), server_hostname="localhost")
    tls.sendall(_frame(API_VERSIONS_V0))
    size = struct.unpack(">i", tls.recv(4))[0]
    assert size > 0
    return tls


def test_tls_connections_count_toward_max_connections_per_ip_from_accept(tmp_path, certs):
    """As Kafka's acceptor counts them: before the handshake; a failed handshake gives its
    count back; over the limit, the connection is closed before any handshake."""
    broker = TlsBroker(tmp_path / "data", certs, settings={"max.connections.per.ip": "2"})
    try:
        for _ in range(3):  # failed handshakes: each gives its count back
            with socket.create_connection((HOST, broker.ports["MTLS"])) as sock:
                sock.sendall(b"\x00" * 64)
                _read_until_closed(sock)
        held = [_tls_session(broker.ports["MTLS"], certs), _tls_session(broker.ports["SSL"], certs, None)]
        before = len(broker.log())
        context = ssl.create_default_context(cafile=str(certs.ca))
        with socket.create_connection((HOST, broker.ports["MTLS"]), timeout=30) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError)):  # closed before the ServerHello
                context.wrap_socket(raw, server_hostname="localhost")
        _log_grows(broker, "already has the configured maximum of 2 connections (max.connections.per.ip)", before)
        held.pop().close()

        def admitted() -> bool:
            try:
                held.append(_tls_session(broker.ports["MTLS"], certs))
                return True
            except (ssl.SSLError, ConnectionError):
                return False

        wait_until(admitted, timeout=20, message="a connection admitted once one closed")
        for tls in held:
            tls.close()
    finally:
        broker.stop()


@pytest.fixture(scope="module", params=[1, 3], ids=["1-node", "3-nodes"])
def sasl_ssl_broker(request, tmp_path_factory, certs):
    """One SASL_SSL listener with the SASL tests' mechanisms and users (tests/sasl_broker.py)."""
    nodes = request.param
    data = tmp_path_factory.mktemp("sasl-ssl")
    port = free_port_block(nodes)
    settings = {key.replace("listener.name.sasl_plaintext.", "listener.name.sasl_ssl."): value
                for key, value in sasl_settings().items()}
    settings.update({"listeners": f"SASL_SSL://{HOST}:{port}", "security.inter.broker.protocol": "SASL_SSL",
                     "ssl.keystore.location": str(certs.p12()), "ssl.keystore.password": certs.password})
    args = [sys.executable, "-m", "broker.program", "serve", "--data-dir", str(data / "data"), "--nodes", str(nodes)]
    for key, value in settings.items():
        args += ["--override", f"{key}={value}"]
    for user, password in PASSWORDS.items():
        args += ["--scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
    with open(data / "broker.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
    lines = [proc.stdout.readline() for _ in range(nodes)]
    assert all("listening on" in line for line in lines), (data / "broker.log").read_text()
    yield f"{HOST}:{port}"
    proc.terminate()
    proc.wait(30)
    proc.stdout.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"])
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_sasl_ssl_each_client_and_mechanism(sasl_ssl_broker, certs, client, mechanism):
    """Over SASL_SSL: alice commits a transaction, bob reads it back read_committed."""
    topic, tid, group = _names()
    if client == "confluent":
        def settings(user):
            return {**confluent_settings(sasl_ssl_broker, mechanism, user), **certs.confluent_kafka(None, "SASL_SSL")}

        producer = Producer({**settings("alice"), "transactional.id": tid})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"v{i}".encode())
        producer.commit_transaction(30)
        del producer
        got = _confluent_read_committed(sasl_ssl_broker, {k: v for k, v in settings("bob").items()
                                                          if k != "bootstrap.servers"}, topic, group, 3)
    elif client == "kafka-python":
        from kafka import KafkaConsumer, KafkaProducer

        def settings(user):
            return {**kafka_python_settings(sasl_ssl_broker, mechanism, user), **certs.kafka_python(None, "SASL_SSL")}

        producer = KafkaProducer(**settings("alice"), transactional_id=tid)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for i in range(3):
                producer.send(topic, f"v{i}".encode())
            producer.commit_transaction()
        finally:
            producer.close()
        consumer = KafkaConsumer(topic, **settings("bob"), group_id=group, auto_offset_reset="earliest",
                                 isolation_level="read_committed", consumer_timeout_ms=20000)
        got = []
        try:
            for record in consumer:
                got.append(record.value)
                if len(got) == 3:
                    break
        finally:
            consumer.close()
    else:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        def settings(user):
            return {**aiokafka_settings(sasl_ssl_broker, mechanism, user), **certs.aiokafka(None, "SASL_SSL")}

        async def run() -> list[bytes]:
            producer = AIOKafkaProducer(**settings("alice"), transactional_id=tid)
            await producer.start()
            try:
                async with producer.transaction():
                    for i in range(3):
                        await producer.send_and_wait(topic, f"v{i}".encode())
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(topic, **settings("bob"), group_id=group, auto_offset_reset="earliest",
                                        isolation_level="read_committed")
            await consumer.start()
            out = []
            try:
                async with asyncio.timeout(30):
                    while len(out) < 3:
                        for records in (await consumer.getmany(timeout_ms=500)).values():
                            out += [r.value for r in records]
            finally:
                await consumer.stop()
            return out

        got = asyncio.run(run())
    assert got == [b"v0", b"v1", b"v2"]


def _read_answers(sock, count: int) -> list[bytes]:
    """``count`` response frames (without their size prefix), nothing after them."""
    received = b""
    answers = []
    while len(answers) < count:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(answers)} answers"
        received += chunk
        while len(received) >= 4 and len(received) >= 4 + struct.unpack(">i", received[:4])[0]:
            size = struct.unpack(">i", received[:4])[0]
            answers.append(received[4:4 + size])
            received = received[4 + size:]
    assert received == b""
    return answers


def _api_versions_v3(correlation_id: int, software_name: str) -> bytes:
    name = software_name.encode()
    header = struct.pack(">hhih", 18, 3, correlation_id, -1) + b"\x00"
    body = _uvarint(len(name) + 1) + name + b"\x021\x00"  # compact strings: name, version "1"; no tags
    return _frame(header + body)


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def test_pipelined_requests_over_tls_are_answered_in_order_then_close_notify(one_node, certs):
    """Requests sent in one write, one of them spread over several TLS records: each is
    answered once, in order, with its own correlation id and the same (kept) ApiVersions
    answer; the client's close_notify is answered with the broker's."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    requests = [_api_versions_v3(1, "a"), _frame(struct.pack(">hhih", 18, 0, 2, -1)),
                _api_versions_v3(3, "b" * 40_000), *(_api_versions_v3(c, "c") for c in range(4, 20))]
    with socket.create_connection((HOST, one_node.ports["SSL"])) as raw:
        raw.settimeout(30)
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(b"".join(requests))
            answers = _read_answers(sock, len(requests))
            assert [struct.unpack(">i", a[:4])[0] for a in answers] == list(range(1, 20))
            assert all(struct.unpack(">h", a[4:6])[0] == 0 for a in answers)  # error_code
            assert len({a[4:] for i, a in enumerate(answers) if i != 1}) == 1  # every v3 answer alike
            sock.unwrap()  # close_notify, and the broker's in return
    assert "Fatal error" not in one_node.log() and "Traceback" not in one_node.log()


def test_healthcheck_over_tls(one_node, certs):
    def healthcheck(port: int, *tls: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "broker.program", "healthcheck", "--bootstrap-server",
                               f"{HOST}:{port}", "--timeout", "20", *tls], capture_output=True, text=True, timeout=60)

    ca = ["--tls-ca", str(certs.ca)]
    assert healthcheck(one_node.ports["SSL"], *ca).returncode == 0
    mtls = healthcheck(one_node.ports["MTLS"], *ca, "--tls-cert", str(certs.cert("alice")),
                       "--tls-key", str(certs.key("alice")))
    assert mtls.returncode == 0 and "healthy" in mtls.stdout, mtls.stderr
    plain = healthcheck(one_node.ports["SSL"])  # plaintext on a TLS port: unhealthy, not hung
    assert plain.returncode == 1 and "unhealthy" in plain.stderr


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_a_large_request_arriving_in_pieces_is_answered(one_node, certs, listener):
    """A 300 kB request in pieces, the first of 100 kB, the rest of 1 kB (each its own TLS
    record on SSL): the broker, waiting for the rest with a raised receive low-water mark,
    still wakes for the last piece, far smaller than the mark, and answers; then the
    small request right behind it."""
    large = _api_versions_v3(1, "b" * 300_000)
    raw = socket.create_connection((HOST, one_node.ports[listener]))
    raw.settimeout(30)
    sock = raw if listener == "PLAINTEXT" else ssl.create_default_context(cafile=str(certs.ca)).wrap_socket(
        raw, server_hostname="localhost")
    with sock:
        sock.sendall(large[:100_000])
        rest = large[100_000:]
        for start in range(0, len(rest), 1000):
            sock.sendall(rest[start:start + 1000])
        sock.sendall(_api_versions_v3(2, "c"))
        answers = _read_answers(sock, 2)
        assert [struct.unpack(">i", a[:4])[0] for a in answers] == [1, 2]
        assert all(struct.unpack(">h", a[4:6])[0] == 0 for a in answers)
