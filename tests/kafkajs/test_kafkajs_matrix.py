"""kafkajs in the security matrix (tests/reference/test_security_matrix.py runs the other
clients): against eosbroker on 1 and 3 nodes and Apache Kafka 4.4 (secured_targets.py),
over SASL_SSL with PLAIN, SCRAM-SHA-512 and OAUTHBEARER, mTLS and SSL without a client
certificate, alice commits a transaction that bob reads back read_committed; bob's own
transactional producer gets the error kafkajs reports, the same on every broker; and one
producer re-authenticates (KIP-368) across 2 s SCRAM-SHA-256 sessions. Needs `npm install`
here and Kafka's classpath (make kafkajs-test)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from broker.testing.security import USERS
from protocol.sasl_client import unsecured_token
from tests.reference.secured_targets import REAUTH_MS, SETUP_IDS, SETUPS, TOPIC, secured_target  # noqa: F401

HERE = Path(__file__).parent
pytestmark = pytest.mark.kafkajs
BOB_SETUPS = [(listener, mechanism) for listener, mechanism in SETUPS if listener != "SSL"]  # SSL: anonymous
BOB_IDS = [i for i in SETUP_IDS if i != "SSL"]


@pytest.fixture(scope="module", autouse=True)
def kafkajs_installed():
    if not (HERE / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run `make kafkajs-test` (npm install in tests/kafkajs)")


def kafkajs(target, listener: str, mechanism: str | None, writer: str, reader: str, txn_id: str,
            **env: str) -> dict:
    """sasl.mjs: WRITER's transaction into orders, read back by READER (kafkajs's options for
    the listener: its CA, the users' certificates on MTLS, SASL with ``mechanism``)."""
    def secret(user):
        if mechanism is None:
            return ""
        return unsecured_token(user) if mechanism == "OAUTHBEARER" else USERS[user]

    env = {**os.environ, "KAFKAJS_CERTS": str(target.certs.directory),
           "KAFKAJS_CLIENT_CERTS": "1" if listener == "MTLS" else "0", **env}
    result = subprocess.run(["node", str(HERE / "sasl.mjs"), target.bootstrap_for(listener),
                             (mechanism or "none").lower(), writer, secret(writer), reader, secret(reader), TOPIC,
                             txn_id, f"g-{uuid.uuid4().hex[:6]}"], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("listener,mechanism", SETUPS, ids=SETUP_IDS)
def test_kafkajs_alice_commits_bob_reads_committed(secured_target, listener, mechanism):
    txn_id = f"t-kafkajs-{uuid.uuid4().hex[:6]}"
    out = kafkajs(secured_target, listener, mechanism, "alice", "bob", txn_id)
    assert sorted(out.get("read", [])) == [f"{txn_id}-{i}" for i in range(3)], out


@pytest.mark.parametrize("listener,mechanism", BOB_SETUPS, ids=BOB_IDS)
def test_kafkajs_bob_may_only_read(secured_target, listener, mechanism):
    # kafkajs's transactional producer first asks for an idempotent producer id: bob may
    # write no topic, so he lacks IDEMPOTENT_WRITE on the cluster
    out = kafkajs(secured_target, listener, mechanism, "bob", "bob", f"t-bob-{uuid.uuid4().hex[:6]}")
    assert out["error"] == {"type": "CLUSTER_AUTHORIZATION_FAILED", "message": "Cluster authorization failed"}, out


def test_kafkajs_re_authenticates_a_long_lived_connection(secured_target):
    before = len(secured_target.log_text()) if secured_target.kind != "kafka" else 0
    txn_id = f"t-kafkajs-{uuid.uuid4().hex[:6]}"
    out = kafkajs(secured_target, "SASL_SSL", "SCRAM-SHA-256", "alice", "bob", txn_id, KAFKAJS_TRANSACTIONS="3",
                  KAFKAJS_PAUSE_MS=str(int(REAUTH_MS * 0.75)), KAFKAJS_REAUTH_THRESHOLD_MS=str(REAUTH_MS // 4))
    written = [f"{txn_id}-{i}" for i in range(3)] + [f"{txn_id}-{t}-{i}" for t in (1, 2) for i in range(3)]
    assert sorted(out.get("read", [])) == sorted(written), out
    assert out["server_closes"] == 0, out  # re-authenticated in time on every connection
    if secured_target.kind != "kafka":
        log = secured_target.log_text()[before:]
        assert "re-authenticated as User:alice with SCRAM-SHA-256" in log
        assert "did not re-authenticate" not in log
