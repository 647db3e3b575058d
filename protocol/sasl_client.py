"""The client halves of the SASL mechanisms a client logs in with, sans-IO: each gives the
bytes of its next SaslAuthenticate request from the server's last answer.

PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, the server's signature checked) and
OAUTHBEARER (RFC 7628) with a token the caller provides (the unsecured one of Kafka's
default login, or any other).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslClientError(Exception):
    """The server's answer cannot be right (a wrong SCRAM signature, a malformed message)."""


class SaslMechanismClient:
    """``first()`` is the first token; ``next(answer)`` the one after the server's answer,
    or None when the exchange is complete on the client's side."""

    def first(self) -> bytes:
        raise NotImplementedError

    def next(self, answer: bytes) -> bytes | None:
        return None


class PlainClient(SaslMechanismClient):
    def __init__(self, username: str, password: str) -> None:
        self.username, self.password = username, password

    def first(self) -> bytes:
        return f"\0{self.username}\0{self.password}".encode()


class ScramClient(SaslMechanismClient):
    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self.first_bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.digest).digest()

    def next(self, answer: bytes) -> bytes | None:
        fields = _scram_fields(answer)
        if self._server_signature is not None:  # server-final: v=signature or e=error
            if "e" in fields:
                raise SaslClientError(f"SCRAM server error: {fields['e']}")
            if not hmac.compare_digest(base64.b64decode(fields.get("v", "")), self._server_signature):
                raise SaslClientError("the server's SCRAM signature is wrong: it does not know the password")
            return None
        try:
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        except (KeyError, ValueError) as e:
            raise SaslClientError(f"malformed SCRAM server-first message: {answer[:200]!r}") from e
        if not nonce.startswith(self.nonce) or iterations < 1:
            raise SaslClientError("the SCRAM server-first message does not continue this client's nonce")
        salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(), salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{answer.decode()},{without_proof}".encode()
        client_key = self._hmac(salted, b"Client Key")
        signature = self._hmac(hashlib.new(self.digest, client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def _scram_fields(message: bytes) -> dict[str, str]:
    try:
        return dict(item.split("=", 1) for item in message.decode().split(","))
    except ValueError as e:
        raise SaslClientError(f"malformed SCRAM message: {message[:200]!r}") from e


class OAuthBearerClient(SaslMechanismClient):
    """RFC 7628's client: the token; to a server's error (a JSON status) the single
    %x01 the RFC asks for, after which the server answers the failure."""

    def __init__(self, token: str) -> None:
        self.token = token

    def first(self) -> bytes:
        return f"n,,\x01auth=Bearer {self.token}\x01\x01".encode()

    def next(self, answer: bytes) -> bytes | None:
        return b"\x01" if answer else None


def unsecured_token(subject: str, lifetime_s: float = 3600.0, now: float | None = None) -> str:
    """An unsigned JWS (alg none) as Kafka's unsecured OAUTHBEARER login writes it."""
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = time.time() if now is None else now
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': int(now), 'exp': now + lifetime_s})}."


def mechanism_client(mechanism: str, username: str | None = None, password: str | None = None,
                     token: str | None = None) -> SaslMechanismClient:
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return ScramClient(mechanism, username, password)
    if mechanism == "OAUTHBEARER":
        return OAuthBearerClient(token)
    raise ValueError(f"SASL mechanism {mechanism!r}: one of {', '.join(MECHANISMS)}")
