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


class SigningKeys:
    """An RSA and an EC key pair, their JWKS, and tokens signed with them (cryptography)."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict:
        def b64int(n: int, length: int | None = None) -> str:
            raw = n.to_bytes(length or (n.bit_length() + 7) // 8, "big")
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        r, e = self.rsa.public_key().public_numbers(), self.ec.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": "rsa-1", "n": b64int(r.n), "e": b64int(r.e)},
                         {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64int(e.x, 32), "y": b64int(e.y, 32)}]}

    def sign(self, claims: dict, alg: str = "RS256", kid: str | None = None) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        kid = kid or ("rsa-1" if alg.startswith("RS") else "ec-1")
        signed = f"{_b64({'alg': alg, 'kid': kid, 'typ': 'JWT'})}.{_b64(claims)}".encode()
        if alg.startswith("RS"):
            signature = self.rsa.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.ec.sign(signed, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signed.decode()}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
