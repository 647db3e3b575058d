"""Property-based tests of the SASL exchange, driven sans-IO: arbitrary, truncated and
bit-flipped tokens, JAAS texts and request orders must end in an answer or in
SaslFailure (which the server turns into Kafka's answer and a closed connection), never
in another exception."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.security.scram_credentials import ScramCredentials
from broker.security import sasl
from broker.security.jaas import JaasError, parse_jaas
from broker.security.sasl_errors import SaslFailure
from broker.security.sasl_settings import listener_sasl
from broker.security.scram_users import parse_scram_user
from tests.sasl_tokens import ScramClient, oauthbearer, plain, unsecured_jws
from tests.unit.test_sasl_exchange import NOW_MS, SETTINGS

SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
VALID = {
    "PLAIN": [plain("alice", "alice-secret")],
    "SCRAM-SHA-512": [ScramClient("SCRAM-SHA-512", "alice", "alice-secret").first(), b"c=biws,r=x,p=AAAA"],
    "OAUTHBEARER": [oauthbearer(unsecured_jws({"sub": "alice", "exp": NOW_MS // 1000 + 60})), b"\x01"],
}


@pytest.fixture(scope="module")
def settings_(tmp_path_factory):
    store = ScramCredentials(tmp_path_factory.mktemp("scram"))
    store.apply([], [parse_scram_user("SCRAM-SHA-512=[name=alice,password=alice-secret]")])
    return listener_sasl(SETTINGS, "SASL_PLAINTEXT", store)


def _mutated(draw, token: bytes) -> bytes:
    out = bytearray(token)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 3))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == 0:
            del out[at:]
        elif kind == 1 and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == 2:
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            out[at:at] = draw(st.sampled_from([b"\0", b",", b"=", b"\x01", b"=2C", b"..", b"\xff\xfe"]))
    return bytes(out)


@st.composite
def exchanges(draw):
    mechanism = draw(st.sampled_from(sorted(VALID)))
    tokens = [draw(st.one_of(st.binary(max_size=300), st.just(t))) if draw(st.booleans()) else _mutated(draw, t)
              for t in VALID[mechanism]]
    steps = draw(st.lists(st.sampled_from([sasl.API_VERSIONS, sasl.SASL_HANDSHAKE, sasl.SASL_AUTHENTICATE, 0, 3]),
                          min_size=1, max_size=6))
    return mechanism, draw(st.sampled_from([0, 1])), tokens, steps, draw(st.integers(0, 2))


@FUZZ
@given(exchanges())
def test_any_exchange_ends_in_an_answer_or_a_sasl_failure(settings_, case):
    mechanism, handshake_version, tokens, steps, version = case
    ex = sasl.SaslExchange(settings_)
    tokens = list(tokens)
    try:
        for api_key in steps:
            if ex.expects_bare_token:
                ex.bare_token(tokens.pop(0) if tokens else b"", NOW_MS, 0.0)
                continue
            ex.admit(api_key, str(api_key))
            if api_key == sasl.API_VERSIONS:
                ex.api_versions_answered()
            elif api_key == sasl.SASL_HANDSHAKE:
                ex.handshake(mechanism, handshake_version)
            elif api_key == sasl.SASL_AUTHENTICATE:
                answer = ex.authenticate(tokens.pop(0) if tokens else b"", version, NOW_MS, 0.0)
                assert answer.error_code == 0
    except SaslFailure as e:
        assert str(e)
        if e.answer is not None:
            assert e.answer.error_code in (sasl.UNSUPPORTED_SASL_MECHANISM, sasl.SASL_AUTHENTICATION_FAILED)
    if not ex.authenticating:
        assert ex.principal == "User:alice"


@FUZZ
@given(st.text(max_size=200))
def test_any_jaas_text_parses_or_is_refused(text):
    try:
        module = parse_jaas(text)
    except JaasError:
        return
    assert module.flag in ("required", "requisite", "sufficient", "optional")


@FUZZ
@given(st.binary(max_size=2000))
def test_any_oauthbearer_message_is_answered_or_refused(settings_, token):
    ex = sasl.SaslExchange(settings_)
    ex.handshake("OAUTHBEARER", 1)
    try:
        ex.authenticate(token, 2, NOW_MS, 0.0)
    except SaslFailure as e:
        assert e.answer.error_code == sasl.SASL_AUTHENTICATION_FAILED


@FUZZ
@given(st.data())
def test_a_scram_final_message_mutated_past_the_nonce_is_answered_or_refused(settings_, data):
    ex = sasl.SaslExchange(settings_)
    ex.handshake("SCRAM-SHA-512", 1)
    client = ScramClient("SCRAM-SHA-512", "alice", data.draw(st.sampled_from(["alice-secret", "wrong"])))
    server_first = ex.authenticate(client.first(), 2, NOW_MS, 0.0).auth_bytes
    final = client.final(server_first)
    cut = final.index(b",p=") + 3
    token = final[:cut] + data.draw(st.one_of(st.binary(max_size=120), st.just(final[cut:]).map(
        lambda proof: proof[:data.draw(st.integers(0, len(proof)))])))
    try:
        answer = ex.authenticate(token, 2, NOW_MS, 0.0)
    except SaslFailure as e:
        assert e.answer.error_code == sasl.SASL_AUTHENTICATION_FAILED
    else:
        assert answer.auth_bytes.startswith(b"v=") and ex.principal == "User:alice"


@pytest.fixture(scope="module")
def jwks_listener(tmp_path_factory):
    import json

    from tests.sasl_tokens import SigningKeys

    keys = SigningKeys()
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps(keys.jwks()))
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    return keys, listener_sasl({
        **SETTINGS, prefix + "sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        prefix + "sasl.oauthbearer.jwks.endpoint.url": f"file://{path}",
        prefix + "sasl.oauthbearer.expected.audience": "kafka",
        prefix + "sasl.oauthbearer.expected.issuer": "https://issuer"}, "SASL_PLAINTEXT", None)


@FUZZ
@given(st.data())
def test_any_token_against_a_jwks_is_answered_or_refused(jwks_listener, data):
    keys, listener = jwks_listener
    valid = keys.sign({"sub": "alice", "iat": NOW_MS // 1000, "exp": NOW_MS // 1000 + 60, "aud": "kafka",
                       "iss": "https://issuer"}, data.draw(st.sampled_from(["RS256", "ES256"])))
    token = data.draw(st.one_of(st.text(alphabet="abcXYZ019-_.", max_size=400), st.just(valid).map(
        lambda t: t[:data.draw(st.integers(0, len(t)))] + data.draw(st.text(alphabet="A-_.=", max_size=8)))))
    ex = sasl.SaslExchange(listener)
    ex.handshake("OAUTHBEARER", 1)
    try:
        answer = ex.authenticate(oauthbearer(token), 2, NOW_MS, 0.0)
    except SaslFailure as e:
        assert e.answer.error_code == sasl.SASL_AUTHENTICATION_FAILED
        return
    assert answer.auth_bytes in (b"", b'{"status":"invalid_token"}')
