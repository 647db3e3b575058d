"""SASL/PLAIN (RFC 4616) against the users of the listener's JAAS options
(``user_<name>="<password>"``), as Kafka's PlainSaslServer checks them."""

from __future__ import annotations

import hmac

from broker.security.sasl_errors import SaslAuthenticationFailed

MECHANISM = "PLAIN"
LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def users_of(options: dict[str, str]) -> dict[str, str]:
    return {key[len("user_"):]: value for key, value in options.items() if key.startswith("user_")}


class PlainServer:
    mechanism = MECHANISM
    credential_lifetime_ms = None

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        # authzid NUL authcid NUL passwd; a fourth NUL-separated part is refused as a count of 4
        parts = token.decode("utf-8", "replace").split("\0", 3)
        if len(parts) != 3:
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authorization_id, username, password = parts
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compared in constant time, also for an unknown user, so timing tells no names apart
        matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if expected is None or not matches:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        self.authorization_id = username
        self.complete = True
        return b""
