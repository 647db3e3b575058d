"""The brokers the security matrix runs against: eosbroker on 1 and 3 nodes and Apache Kafka
4.4, each serving the same secured listeners (SASL_SSL with PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER; MTLS; SSL without a client certificate) with the same users, certificates,
authorizer and ACLs:

- alice may write topic ``orders`` under transactional ids ``t-*``; bob may only read it, in
  groups ``g-*``; User:admin (the admin certificate, the admin login) and User:ANONYMOUS
  (Kafka's controller and inter-broker principal here, and a TLS client without a
  certificate) are super users;
- a SCRAM-SHA-256 session on SASL_SSL lasts REAUTH_MS (connections.max.reauth.ms for that
  mechanism only), so a long-lived connection logging in with it must re-authenticate
  (KIP-368) while the other mechanisms' sessions do not end.

``secured_target`` (a session fixture over TARGETS, registered for tests/reference by its
conftest) hands out one started broker; its ``bootstrap_for(listener)`` and
``security(listener, mechanism)`` give the client side.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic
from confluent_kafka.admin import ResourcePatternType as Pattern
from confluent_kafka.admin import ResourceType as Resource

from broker.security.certs import write_certificates
from broker.testing.helpers import HOST, free_port_block, wait_until
from broker.testing.process import BrokerProcess
from broker.testing.security import USERS, Security, scram_users
from tests.reference.kafka_broker import SECURED_LISTENERS, KafkaBroker, secured_listener_settings

TOPIC = "orders"
PARTITIONS = 3
REAUTH_MS = 2000
LISTENERS = ("SASL_SSL", "MTLS", "SSL")
# (listener, SASL mechanism): the set-ups every client is asked to work over
SETUPS = [("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "OAUTHBEARER"), ("MTLS", None),
          ("SSL", None)]
SETUP_IDS = [f"{listener}-{mechanism}" if mechanism else listener for listener, mechanism in SETUPS]
TARGETS = ["eosbroker", "eosbroker-3-nodes", "kafka"]
GRANTS = [
    ("User:alice", Resource.TOPIC, TOPIC, Pattern.LITERAL, AclOperation.WRITE),
    ("User:alice", Resource.TRANSACTIONAL_ID, "t-", Pattern.PREFIXED, AclOperation.WRITE),
    ("User:bob", Resource.TOPIC, TOPIC, Pattern.LITERAL, AclOperation.READ),
    ("User:bob", Resource.GROUP, "g-", Pattern.PREFIXED, AclOperation.READ),
]
AUTHORIZED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "listener.name.sasl_ssl.scram-sha-256.connections.max.reauth.ms": str(REAUTH_MS),
}


class SecuredEosbroker(BrokerProcess):
    """eosbroker with the listeners of SecuredKafka (each N consecutive ports with N nodes)
    beside an INTERNAL plaintext one between its nodes."""

    def __init__(self, data_dir, certs, nodes: int, settings: dict[str, str] | None = None) -> None:
        first = free_port_block((len(LISTENERS) + 1) * nodes)
        self.secured_ports = {name: first + i * nodes for i, name in enumerate(LISTENERS)}
        internal = self.internal_port = first + len(LISTENERS) * nodes
        self.certs = certs
        overrides = {
            "listeners": ",".join([f"{n}://{HOST}:{p}" for n, p in self.secured_ports.items()]
                                  + [f"INTERNAL://{HOST}:{internal}"]),
            "listener.security.protocol.map": ",".join(
                [f"{n}:{SECURED_LISTENERS[n]}" for n in LISTENERS] + ["INTERNAL:PLAINTEXT"]),
            "inter.broker.listener.name": "INTERNAL",
            "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
            **secured_listener_settings(LISTENERS, certs),
            **AUTHORIZED,
            **(settings or {}),
        }
        super().__init__(data_dir, overrides, nodes=nodes,
                         extra_args=[arg for entry in scram_users() for arg in ("--scram", entry)])

    def bootstrap_for(self, listener: str) -> str:
        return f"{HOST}:{self.secured_ports[listener]}"

    def security(self, listener: str, mechanism: str | None = None) -> Security:
        return Security(SECURED_LISTENERS[listener], mechanism, listener == "MTLS", self.certs)


def plaintext_bootstrap(target) -> str:
    """The plaintext listener's address: Kafka's PLAINTEXT, eosbroker's INTERNAL."""
    return target.bootstrap if target.kind == "kafka" else f"{HOST}:{target.internal_port}"


def start_target(kind: str, workdir, settings: dict[str, str] | None = None,
                 kafka_system_properties: dict[str, str] | None = None):
    """A started broker of ``kind`` (one of TARGETS) with topic orders and the ACLs;
    ``settings``: more broker settings (both brokers take them)."""
    certs = write_certificates(workdir / "certs", clients=tuple(USERS))
    if kind == "kafka":
        broker = KafkaBroker(workdir / "kafka", {**AUTHORIZED, **(settings or {})}, secured=True, certs=certs)
        broker.start(system_properties=kafka_system_properties)
    else:
        broker = SecuredEosbroker(workdir / "data", certs, 3 if kind.endswith("3-nodes") else 1, settings).start()
    broker.kind = kind
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_for("MTLS"), **certs.confluent_kafka("admin")})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        for future in admin.create_acls([AclBinding(kind_, name, pattern, who, "*", op, AclPermissionType.ALLOW)
                                         for who, kind_, name, pattern, op in GRANTS]).values():
            future.result(60)
        # Kafka's broker learns the ACLs from the metadata log a moment after CreateAcls answers
        wait_until(lambda: len(admin.describe_acls(_every_acl()).result(60)) == len(GRANTS), timeout=60,
                   message="the ACLs described")
    except BaseException:
        broker.stop()
        raise
    return broker


def _every_acl() -> AclBindingFilter:
    return AclBindingFilter(Resource.ANY, None, Pattern.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)


@pytest.fixture(scope="session", params=TARGETS)
def secured_target(request, tmp_path_factory):
    """One target at a time, each started once: pytest orders the tests that use it by target."""
    broker = start_target(request.param, tmp_path_factory.mktemp(request.param))
    yield broker
    broker.stop()
