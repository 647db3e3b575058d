"""SASL/SCRAM-SHA-256 and -512 (RFC 5802/7677) against the credentials
AlterUserScramCredentials stores (broker.security.scram_credentials), as Kafka's ScramSaslServer
runs it: client-first, server-first, client-final with the proof, server-final."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from broker.security.sasl_errors import SaslAuthenticationFailed, SaslRejected

# mechanism name -> (the id AlterUserScramCredentials uses, hashlib digest, minimum iterations)
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256", 4096), "SCRAM-SHA-512": (2, "sha512", 4096)}
LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_SASL_NAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # no bare ',' or '='
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]"  # printable but ','
_EXTENSIONS = r"(?:,[A-Za-z]+=[\x01-\x2B\x2D-\x7F]*)*"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASL_NAME}))?,(?P<bare>n=(?P<saslname>{_SASL_NAME}),"
                           rf"r=(?P<nonce>{_PRINTABLE}+)(?P<extensions>{_EXTENSIONS}))", re.S)
_CLIENT_FINAL = re.compile(rf"(?P<without_proof>c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>{_PRINTABLE}+)"
                           rf"{_EXTENSIONS}),p=(?P<proof>[A-Za-z0-9+/=]+)", re.S)


def username(sasl_name: str) -> str:
    """RFC 5802's saslname: ',' and '=' are escaped as =2C and =3D."""
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslRejected("Invalid base64 in the client final message") from None


class ScramServer:
    credential_lifetime_ms = None

    def __init__(self, mechanism: str, credentials) -> None:
        self.mechanism = mechanism
        self._id, self._digest, self._min_iterations = MECHANISMS[mechanism]
        self._credentials = credentials  # broker.security.scram_credentials.ScramCredentials: read at each login
        self.complete = False
        self.authorization_id: str | None = None
        self._state = "client-first"
        self._first_bare = self._server_first = self._nonce = ""
        self._credential: dict | None = None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        text = token.decode("utf-8", "replace")
        if self._state == "client-first":
            return self._client_first(text)
        if self._state == "client-final":
            return self._client_final(text)
        raise SaslRejected(f"Unexpected challenge in Sasl server state {self._state}")

    def _client_first(self, text: str) -> bytes:
        self._state = "failed"
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslRejected(f"Invalid SCRAM client first message format: {text[:200]!r}")
        extensions = dict(item.split("=", 1) for item in match["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":  # delegation tokens are not served
            raise SaslRejected("Authentication failed: delegation tokens are not supported")
        user = username(match["saslname"])
        authorization_id = match["authzid"]
        if authorization_id and username(authorization_id) != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        credential = self._credentials.users.get(user, {}).get(str(self._id))
        if credential is None:
            raise SaslRejected("Authentication failed: Invalid user credentials")
        if credential["iterations"] < self._min_iterations:
            raise SaslRejected(f"Iterations {credential['iterations']} is less than the minimum "
                               f"{self._min_iterations} for {self.mechanism}")
        self._credential = credential
        self.authorization_id = user
        self._nonce = match["nonce"] + secrets.token_urlsafe(24)
        self._first_bare = match["bare"]
        self._server_first = f"r={self._nonce},s={credential['salt']},i={credential['iterations']}"
        self._state = "client-final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self._state = "failed"
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise SaslRejected("Invalid SCRAM client final message format")
        if match["nonce"] != self._nonce:
            raise SaslRejected("Invalid client nonce in the final client message.")
        proof = _b64decode(match["proof"])
        auth_message = f"{self._first_bare},{self._server_first},{match['without_proof']}".encode()
        stored_key = base64.b64decode(self._credential["stored_key"])
        signature = hmac.new(stored_key, auth_message, self._digest).digest()
        if len(proof) != len(signature):
            raise SaslRejected("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), stored_key):
            raise SaslRejected("Invalid client credentials")
        server_key = base64.b64decode(self._credential["server_key"])
        server_signature = hmac.new(server_key, auth_message, self._digest).digest()
        self.complete = True
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword (Hi), as kafka-storage format --add-scram derives it."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][1], password.encode(), salt, iterations)
