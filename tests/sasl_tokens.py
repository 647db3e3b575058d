"""Client halves of the SASL mechanisms, for tests that speak SASL themselves: the
PLAIN message, a SCRAM client (RFC 5802) and unsecured/expired OAUTHBEARER tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets


def plain(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


class ScramClient:
    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.user, self.password = user, password
        self.nonce = secrets.token_urlsafe(18)
        self.first_bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes, nonce: str | None = None) -> bytes:
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        without_proof = f"c=biws,r={nonce or fields['r']}"
        auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self.digest).digest()
        signature = hmac.new(hashlib.new(self.digest, client_key).digest(), auth_message, self.digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_signature = hmac.new(hmac.new(salted, b"Server Key", self.digest).digest(), auth_message,
                                         self.digest).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def unsecured_jws(claims: dict, alg: str = "none", signature: str = "") -> str:
    return f"{_b64({'alg': alg})}.{_b64(claims)}.{signature}"


def oauthbearer(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()
