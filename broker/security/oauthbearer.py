"""SASL/OAUTHBEARER (RFC 7628) with the rules of Kafka's unsecured-JWS validator
(OAuthBearerUnsecuredValidatorCallbackHandler), configured by the listener's JAAS
options: ``unsecuredValidatorPrincipalClaimName`` (sub), ``...ScopeClaimName`` (scope),
``...RequiredScope`` (space separated) and ``...AllowableClockSkewMs`` (0).

A token the validator refuses is answered, as Kafka answers it, with a JSON challenge
(``{"status":"invalid_token"}``); the client acknowledges it with a single 0x01 and is
then refused with that JSON as the message.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from broker.security.sasl_errors import SaslAuthenticationFailed, SaslRejected

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_SASL_NAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASL_NAME}))?,\x01(?P<pairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01", re.S)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class TokenRefused(Exception):
    """The validator's refusal; ``scope`` names the missing scope (insufficient_scope)."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


def _json_part(part: str) -> dict:
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenRefused("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(decoded)
    except (ValueError, UnicodeDecodeError):
        raise TokenRefused("malformed JSON") from None
    if not isinstance(value, dict):
        raise TokenRefused("malformed JSON")
    return value


def _number(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TokenRefused(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    return value


class UnsecuredValidator:
    def __init__(self, options: dict[str, str]) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub").strip() or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope").strip() or "scope"
        self.required_scope = options.get("unsecuredValidatorRequiredScope", "").split()
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0").strip() or "0"
        try:
            self.clock_skew_ms = int(skew)
        except ValueError:
            raise ValueError(f"Invalid value for unsecuredValidatorAllowableClockSkewMs: {skew}") from None
        if self.clock_skew_ms < 0:
            raise ValueError(f"Allowable clock skew must not be negative: {self.clock_skew_ms}")

    def validate(self, token: str, now_ms: int) -> tuple[str, int]:
        """(the principal name, the expiry in ms since the epoch), or TokenRefused."""
        if ".." in token:
            raise TokenRefused("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenRefused("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
        header, claims = _json_part(parts[0]), _json_part(parts[1])
        if header.get("alg") != "none":
            raise TokenRefused("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise TokenRefused("Unsecured JWS must not contain a digital signature")
        return self.check_claims(claims, now_ms)

    def check_claims(self, claims: dict, now_ms: int) -> tuple[str, int]:
        expiry = _number(claims, "exp")
        if expiry is None:
            raise TokenRefused("No expiration time in JWT")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenRefused(f"No principal name in JWT claim: {self.principal_claim}")
        issued_at = _number(claims, "iat")
        if issued_at is not None and 1000 * issued_at > now_ms + self.clock_skew_ms:
            raise TokenRefused(f"The Issued At value ({issued_at} seconds) was after the indicated time ({now_ms} ms) "
                               f"plus allowable clock skew ({self.clock_skew_ms} ms)")
        if now_ms - self.clock_skew_ms >= 1000 * expiry:
            raise TokenRefused(f"The indicated time ({now_ms} ms) minus allowable clock skew ({self.clock_skew_ms} ms) "
                               f"was on or after the Expiration Time value ({expiry} seconds)")
        if issued_at is not None and expiry <= issued_at:
            raise TokenRefused(f"The Expiration Time time ({expiry} seconds) was not after the Issued At time "
                               f"({issued_at} seconds)")
        scope = claims.get(self.scope_claim)
        granted = ({scope.strip()} if isinstance(scope, str) and scope.strip()
                   else {str(s).strip() for s in scope if str(s).strip()} if isinstance(scope, list) else set())
        for element in self.required_scope:
            if element not in granted:
                raise TokenRefused(f"The provided scope ({sorted(granted)}) was missing a required scope ({element}). "
                                   f" All required scope elements: {self.required_scope}",
                                   scope="[" + ", ".join(self.required_scope) + "]")
        return principal, round(expiry * 1000)


class OAuthBearerServer:
    mechanism = MECHANISM

    def __init__(self, validator: UnsecuredValidator) -> None:
        self._validator = validator
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_lifetime_ms: int | None = None
        self._error: str | None = None  # the JSON challenge sent, awaiting the client's 0x01
        self.refusal: str | None = None  # why the token was refused, for the log line

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise SaslAuthenticationFailed(self._error)
        self._error = None
        match = _INITIAL_RESPONSE.fullmatch(token.decode("utf-8", "replace"))
        if match is None:
            raise SaslRejected("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split("=", 1) for p in match["pairs"].split("\x01") if p)
        auth = pairs.get("auth")
        if auth is None:
            raise SaslRejected("Invalid OAUTHBEARER client first message: 'auth' not specified")
        auth_match = _AUTH.fullmatch(auth)
        if auth_match is None or auth_match["scheme"].lower() != "bearer":
            raise SaslRejected("Invalid scheme in OAUTHBEARER client first message")
        try:
            principal, expiry_ms = self._validator.validate(auth_match["token"], now_ms)
        except TokenRefused as e:
            self.refusal = str(e)
            status = "insufficient_scope" if e.scope is not None else "invalid_token"
            self._error = f'{{"status":"{status}"' + (f', "scope":"{e.scope}"' if e.scope is not None else "") + "}"
            return self._error.encode()
        authorization_id = match["authzid"]
        if authorization_id and authorization_id != principal:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authorization_id}) that is "
                f"different from the token's principal name ({principal})")
        self.authorization_id = principal
        self.credential_lifetime_ms = expiry_ms
        self.complete = True
        return b""
