"""mTLS against Apache Kafka 4.4 and eosbroker with the same certificates (eosbroker certs)
and settings: a listener requiring client certificates, ssl.principal.mapping.rules
naming the user by the certificate's CN, ACLs on those names. What the clients see must
match: the transaction alice commits and bob reads, the errors bob gets for writing, the
ACLs DescribeAcls shows for the mapped principal, and the refusal of a client without a
certificate."""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.security.certs import write_certificates
from broker.testing.helpers import wait_until
from tests.reference.kafka_broker import DIFFERENTIAL, HOST, KafkaBroker, free_port
from tests.tls_setup import MAPPING, TlsBroker

pytestmark = pytest.mark.reference_extended  # a Kafka broker of its own: outside make test

# Both: the authorizer on; PLAINTEXT (User:ANONYMOUS, Kafka's inter-broker and controller
# principal here) and the admin certificate are super users.
SECURED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "ssl.principal.mapping.rules": MAPPING,
    **DIFFERENTIAL,
}


class KafkaWithMtls(KafkaBroker):
    """The reference broker with one more listener, MTLS (SSL, client certificates required)."""

    def __init__(self, workdir, certs) -> None:
        super().__init__(workdir, SECURED)
        self.certs = certs
        self.mtls_port = free_port()

    def _write_config(self, port: int = 0):
        config = super()._write_config(port)
        listeners = {  # later keys win in a Java properties file
            "listeners": f"PLAINTEXT://{HOST}:{self.port},MTLS://{HOST}:{self.mtls_port},"
                         f"CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port},MTLS://{HOST}:{self.mtls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,CONTROLLER:PLAINTEXT",
            **self.certs.broker_settings("MTLS", "PKCS12", "required"),
        }
        with open(config, "a") as f:
            f.write("".join(f"{k}={v}\n" for k, v in listeners.items()))
        return config


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certificates(tmp_path_factory.mktemp("certs"), clients=("alice", "bob", "admin"))


def observe(plaintext: str, mtls: str, certs) -> dict:
    """What the clients see on one broker."""
    seen: dict = {}
    admin = AdminClient({"bootstrap.servers": mtls, **certs.confluent_kafka("admin")})
    for future in admin.create_topics([NewTopic("orders", 1, 1)]).values():
        future.result(60)

    def allow(principal, kind, name, operation, pattern=ResourcePatternType.LITERAL):
        return AclBinding(kind, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)

    bindings = [allow("User:alice", ResourceType.TRANSACTIONAL_ID, "t-", op, ResourcePatternType.PREFIXED)
                for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    bindings += [allow("User:alice", ResourceType.TOPIC, "orders", op) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    bindings += [allow("User:bob", ResourceType.TOPIC, "orders", op) for op in (AclOperation.READ, AclOperation.DESCRIBE)]
    bindings.append(allow("User:bob", ResourceType.GROUP, "bob-", AclOperation.READ, ResourcePatternType.PREFIXED))
    for future in admin.create_acls(bindings).values():
        future.result(60)
    alices = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                              AclPermissionType.ANY)
    # Kafka's brokers learn new ACLs from the metadata log a moment after CreateAcls answers
    described = wait_until(lambda: len(found := admin.describe_acls(alices).result(60)) == 4 and found,
                           timeout=60, message="alice's four ACLs described")
    seen["alice's acls"] = sorted((b.restype.name, b.name, b.operation.name) for b in described)

    alice = Producer({"bootstrap.servers": mtls, **certs.confluent_kafka("alice"), "transactional.id": "t-alice"})
    alice.init_transactions(60)
    alice.begin_transaction()
    alice.produce("orders", b"from alice")
    alice.commit_transaction(60)

    bob = Producer({"bootstrap.servers": mtls, **certs.confluent_kafka("bob"), "transactional.id": "t-bob"})
    try:
        bob.init_transactions(60)
        seen["bob's transactional id"] = "allowed"
    except KafkaException as e:
        seen["bob's transactional id"] = e.args[0].name()
    del bob
    delivered = []
    writer = Producer({"bootstrap.servers": mtls, **certs.confluent_kafka("bob"), "enable.idempotence": False})
    writer.produce("orders", b"from bob", on_delivery=lambda err, msg: delivered.append(err and err.name()))
    writer.flush(60)
    seen["bob's write"] = delivered
    del writer

    consumer = Consumer({"bootstrap.servers": mtls, **certs.confluent_kafka("bob"), "group.id": "bob-readers",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["orders"])
    got = []
    try:
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
                break
    finally:
        consumer.close()
    seen["bob reads"] = got

    errors = []
    anonymous = Producer({"bootstrap.servers": mtls, **certs.confluent_kafka(),
                          "error_cb": lambda e: errors.append(e.code())})

    def refused() -> bool:
        anonymous.poll(0.2)
        return bool(errors)

    wait_until(refused, timeout=60, message="the client without a certificate refused")
    seen["without a certificate"] = KafkaError._SSL in errors or KafkaError._TRANSPORT in errors
    del anonymous
    # not TLS at all: a plaintext request, then bytes that are no ClientHello
    api_versions = struct.pack(">ihhih", 10, 18, 0, 7, -1)
    for name, data in (("plaintext request", api_versions), ("garbage", bytes(range(256)) * 4)):
        with socket.create_connection(mtls.split(":")) as sock:
            sock.settimeout(30)
            sock.sendall(data)
            answer = b""
            try:
                while chunk := sock.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                answer += b"<reset>"
        seen[name] = answer  # Kafka: a fatal internal_error alert, then the close
    return seen


def test_mtls_principals_and_acls_as_kafka(tmp_path, certs):
    kafka = KafkaWithMtls(tmp_path / "kafka", certs).start()
    try:
        reference = observe(kafka.bootstrap, f"{HOST}:{kafka.mtls_port}", certs)
    finally:
        kafka.stop()
    eos = TlsBroker(tmp_path / "eos" / "data", certs, settings=SECURED)
    try:
        ours = observe(eos.bootstrap("PLAINTEXT"), eos.bootstrap("MTLS"), certs)
    finally:
        eos.stop()
    assert reference["bob reads"] == [b"from alice"]
    assert reference["without a certificate"] is True
    assert ours == reference
