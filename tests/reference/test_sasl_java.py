"""The Java client (kafka-clients 4.4.0) over SASL_PLAINTEXT with PLAIN, SCRAM-SHA-512 and
OAUTHBEARER (its unsecured login): the transactional scenario (commit, abort, commit, read
back read_committed) against eosbroker, with sessions of 1.5 s, so the client re-authenticates
(KIP-368) on its connections as it goes. Over SASL_SSL, on 3 nodes and against Apache
Kafka: test_security_matrix.py."""

from __future__ import annotations

import uuid

import pytest

from tests.reference import java_driver
from tests.sasl_broker import PASSWORDS, SaslBroker

LOGIN_MODULES = {
    "PLAIN": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
             f'password="{PASSWORDS["alice"]}";',
    "SCRAM-SHA-512": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                     f'password="{PASSWORDS["alice"]}";',
    "OAUTHBEARER": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                   'unsecuredLoginStringClaim_sub="alice";',
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = SaslBroker(tmp_path_factory.mktemp("sasl-java"), **{"connections.max.reauth.ms": "1500"})
    yield b
    b.stop()


@pytest.mark.parametrize("mechanism", sorted(LOGIN_MODULES))
def test_java_client_transactions_over_sasl(broker, tmp_path, mechanism):
    settings = tmp_path / "client.properties"
    settings.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                        f"sasl.jaas.config={LOGIN_MODULES[mechanism]}\n")
    out = java_driver.run("transactional", broker.bootstrap, f"java-sasl-{uuid.uuid4().hex[:6]}",
                          client_properties=settings)
    assert sorted(out["read_committed"]) == sorted([f"committed-{i}" for i in range(6)] + ["committed-last"])
    assert out["read_uncommitted_count"] == 13
    assert f"authenticated as User:alice with {mechanism}" in broker.log()
