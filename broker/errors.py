"""Kafka error codes by the names Kafka uses (CORRUPT_MESSAGE, NOT_COORDINATOR, ...)."""

from kio.schema.errors import ErrorCode

NONE = ErrorCode.none


def code(name: str) -> ErrorCode:
    return ErrorCode[name.lower()]
