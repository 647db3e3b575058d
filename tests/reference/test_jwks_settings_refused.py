"""A listener checking signed OAUTHBEARER tokens against a JWKS, started by Apache Kafka 4.4
and by eosbroker with the same settings: without an expected audience or issuer (and no
allow.unverified opt-out) both refuse to start, eosbroker with the message Kafka logs; a
JWKS URL the JVM's org.apache.kafka.sasl.oauthbearer.allowed.urls does not list stops
Kafka only (README, "Differences from Apache Kafka"); one naming no readable file stops
both, with Kafka's message. A JVM start per case: outside make test."""

from __future__ import annotations

import json

import pytest

from broker.security.sasl_settings import SaslConfigError, listener_sasl
from tests.reference.kafka_broker import KafkaBroker, free_port, secured_listener_settings

pytestmark = pytest.mark.reference_extended

PREFIX = "listener.name.sasl_plaintext.oauthbearer."
AUDIENCE = {PREFIX + "sasl.oauthbearer.expected.audience": "kafka"}
ISSUER = {PREFIX + "sasl.oauthbearer.expected.issuer": "https://issuer.example"}


def _jwks_settings(tmp_path) -> dict[str, str]:
    from tests.sasl_tokens import SigningKeys

    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(SigningKeys().jwks()))
    return {PREFIX + "sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            PREFIX + "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri()}


def _kafkas_refusal(tmp_path, settings: dict[str, str], system_properties: dict[str, str] | None = None) -> str:
    kafka = KafkaBroker(tmp_path / "kafka", overrides=settings, secured=True,
                        secured_ports={"SASL_PLAINTEXT": free_port()})
    with pytest.raises(RuntimeError, match="kafka exited"):
        kafka.start(timeout=120, system_properties=system_properties)
    return kafka.log_tail(400)


def _eosbrokers_refusal(settings: dict[str, str]) -> str:
    with pytest.raises(SaslConfigError) as refused:
        listener_sasl({**secured_listener_settings(["SASL_PLAINTEXT"], None), **settings}, "SASL_PLAINTEXT", None)
    return str(refused.value)


@pytest.mark.parametrize("expected", [{}, AUDIENCE], ids=["neither", "audience only"])
def test_an_unverified_audience_or_issuer_is_refused_at_start_as_kafka_refuses_it(tmp_path, expected):
    settings = {**_jwks_settings(tmp_path), **expected}
    message = _eosbrokers_refusal(settings)
    assert message.startswith('The OAuth validator for the broker requires "sasl.oauthbearer.expected.'
                              + ("issuer" if expected else "audience"))
    assert message in _kafkas_refusal(tmp_path, settings)


def test_a_jwks_url_the_jvm_does_not_allow_stops_kafka_only(tmp_path):
    settings = {**_jwks_settings(tmp_path), **AUDIENCE, **ISSUER}
    url = settings[PREFIX + "sasl.oauthbearer.jwks.endpoint.url"]
    assert f"Invalid value {url} for configuration sasl.oauthbearer.jwks.endpoint.url: The URL cannot be accessed " \
           "due to restrictions. Update the system property 'org.apache.kafka.sasl.oauthbearer.allowed.urls' to " \
           "allow the URL to be accessed." in _kafkas_refusal(tmp_path, settings)
    served = listener_sasl({**secured_listener_settings(["SASL_PLAINTEXT"], None), **settings}, "SASL_PLAINTEXT",
                           None)
    assert "OAUTHBEARER" in served.mechanisms


@pytest.mark.parametrize("where", ["no protocol", "missing file"])
def test_a_jwks_url_that_names_no_readable_file_is_refused_as_kafka_refuses_it(tmp_path, where):
    url = str(tmp_path / "jwks.json") if where == "no protocol" else (tmp_path / "missing.json").as_uri()
    settings = {**_jwks_settings(tmp_path), **AUDIENCE, **ISSUER, PREFIX + "sasl.oauthbearer.jwks.endpoint.url": url}
    message = _eosbrokers_refusal(settings)
    assert message.startswith("The OAuth configuration option sasl.oauthbearer.jwks.endpoint.url contains a ")
    # the malformed URL is refused before the allow-list is asked; the missing file after
    assert message in _kafkas_refusal(tmp_path, settings, {"org.apache.kafka.sasl.oauthbearer.allowed.urls": url})
