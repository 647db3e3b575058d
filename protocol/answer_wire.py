"""The answer side of the wire, sans-IO: the answers handlers build, and their encoding
into response frames behind one encoder (``response_frame_encoder``).

``build`` turns a nested dict with Kafka's field names into the kio dataclass of a
version: fields the version lacks are dropped, fields it has but the dict omits take
their schema default (or a zero value). Millisecond ints become timedeltas/datetimes
where kio wants them. ``build`` + ``encode`` walk a message field by field through
kio's writers: per response, thousands of calls (phantom-type checks, one BytesIO write
per field). For the APIs every transaction or produce request touches, the encoder
compiles the response schema of one version, once, into a Python function that reads
the answer with ``build``'s rules and writes the bytes kio would write, packing runs of
fixed-size fields with one ``struct`` call. Anything a layout does not expect (a value
of another type, an out-of-range number, an unknown error code) makes it give up, and
the generic path answers instead. Under the tests (``EOSBROKER_CHECK_FIELDS=1``) every
response goes both ways and the bytes must be equal, so the whole suite checks the
layouts against kio.
"""

from __future__ import annotations

import datetime
import io
import os
import struct
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from importlib import import_module
from io import BytesIO
from typing import Any
from uuid import UUID

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_tagged_field
from kio.static.constants import EntityType

from protocol.kio_private import classify_field, EntityField, EntityTupleField, get_field_writer, get_tagged_field_default, is_optional, PrimitiveTupleField
from protocol.request_wire import request_class, write_unsigned_varint as _uvarint

ZERO_UUID = UUID(int=0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def decode_response(api_key: int, version: int, body: bytes | memoryview, offset: int = 0):
    message, _size = _reader(response_class(api_key, version))(body, offset)
    return message


def encode(message) -> bytes:
    buf = io.BytesIO()
    _writer(type(message))(buf, message)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# dict -> dataclass for any version


@cache
def _plan(cls: type) -> tuple:
    plan = []
    for f in fields(cls):
        if f.name.startswith("__"):
            continue
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityField):
            conv = ("entity", kind.type_)
        elif isinstance(kind, EntityTupleField):
            conv = ("entities", kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            conv = ("tuple", kafka_type)
        else:
            conv = ("value", kafka_type)
        has_default = f.default is not MISSING or f.default_factory is not MISSING  # type: ignore[misc]
        # kio drops Kafka's "_ms" suffix from time fields; accept Kafka's name too.
        alias = f.name + "_ms" if kafka_type in _TIME_TYPES else None
        plan.append((f.name, alias, conv, has_default, _zero(kafka_type, kind)))
    return tuple(plan)


_TIME_TYPES = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})


def _zero(kafka_type: str | None, kind) -> Any:
    if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
        return ()
    if isinstance(kind, EntityField):
        return None
    return {
        "bool": False,
        "string": "",
        "bytes": b"",
        "records": None,
        "uuid": ZERO_UUID,
        "error_code": ErrorCode.none,
        "timedelta_i32": datetime.timedelta(0),
        "timedelta_i64": datetime.timedelta(0),
        "datetime_i64": _EPOCH,
        "float64": 0.0,
    }.get(kafka_type, 0)


def _value(kafka_type: str | None, v: Any) -> Any:
    if v is None:
        return None
    if kafka_type == "error_code" and not isinstance(v, ErrorCode):
        return ErrorCode(v)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(v, int):
        return datetime.timedelta(milliseconds=v)
    if kafka_type == "datetime_i64" and isinstance(v, int):
        return _EPOCH + datetime.timedelta(milliseconds=v)
    return v


# kafka types whose dict values need converting; every other value is taken as it is
_CONVERTED = frozenset({"error_code", *_TIME_TYPES})


@cache
def _names_in_any_version(cls: type) -> frozenset[str]:
    """Field names that ``cls``'s namesake has in any version of its API."""
    api = api_key_map[cls.__api_key__]
    names: set[str] = set()
    for version in schema_name_map[api]:
        for entity_type in (EntityType.request, EntityType.response):
            module = import_module(schema_name_map[api][version][entity_type].split(":")[0])
            twin = getattr(module, cls.__name__, None)
            if twin is not None:
                names.update(p[0] for p in _plan(twin))
                names.update(p[1] for p in _plan(twin) if p[1])
    return frozenset(names)


# Checking for misspelt fields loads every version of a message: on under tests only.
CHECK_FIELD_NAMES = os.environ.get("EOSBROKER_CHECK_FIELDS") == "1"


def build(cls: type, data: dict[str, Any]):
    """Builds ``cls`` from ``data``; keys of other versions are ignored, unknown keys are a bug."""
    plan = _plan(cls)
    if CHECK_FIELD_NAMES and not data.keys() <= {n for p in plan for n in p[:2]}:
        unknown = set(data) - _names_in_any_version(cls)
        if unknown:
            raise KeyError(f"{cls.__name__} has no field {sorted(unknown)} in any version")
    kwargs = {}
    for name, alias, (kind, arg), has_default, zero in plan:
        if name in data:
            v = data[name]
        elif alias is not None and alias in data:
            v = data[alias]
        else:
            if not has_default:
                kwargs[name] = zero
            continue
        if kind == "value":
            kwargs[name] = _value(arg, v) if arg in _CONVERTED else v
        else:
            kwargs[name] = convert(kind, arg, v)
    return cls(**kwargs)


def convert(kind: str, arg: Any, v: Any) -> Any:
    """A dict value as ``build`` stores it in a field of this ``_plan`` kind."""
    if v is None:
        return None
    if kind == "value":
        return _value(arg, v) if arg in _CONVERTED else v
    if kind == "entity":
        return v if is_dataclass(v) else build(arg, v)
    if kind == "entities":
        return tuple(x if is_dataclass(x) else build(arg, x) for x in v)
    return tuple(_value(arg, x) for x in v) if arg in _CONVERTED else tuple(v)


def field_plan(cls: type, name: str) -> tuple:
    """``build``'s plan for one field of ``cls``: (name, alias, (kind, arg), has_default, zero)."""
    return next(p for p in _plan(cls) if p[0] == name)


def build_response(api_key: int, version: int, data: dict[str, Any]):
    return build(response_class(api_key, version), data)


def build_request(api_key: int, version: int, data: dict[str, Any]):
    return build(request_class(api_key, version), data)


def ms(value: datetime.timedelta | datetime.datetime | int | None) -> int | None:
    """kio's timedelta/datetime fields back to Kafka's milliseconds."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return (value - _EPOCH) // datetime.timedelta(milliseconds=1)


def answer_field(answer: Any, name: str) -> Any:
    """A field of a handler's answer as another node receives it (``Network.request(...,
    typed=False)``): the handler's dict, or the kio response a fault rule's error answer is."""
    return answer[name] if type(answer) is dict else getattr(answer, name)


# ---------------------------------------------------------------------------
# Response frames

_RESPONSE_HEAD = struct.Struct(">ii")  # size, correlation_id
_FLEXIBLE_RESPONSE_HEAD = struct.Struct(">iiB")  # size, correlation_id, no tagged fields


class EncodedBody(bytes):
    """A response body a handler gives already encoded (an answer that is the same for
    every request, kept from the first): framed as is, after the correlation id."""

    __slots__ = ()


def encode_response_frame(correlation_id: int, flexible_header: bool, body: bytes) -> bytes:
    """Size prefix + response header (v0, or v1 with empty tagged fields) + body.

    One concatenation: the body (a Fetch answer can be a megabyte of records) is
    copied once."""
    if flexible_header:
        return _FLEXIBLE_RESPONSE_HEAD.pack(5 + len(body), correlation_id, 0) + body
    return _RESPONSE_HEAD.pack(4 + len(body), correlation_id) + body


def response_head_size(flexible_header: bool) -> int:
    """The bytes before a response's body: size prefix and response header."""
    return _FLEXIBLE_RESPONSE_HEAD.size if flexible_header else _RESPONSE_HEAD.size


def fill_response_head(frame: bytearray, correlation_id: int, flexible_header: bool) -> None:
    """Writes size prefix and response header into the room a body was written after
    (``response_head_size`` bytes), so the body is not copied into a frame."""
    if flexible_header:
        _FLEXIBLE_RESPONSE_HEAD.pack_into(frame, 0, len(frame) - 4, correlation_id, 0)
    else:
        _RESPONSE_HEAD.pack_into(frame, 0, len(frame) - 4, correlation_id)


# ---------------------------------------------------------------------------
# The compiled layouts

# Produce, Fetch, FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
# EndTxn, TxnOffsetCommit: what producers and transactions hit per record batch or per
# transaction. Not Metadata: asked rarely, and compiling its layout on the first
# request would lengthen start-up to the first Metadata answer.
HOT_APIS = frozenset({0, 1, 10, 22, 24, 25, 26, 28})

_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B", "uint16": "H", "uint32": "I",
          "uint64": "Q", "float64": "d", "bool": "?", "error_code": "h", "timedelta_i32": "i",
          "timedelta_i64": "q", "datetime_i64": "q"}
_ERROR_CODES = frozenset(int(c) for c in ErrorCode)
_MS = datetime.timedelta(milliseconds=1)


class GiveUp(Exception):
    """A value the layout does not handle: the generic path answers instead."""


def _error_code(v) -> int:
    if v.__class__ is ErrorCode or (v.__class__ is int and v in _ERROR_CODES):
        return v
    raise GiveUp(f"error code {v!r}")


def _timedelta_ms(v) -> int:
    if v.__class__ is int:
        return v
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)  # as kio's writer
    raise GiveUp(f"duration {v!r}")


def _datetime_ms(v) -> int:
    if v.__class__ is int:
        return v
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1000)
    raise GiveUp(f"timestamp {v!r}")


def _uuid_bytes(v) -> bytes:
    if v is None:
        return bytes(16)
    if isinstance(v, UUID):
        return v.bytes
    raise GiveUp(f"uuid {v!r}")


def _scalar(kafka_type: str, optional: bool, var: str) -> str:
    """The expression that turns a dict value into what struct packs: the usual types
    pass inline, anything else goes through the helper that converts it or gives up."""
    if kafka_type == "error_code":
        return f"({var} if {var}.__class__ is _ErrorCode or ({var}.__class__ is int and {var} in _ERROR_CODES)" \
               f" else _error_code({var}))"
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return f"({var} if {var}.__class__ is int else _timedelta_ms({var}))"
    if kafka_type == "datetime_i64":
        converted = f"{var} if {var}.__class__ is int else _datetime_ms({var})"
        return f"(-1 if {var} is None else {converted})" if optional else f"({converted})"
    return var


def _packed_default(kafka_type: str | None, default: Any) -> Any:
    """A time field's default as the milliseconds it packs to: converted once, here."""
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(default, datetime.timedelta):
        return _timedelta_ms(default)
    if kafka_type == "datetime_i64" and isinstance(default, datetime.datetime):
        return _datetime_ms(default)
    return default


def _default(f, kind) -> Any:
    """What ``build`` puts in a field the dict leaves out, in the dataclass's terms."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return _zero(f.metadata.get("kafka_type"), kind)


class _Compiler:
    """Writes one ``_w_<n>(d, buf)`` function per entity class into ``lines``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "_GiveUp": GiveUp, "_MISSING": MISSING, "_uvarint": _uvarint, "_error_code": _error_code,
            "_timedelta_ms": _timedelta_ms, "_datetime_ms": _datetime_ms, "_ErrorCode": ErrorCode,
            "_ERROR_CODES": _ERROR_CODES, "_uuid_bytes": _uuid_bytes, "_dict": dict,
            "_kio_entity": self._kio_entity,
        }
        self.names: dict[type, str] = {}

    @staticmethod
    def _kio_entity(cls: type, v, buf: bytearray, nullable: bool) -> None:
        """A nested value that is already a dataclass: kio writes it, as build keeps it."""
        if not is_dataclass(v):
            raise GiveUp(f"{cls.__name__} given as {type(v).__name__}")
        out = BytesIO()
        entity_writer(cls, nullable=nullable)(out, v)
        buf += out.getvalue()

    def const(self, value: Any) -> str:
        name = f"_c{len(self.env)}"
        self.env[name] = value
        return name

    def entity(self, cls: type) -> str:
        if cls in self.names:
            return self.names[cls]
        name = self.names[cls] = f"_w_{len(self.names)}"
        flexible = bool(cls.__flexible__)
        body: list[str] = ["g = d.get"]
        pending: list[tuple[str, str]] = []  # fixed-size fields not yet packed: (struct code, expression)
        tagged = []

        def pack_pending() -> None:
            if pending:
                s = self.const(struct.Struct(">" + "".join(code for code, _ in pending)))
                body.append(f"buf += {s}.pack({', '.join(e for _, e in pending)})")
                pending.clear()

        for i, f in enumerate(fields(cls)):
            kind = classify_field(f)
            if "tag" in f.metadata:
                tagged.append((f, kind))
                continue
            kafka_type = f.metadata.get("kafka_type")
            alias = f.name + "_ms" if kafka_type in _TIME_TYPES else None
            default = self.const(_packed_default(kafka_type, _default(f, kind)))
            var = f"v{i}"
            body.append(f"{var} = g({f.name!r}, _MISSING)")
            if alias is not None:
                body.append(f"if {var} is _MISSING: {var} = g({alias!r}, _MISSING)")
            body.append(f"if {var} is _MISSING: {var} = {default}")
            optional = is_optional(f)
            if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
                pack_pending()
                self.array(body, var, kind, kafka_type, flexible)
            elif isinstance(kind, EntityField):
                pack_pending()
                self.nested(body, var, kind.type_, optional, indent="")
            elif kafka_type in _FIXED:
                value = _scalar(kafka_type, optional, var)
                if optional and value == var:
                    raise NotImplementedError(f"nullable {kafka_type} in {cls.__name__}")
                pending.append((_FIXED[kafka_type], value))
            else:
                pack_pending()
                self.variable(body, var, kafka_type, optional, flexible, indent="")
        pack_pending()
        if flexible:
            self.tags(body, cls, tagged)
        self.lines.append(f"def {name}(d, buf):")
        self.lines.append("    if d.__class__ is not _dict: return _kio_entity(" + self.const(cls) + ", d, buf, False)")
        self.lines.extend("    " + line for line in body)
        return name

    def nested(self, body: list[str], var: str, cls: type, optional: bool, indent: str) -> None:
        writer = self.entity(cls)
        if optional:
            body.append(f"{indent}if {var} is None: buf.append(0xFF)")
            body.append(f"{indent}elif {var}.__class__ is not _dict: _kio_entity({self.const(cls)}, {var}, buf, True)")
            body.append(f"{indent}else:")
            body.append(f"{indent}    buf.append(1)")
            body.append(f"{indent}    {writer}({var}, buf)")
        else:
            body.append(f"{indent}{writer}({var}, buf)")

    def variable(self, body: list[str], var: str, kafka_type: str, optional: bool, flexible: bool, indent: str) -> None:
        """string, bytes, records and uuid: kio's writers for them, inlined."""
        if kafka_type == "uuid":
            body.append(f"{indent}buf += _uuid_bytes({var})")
            return
        if kafka_type not in ("string", "bytes", "records"):
            raise NotImplementedError(kafka_type)
        null = "buf.append(0)" if flexible else ("buf += b'\\xff\\xff'" if kafka_type == "string"
                                                 else "buf += b'\\xff\\xff\\xff\\xff'")
        body.append(f"{indent}if {var} is None:")
        body.append(f"{indent}    {null if optional else 'raise _GiveUp(' + repr('null ' + kafka_type) + ')'}")
        body.append(f"{indent}else:")
        if flexible:  # kio's compact writer takes str or bytes
            body.append(f"{indent}    if {var}.__class__ is str: {var} = {var}.encode()")
        elif kafka_type == "string":
            body.append(f"{indent}    {var} = {var}.encode()")
        if flexible:
            self.compact_length(body, f"len({var}) + 1", indent + "    ")
        elif kafka_type == "string":
            body.append(f"{indent}    buf += {self.const(struct.Struct('>h'))}.pack(len({var}))")
        else:
            body.append(f"{indent}    buf += {self.const(struct.Struct('>i'))}.pack(len({var}))")
        body.append(f"{indent}    buf += {var}")

    @staticmethod
    def compact_length(body: list[str], expression: str, indent: str) -> None:
        """A compact length prefix: the one-byte varint (< 128) appended without a call."""
        body.append(f"{indent}_n = {expression}")
        body.append(f"{indent}if _n < 0x80: buf.append(_n)")
        body.append(f"{indent}else: _uvarint(buf, _n)")

    def array(self, body: list[str], var: str, kind, kafka_type: str | None, flexible: bool) -> None:
        length = self.const(struct.Struct(">i"))
        body.append(f"if {var} is None:")
        body.append("    buf.append(0)" if flexible else f"    buf += {length}.pack(-1)")
        body.append("else:")
        if flexible:
            self.compact_length(body, f"len({var}) + 1", "    ")
        else:
            body.append(f"    buf += {length}.pack(len({var}))")
        item = f"{var}_item"
        body.append(f"    for {item} in {var}:")
        if isinstance(kind, EntityTupleField):
            body.append(f"        {self.entity(kind.type_)}({item}, buf)")
        elif kafka_type in _FIXED:
            s = self.const(struct.Struct(">" + _FIXED[kafka_type]))
            body.append(f"        buf += {s}.pack({_scalar(kafka_type, False, item)})")
        else:
            self.variable(body, item, kafka_type, False, flexible, indent="        ")

    def tags(self, body: list[str], cls: type, tagged: list) -> None:
        """Tagged fields are rare and small: kio's own rule (skip a default value) and writers."""
        if not tagged:
            body.append("buf.append(0)")
            return
        plan = []
        for f, kind in sorted(tagged, key=lambda fk: fk[0].metadata["tag"]):
            name, alias, conversion, _, _ = field_plan(cls, f.name)
            writer = get_field_writer(f, flexible=True, is_request_header=False, is_tag=True)
            absent = getattr(build(cls, {}), f.name)
            plan.append((name, alias, conversion, f.metadata["tag"], writer, f.default, get_tagged_field_default(f),
                         absent))
        call = f"_tagged({self.const(tuple(plan))}, d, buf)"
        if all(_skipped(absent, default, implicit) for *_, default, implicit, absent in plan):
            names = [n for name, alias, *_ in plan for n in (name, alias) if n is not None]
            body.append(f"if {' and '.join(f'{n!r} not in d' for n in names)}: buf.append(0)")
            body.append(f"else: {call}")
        else:
            body.append(call)
        self.env["_tagged"] = _tagged


def _skipped(value, default, implicit) -> bool:
    """kio leaves a tagged field out when it holds its default."""
    return value == default or (default is MISSING and value == implicit)


def _tagged(plan: tuple, d: dict, buf: bytearray) -> None:
    """kio's tagged section: the fields whose value is not their default, by tag."""
    written = []
    for name, alias, (kind, arg), tag, writer, default, implicit, absent in plan:
        if name in d:
            value = convert(kind, arg, d[name])
        elif alias is not None and alias in d:
            value = convert(kind, arg, d[alias])
        else:
            value = absent
        if _skipped(value, default, implicit):
            continue
        out = BytesIO()
        write_tagged_field(out, tag, writer, value)
        written.append(out.getvalue())
    _uvarint(buf, len(written))
    for field in written:
        buf += field


@cache
def _compiled(cls: type):
    compiler = _Compiler()
    name = compiler.entity(cls)
    source = "\n".join(compiler.lines)
    exec(compile(source, f"<layout {cls.__module__}.{cls.__name__}>", "exec"), compiler.env)
    return compiler.env[name]


@cache
def _response_writer(api_key: int, version: int):
    """The compiled layout writer ``(data, buf)`` of ``api_key``'s response in ``version``,
    or None for APIs answered the generic way."""
    if api_key not in HOT_APIS:
        return None
    try:
        return _compiled(response_class(api_key, version))
    except NotImplementedError:  # a field type no layout writes: the generic path serves it
        return None


@cache
def encoder(api_key: int, version: int):
    """The layout of ``api_key``'s response in ``version`` (a function dict -> bytes), or
    None for APIs answered the generic way."""
    write = _response_writer(api_key, version)
    if write is None:
        return None

    def encode(data: dict) -> bytearray:
        buf = bytearray()
        write(data, buf)
        return buf

    return encode


@cache
def response_frame_encoder(api_key: int, version: int, flexible_header: bool):
    """``encode(correlation_id, data)``: the whole response frame for a handler's dict,
    its body by the layout when the API has one, else (or when the layout gives up) by
    build + kio. Looked up once per API version: the request path calls it for every
    response. The layout writes the body after room for the size and header, so the
    body (a Fetch answer can be a megabyte of records) is not copied again into a frame."""
    def body_by_kio(data: dict) -> bytes:
        return encode(build_response(api_key, version, data))

    def generic(correlation_id: int, data: dict) -> bytes:
        return encode_response_frame(correlation_id, flexible_header, body_by_kio(data))

    write = _response_writer(api_key, version)
    if write is None:
        return generic
    head = response_head_size(flexible_header)

    def by_layout(correlation_id: int, data: dict) -> bytearray | bytes:
        frame = bytearray(head)
        try:
            write(data, frame)
        except (GiveUp, struct.error, TypeError, AttributeError, OverflowError):
            return generic(correlation_id, data)
        if CHECK_FIELD_NAMES:
            expected = body_by_kio(data)
            if expected != frame[head:]:
                raise AssertionError(f"layout of api {api_key} v{version} wrote {frame[head:]!r}, kio {expected!r}")
        fill_response_head(frame, correlation_id, flexible_header)
        return frame

    return by_layout


def encode_response(api_key: int, version: int, data: dict) -> bytes:
    """The response body for a handler's dict (the frame of ``response_frame_encoder``
    after its size and header)."""
    return bytes(response_frame_encoder(api_key, version, False)(0, data)[response_head_size(False):])
