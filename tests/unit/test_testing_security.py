"""broker.testing.security: the set-ups it accepts and the settings it writes (parsed as
the broker parses them)."""

from __future__ import annotations

import pytest

from broker.security.jaas import parse_jaas
from broker.security.scram_users import parse_scram_user
from broker.testing.security import USERS, Security, sasl_listener_settings, scram_users
from spark_client.security import ClientSecurity


@pytest.mark.parametrize("protocol,mechanism,match", [
    ("SASL_SSL", None, "needs SASL mechanism"),
    ("SSL", "PLAIN", "takes no SASL mechanism"),
    ("SASL_PLAINTEXT", "GSSAPI", "one of PLAIN"),
    ("TLS", None, "one of PLAINTEXT"),
])
def test_refused_set_ups(protocol, mechanism, match):
    with pytest.raises(ValueError, match=match):
        Security(protocol, mechanism)


def test_tls_needs_certificates_and_mtls_goes_with_ssl():
    with pytest.raises(ValueError, match="needs certificates"):
        Security("SSL")
    with pytest.raises(ValueError, match="mTLS"):
        Security("SASL_PLAINTEXT", "PLAIN", client_auth=True)
    with pytest.raises(ValueError, match="a directory"):
        Security.of("mtls")


def test_sasl_listener_settings_parse_as_the_broker_reads_them():
    settings = sasl_listener_settings("INTERNAL")
    assert settings["listener.name.internal.sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    plain = parse_jaas(settings["listener.name.internal.plain.sasl.jaas.config"])
    assert {k: v for k, v in plain.options.items() if k.startswith("user_")} == {f"user_{u}": p for u, p in USERS.items()}
    assert parse_jaas(settings["listener.name.internal.oauthbearer.sasl.jaas.config"]).options == {
        "unsecuredLoginStringClaim_sub": "admin"}
    users = [parse_scram_user(entry) for entry in scram_users()]
    assert sorted({(u[0], u[1]) for u in users}) == sorted({(u, m) for u in USERS for m in (1, 2)})


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_client_settings_name_the_user(mechanism):
    security = Security("SASL_PLAINTEXT", mechanism)
    confluent = security.confluent_kafka("bob")
    if mechanism == "OAUTHBEARER":
        assert confluent["sasl.oauthbearer.config"] == "principal=bob"
    else:
        assert (confluent["sasl.username"], confluent["sasl.password"]) == ("bob", "bob-secret")
    spark = ClientSecurity.parse(security.spark_options("bob"))  # the data source reads what it is given
    assert (spark.mechanism, spark.username or spark.oauth_subject) == (mechanism, "bob")
    with pytest.raises(ValueError, match="not 'mallory'"):
        security.kafka_python("mallory")
