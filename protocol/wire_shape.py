"""Checks that a request body's lengths and counts fit in the bytes that arrived, before
kio's native decoder sees it.

kio reserves memory for an array from its declared count before reading the elements,
and a failed reservation aborts the process: one frame declaring a few billion elements
would take the broker down. This walk follows the same schema (kio's dataclasses), reads
only the length prefixes and skips fixed-size fields, and refuses a body whose length,
count or tagged field runs past its end, or that is null where the schema says it
cannot be (as Kafka's parser does; handlers then never see None there). It builds nothing, so its cost is a few
operations per field; record batches are skipped whole.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from protocol.framing import FrameError, read_unsigned_varint

_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16, "error_code": 2}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class ShapeError(ValueError):
    pass


def _uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # the usual one-byte case, without a call
        return buf[pos], pos + 1
    try:
        return read_unsigned_varint(buf, pos, end)
    except FrameError as e:
        raise ShapeError(f"{e} in the request") from None


def _length(buf, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """(length or -1 for null, position after the prefix)."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    fmt = _INT32 if wide else _INT16
    if pos + fmt.size > end:
        raise ShapeError("length prefix runs past the end of the request")
    n = fmt.unpack_from(buf, pos)[0]
    if n < -1:
        raise ShapeError(f"negative length {n}")
    return n, pos + fmt.size


def _skip_value(kafka_type: str, buf, pos: int, end: int, flexible: bool, nullable: bool = True) -> int:
    size = _FIXED.get(kafka_type)
    if size is None:  # string, bytes, records
        n, pos = _length(buf, pos, end, flexible, wide=kafka_type != "string")
        if n < 0 and not nullable:
            raise ShapeError(f"non-nullable {kafka_type} was serialized as null")
        size = max(n, 0)
    pos += size
    if pos > end:
        raise ShapeError(f"{kafka_type} runs past the end of the request")
    return pos


@cache
def _plan(cls: type) -> tuple[bool, tuple]:
    """(flexible, steps); runs of fixed-size fields are merged into one ("skip", n) step."""
    steps: list = []
    for f in fields(cls):
        if f.name.startswith("__") or "tag" in f.metadata:
            continue  # tagged fields are skipped by size in the tagged section
        kind = classify_field(f)
        nullable = is_optional(f)
        if isinstance(kind, EntityField):
            steps.append(("entity", kind.type_, nullable))
        elif isinstance(kind, EntityTupleField):
            steps.append(("entities", kind.type_, nullable))
        elif isinstance(kind, PrimitiveTupleField):
            steps.append(("values", f.metadata["kafka_type"], nullable))
        elif f.metadata["kafka_type"] in _FIXED:
            size = _FIXED[f.metadata["kafka_type"]]
            if steps and steps[-1][0] == "skip":
                size += steps.pop()[1]
            steps.append(("skip", size, False))
        else:
            steps.append(("value", f.metadata["kafka_type"], nullable))
    return bool(getattr(cls, "__flexible__", False)), tuple(steps)


def _walk(cls: type, buf, pos: int, end: int, depth: int) -> int:
    if depth > 16:
        raise ShapeError("structures nested too deep")
    flexible, steps = _plan(cls)
    for kind, arg, nullable in steps:
        if kind == "skip":
            pos += arg
            if pos > end:
                raise ShapeError("request truncated")
        elif kind == "value":
            pos = _skip_value(arg, buf, pos, end, flexible, nullable)
        elif kind == "entity":
            pos = _walk(arg, buf, pos, end, depth + 1)
        else:
            count, pos = _length(buf, pos, end, flexible, wide=True)
            if count < 0 and not nullable:  # Kafka: "non-nullable field was serialized as null"
                raise ShapeError("non-nullable array was serialized as null")
            if count > end - pos:  # every element takes at least one byte
                raise ShapeError(f"array of {count} elements in {end - pos} remaining bytes")
            for _ in range(count):
                if kind == "entities":
                    pos = _walk(arg, buf, pos, end, depth + 1)
                else:
                    pos = _skip_value(arg, buf, pos, end, flexible)
    if flexible:
        tags, pos = _uvarint(buf, pos, end)
        if tags > end - pos:
            raise ShapeError(f"{tags} tagged fields in {end - pos} remaining bytes")
        for _ in range(tags):
            _tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            pos += size
            if pos > end:
                raise ShapeError("tagged field runs past the end of the request")
    return pos


def check(cls: type, buf, offset: int = 0) -> None:
    """Raises ShapeError unless every length and count in ``buf[offset:]`` fits."""
    _walk(cls, buf, offset, len(buf), 0)
