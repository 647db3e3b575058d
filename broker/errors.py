"""Kafka error codes by the names Kafka uses (CORRUPT_MESSAGE, NOT_COORDINATOR, ...),
and the violation that ends a connection instead of an answer."""

from kio.schema.errors import ErrorCode

NONE = ErrorCode.none


def code(name: str) -> ErrorCode:
    return ErrorCode[name.lower()]


class ProtocolViolation(Exception):
    """The request cannot be answered; the connection is closed with a log line."""
