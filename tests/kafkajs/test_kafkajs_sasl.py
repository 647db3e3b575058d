"""kafkajs over SASL_PLAINTEXT with PLAIN, SCRAM-SHA-512 and OAUTHBEARER: alice commits a
transaction into orders, bob reads it back read_committed; bob's own transaction is refused
with the error kafkajs reports. Needs `npm install` here (make kafkajs-test)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.integration.test_sasl import _with_acls
from tests.sasl_broker import PASSWORDS, token_for

HERE = Path(__file__).parent
pytestmark = pytest.mark.kafkajs
SECRETS = {"plain": PASSWORDS, "scram-sha-512": PASSWORDS}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    if not (HERE / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run `make kafkajs-test` (npm install in tests/kafkajs)")
    b = _with_acls(tmp_path_factory.mktemp("kafkajs"), 1)
    yield b
    b.stop()


def kafkajs(broker, mechanism: str, writer: str, reader: str, txn_id: str) -> dict:
    def secret(user):
        return token_for(user) if mechanism == "oauthbearer" else PASSWORDS[user]

    result = subprocess.run(["node", str(HERE / "sasl.mjs"), broker.bootstrap, mechanism, writer, secret(writer),
                             reader, secret(reader), "orders", txn_id, f"g-{uuid.uuid4().hex[:6]}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-512", "oauthbearer"])
def test_kafkajs_alice_writes_bob_reads(broker, mechanism):
    txn_id = f"t-kafkajs-{uuid.uuid4().hex[:6]}"
    out = kafkajs(broker, mechanism, "alice", "bob", txn_id)
    assert sorted(out.get("read", [])) == [f"{txn_id}-{i}" for i in range(3)], out


def test_kafkajs_bob_may_not_write(broker):
    # kafkajs's producer first asks for an idempotent producer id: bob may write no topic,
    # so he lacks IDEMPOTENT_WRITE on the cluster
    out = kafkajs(broker, "plain", "bob", "bob", f"t-bob-{uuid.uuid4().hex[:6]}")
    assert out["error"] == {"type": "CLUSTER_AUTHORIZATION_FAILED", "message": "Cluster authorization failed"}, out
    broker.wait_for_log("Principal = User:bob is Denied operation = IDEMPOTENT_WRITE from host = 127.0.0.1 on "
                        "resource = Cluster:kafka-cluster for request = InitProducerId")
    assert "Principal = User:alice is Denied operation = IDEMPOTENT_WRITE" not in broker.log()
