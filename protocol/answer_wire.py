"""The answer side of the wire, sans-IO: the answers handlers build, and their encoding
into response frames behind one encoder (``response_frame_encoder``).

Handlers build an answer of their API's ``answer_type``: an immutable type made from
kio's schemas, whose fields are the union over the API's versions, so a misspelt or
missing field fails where the answer is built. For the APIs every transaction or produce
request touches, the encoder compiles the response schema of one version, once, into a
Python function that reads the answer's attributes and writes the bytes kio would
write, packing runs of fixed-size fields with one ``struct`` call. Anything else (an
API without a layout, a value a layout does not expect, a kio message) goes the generic
way: ``build`` turns it into the kio dataclass of the version (fields the version lacks
are dropped, millisecond ints become timedeltas/datetimes where kio wants them) and
kio's writers encode it. A dict answer is refused (``build`` takes dicts for requests
only). Under the tests (``EOSBROKER_CROSS_CHECK_LAYOUTS=1``) every answer a layout
writes is written by kio too and the bytes must be equal, so the whole suite checks the
layouts against kio.

The requests nodes send each other through the in-process network, and those the
broker's tools send as a client (protocol/client.py), are typed the same way:
``request_type`` makes them from the request schemas with the code that makes answer
types, and ``kio_request``, the one request encoder of both, refuses a dict (the client
takes one only for requests written by hand, in tests). Requests from clients are
decoded into kio's messages (request_wire).
"""

from __future__ import annotations

import datetime
import io
import os
import struct
from collections import namedtuple
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from io import BytesIO
from typing import Any, Callable
from uuid import UUID

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_tagged_field

from protocol import message_specs
from protocol.kio_private import classify_field, EntityField, EntityTupleField, get_field_writer, get_tagged_field_default, is_optional, PrimitiveTupleField
from protocol.request_wire import KAFKA_4_0, OWN_SCHEMA_APIS, kio_schema, own_schema, request_class, write_unsigned_varint as _uvarint

ZERO_UUID = UUID(int=0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def response_class(api_key: int, version: int) -> type:
    own = own_schema(api_key, version, "RESPONSES")
    return own if own is not None else kio_schema(api_key, version, "response")


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


# Under the tests every answer a layout writes is written by kio too, and the bytes must
# be equal: the whole suite checks the layouts against kio.
CROSS_CHECK_LAYOUTS = os.environ.get("EOSBROKER_CROSS_CHECK_LAYOUTS") == "1"


def build(cls: type, data):
    """Builds ``cls`` from ``data`` (a dict, or a message of an ``answer_type`` or
    ``request_type``); fields of other versions are ignored."""
    if data.__class__ is not dict:
        return _build_typed(cls, data)
    plan = _plan(cls)
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


_ABSENT = object()


def _build_typed(cls: type, message):
    """``build`` for a message of an ``answer_type`` or ``request_type``: its fields read by
    attribute (Kafka's names), without a dict in between."""
    kwargs = {}
    for name, attr, kind, arg, has_default, zero in _typed_plan(cls):
        v = getattr(message, attr, _ABSENT)
        if v is _ABSENT:
            if not has_default:
                kwargs[name] = zero
        elif kind is None or v is None:
            kwargs[name] = v
        elif kind == "value":
            kwargs[name] = _value(arg, v)
        elif kind == "entities":
            kwargs[name] = tuple(x if x.__class__ is arg else build(arg, x) for x in v)
        elif kind == "entity":
            kwargs[name] = v if v.__class__ is arg else build(arg, v)
        else:
            kwargs[name] = convert(kind, arg, v)
    return cls(**kwargs)


@cache
def _typed_plan(cls: type) -> tuple:
    """``_plan`` by the names messages of the types hold, kind None for a value taken as is."""
    return tuple((name, alias or name, None if kind == "value" and arg not in _CONVERTED else kind, arg, has_default,
                  zero) for name, alias, (kind, arg), has_default, zero in _plan(cls))


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
    """kio's request of ``version`` from a dict of field names (requests written by hand,
    in tests and the fuzzer): fields of other versions are left out, a name no served
    version has at that place raises TypeError."""
    check_request_names(api_key, data)
    return build(request_class(api_key, version), data)


def check_request_names(api_key: int, data: dict[str, Any]) -> None:
    """Raises TypeError for a key of ``data``, at any depth, that no served version of
    the API's request has there (Kafka's name, or kio's without a time field's ``_ms``):
    a misspelt field fails where it is written instead of being dropped."""
    top, structs = _request_names(api_key)
    todo = [(top, data, top)]
    while todo:
        struct, value, where = todo.pop()
        names, nested = structs[struct]
        for key, v in value.items():
            name = key if key in names else key + "_ms"
            if name not in names:
                raise TypeError(f"{where} has no field {key!r} in any version served (its fields: "
                                f"{', '.join(sorted(names))})")
            inner = nested.get(name)
            if inner is None or v is None:
                continue
            for item in (v if isinstance(v, (list, tuple)) else (v,)):
                if item.__class__ is dict:
                    todo.append((inner, item, f"{where}.{name}"))


@cache
def _request_names(api_key: int) -> tuple[str, dict[str, tuple[frozenset[str], dict[str, str]]]]:
    """The request spec's names: (top struct, struct -> (its field names, field -> nested struct))."""
    top, structs = _spec(api_key, "request")
    return top, {name: (frozenset(f for f, _ in fields_), dict(nested)) for name, fields_, nested in structs}


def ms(value: datetime.timedelta | datetime.datetime | int | None) -> int | None:
    """kio's timedelta/datetime fields back to Kafka's milliseconds."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return (value - _EPOCH) // datetime.timedelta(milliseconds=1)


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
# Answer types


def _kafka_name(f) -> str:
    """A field's Kafka name: kio drops the ``_ms`` of time fields, answers keep it."""
    return f.name + "_ms" if f.metadata.get("kafka_type") in _TIME_TYPES else f.name


@cache
def answer_type(api_key: int) -> type:
    """The type a handler builds its answer of: an immutable named tuple whose fields are
    the union of the API's response fields over every version the broker serves, by Kafka's names
    (time fields in milliseconds, with ``_ms``); each nested struct is a type of its own,
    an attribute of this one (``answer_type(0).PartitionProduceResponse``). A misspelt or
    missing field fails at construction. A field has a default only where Kafka's schema
    gives one, where only older versions have it, for tagged fields, and for
    ``throttle_time_ms`` (the broker never throttles); every other field must be given."""
    return _message_type(api_key, "answer", _ANSWER_TYPES)


@cache
def request_type(api_key: int) -> type:
    """The type a node builds a request to another node of (``Network.request``): made
    from the API's request schemas as ``answer_type`` is from its response schemas, with
    the same fields, names and defaults rules (``request_type(1).FetchTopic``). A misspelt
    or missing field fails at construction; ``kio_request`` turns it into kio's request
    of the version sent."""
    return _message_type(api_key, "request", _REQUEST_TYPES)


def _message_type(api_key: int, direction: str, made: set[type]) -> type:
    """The named tuple type of the API's messages of ``direction``, built from its spec:
    the one ``make compile`` stored (protocol/message_specs.py), else made from kio's
    schemas here, which imports every served version's schema module."""
    return _types_from_spec(_spec(api_key, direction), made)


def _spec(api_key: int, direction: str) -> tuple:
    """The API's ``message_spec`` of ``direction``: the one ``make compile`` stored, else
    made from kio's schemas here."""
    spec = message_specs.stored(direction, api_key)
    return spec if spec is not None else message_spec(api_key, direction)


_SCHEMAS: dict[str, Callable[[int, int], type]] = {"answer": response_class, "request": request_class}


def message_spec(api_key: int, direction: str) -> tuple:
    """What the named tuple types of ``direction``'s ("answer" or "request") messages of
    ``api_key`` are, as plain data: (the message's struct name, the structs), each struct
    (name, its fields in order as (Kafka name, default or ``REQUIRED``), its nested structs
    as (Kafka name, struct name)); the fields the union over the versions the broker serves."""
    schema = _SCHEMAS[direction]
    served = KAFKA_4_0.get(api_key)
    versions = schema_name_map.get(api_key_map.get(api_key), ())
    if api_key in OWN_SCHEMA_APIS:
        from protocol.own_schemas import versions as schema_versions

        versions = schema_versions(api_key, versions)
    versions = [v for v in sorted(versions) if served is None or v <= served[3]]
    structs: dict[str, dict[str, tuple]] = {}  # struct name -> Kafka name -> (field, newest version seen)
    newest: dict[str, int] = {}
    top = None
    for version in versions:
        cls = schema(api_key, version)
        top = cls.__name__
        seen: set[type] = set()
        todo = [cls]
        while todo:
            entity = todo.pop()
            if entity in seen:
                continue
            seen.add(entity)
            newest[entity.__name__] = version
            known = structs.setdefault(entity.__name__, {})
            for f in fields(entity):
                if f.name.startswith("__"):
                    continue
                known[_kafka_name(f)] = (f, version)
                kind = classify_field(f)
                if isinstance(kind, (EntityField, EntityTupleField)):
                    todo.append(kind.type_)

    def held(value: Any) -> tuple:
        """A kio default as a message of these types holds it (times in milliseconds, error
        codes as ints, a struct as its type), as data."""
        if is_dataclass(value):
            return ("struct", type(value).__name__, tuple((_kafka_name(f), held(getattr(value, f.name)))
                                                          for f in fields(value) if not f.name.startswith("__")))
        if isinstance(value, tuple):
            return ("tuple", tuple(held(v) for v in value))
        if isinstance(value, (datetime.timedelta, datetime.datetime)):
            return ("value", ms(value))
        if isinstance(value, ErrorCode):
            return ("value", int(value))
        if isinstance(value, UUID):
            return ("uuid", value.bytes)
        return ("value", value)

    out = []
    for name, known in structs.items():
        required, defaults = [], []
        for attr, (f, version) in known.items():
            if f.default is not MISSING:
                default = f.default
            elif f.default_factory is not MISSING:  # type: ignore[misc]
                default = f.default_factory()  # type: ignore[misc]
            elif attr == "throttle_time_ms" or "tag" in f.metadata or version < newest[name]:
                default = _zero(f.metadata.get("kafka_type"), classify_field(f))
            else:
                required.append((attr, REQUIRED))
                continue
            defaults.append((attr, held(default)))
        nested = tuple((attr, kind.type_.__name__) for attr, (f, _) in known.items()
                       if isinstance(kind := classify_field(f), (EntityField, EntityTupleField)))
        out.append((name, tuple(required + defaults), nested))
    return top, tuple(out)


REQUIRED = ("required",)


def store_message_specs(path=None) -> int:
    """Makes every served API's answer and request spec from kio's schemas and stores them
    (protocol/message_specs.py); returns how many."""
    specs = {(direction, api_key): message_spec(api_key, direction)
             for api_key in KAFKA_4_0 for direction in _SCHEMAS}
    message_specs.save(specs, *([] if path is None else [path]))
    return len(specs)


def _types_from_spec(spec: tuple, made: set[type]) -> type:
    """The message's named tuple type of a ``message_spec``, its nested types attributes of it."""
    top, structs = spec
    by_name = {name: (struct_fields, nested) for name, struct_fields, nested in structs}
    types: dict[str, type] = {}

    def make(name: str) -> type:
        """The type of one struct, the types of the structs its defaults hold first."""
        if name in types:
            return types[name]
        struct_fields, _ = by_name[name]
        defaults = tuple(value(default) for _, default in struct_fields if default != REQUIRED)
        types[name] = namedtuple(name, [attr for attr, _ in struct_fields], defaults=defaults)
        types[name].__module__ = __name__
        return types[name]

    def value(held: tuple) -> Any:
        kind = held[0]
        if kind == "value":
            return held[1]
        if kind == "tuple":
            return tuple(value(v) for v in held[1])
        if kind == "uuid":
            return UUID(bytes=held[1])
        return make(held[1])(**{attr: value(v) for attr, v in held[2]})

    for name in by_name:
        make(name)
    for name, (_, nested) in by_name.items():  # each struct's nested structs, for answer_from
        types[name]._nested = {attr: types[inner] for attr, inner in nested}
    message = types[top]
    for name, nested_type_ in types.items():
        if nested_type_ is not message:
            setattr(message, name, nested_type_)
    made.update(types.values())
    return message


_ANSWER_TYPES: set[type] = set()
_REQUEST_TYPES: set[type] = set()


def nested_type(kind: type, field: str) -> type:
    """The answer type of ``kind``'s nested field ``field`` (for instance an API's per-topic
    results, whose type is named differently in each API)."""
    return kind._nested[field]


def answer_from(kind: type, value: Any):
    """``value`` as an answer of ``kind`` (an ``answer_type`` or one of its nested types):
    a message the coordinators hand back, a dataclass with Kafka's field names (nested
    alike), converted field by field; a field ``kind`` lacks fails as at construction."""
    if value.__class__ is kind:
        return value
    nested = kind._nested
    given = {}
    for f in fields(value):
        v = getattr(value, f.name)
        inner = nested.get(f.name)
        if inner is not None and v is not None:
            v = [answer_from(inner, x) for x in v] if isinstance(v, (list, tuple)) else answer_from(inner, v)
        given[f.name] = v
    return kind(**given)


def is_answer(value: Any) -> bool:
    """Whether ``value`` is an answer of an ``answer_type`` (or one of its nested types)."""
    return value.__class__ in _ANSWER_TYPES


def is_request(value: Any) -> bool:
    """Whether ``value`` is a request of a ``request_type`` (or one of its nested types)."""
    return value.__class__ in _REQUEST_TYPES


def kio_request(api_key: int, version: int, request):
    """kio's request of ``version`` for a request of the API's ``request_type`` (or the kio
    message itself): what ``Network.request`` hands the target node's handler and what a
    client (protocol/client.py) encodes. A dict is refused (TypeError naming the API):
    requests are built of ``request_type``, so a misspelt field fails where it is built
    instead of being dropped here."""
    if is_dataclass(request):
        return request
    if not is_request(request):
        raise TypeError(f"the {request_class(api_key, version).__name__} (API {api_key} v{version}) sent between "
                        f"nodes or by a client is a {type(request).__name__}; requests are of request_type({api_key})")
    return build(request_class(api_key, version), request)


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
    """The expression that turns an answer's value into what struct packs: the usual types
    pass inline, anything else goes through the helper that converts it or gives up."""
    if kafka_type == "error_code":
        return f"({var} if {var}.__class__ is int and {var} in _ERROR_CODES else _error_code({var}))"
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return f"({var} if {var}.__class__ is int else _timedelta_ms({var}))"
    if kafka_type == "datetime_i64":
        converted = f"{var} if {var}.__class__ is int else _datetime_ms({var})"
        return f"(-1 if {var} is None else {converted})" if optional else f"({converted})"
    return var


class _Compiler:
    """Writes one ``_w_<n>(d, buf)`` function per entity class into ``lines``: ``d`` is an
    answer of the entity's answer type, read by attribute."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "_GiveUp": GiveUp, "_uvarint": _uvarint, "_error_code": _error_code,
            "_timedelta_ms": _timedelta_ms, "_datetime_ms": _datetime_ms,
            "_ERROR_CODES": _ERROR_CODES, "_uuid_bytes": _uuid_bytes, "_tagged": _tagged,
        }
        self.names: dict[type, str] = {}

    def const(self, value: Any) -> str:
        name = f"_c{len(self.env)}"
        self.env[name] = value
        return name

    def entity(self, cls: type) -> str:
        if cls in self.names:
            return self.names[cls]
        name = self.names[cls] = f"_w_{len(self.names)}"
        flexible = bool(cls.__flexible__)
        body: list[str] = []
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
            var = f"v{i}"
            body.append(f"{var} = d.{_kafka_name(f)}")
            optional = is_optional(f)
            if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
                pack_pending()
                self.array(body, var, kind, kafka_type, flexible)
            elif isinstance(kind, EntityField):
                pack_pending()
                self.nested(body, var, kind.type_, optional)
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
        self.lines.extend("    " + line for line in body or ["pass"])
        return name

    def nested(self, body: list[str], var: str, cls: type, optional: bool) -> None:
        writer = self.entity(cls)
        if optional:
            body.append(f"if {var} is None: buf.append(0xFF)")
            body.append("else:")
            body.append("    buf.append(1)")
            body.append(f"    {writer}({var}, buf)")
        else:
            body.append(f"{writer}({var}, buf)")

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
        """Tagged fields are rare and small: kio's own rule (skip a default value) and writers.
        An answer whose tagged fields are all the answer type's defaults (the usual case)
        gets the empty tagged section without a call."""
        if not tagged:
            body.append("buf.append(0)")
            return
        plan = []
        usual = []
        for f, kind in sorted(tagged, key=lambda fk: fk[0].metadata["tag"]):
            _name, _alias, conversion, _, _ = field_plan(cls, f.name)
            writer = get_field_writer(f, flexible=True, is_request_header=False, is_tag=True)
            plan.append((_kafka_name(f), conversion, f.metadata["tag"], writer, f.default, get_tagged_field_default(f)))
            usual.append(f"d.{_kafka_name(f)} is {self.const(_tagged_absent(cls, f))}")
        call = f"_tagged({self.const(tuple(plan))}, d, buf)"
        absent_skipped = all(_skipped(convert(conversion[0], conversion[1], _tagged_absent(cls, f)), default, implicit)
                             for (f, kind), (_, conversion, _, _, default, implicit) in zip(
                                 sorted(tagged, key=lambda fk: fk[0].metadata["tag"]), plan))
        if absent_skipped:
            body.append(f"if {' and '.join(usual)}: buf.append(0)")
            body.append(f"else: {call}")
        else:
            body.append(call)


def _tagged_absent(cls: type, f) -> Any:
    """A tagged field's default in its answer type."""
    answer = answer_type(cls.__api_key__)
    kind = answer if answer.__name__ == cls.__name__ else getattr(answer, cls.__name__)
    return kind._field_defaults[_kafka_name(f)]


def _skipped(value, default, implicit) -> bool:
    """kio leaves a tagged field out when it holds its default."""
    return value == default or (default is MISSING and value == implicit)


def _tagged(plan: tuple, d, buf: bytearray) -> None:
    """kio's tagged section: the fields whose value is not their default, by tag."""
    written = []
    for attr, (kind, arg), tag, writer, default, implicit in plan:
        value = convert(kind, arg, getattr(d, attr))
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
    """The compiled layout writer ``(answer, buf)`` of ``api_key``'s response in
    ``version``, or None for APIs answered the generic way."""
    if api_key not in HOT_APIS:
        return None
    try:
        return _compiled(response_class(api_key, version))
    except NotImplementedError:  # a field type no layout writes: the generic path serves it
        return None


@cache
def encoder(api_key: int, version: int):
    """The layout of ``api_key``'s response in ``version`` (a function answer -> bytes), or
    None for APIs answered the generic way."""
    write = _response_writer(api_key, version)
    if write is None:
        return None

    def encode(answer) -> bytearray:
        buf = bytearray()
        write(answer, buf)
        return buf

    return encode


def kio_response(api_key: int, version: int, answer):
    """The kio response of ``version`` for an answer of the API's ``answer_type`` or the
    kio message itself; a dict is refused (TypeError naming the API): handlers answer
    with their API's answer type."""
    if is_dataclass(answer):
        return answer
    if answer.__class__ is dict:
        raise TypeError(f"the answer to {response_class(api_key, version).__name__} (API {api_key} v{version}) is "
                        f"a dict; answers are of answer_type({api_key})")
    return build_response(api_key, version, answer)


@cache
def response_frame_encoder(api_key: int, version: int, flexible_header: bool):
    """``encode(correlation_id, answer)``: the whole response frame for a handler's
    answer, the one encoder every answer goes through. An answer of the API's
    ``answer_type`` is written by the layout when the API has one (and the layout takes
    it), anything else (a kio message, or what a layout gives up on) by build + kio; an
    ``EncodedBody`` is framed as is; a dict is refused (TypeError naming the API). Looked up once per API version: the request path
    calls it for every response. The layout writes the body after room for the size and
    header, so the body (a Fetch answer can be a megabyte of records) is not copied again
    into a frame."""
    def generic(correlation_id: int, answer) -> bytes:
        if answer.__class__ is EncodedBody:
            return encode_response_frame(correlation_id, flexible_header, answer)
        return encode_response_frame(correlation_id, flexible_header, encode(kio_response(api_key, version, answer)))

    write = _response_writer(api_key, version)
    if write is None:
        return generic
    typed = answer_type(api_key)
    head = response_head_size(flexible_header)

    def by_layout(correlation_id: int, answer) -> bytearray | bytes:
        if answer.__class__ is not typed:
            return generic(correlation_id, answer)
        frame = bytearray(head)
        try:
            write(answer, frame)
        except (GiveUp, struct.error, TypeError, AttributeError, OverflowError):
            return generic(correlation_id, answer)
        if CROSS_CHECK_LAYOUTS:
            expected = encode(kio_response(api_key, version, answer))
            if expected != frame[head:]:
                raise AssertionError(f"layout of api {api_key} v{version} wrote {frame[head:]!r}, kio {expected!r}")
        fill_response_head(frame, correlation_id, flexible_header)
        return frame

    return by_layout


def encode_response(api_key: int, version: int, answer) -> bytes:
    """The response body for a handler's answer (the frame of ``response_frame_encoder``
    after its size and header)."""
    return bytes(response_frame_encoder(api_key, version, False)(0, answer)[response_head_size(False):])


if __name__ == "__main__":
    from protocol import answer_wire  # the module the broker imports, not this __main__ copy

    print(f"{answer_wire.store_message_specs()} message type specs stored in {message_specs.CACHE_FILE}")
