"""The Java client (kafka-clients 4.4.0) over mTLS (SSL, client certificates required,
PKCS12 key and trust stores from ``eosbroker certs``), the authorizer on: alice's
certificate, mapped to User:alice by ssl.principal.mapping.rules, commits transactions and
reads them back read_committed under ACLs naming User:alice; bob's certificate gets Kafka's
refusal for a transactional id no ACL gives him. Apache Kafka 4.4 (a broker of its own)
answers the same. Outside make test (two JVM clients, about 11 s against eosbroker): make
test-reference runs it."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from broker.security.certs import write_certificates
from tests.reference import java_driver
from tests.reference.test_tls_reference import SECURED, KafkaWithMtls
from tests.tls_setup import TlsBroker

pytestmark = pytest.mark.reference_extended

PREFIX = "java-mtls-"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certificates(tmp_path_factory.mktemp("certs"), clients=("alice", "bob", "admin"))


@pytest.fixture(scope="module", params=["eosbroker", "kafka"])
def mtls_bootstrap(request, tmp_path_factory, certs):
    """The MTLS listener's address of a broker whose ACLs let User:alice use topics and
    transactional ids starting with java-mtls-; User:admin (the admin certificate) is a super user."""
    workdir = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        broker = KafkaWithMtls(workdir, certs).start()
        bootstrap = f"127.0.0.1:{broker.mtls_port}"
    else:
        broker = TlsBroker(workdir / "data", certs, settings=SECURED)
        bootstrap = broker.bootstrap("MTLS")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, **certs.confluent_kafka("admin")})
        grants = [AclBinding(kind, PREFIX, ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.ALL,
                             AclPermissionType.ALLOW) for kind in (ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID)]
        for future in admin.create_acls(grants).values():
            future.result(30)
        yield bootstrap
    finally:
        broker.stop()


def _client_properties(tmp_path, certs, user: str):
    path = tmp_path / f"{user}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in certs.java(user, "SSL").items()))
    return path


def test_java_client_over_mtls_as_the_certificates_principal(mtls_bootstrap, certs, tmp_path):
    name = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    out = java_driver.run("transactional", mtls_bootstrap, name,
                          client_properties=_client_properties(tmp_path, certs, "alice"))
    assert sorted(out["read_committed"]) == sorted([f"committed-{i}" for i in range(6)] + ["committed-last"])
    assert out["read_uncommitted_count"] == 13

    refused = java_driver.run("init-transactions", mtls_bootstrap, f"{name}-bob",
                              client_properties=_client_properties(tmp_path, certs, "bob"))
    assert refused["error"] == "TransactionalIdAuthorizationException", refused
    assert refused["message"] == "Transactional Id authorization failed.", refused
