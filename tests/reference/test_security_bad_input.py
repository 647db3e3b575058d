"""Bad input on the secured listeners, asked of eosbroker (1 and 3 nodes) and Apache Kafka 4.4
alike (secured_targets.py), frame by frame: a wrong password, an unknown user, an expired
token, a request before authentication and a SASL token of 100 MB on SASL_SSL; a TLS client
on a plaintext port; a plaintext request and garbage on a TLS port; and an unsigned token
where a signature is required (a JWKS file), against a broker of each kind of its own. Each
gets Kafka's answer (the error code and message, a TLS alert, or none) and the close;
eosbroker logs a line for each, its memory stays bounded, and the broker goes on serving (a
transaction committed afterwards). The same cases over SASL_PLAINTEXT and with the client
libraries are in tests/integration/test_sasl.py and test_tls_listeners.py."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import time
import uuid

import pytest
from confluent_kafka import Producer

from broker.security.tls import INTERNAL_ERROR_ALERT
from protocol.client import ClientConnection
from tests.reference.secured_targets import TOPIC, plaintext_bootstrap
from tests.sasl_broker import RawConnection, rss_kib
from tests.sasl_tokens import ScramClient, oauthbearer, plain, unsecured_jws

pytestmark = pytest.mark.reference_extended

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3
CLOSED = "closed"


class TlsRawConnection(RawConnection):
    """RawConnection over TLS (the broker's certificate checked against the test CA)."""

    def __init__(self, address: str, certs) -> None:
        host, port = address.rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(certs.ca))
        self.sock = context.wrap_socket(socket.create_connection((host, int(port)), timeout=30),
                                        server_hostname="localhost")
        self.client = ClientConnection("bad-input")

    def closed(self) -> bool:
        try:
            return super().closed()
        except (ssl.SSLError, OSError):  # an abrupt close under TLS
            return True


def _answer(response) -> tuple:
    return CLOSED if response is None else (response.error_code, response.error_message)


def _logged_in_exchange(raw: RawConnection, mechanism: str, *tokens: bytes) -> list:
    """SaslHandshake v1, then SaslAuthenticate v2 with each token: the answers, then whether
    the broker closed the connection."""
    handshake = raw.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    seen = [handshake.error_code]
    for token in tokens:
        answer = raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        seen.append(_answer(answer) if answer is None or answer.error_code else (0, answer.auth_bytes))
        if answer is None or answer.error_code:
            break
    seen.append(CLOSED if raw.closed() else "open")
    return seen


def wrong_password(target) -> list:
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)
    return _logged_in_exchange(raw, "PLAIN", plain("alice", "wrong"))


def unknown_user(target) -> list:
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)
    return _logged_in_exchange(raw, "SCRAM-SHA-512", ScramClient("SCRAM-SHA-512", "mallory", "x").first())


def expired_token(target) -> list:
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)
    expired = oauthbearer(unsecured_jws({"sub": "alice", "iat": int(time.time()) - 120,
                                         "exp": int(time.time()) - 60}))
    # Kafka's answer to a bad token is a JSON challenge; the client's \x01 then ends it
    return _logged_in_exchange(raw, "OAUTHBEARER", expired, b"\x01")


def request_before_authentication(target) -> list:
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)
    return [_answer(raw.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}))]


def token_of_100_mb(target) -> list:
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)
    seen = [raw.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code]
    # a SaslAuthenticate frame announcing 100 MB, refused at its length (sasl.server.max.receive.size)
    try:
        raw.sock.sendall((100 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 65536)
    except (ssl.SSLError, OSError):
        pass  # closed while sending: as refused
    seen.append(CLOSED if raw.closed() else "open")
    return seen


def tls_client_on_a_plaintext_port(target) -> list:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        hello.do_handshake()
    # the ClientHello: its first bytes read as a frame of ~370 MB
    return _sent_until_closed(plaintext_bootstrap(target), outgoing.read())


def _not_tls_on_the_ssl_port(target, data: bytes) -> list:
    return _sent_until_closed(target.bootstrap_for("SSL"), data)


def _sent_until_closed(address: str, data: bytes) -> list:
    """``data`` sent on a new connection to ``address``; what came back before the broker
    closed it (CLOSED for nothing)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return [answer or CLOSED]


def plaintext_client_on_a_tls_port(target) -> list:
    api_versions = struct.pack(">hhih", 18, 0, 7, -1)
    return _not_tls_on_the_ssl_port(target, struct.pack(">i", len(api_versions)) + api_versions)


def garbage_instead_of_a_client_hello(target) -> list:
    return _not_tls_on_the_ssl_port(target, bytes(range(256)) * 8)


INVALID_CREDENTIALS = "Authentication failed during authentication due to invalid credentials with SASL mechanism "
# case: (what the client sees, as Kafka answers it; eosbroker's log line)
CASES = {
    wrong_password: ([0, (58, "Authentication failed: Invalid username or password"), CLOSED],
                     "Authentication failed: Invalid username or password"),
    unknown_user: ([0, (58, INVALID_CREDENTIALS + "SCRAM-SHA-512"), CLOSED],
                   "Authentication failed: Invalid user credentials"),
    expired_token: ([0, (0, b'{"status":"invalid_token"}'), (58, '{"status":"invalid_token"}'), CLOSED],
                    "was on or after the Expiration Time value"),
    request_before_authentication: ([CLOSED], "Unexpected Kafka request of type METADATA during SASL handshake."),
    token_of_100_mb: ([0, CLOSED],
                      "Failing SASL authentication due to invalid receive size (a frame of 104857600 bytes"),
    tls_client_on_a_plaintext_port: ([CLOSED], "exceeds socket.request.max.bytes"),
    # Kafka's answer to what is no TLS: a fatal internal_error alert, then the close
    plaintext_client_on_a_tls_port: ([INTERNAL_ERROR_ALERT], "listener SSL): SSL handshake failed"),
    garbage_instead_of_a_client_hello: ([INTERNAL_ERROR_ALERT], "listener SSL): SSL handshake failed"),
}


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_bad_input_answered_and_closed_as_kafka_does(secured_target, case):
    seen_by_client, log_line = CASES[case]
    eosbroker = secured_target.kind != "kafka"
    before = len(secured_target.log_text()) if eosbroker else 0
    rss_before = rss_kib(secured_target.proc.pid) if eosbroker else 0
    assert case(secured_target) == seen_by_client
    if eosbroker:
        deadline = time.monotonic() + 20
        while log_line not in secured_target.log_text()[before:]:
            assert time.monotonic() < deadline, f"{log_line!r} not logged:\n{secured_target.log_tail()}"
            time.sleep(0.05)
        assert rss_kib(secured_target.proc.pid) - rss_before < 16 * 1024
    # nothing else disturbed: alice still commits a transaction
    settings = {"bootstrap.servers": secured_target.bootstrap_for("SASL_SSL"),
                **secured_target.security("SASL_SSL", "PLAIN").confluent_kafka("alice")}
    producer = Producer({**settings, "transactional.id": f"t-after-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(TOPIC, b"after bad input")
    producer.commit_transaction(60)
    del producer


# -- a token without a signature where one is required ------------------------------------

ISSUER = "https://issuer.example"


@pytest.fixture(scope="module", params=["eosbroker", "kafka"])
def signing_target(request, tmp_path_factory):
    """A broker whose SASL_SSL listener checks OAUTHBEARER tokens' signatures against a JWKS
    file (Kafka's OAuthBearerValidatorCallbackHandler), and the keys that sign them."""
    from tests.reference.secured_targets import start_target
    from tests.sasl_tokens import SigningKeys

    workdir = tmp_path_factory.mktemp(f"signed-{request.param}")
    keys = SigningKeys()
    jwks = workdir / "jwks.json"
    jwks.write_text(json.dumps(keys.jwks()))
    prefix = "listener.name.sasl_ssl.oauthbearer."
    broker = start_target(request.param, workdir, {
        prefix + "sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        prefix + "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
        prefix + "sasl.oauthbearer.expected.audience": "kafka",
        prefix + "sasl.oauthbearer.expected.issuer": ISSUER,  # Kafka 4.4 starts no such listener without
    }, kafka_system_properties={"org.apache.kafka.sasl.oauthbearer.allowed.urls": jwks.as_uri()})
    yield broker, keys
    broker.stop()


def test_an_unsigned_token_where_a_signature_is_required_as_kafka(signing_target):
    target, keys = signing_target
    before = len(target.log_text()) if target.kind != "kafka" else 0
    now = int(time.time())
    claims = {"sub": "alice", "iat": now, "exp": now + 600, "aud": "kafka", "iss": ISSUER}
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)  # a signed token: served
    assert raw.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    assert raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": oauthbearer(keys.sign(claims))}).error_code == 0
    assert raw.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}).brokers
    raw.close()
    unsigned = _logged_in_exchange(TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs), "OAUTHBEARER",
                                   oauthbearer(unsecured_jws(claims)), b"\x01")
    assert unsigned == [0, (0, b'{"status":"invalid_token"}'), (58, '{"status":"invalid_token"}'), CLOSED]
    if target.kind != "kafka":
        deadline = time.monotonic() + 20
        while "The JWT is not signed, and a signature is required" not in target.log_text()[before:]:
            assert time.monotonic() < deadline, target.log_tail()
            time.sleep(0.05)


@pytest.mark.parametrize("wrong", [{"iss": "https://elsewhere.example"}, {"aud": "web"}, {"iat": None},
                                   {"scope": ["kafka", "kafka"]}],
                         ids=["issuer", "audience", "no iat", "a scope twice"])
def test_a_signed_token_with_a_wrong_claim_as_kafka(signing_target, wrong):
    """Signed by the JWKS's key, but for another issuer or audience, without iat or with a
    scope twice: the same JSON challenge, failure and close from both brokers."""
    target, keys = signing_target
    now = int(time.time())
    claims = {"sub": "alice", "iat": now, "exp": now + 600, "aud": "kafka", "iss": ISSUER, **wrong}
    token = keys.sign({k: v for k, v in claims.items() if v is not None})
    refused = _logged_in_exchange(TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs), "OAUTHBEARER",
                                  oauthbearer(token), b"\x01")
    assert refused == [0, (0, b'{"status":"invalid_token"}'), (58, '{"status":"invalid_token"}'), CLOSED]


def test_a_signed_token_issued_in_the_future_is_served_as_by_kafka(signing_target):
    target, keys = signing_target  # jose4j checks iat only when asked to, and Kafka does not ask
    now = int(time.time())
    token = keys.sign({"sub": "alice", "iat": now + 300, "exp": now + 600, "aud": "kafka", "iss": ISSUER})
    raw = TlsRawConnection(target.bootstrap_for("SASL_SSL"), target.certs)
    assert raw.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    assert raw.request(SASL_AUTHENTICATE, 2, {"auth_bytes": oauthbearer(token)}).error_code == 0
    raw.close()
