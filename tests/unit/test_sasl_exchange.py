"""The SASL exchange and its mechanisms, driven sans-IO: what each request is answered
in each state, with Kafka's error codes and messages."""

from __future__ import annotations

import pytest

from broker.kafka_settings import KafkaSettingRefused
from broker.security.scram_credentials import ScramCredentials
from broker.security import sasl
from broker.security.jaas import JaasError, parse_jaas
from broker.security.sasl_errors import SaslFailure
from broker.security.sasl_settings import SaslConfigError, check_principal_builder, listener_sasl
from broker.security.scram_users import ScramUserError, parse_scram_user
from tests.sasl_tokens import ScramClient, oauthbearer, plain, unsecured_jws

NOW_MS = 1_800_000_000_000
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SETTINGS = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredValidatorRequiredScope="kafka" unsecuredValidatorAllowableClockSkewMs="1000";',
}


@pytest.fixture
def credentials(tmp_path):
    store = ScramCredentials(tmp_path)
    store.apply([], [parse_scram_user("SCRAM-SHA-512=[name=alice,password=alice-secret]")])
    return store


def exchange(credentials, **settings) -> sasl.SaslExchange:
    return sasl.SaslExchange(listener_sasl({**SETTINGS, **settings}, "SASL_PLAINTEXT", credentials))


def logged_in(ex, mechanism, *tokens, version=2, now_ms=NOW_MS, monotonic=0.0):
    ex.admit(sasl.SASL_HANDSHAKE, "SaslHandshake")
    assert ex.handshake(mechanism, 1).error_code == 0
    answer = None
    for token in tokens:
        ex.admit(sasl.SASL_AUTHENTICATE, "SaslAuthenticate")
        answer = ex.authenticate(token, version, now_ms, monotonic)
    return answer


def token(**claims):
    return oauthbearer(unsecured_jws({"sub": "alice", "exp": NOW_MS // 1000 + 3600, "scope": "kafka", **claims}))


# -- JAAS and settings ---------------------------------------------------------------------

def test_jaas_text_is_parsed_not_evaluated():
    module = parse_jaas('x.Y required a="1 2;" b=bare c="q\\"uote";')
    assert (module.name, module.flag, module.options) == ("x.Y", "required", {"a": "1 2;", "b": "bare", "c": 'q"uote'})


@pytest.mark.parametrize("text, message", [
    ("x.Y required a=1", "JAAS config entry not terminated by semi-colon"),
    ("x.Y always a=1;", "Invalid control flag always"),
    ("x.Y required a=1; z.W required;", "contains 2 login modules, should be 1 module"),
    ("x.Y required a;", "Value not specified for key a"),
])
def test_bad_jaas_text_is_refused(text, message):
    with pytest.raises(JaasError, match=message):
        parse_jaas(text)


def test_settings_are_refused_at_start_where_they_cannot_be_served(credentials):
    with pytest.raises(SaslConfigError, match="GSSAPI is not served by eosbroker"):
        listener_sasl({}, "SASL_PLAINTEXT", credentials)
    with pytest.raises(SaslConfigError, match="Could not find a 'sasl_plaintext.KafkaServer'"):
        listener_sasl({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}, "SASL_PLAINTEXT",
                      credentials)
    with pytest.raises(SaslConfigError, match="principal.builder.class"):
        check_principal_builder({"principal.builder.class": "com.example.MyBuilder"})
    check_principal_builder({"principal.builder.class":
                             "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"})


def test_listener_and_mechanism_prefixes_win_over_the_bare_setting(credentials):
    settings = listener_sasl({**SETTINGS, "connections.max.reauth.ms": "5000",
                              "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": "1000",
                              "listener.name.sasl_plaintext.connection.failed.authentication.delay.ms": "0"},
                             "SASL_PLAINTEXT", credentials)
    assert settings.max_reauth_ms == {"PLAIN": 5000, "SCRAM-SHA-512": 5000, "OAUTHBEARER": 1000}
    assert settings.failed_delay_ms == 0


def test_scram_users_as_kafka_storage_add_scram_takes_them():
    user, mechanism, iterations, salt, salted = parse_scram_user(
        'SCRAM-SHA-256=[name=bob,iterations=8192,salt="c2FsdA==",password=pw]')
    assert (user, mechanism, iterations, salt) == ("bob", 1, 8192, b"salt")
    with pytest.raises(ScramUserError, match="must supply 'name'"):
        parse_scram_user("SCRAM-SHA-256=[password=pw]")
    with pytest.raises(ScramUserError, match="iterations must be between"):
        parse_scram_user("SCRAM-SHA-256=[name=a,password=pw,iterations=10]")


# -- the handshake -----------------------------------------------------------------------

def test_only_api_versions_and_the_handshake_come_before_authentication(credentials):
    ex = exchange(credentials)
    with pytest.raises(SaslFailure, match="Unexpected Kafka request of type METADATA during SASL handshake") as e:
        ex.admit(3, "METADATA")
    assert not e.value.authentication and e.value.answer is None  # closed at once, unanswered
    ex = exchange(credentials)
    ex.admit(sasl.API_VERSIONS, "ApiVersions")
    ex.api_versions_answered()
    with pytest.raises(SaslFailure, match="Unexpected ApiVersions request received during SASL authentication state"):
        ex.admit(sasl.API_VERSIONS, "ApiVersions")


def test_an_unsupported_mechanism_is_answered_then_closed(credentials):
    ex = exchange(credentials)
    with pytest.raises(SaslFailure, match="Unsupported SASL mechanism SCRAM-SHA-256") as e:
        ex.handshake("SCRAM-SHA-256", 1)
    assert e.value.authentication
    assert e.value.answer == sasl.HandshakeAnswer(error_code=sasl.UNSUPPORTED_SASL_MECHANISM,
                                                  mechanisms=["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"])


def test_another_request_during_the_exchange_is_illegal_sasl_state(credentials):
    ex = exchange(credentials)
    ex.handshake("PLAIN", 1)
    with pytest.raises(SaslFailure, match="Unexpected Kafka request of type PRODUCE during SASL authentication") as e:
        ex.admit(0, "PRODUCE")
    assert e.value.error_code == sasl.ILLEGAL_SASL_STATE and e.value.authentication


def test_after_a_v0_handshake_tokens_travel_bare(credentials):
    ex = exchange(credentials)
    ex.handshake("PLAIN", 0)
    assert ex.expects_bare_token
    assert ex.bare_token(plain("alice", "alice-secret"), NOW_MS, 0.0) == b""
    assert (ex.authenticating, ex.principal) == (False, "User:alice")
    ex = exchange(credentials)
    ex.handshake("PLAIN", 0)
    with pytest.raises(SaslFailure, match="Invalid username or password") as e:
        ex.bare_token(plain("alice", "nope"), NOW_MS, 0.0)
    assert e.value.answer is None  # a bare exchange has no error answer: closed after the delay


# -- PLAIN -------------------------------------------------------------------------------

def test_plain_logs_in_the_jaas_users(credentials):
    ex = exchange(credentials)
    answer = logged_in(ex, "PLAIN", plain("alice", "alice-secret"))
    assert answer == sasl.AuthenticateAnswer(error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0)
    assert ex.principal == "User:alice" and not ex.authenticating


@pytest.mark.parametrize("message, said", [
    (plain("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (plain("mallory", "alice-secret"), "Authentication failed: Invalid username or password"),
    (plain("", "x"), "Authentication failed: username not specified"),
    (plain("alice", ""), "Authentication failed: password not specified"),
    (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (plain("alice", "alice-secret", authzid="admin"),
     "Authentication failed: Client requested an authorization id that is different from username"),
])
def test_plain_refusals_say_what_kafka_says(credentials, message, said):
    with pytest.raises(SaslFailure) as e:
        logged_in(exchange(credentials), "PLAIN", message)
    assert e.value.answer == sasl.AuthenticateAnswer(error_code=sasl.SASL_AUTHENTICATION_FAILED, auth_bytes=b"", error_message=said)


# -- SCRAM -------------------------------------------------------------------------------

def test_scram_logs_in_a_stored_user_and_proves_the_server(credentials):
    ex = exchange(credentials)
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    server_first = logged_in(ex, "SCRAM-SHA-512", client.first()).auth_bytes
    assert server_first.startswith(b"r=" + client.nonce.encode()) and b",i=4096" in server_first
    ex.admit(sasl.SASL_AUTHENTICATE, "SaslAuthenticate")
    answer = ex.authenticate(client.final(server_first), 2, NOW_MS, 0.0)
    import base64

    assert answer.auth_bytes == b"v=" + base64.b64encode(client.server_signature)
    assert ex.principal == "User:alice"


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "x")])
def test_scram_refusals_do_not_tell_a_wrong_password_from_an_unknown_user(credentials, user, password):
    ex = exchange(credentials)
    client = ScramClient("SCRAM-SHA-512", user, password)
    with pytest.raises(SaslFailure) as e:
        server_first = logged_in(ex, "SCRAM-SHA-512", client.first()).auth_bytes
        ex.authenticate(client.final(server_first), 2, NOW_MS, 0.0)
    assert e.value.answer == sasl.AuthenticateAnswer(error_code=sasl.SASL_AUTHENTICATION_FAILED, auth_bytes=b"", error_message=
                              "Authentication failed during authentication due to invalid credentials with SASL "
                              "mechanism SCRAM-SHA-512")


def test_scram_refuses_a_final_message_with_another_nonce(credentials):
    ex = exchange(credentials)
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    server_first = logged_in(ex, "SCRAM-SHA-512", client.first()).auth_bytes
    with pytest.raises(SaslFailure, match="Invalid client nonce"):
        ex.authenticate(client.final(server_first, nonce=client.nonce + "x"), 2, NOW_MS, 0.0)


def test_scram_sees_credentials_altered_after_start(credentials):
    credentials.apply([("alice", 2)], [])
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    with pytest.raises(SaslFailure, match="Invalid user credentials"):
        logged_in(exchange(credentials), "SCRAM-SHA-512", client.first())


# -- OAUTHBEARER -------------------------------------------------------------------------

def test_oauthbearer_takes_the_principal_from_sub_and_the_session_ends_with_the_token(credentials):
    ex = exchange(credentials)
    answer = logged_in(ex, "OAUTHBEARER", token(sub="carol"), monotonic=10.0)
    assert ex.principal == "User:carol"
    assert answer.session_lifetime_ms == 3_600_000
    assert ex.session_expiry == 10.0 + 3600


@pytest.mark.parametrize("claims, status", [
    ({"exp": NOW_MS // 1000 - 2}, '{"status":"invalid_token"}'),  # expired beyond the allowed 1 s skew
    ({"sub": None}, '{"status":"invalid_token"}'),
    ({"exp": None}, '{"status":"invalid_token"}'),
    ({"iat": NOW_MS // 1000 + 60}, '{"status":"invalid_token"}'),
    ({"scope": "other"}, '{"status":"insufficient_scope", "scope":"[kafka]"}'),
])
def test_oauthbearer_refusals_are_a_json_challenge_then_the_failure(credentials, claims, status):
    ex = exchange(credentials)
    body = {"sub": "alice", "exp": NOW_MS // 1000 + 3600, "scope": "kafka", **claims}
    challenge = logged_in(ex, "OAUTHBEARER", oauthbearer(unsecured_jws({k: v for k, v in body.items() if v is not None})))
    assert challenge.error_code == 0 and challenge.auth_bytes == status.encode()
    with pytest.raises(SaslFailure) as e:
        ex.authenticate(b"\x01", 2, NOW_MS, 0.0)
    assert e.value.answer == sasl.AuthenticateAnswer(error_code=sasl.SASL_AUTHENTICATION_FAILED, auth_bytes=b"", error_message=status)


def test_oauthbearer_allows_the_configured_clock_skew(credentials):
    ex = exchange(credentials)
    logged_in(ex, "OAUTHBEARER", token(exp=NOW_MS / 1000 - 0.5))
    assert ex.principal == "User:alice"


def test_a_signed_token_is_not_an_unsecured_one(credentials):
    ex = exchange(credentials)
    jws = unsecured_jws({"sub": "alice", "exp": NOW_MS // 1000 + 60, "scope": "kafka"}, alg="RS256", signature="c2ln")
    assert logged_in(ex, "OAUTHBEARER", oauthbearer(jws)).auth_bytes == b'{"status":"invalid_token"}'
    assert ex.last_refusal == "Unsecured JWS must have 'none' for an algorithm"


# -- KIP-368 -----------------------------------------------------------------------------

def test_without_a_session_lifetime_there_is_no_re_authentication(credentials):
    ex = exchange(credentials)
    logged_in(ex, "PLAIN", plain("alice", "alice-secret"))
    assert not ex.expired(1e9) and not ex.begin_reauthentication(1e9)


def test_re_authentication_keeps_the_principal_and_renews_the_session(credentials):
    ex = exchange(credentials, **{"connections.max.reauth.ms": "2000"})
    assert logged_in(ex, "PLAIN", plain("alice", "alice-secret"), monotonic=0.0).session_lifetime_ms == 2000
    assert ex.expired(2.0) and not ex.expired(1.9)
    assert ex.begin_reauthentication(1.5)
    assert logged_in(ex, "PLAIN", plain("alice", "alice-secret"), monotonic=1.5).session_lifetime_ms == 2000
    assert ex.session_expiry == 3.5 and ex.principal == "User:alice"
    assert not ex.begin_reauthentication(2.0)  # at most once a second: it goes to the handler instead


def test_re_authentication_cannot_change_principal_or_mechanism(credentials):
    ex = exchange(credentials, **{"connections.max.reauth.ms": "2000"})
    logged_in(ex, "PLAIN", plain("alice", "alice-secret"))
    assert ex.begin_reauthentication(5.0)
    with pytest.raises(SaslFailure, match="Cannot change principals during re-authentication from User.alice: "
                                          "User.admin") as e:
        logged_in(ex, "PLAIN", plain("admin", "admin-secret"))
    assert e.value.answer.error_code == sasl.SASL_AUTHENTICATION_FAILED
    ex = exchange(credentials, **{"connections.max.reauth.ms": "2000"})
    logged_in(ex, "PLAIN", plain("alice", "alice-secret"))
    assert ex.begin_reauthentication(5.0)
    ex.handshake("OAUTHBEARER", 1)
    with pytest.raises(SaslFailure, match="SASL mechanism 'OAUTHBEARER' requested by client is not supported for "
                                          "re-authentication of mechanism 'PLAIN'"):
        ex.admit(sasl.SASL_AUTHENTICATE, "SaslAuthenticate")


# -- OAUTHBEARER with a JWKS -------------------------------------------------------------

JWKS_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
JWKS_PREFIX = "listener.name.sasl_plaintext.oauthbearer."
ISSUER = "https://issuer"
# what Kafka 4.4 needs of a listener checking signed tokens: an audience and an issuer to expect
EXPECTED = {JWKS_PREFIX + "sasl.oauthbearer.expected.audience": "kafka",
            JWKS_PREFIX + "sasl.oauthbearer.expected.issuer": ISSUER}


@pytest.fixture(scope="module")
def signing_keys():
    from tests.sasl_tokens import SigningKeys

    return SigningKeys()


def jwks_exchange(credentials, signing_keys, tmp_path, **settings):
    import json

    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(signing_keys.jwks()))
    return exchange(credentials, **{JWKS_PREFIX + "sasl.server.callback.handler.class": JWKS_HANDLER,
                                    JWKS_PREFIX + "sasl.oauthbearer.jwks.endpoint.url": f"file://{path}",
                                    **EXPECTED, **settings})


def claims(**more):
    return {"sub": "carol", "iat": NOW_MS // 1000, "exp": NOW_MS // 1000 + 600, "aud": "kafka", "iss": ISSUER, **more}


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_a_token_signed_with_a_jwks_key_logs_in(credentials, signing_keys, tmp_path, alg):
    ex = jwks_exchange(credentials, signing_keys, tmp_path)
    jws = signing_keys.sign(claims(), alg)
    assert logged_in(ex, "OAUTHBEARER", oauthbearer(jws)).session_lifetime_ms == 600_000
    assert ex.principal == "User:carol"


def test_an_iat_in_the_future_is_let_be_as_kafka_lets_it_be(credentials, signing_keys, tmp_path):
    ex = jwks_exchange(credentials, signing_keys, tmp_path)  # jose4j checks iat only when told to
    logged_in(ex, "OAUTHBEARER", oauthbearer(signing_keys.sign(claims(iat=NOW_MS // 1000 + 300))))
    assert ex.principal == "User:carol"


def test_unsigned_forged_or_expired_tokens_are_refused_where_a_signature_is_required(credentials, signing_keys,
                                                                                      tmp_path):
    good = claims()
    forged = signing_keys.sign(good).split(".")
    forged[1] = unsecured_jws(claims(sub="admin")).split(".")[1]
    cases = {
        "unsigned": (unsecured_jws(good), "The JWT is not signed, and a signature is required"),
        "alg none, signed": (unsecured_jws(good, signature="c2ln"), "Unsupported or missing JWT algorithm 'none'"),
        "forged": (".".join(forged), "The JWT signature does not match the JWKS key"),
        "expired": (signing_keys.sign({**good, "exp": NOW_MS // 1000 - 31}), "The JWT has expired"),
        "unknown key": (signing_keys.sign(good, kid="other"), "No key with kid 'other' in the JWKS"),
        "no iat": (signing_keys.sign({k: v for k, v in good.items() if k != "iat"}), "No Issued At (iat) claim"),
        "not yet valid": (signing_keys.sign({**good, "nbf": NOW_MS // 1000 + 31}), "The JWT is not yet valid"),
        "a scope twice": (signing_keys.sign({**good, "scope": ["kafka", " kafka"]}),
                          "scope value must not contain duplicates - kafka already present"),
        "a blank scope": (signing_keys.sign({**good, "scope": ["kafka", " "]}),
                          "scope value must not contain only whitespace"),
        "exp before iat": (signing_keys.sign({**good, "iat": good["exp"] + 1}),
                           "The Expiration Time (exp=1800000600) claim value cannot be before the Issued At"),
    }
    for name, (jws, reason) in cases.items():
        ex = jwks_exchange(credentials, signing_keys, tmp_path)
        assert logged_in(ex, "OAUTHBEARER", oauthbearer(jws)).auth_bytes == b'{"status":"invalid_token"}', name
        assert ex.last_refusal.startswith(reason), (name, ex.last_refusal)
        with pytest.raises(SaslFailure):
            ex.authenticate(b"\x01", 2, NOW_MS, 0.0)


def test_expected_audience_and_issuer(credentials, signing_keys, tmp_path):
    settings = {JWKS_PREFIX + "sasl.oauthbearer.expected.audience": "kafka,other"}
    ex = jwks_exchange(credentials, signing_keys, tmp_path, **settings)
    logged_in(ex, "OAUTHBEARER", oauthbearer(signing_keys.sign(claims(aud=["web", "other"]))))
    assert ex.principal == "User:carol"
    cases = {"aud": ("web", "Audience (aud) claim [web] doesn't contain an acceptable identifier. "
                            "Expected one of [kafka, other] as an aud value"),
             "iss": ("https://elsewhere", "Issuer (iss) claim value (https://elsewhere) doesn't match expected "
                                          "value of https://issuer")}
    for claim, (value, reason) in cases.items():
        for token in (claims(**{claim: value}), {k: v for k, v in claims().items() if k != claim}):
            ex = jwks_exchange(credentials, signing_keys, tmp_path, **settings)
            answer = logged_in(ex, "OAUTHBEARER", oauthbearer(signing_keys.sign(token)))
            assert answer.auth_bytes == b'{"status":"invalid_token"}'
            assert ex.last_refusal == (reason if claim in token else
                                       "No Audience (aud) claim present" if claim == "aud" else
                                       "No Issuer (iss) claim present")
            with pytest.raises(SaslFailure, match='{"status":"invalid_token"}'):
                ex.authenticate(b"\x01", 2, NOW_MS, 0.0)


def test_a_listener_checking_signatures_needs_an_audience_and_an_issuer_as_in_kafka(credentials, signing_keys,
                                                                                     tmp_path):
    unset = {name: "" for name in EXPECTED}
    audience = ('The OAuth validator for the broker requires "sasl.oauthbearer.expected.audience" to be configured '
                'so that the token\'s audience ("aud") claim can be verified, but it was not set. Set '
                '"sasl.oauthbearer.expected.audience" to the audience(s) that identify this cluster, or set '
                '"sasl.oauthbearer.allow.unverified.audience" to true to accept tokens regardless of their audience.')
    issuer = ('The OAuth validator for the broker requires "sasl.oauthbearer.expected.issuer" to be configured so '
              'that the token\'s issuer ("iss") claim can be verified, but it was not set. Set '
              '"sasl.oauthbearer.expected.issuer" to the issuer URL of the OAuth/OIDC provider that signs the tokens, '
              'or set "sasl.oauthbearer.allow.unverified.issuer" to true to accept tokens regardless of their issuer.')
    allow_audience = {"sasl.oauthbearer.allow.unverified.audience": "true"}  # the bare name counts too
    allow_issuer = {"listener.name.sasl_plaintext.sasl.oauthbearer.allow.unverified.issuer": "true"}
    refused = [(unset, audience),  # Kafka asks for the audience first
               ({**unset, JWKS_PREFIX + "sasl.oauthbearer.expected.issuer": ISSUER}, audience),
               ({**unset, **allow_audience}, issuer),
               ({**unset, **allow_audience, JWKS_PREFIX + "sasl.oauthbearer.expected.issuer": "  "}, issuer),
               ({**unset, JWKS_PREFIX + "sasl.oauthbearer.allow.unverified.audience": "false", **allow_issuer},
                audience)]
    for settings, message in refused:
        with pytest.raises(SaslConfigError) as refusal:
            jwks_exchange(credentials, signing_keys, tmp_path, **settings)
        assert str(refusal.value) == message, settings
    # opted out: any audience and issuer, or none, is served
    ex = jwks_exchange(credentials, signing_keys, tmp_path, **unset, **allow_audience, **allow_issuer)
    logged_in(ex, "OAUTHBEARER", oauthbearer(signing_keys.sign({"sub": "carol", "iat": NOW_MS // 1000,
                                                                  "exp": NOW_MS // 1000 + 600, "aud": "web"})))
    assert ex.principal == "User:carol"
    # opted out but set: what is set is still checked, as Kafka does
    ex = jwks_exchange(credentials, signing_keys, tmp_path, **allow_audience, **allow_issuer)
    assert logged_in(ex, "OAUTHBEARER", oauthbearer(signing_keys.sign(claims(iss="https://elsewhere")))).auth_bytes \
        == b'{"status":"invalid_token"}'
    with pytest.raises(KafkaSettingRefused, match="Invalid value yes for configuration sasl.oauthbearer.allow."
                                                  "unverified.audience: Expected value to be either true or false"):
        jwks_exchange(credentials, signing_keys, tmp_path, **unset,
                      **{"sasl.oauthbearer.allow.unverified.audience": "yes"})


def test_the_jwks_is_read_from_a_file_at_start(credentials, tmp_path):
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    with pytest.raises(SaslConfigError, match='requires "sasl.oauthbearer.jwks.endpoint.url" to be configured so '
                                              'that JWT signatures can be verified'):
        exchange(credentials, **{prefix + "sasl.server.callback.handler.class": JWKS_HANDLER, **EXPECTED})
    with pytest.raises(SaslConfigError, match="reads the keys from a file"):
        exchange(credentials, **{prefix + "sasl.server.callback.handler.class": JWKS_HANDLER, **EXPECTED,
                                 prefix + "sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks"})
    option = "The OAuth configuration option sasl.oauthbearer.jwks.endpoint.url "
    (tmp_path / "not-json").write_text("{")
    for url, message in ((f"file://{tmp_path}/missing.json", f"contains a file ({tmp_path}/missing.json) that "
                                                              "doesn't exist"),
                         (f"file://{tmp_path}", f"references a directory ({tmp_path}), not a file"),
                         (f"{tmp_path}/jwks.json", f"contains a URL ({tmp_path}/jwks.json) that is malformed: "
                                                   f"no protocol: {tmp_path}/jwks.json"),
                         ("ftp://idp/jwks", "contains a URL (ftp://idp/jwks) that is malformed: unknown protocol: ftp"),
                         (" ", "value is required")):
        with pytest.raises(SaslConfigError) as refused:
            exchange(credentials, **{prefix + "sasl.server.callback.handler.class": JWKS_HANDLER, **EXPECTED,
                                     prefix + "sasl.oauthbearer.jwks.endpoint.url": url})
        assert str(refused.value) == option + message
    with pytest.raises(SaslConfigError, match="cannot read its keys"):
        exchange(credentials, **{prefix + "sasl.server.callback.handler.class": JWKS_HANDLER, **EXPECTED,
                                 prefix + "sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp_path}/not-json"})


def test_a_callback_handler_is_read_only_under_its_listener_and_mechanism_as_in_kafka(credentials, signing_keys,
                                                                                       tmp_path):
    import json

    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(signing_keys.jwks()))
    # Kafka's SaslChannelBuilder reads listener.name.<l>.<mechanism>.sasl.server.callback.handler.class
    # only: the same class bare or under the listener alone leaves the unsecured validator in place
    for key in ("sasl.server.callback.handler.class",
                "listener.name.sasl_plaintext.sasl.server.callback.handler.class"):
        ex = exchange(credentials, **{key: JWKS_HANDLER, "sasl.oauthbearer.jwks.endpoint.url": f"file://{path}",
                                      **EXPECTED})
        logged_in(ex, "OAUTHBEARER", oauthbearer(unsecured_jws({"sub": "dave", "exp": NOW_MS // 1000 + 60,
                                                                "scope": "kafka"})))
        assert ex.principal == "User:dave", key
