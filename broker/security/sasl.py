"""One connection's SASL authentication, sans-IO, as Kafka's SaslServerAuthenticator runs it.

The server feeds it what arrives before authentication completes (and during a
KIP-368 re-authentication) and does what it answers: a reply, or ``SaslFailure``,
which says whether the connection closes at once or after
``connection.failed.authentication.delay.ms`` with a last answer.

States: a client first sends ApiVersions (optional, once) and SaslHandshake, which names
the mechanism. Handshake v1+ wraps each token in a SaslAuthenticate request; after a v0
handshake the tokens travel bare, each with only its 4-byte length. Any other request
before completion closes the connection (Kafka: "Unexpected Kafka request of type ...").

Re-authentication (KIP-368): when the session has a lifetime (``connections.max.reauth.ms``
> 0, or an OAUTHBEARER token's expiry), a client that sent SaslAuthenticate v1+ may send
SaslHandshake again on the authenticated connection, at most once a second, with the same
mechanism and ending as the same principal. A connection whose session has expired is
closed at its next request other than that handshake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.security.sasl_errors import SaslAuthenticationFailed, SaslFailure, SaslRejected
from protocol.answer_wire import answer_type

if TYPE_CHECKING:
    from broker.security.sasl_settings import ListenerSasl

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
HandshakeAnswer, AuthenticateAnswer = answer_type(SASL_HANDSHAKE), answer_type(SASL_AUTHENTICATE)
MIN_REAUTH_INTERVAL_MS = 1000

INITIAL = "INITIAL_REQUEST"
HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS_REQUEST"
HANDSHAKE = "HANDSHAKE_REQUEST"
AUTHENTICATE = "AUTHENTICATE"
COMPLETE = "COMPLETE"
FAILED = "FAILED"
REAUTH_HANDSHAKE = "REAUTH_PROCESS_HANDSHAKE"
REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"


class SaslExchange:
    def __init__(self, settings: "ListenerSasl") -> None:
        self.settings = settings
        self.state = INITIAL
        self.mechanism: str | None = None
        self.principal: str | None = None  # "User:<name>" once authenticated
        self.framed = False  # tokens in SaslAuthenticate requests (handshake v1+)
        self._server = None  # the mechanism's server for the exchange under way
        self.session_expiry: float | None = None  # monotonic seconds; None: the session never expires
        self.client_supports_reauth = False  # it sent SaslAuthenticate v1+
        self._previous: tuple[str, str] | None = None  # (mechanism, principal) while re-authenticating
        self._last_reauth_start: float | None = None
        self.failed_delay_s = settings.failed_delay_ms / 1000
        self.logins = 0  # authentications completed: the first, then re-authentications
        self.session_lifetime_ms = 0
        self.last_refusal: str | None = None  # why the validator refused a token (for the log line)

    @property
    def authenticating(self) -> bool:
        return self.state != COMPLETE

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    @property
    def expects_bare_token(self) -> bool:
        return self.state == AUTHENTICATE and not self.framed

    @property
    def _text(self) -> str:
        return "re-authentication" if self._previous is not None else "authentication"

    # -- before a request is decoded -------------------------------------------------

    def unparsable(self, reason: str) -> SaslFailure:
        if self.state == INITIAL:
            return SaslFailure("Invalid request, potential reasons: kafka client configured with the wrong security "
                               f"protocol, it does not support KIP-43 or it is not a kafka client. ({reason})",
                               authentication=False)
        return SaslFailure(reason, authentication=False)

    def admit(self, api_key: int, api_name: str) -> None:
        """Whether a request of ``api_key`` has a place now; SaslFailure if not."""
        state = self.state
        if state in (INITIAL, HANDSHAKE_OR_VERSIONS, HANDSHAKE, REAUTH_HANDSHAKE):
            if api_key not in (API_VERSIONS, SASL_HANDSHAKE):
                raise SaslFailure(f"Unexpected Kafka request of type {api_name} during SASL handshake.",
                                  authentication=False)
            if api_key == API_VERSIONS and state not in (INITIAL, HANDSHAKE_OR_VERSIONS):
                raise SaslFailure(f"Unexpected ApiVersions request received during SASL authentication state {state}",
                                  authentication=False)
        elif state == REAUTH_BAD_MECHANISM:
            self.state = FAILED
            raise SaslFailure(self._bad_mechanism)
        elif state == AUTHENTICATE and api_key != SASL_AUTHENTICATE:
            self.state = FAILED
            raise SaslFailure(f"Unexpected Kafka request of type {api_name} during SASL authentication.",
                              error_code=ILLEGAL_SASL_STATE)
        elif state in (FAILED, COMPLETE):
            raise SaslFailure(f"Unexpected Kafka request of type {api_name} in SASL state {state}",
                              authentication=False)

    # -- the requests ----------------------------------------------------------------

    def api_versions_answered(self) -> None:
        self.state = HANDSHAKE

    def handshake(self, mechanism: str, version: int):
        """The SaslHandshake answer; SaslFailure (UNSUPPORTED_SASL_MECHANISM) for a
        mechanism the listener does not enable."""
        if self.state == INITIAL:
            self.state = HANDSHAKE_OR_VERSIONS
        self.framed = version >= 1
        enabled = list(self.settings.mechanisms)
        if mechanism not in self.settings.servers:
            self.state = FAILED
            raise SaslFailure(f"Unsupported SASL mechanism {mechanism}",
                              answer=HandshakeAnswer(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled))
        if self._previous is not None and mechanism != self._previous[0]:
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self._previous[0]}'")
            self.state = REAUTH_BAD_MECHANISM
        else:
            self.mechanism = mechanism
            self._server = self.settings.servers[mechanism]()
            self.state = AUTHENTICATE
        return HandshakeAnswer(error_code=0, mechanisms=enabled)

    def authenticate(self, token: bytes, version: int, now_ms: int, monotonic: float):
        """The SaslAuthenticate answer to a token; SaslFailure with the failure answer."""
        if version > 0:
            self.client_supports_reauth = True
        try:
            reply, lifetime_ms = self._evaluate(token, now_ms, monotonic)
        except SaslAuthenticationFailed as e:
            detail = f"{e} ({self.last_refusal})" if self.last_refusal else str(e)
            raise SaslFailure(detail, answer=AuthenticateAnswer(error_code=SASL_AUTHENTICATION_FAILED, error_message=str(e),
                                                                auth_bytes=b"")) from None
        except SaslRejected as e:
            message = (f"Authentication failed during {self._text} due to invalid credentials with SASL mechanism "
                       f"{self.mechanism}")
            raise SaslFailure(f"{message}: {e}",
                              answer=AuthenticateAnswer(error_code=SASL_AUTHENTICATION_FAILED, error_message=message,
                                                         auth_bytes=b"")) from None
        return AuthenticateAnswer(error_code=0, error_message=None, auth_bytes=reply, session_lifetime_ms=lifetime_ms)

    def bare_token(self, token: bytes, now_ms: int, monotonic: float) -> bytes:
        """The bare reply to a bare token (after a v0 handshake); SaslFailure, unanswered."""
        try:
            reply, _ = self._evaluate(token, now_ms, monotonic)
        except SaslAuthenticationFailed as e:
            raise SaslFailure(str(e)) from None
        except SaslRejected as e:  # Kafka's SaslException is an IOException here: closed at once
            raise SaslFailure(f"{self.mechanism}: {e}", authentication=False) from None
        return reply

    def _evaluate(self, token: bytes, now_ms: int, monotonic: float) -> tuple[bytes, int]:
        server = self._server
        try:
            reply = server.evaluate(token, now_ms)
        except (SaslAuthenticationFailed, SaslRejected):
            self.state = FAILED
            raise
        self.last_refusal = getattr(server, "refusal", None)
        if not server.complete:
            return reply, 0
        principal = f"User:{server.authorization_id}"
        if self._previous is not None and principal != self._previous[1]:
            self.state = FAILED
            old, new = self._previous[1].split(":", 1), principal.split(":", 1)
            raise SaslAuthenticationFailed(f"Cannot change principals during re-authentication from "
                                           f"{old[0]}.{old[1]}: {new[0]}.{new[1]}")
        lifetime_ms = self._session_lifetime_ms(server.credential_lifetime_ms, now_ms)
        self.session_expiry = None if lifetime_ms is None else monotonic + lifetime_ms / 1000
        self.session_lifetime_ms = lifetime_ms or 0
        self.logins += 1
        self.principal = principal
        self.state = COMPLETE
        self._previous = None
        self._server = None
        return reply, lifetime_ms or 0

    def _session_lifetime_ms(self, credential_expiry_ms: int | None, now_ms: int) -> int | None:
        max_reauth_ms = self.settings.max_reauth_ms.get(self.mechanism) or 0
        if credential_expiry_ms is None and max_reauth_ms <= 0:
            return None
        candidates = [credential_expiry_ms - now_ms] if credential_expiry_ms is not None else []
        if max_reauth_ms > 0:
            candidates.append(max_reauth_ms)
        return max(0, min(candidates))

    # -- on an authenticated connection ----------------------------------------------

    def expired(self, monotonic: float) -> bool:
        return self.session_expiry is not None and monotonic >= self.session_expiry

    def begin_reauthentication(self, monotonic: float) -> bool:
        """A SaslHandshake on the authenticated connection: True when it starts a
        re-authentication (the exchange then handles it), False when it goes to its
        handler like any request (which answers ILLEGAL_SASL_STATE)."""
        if self.state != COMPLETE or self.session_expiry is None:
            return False
        if self._last_reauth_start is not None and monotonic - self._last_reauth_start < MIN_REAUTH_INTERVAL_MS / 1000:
            return False
        self._last_reauth_start = monotonic
        self._previous = (self.mechanism, self.principal)
        self.state = REAUTH_HANDSHAKE
        return True
