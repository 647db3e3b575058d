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

from protocol.kio_private import classify_field, EntityField, EntityTupleField, is_optional, PrimitiveTupleField

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


# Each schema's walk is compiled once into straight-line Python: the plan's steps become
# statements, the one-byte varint of a flexible length is read inline, and an array of
# fixed-size values is skipped in one step. Refusals and their messages are the walk's.

def _length_code(var: str, flexible: bool, wide: bool) -> list[str]:
    """Reads a length or count into ``var`` (-1 for null), as ``_length`` does: a
    fixed-size prefix or a varint of one byte, or two (a produced batch's length), without a call."""
    if not flexible:
        size = 4 if wide else 2
        return [f"if pos + {size} > end: raise ShapeError('length prefix runs past the end of the request')",
                f"{var} = {'_int32' if wide else '_int16'}(buf, pos)[0]",
                f"if {var} < -1: raise ShapeError(f'negative length {{{var}}}')",
                f"pos += {size}"]
    return [f"if pos < end and buf[pos] < 0x80: {var} = buf[pos] - 1; pos += 1",
            f"elif pos + 1 < end and buf[pos + 1] < 0x80: {var} = (buf[pos] & 0x7F | buf[pos + 1] << 7) - 1; pos += 2",
            f"else: {var}, pos = _length(buf, pos, end, True, {wide})"]


def _value_code(kafka_type: str, flexible: bool, nullable: bool) -> list[str]:
    size = _FIXED.get(kafka_type)
    if size is not None:
        return [f"pos += {size}", f"if pos > end: raise ShapeError({kafka_type + ' runs past the end of the request'!r})"]
    lines = _length_code("n", flexible, wide=kafka_type != "string")
    if not nullable:
        lines.append(f"if n < 0: raise ShapeError({'non-nullable ' + kafka_type + ' was serialized as null'!r})")
    lines += ["if n > 0: pos += n",
              f"if pos > end: raise ShapeError({kafka_type + ' runs past the end of the request'!r})"]
    return lines


class _Compiler:
    def __init__(self) -> None:
        self.env: dict = {"ShapeError": ShapeError, "_length": _length, "_uvarint": _uvarint,
                          "_int16": _INT16.unpack_from, "_int32": _INT32.unpack_from}
        self.names: dict[type, str] = {}
        self.sources: list[str] = []

    def walk(self, cls: type) -> str:
        if cls in self.names:
            return self.names[cls]
        name = self.names[cls] = f"_walk_{len(self.names)}"
        flexible, steps = _plan(cls)
        body = ["if depth > 16: raise ShapeError('structures nested too deep')"]
        for kind, arg, nullable in steps:
            if kind == "skip":
                body += [f"pos += {arg}", "if pos > end: raise ShapeError('request truncated')"]
            elif kind == "value":
                body += _value_code(arg, flexible, nullable)
            elif kind == "entity" and nullable:  # an int8 before it: -1 for null (as kio reads it)
                body += ["if pos >= end: raise ShapeError('request truncated')",
                         "pos += 1",
                         f"if buf[pos - 1] < 0x80: pos = {self.walk(arg)}(buf, pos, end, depth + 1)"]
            elif kind == "entity":
                body.append(f"pos = {self.walk(arg)}(buf, pos, end, depth + 1)")
            else:
                body += _length_code("count", flexible, wide=True)
                if not nullable:  # Kafka: "non-nullable field was serialized as null"
                    body.append("if count < 0: raise ShapeError('non-nullable array was serialized as null')")
                body.append("if count > end - pos:"
                            " raise ShapeError(f'array of {count} elements in {end - pos} remaining bytes')")
                if kind == "entities":
                    body += ["for _ in range(count):", f"    pos = {self.walk(arg)}(buf, pos, end, depth + 1)"]
                elif arg in _FIXED:  # every element the same size: one step
                    body += [f"if count > 0: pos += count * {_FIXED[arg]}",
                             f"if pos > end: raise ShapeError({arg + ' runs past the end of the request'!r})"]
                else:
                    body += ["for _ in range(count):"] + ["    " + line for line in _value_code(arg, flexible, True)]
        if flexible:
            body += [
                "if pos < end and buf[pos] == 0: pos += 1  # no tagged fields: the usual case",
                "else:",
                "    tags, pos = _uvarint(buf, pos, end)",
                "    if tags > end - pos: raise ShapeError(f'{tags} tagged fields in {end - pos} remaining bytes')",
                "    for _ in range(tags):",
                "        _tag, pos = _uvarint(buf, pos, end)",
                "        size, pos = _uvarint(buf, pos, end)",
                "        pos += size",
                "        if pos > end: raise ShapeError('tagged field runs past the end of the request')",
            ]
        body.append("return pos")
        self.sources.append(f"def {name}(buf, pos, end, depth):\n" + "\n".join("    " + line for line in body))
        return name


@cache
def _compiled(cls: type):
    compiler = _Compiler()
    name = compiler.walk(cls)
    exec(compile("\n\n".join(compiler.sources), f"<shape walk {cls.__module__}.{cls.__name__}>", "exec"), compiler.env)
    return compiler.env[name]


def walker(cls: type):
    """``cls``'s walk, called as ``walk(buf, offset, len(buf), 0)`` (what ``check`` does)."""
    return _compiled(cls)


def check(cls: type, buf, offset: int = 0) -> None:
    """Raises ShapeError unless every length and count in ``buf[offset:]`` fits."""
    _compiled(cls)(buf, offset, len(buf), 0)
