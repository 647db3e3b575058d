"""How a SASL login fails: a mechanism refuses a client as Kafka's SaslServer
implementations do, and the exchange ends the connection as Kafka's authenticator does."""


class SaslAuthenticationFailed(Exception):
    """Kafka's SaslAuthenticationException: the client is told this very message."""


class SaslRejected(Exception):
    """Kafka's SaslException: the message may say whether the user exists, so the client
    is told only that its credentials were invalid; the message goes to the log."""


class SaslFailure(Exception):
    """The connection ends. ``authentication``: Kafka's AuthenticationException (logged as a
    failed authentication, closed after the failed-authentication delay, ``answer`` sent
    just before); otherwise closed at once, unanswered. ``answer`` is the response (a dict)
    to the request being handled, of its API's answer type; ``error_code`` asks for the request's own error response
    instead (ILLEGAL_SASL_STATE to a request that came mid-exchange)."""

    def __init__(self, message: str, authentication: bool = True, answer=None,
                 error_code: int | None = None) -> None:
        super().__init__(message)
        self.authentication = authentication
        self.answer = answer
        self.error_code = error_code  # for an error answer to a request other than SaslAuthenticate
        self.frame: bytes | None = None  # the answer, encoded by the server


class SessionExpired(Exception):
    """A request on a connection whose SASL session ended without a re-authentication
    (KIP-368): the connection is closed, unanswered, as Kafka closes it (a client without
    re-authentication support then reconnects and logs in again)."""
