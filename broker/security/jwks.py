"""Signed OAUTHBEARER tokens checked against the keys of a JWKS file, with the rules of
Kafka's OAuthBearerValidatorCallbackHandler (jose4j under it): the signature
(RS256/384/512, ES256/384/512, the key chosen by ``kid``); ``exp`` and ``iat`` required,
``exp`` not passed and not before ``iat`` or ``nbf``, ``nbf`` reached (within
``sasl.oauthbearer.clock.skew.seconds``; an ``iat`` in the future is let be, as jose4j lets
it be); the subject from ``sasl.oauthbearer.sub.claim.name``; the audience and issuer
matched against ``sasl.oauthbearer.expected.audience`` / ``...expected.issuer`` when set (a
listener sets them or opts out with ``...allow.unverified.audience`` / ``...issuer``, as
Kafka 4.4 requires). The keys are read once, at start, from
``sasl.oauthbearer.jwks.endpoint.url`` (a file: URL, refused with Kafka's messages as Kafka
refuses it)."""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from broker.security.oauthbearer import TokenRefused, _json_part, _number

_HASHES = {"256": "SHA256", "384": "SHA384", "512": "SHA512"}
_CURVES = {"P-256": "SECP256R1", "P-384": "SECP384R1", "P-521": "SECP521R1"}


class JwksError(ValueError):
    """A JWKS setting or file that cannot be used (at start)."""


def _b64int(text: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


def load_keys(url: str) -> dict[str | None, object]:
    """The public keys of a JWKS file by ``kid``; JwksError if it cannot be read."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    url = url.strip()
    option = "The OAuth configuration option sasl.oauthbearer.jwks.endpoint.url"
    if not url:
        raise JwksError(f"{option} value is required")
    parsed = urlparse(url)
    if parsed.scheme.lower() in ("http", "https"):
        raise JwksError(f"sasl.oauthbearer.jwks.endpoint.url {url}: eosbroker reads the keys from a file "
                        "(file:/path/to/jwks.json), not over the network")
    if parsed.scheme.lower() != "file":  # Kafka's wording, from java.net.URL's refusal
        reason = f"unknown protocol: {parsed.scheme.lower()}" if parsed.scheme else f"no protocol: {url}"
        raise JwksError(f"{option} contains a URL ({url}) that is malformed: {reason}")
    path = Path(unquote(parsed.path)).absolute()
    if not path.exists():
        raise JwksError(f"{option} contains a file ({path}) that doesn't exist")
    if not os.access(path, os.R_OK):
        raise JwksError(f"{option} contains a file ({path}) that doesn't have read permission")
    if path.is_dir():
        raise JwksError(f"{option} references a directory ({path}), not a file")
    try:
        document = json.loads(path.read_text())
        keys = {}
        for jwk in document["keys"]:
            if jwk["kty"] == "RSA":
                key = rsa.RSAPublicNumbers(_b64int(jwk["e"]), _b64int(jwk["n"])).public_key()
            elif jwk["kty"] == "EC":
                curve = getattr(ec, _CURVES[jwk["crv"]])()
                key = ec.EllipticCurvePublicNumbers(_b64int(jwk["x"]), _b64int(jwk["y"]), curve).public_key()
            else:
                continue  # a key type no supported algorithm uses
            keys[jwk.get("kid")] = key
    except (OSError, ValueError, KeyError, TypeError, binascii.Error) as e:
        raise JwksError(f"sasl.oauthbearer.jwks.endpoint.url {url}: cannot read its keys ({e})") from None
    if not keys:
        raise JwksError(f"sasl.oauthbearer.jwks.endpoint.url {url}: no RSA or EC key in it")
    return keys


class JwksValidator:
    def __init__(self, keys: dict, sub_claim: str = "sub", clock_skew_s: int = 30,
                 audience: list[str] | None = None, issuer: str | None = None, scope_claim: str = "scope") -> None:
        self.keys = keys
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_ms = clock_skew_s * 1000
        self.audience = [a for a in audience or [] if a]
        self.issuer = issuer

    def validate(self, token: str, now_ms: int) -> tuple[str, int]:
        parts = token.split(".")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            raise TokenRefused("A JWT has three dot-separated parts")
        if not parts[2]:
            raise TokenRefused("The JWT is not signed, and a signature is required")
        header, claims = _json_part(parts[0]), _json_part(parts[1])
        self._verify(header, f"{parts[0]}.{parts[1]}".encode(), parts[2])
        expiry = _number(claims, "exp")
        if expiry is None:
            raise TokenRefused("No expiration time in JWT")
        if now_ms - self.clock_skew_ms >= 1000 * expiry:
            raise TokenRefused(f"The JWT has expired ({expiry} seconds)")
        issued_at = _number(claims, "iat")
        if issued_at is None:
            raise TokenRefused("No Issued At (iat) claim present")
        # as jose4j under Kafka: an iat in the future is let be, an exp before iat or nbf is not
        if expiry < issued_at:
            raise TokenRefused(f"The Expiration Time (exp={expiry}) claim value cannot be before the Issued At "
                               f"(iat={issued_at}) claim value")
        not_before = _number(claims, "nbf")
        if not_before is not None and expiry < not_before:
            raise TokenRefused(f"The Expiration Time (exp={expiry}) claim value cannot be before the Not Before "
                               f"(nbf={not_before}) claim value")
        if not_before is not None and now_ms + self.clock_skew_ms < 1000 * not_before:
            raise TokenRefused(f"The JWT is not yet valid as the evaluation time {now_ms // 1000} is before the "
                               f"Not Before (nbf={not_before}) claim time")
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenRefused(f"No principal name in JWT claim: {self.sub_claim}")
        if self.audience:
            aud = claims.get("aud")
            if aud is None:
                raise TokenRefused("No Audience (aud) claim present")
            given = aud if isinstance(aud, list) else [aud]
            if not set(self.audience) & {a for a in given if isinstance(a, str)}:
                expected = (self.audience[0] if len(self.audience) == 1
                            else f"one of [{', '.join(self.audience)}]")
                raise TokenRefused(f"Audience (aud) claim [{', '.join(map(str, given))}] doesn't contain an "
                                   f"acceptable identifier. Expected {expected} as an aud value")
        if self.issuer is not None:
            iss = claims.get("iss")
            if iss is None:
                raise TokenRefused("No Issuer (iss) claim present")
            if iss != self.issuer:
                raise TokenRefused(f"Issuer (iss) claim value ({iss}) doesn't match expected value of {self.issuer}")
        self._check_scope(claims.get(self.scope_claim))
        return principal, round(expiry * 1000)

    def _check_scope(self, scope) -> None:
        """Kafka's ClaimValidationUtils.validateScopes: each scope a string with more than
        whitespace, none twice (a string is one scope; no scope claim is none)."""
        scopes = [scope] if isinstance(scope, str) else scope if isinstance(scope, list) else []
        seen = set()
        for element in scopes:
            if not isinstance(element, str):
                raise TokenRefused(f"Could not extract the '{self.scope_claim}' claim from the access token")
            if not element:
                raise TokenRefused(f"{self.scope_claim} value must be non-empty")
            if not element.strip():
                raise TokenRefused(f"{self.scope_claim} value must not contain only whitespace")
            if element.strip() in seen:
                raise TokenRefused(f"{self.scope_claim} value must not contain duplicates - {element.strip()} "
                                   "already present")
            seen.add(element.strip())

    def _verify(self, header: dict, signed: bytes, signature_text: str) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

        alg = header.get("alg")
        if not isinstance(alg, str) or alg[:2] not in ("RS", "ES") or alg[2:] not in _HASHES:
            raise TokenRefused(f"Unsupported or missing JWT algorithm {alg!r}")
        kid = header.get("kid")
        key = self.keys.get(kid) if kid is not None else (next(iter(self.keys.values())) if len(self.keys) == 1
                                                          else None)
        if key is None:
            raise TokenRefused(f"No key with kid {kid!r} in the JWKS")
        try:
            signature = base64.urlsafe_b64decode(signature_text + "=" * (-len(signature_text) % 4))
        except (binascii.Error, ValueError):
            raise TokenRefused("malformed Base64 URL encoded signature") from None
        digest = getattr(hashes, _HASHES[alg[2:]])()
        try:
            if alg.startswith("RS") and isinstance(key, rsa.RSAPublicKey):
                key.verify(signature, signed, padding.PKCS1v15(), digest)
            elif alg.startswith("ES") and isinstance(key, ec.EllipticCurvePublicKey):
                half = len(signature) // 2
                if len(signature) % 2:
                    raise InvalidSignature()
                der = encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                           int.from_bytes(signature[half:], "big"))
                key.verify(der, signed, ec.ECDSA(digest))
            else:
                raise TokenRefused(f"The key {kid!r} is not for {alg}")
        except InvalidSignature:
            raise TokenRefused("The JWT signature does not match the JWKS key") from None
