"""kafkajs over TLS, with the certificates of eosbroker certs, the authorizer on: over SSL
(the broker's certificate only, the client User:ANONYMOUS) and over mTLS (alice's and bob's
certificates, mapped to User:alice and User:bob), a transaction committed and read back
read_committed; bob's certificate may not write, with the error kafkajs reports. Needs
`npm install` here (make kafkajs-test)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.security.certs import write_certificates
from broker.testing.helpers import wait_until
from tests.tls_setup import TlsBroker

HERE = Path(__file__).parent
pytestmark = pytest.mark.kafkajs
TOPIC = "orders"
WRITE = [(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, AclOperation.WRITE),
         (ResourceType.TRANSACTIONAL_ID, "t-", ResourcePatternType.PREFIXED, AclOperation.WRITE)]
READ = [(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, AclOperation.READ),
        (ResourceType.GROUP, "g-", ResourcePatternType.PREFIXED, AclOperation.READ)]
# alice writes, bob reads; User:ANONYMOUS (a client without a certificate on SSL) does both
GRANTS = {"User:alice": WRITE, "User:bob": READ, "User:ANONYMOUS": WRITE + READ}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certificates(tmp_path_factory.mktemp("certs"), clients=("alice", "bob", "admin"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, certs):
    if not (HERE / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run `make kafkajs-test` (npm install in tests/kafkajs)")
    b = TlsBroker(tmp_path_factory.mktemp("kafkajs-tls") / "data", certs, settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap("MTLS"), **certs.confluent_kafka("admin")})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    for future in admin.create_acls([AclBinding(kind, name, pattern, who, "*", operation, AclPermissionType.ALLOW)
                                     for who, grants in GRANTS.items()
                                     for kind, name, pattern, operation in grants]).values():
        future.result(30)
    yield b
    b.stop()


def kafkajs(bootstrap: str, certs, client_certs: bool, writer: str, reader: str, txn_id: str) -> dict:
    env = {**os.environ, "KAFKAJS_CERTS": str(certs.directory), "KAFKAJS_CLIENT_CERTS": "1" if client_certs else "0"}
    result = subprocess.run(["node", str(HERE / "sasl.mjs"), bootstrap, "none", writer, "", reader, "", TOPIC, txn_id,
                             f"g-{uuid.uuid4().hex[:6]}"], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kafkajs_transaction_over_tls(broker, certs, listener):
    txn_id = f"t-kafkajs-{uuid.uuid4().hex[:6]}"
    out = kafkajs(broker.bootstrap(listener), certs, listener == "MTLS", "alice", "bob", txn_id)
    assert sorted(out.get("read", [])) == [f"{txn_id}-{i}" for i in range(3)], out


def test_kafkajs_bobs_certificate_may_not_write(broker, certs):
    # kafkajs's producer first asks for an idempotent producer id: bob may write no topic,
    # so he lacks IDEMPOTENT_WRITE on the cluster
    out = kafkajs(broker.bootstrap("MTLS"), certs, True, "bob", "bob", f"t-bob-{uuid.uuid4().hex[:6]}")
    assert out["error"] == {"type": "CLUSTER_AUTHORIZATION_FAILED", "message": "Cluster authorization failed"}, out
    denial = ("Principal = User:bob is Denied operation = IDEMPOTENT_WRITE from host = 127.0.0.1 on "
              "resource = Cluster:kafka-cluster for request = InitProducerId")
    wait_until(lambda: denial in broker.log(), 10, message="the denial's log line")
    assert "Principal = User:alice is Denied" not in broker.log()
