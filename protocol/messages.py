"""Typed request/response messages through kio, and a builder that serves every version.

Handlers describe a response once, as nested dicts with Kafka's field names, and
``build`` turns that into the kio dataclass of the negotiated version: fields the
version lacks are dropped, fields it has but the dict omits take their schema default
(or a zero value). Millisecond ints become timedeltas/datetimes where kio wants them.
"""

from __future__ import annotations

import datetime
import io
import os
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any
from uuid import UUID

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from importlib import import_module

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader, entity_writer
from protocol.kio_private import classify_field, EntityField, EntityTupleField, PrimitiveTupleField

from protocol import wire_shape

ZERO_UUID = UUID(int=0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class DecodeError(ValueError):
    """A request body kio could not parse."""


@cache
def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


# A transactional producer sends the same AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
# body in every transaction; kio's messages are immutable, so one decoded copy of each
# body serves its repeats (at most _REPEATS_KEPT bodies of up to _REPEAT_BYTES each per
# API version, so what a client can make the broker keep stays small).
_REPEATING_APIS = frozenset({24, 25, 26})
_REPEATS_KEPT = 64
_REPEAT_BYTES = 1024


@cache
def request_decoder(api_key: int, version: int):
    """``decode_request`` for one API version, its class, reader and shape walk looked up
    once: the request path calls it for every request."""
    cls = request_class(api_key, version)
    read = _reader(cls)
    walk = wire_shape.walker(cls)

    def decode(body: bytes | memoryview, offset: int = 0):
        try:
            walk(body, offset, len(body), 0)  # kio's native reader aborts on absurd counts
            return read(body, offset)[0]
        except Exception as e:  # kio raises several types for malformed input
            raise DecodeError(f"cannot decode {api_key_map[api_key]} v{version}: {e}") from e

    if api_key not in _REPEATING_APIS:
        return decode
    decoded: dict[bytes, Any] = {}

    def decode_repeat(body: bytes | memoryview, offset: int = 0):
        if len(body) - offset > _REPEAT_BYTES:
            return decode(body, offset)
        key = bytes(body[offset:])
        request = decoded.get(key)
        if request is None:
            request = decode(body, offset)
            if len(decoded) >= _REPEATS_KEPT:
                decoded.clear()
            decoded[key] = request
        return request

    return decode_repeat


def decode_request(api_key: int, version: int, body: bytes | memoryview, offset: int = 0):
    return request_decoder(api_key, version)(body, offset)


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
