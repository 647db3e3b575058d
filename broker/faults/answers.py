"""An error answer to any request, without processing it: the response of the request's
own API and version, mirroring what the request names, with the error code on every
entry at the deepest level the response has (each partition of a Produce, each
transaction of a batched AddPartitionsToTxn, each key of a FindCoordinator v4) and on
the top-level ``error_code`` only when nothing deeper was named.

The response's lists are paired with the request's by what they hold (topics with
topics, partitions with partitions, transactions, groups, coordinators, markers), or
as the only list on each side; each entry copies the request entry's identifying
fields (name/topic, topic id, partition index, producer id, keys).
"""

from __future__ import annotations

import dataclasses
from functools import cache

from kio.schema.errors import ErrorCode
from protocol.kio_private import classify_field, EntityField, EntityTupleField, PrimitiveTupleField

from protocol import answer_wire

PRODUCE = 0
_ALIASES = {"name": ("topic", "name"), "topic": ("name", "topic"),
            "partition_index": ("partition_index", "index", "partition"),
            "index": ("index", "partition_index", "partition"),
            "partition": ("partition", "partition_index", "index")}
_IDENTITY = frozenset({"name", "topic", "topic_id", "partition_index", "index", "partition", "producer_id",
                       "producer_epoch", "transactional_id", "group_id", "key", "member_id"})


def error_answer(api_key: int, version: int, request, code: int):
    """The kio response answering ``request`` with ``code``; None where the request
    expects no answer (Produce with acks=0)."""
    if api_key == PRODUCE and getattr(request, "acks", 1) == 0:
        return None
    cls = answer_wire.response_class(api_key, version)
    data, deep = _mirror(cls, request, code, top=True)
    return answer_wire.build(cls, data)


@cache
def _shape(cls: type) -> tuple:
    """(name, kind, kafka type, entity type) for each field of a kio class."""
    out = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("__"):
            continue
        kind = classify_field(f)
        entity = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        label = ("entities" if isinstance(kind, EntityTupleField) else "entity" if isinstance(kind, EntityField)
                 else "values" if isinstance(kind, PrimitiveTupleField) else "value")
        out.append((f.name, label, f.metadata.get("kafka_type"), entity))
    return tuple(out)


def _category(name: str) -> str:
    for word in ("partition", "topic", "transaction", "group", "coordinator", "marker", "member", "resource"):
        if word in name:
            return word
    return "topic" if name == "responses" else name


def _lists(obj) -> list[tuple[str, tuple]]:
    if obj is None or not dataclasses.is_dataclass(obj):
        return []
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if isinstance(getattr(obj, f.name), tuple) and not f.name.startswith("__")]


def _source(name: str, response_lists: list[str], request) -> tuple:
    """The request's list that the response's list ``name`` answers, or ()."""
    candidates = _lists(request)
    for n, v in candidates:
        if n == name:
            return v or ()
    for n, v in candidates:
        if _category(n) == _category(name):
            return v or ()
    if len(candidates) == 1 and len(response_lists) == 1:
        return candidates[0][1] or ()
    return ()


def _mirror(cls: type, request, code: int, top: bool = False) -> tuple[dict, bool]:
    shape = _shape(cls)
    data: dict = {}
    deep = False
    response_lists = [name for name, label, _, _ in shape if label == "entities"]
    for name, label, kafka_type, entity in shape:
        if label == "entities":
            items = []
            for item in _source(name, response_lists, request):
                if dataclasses.is_dataclass(item):
                    sub, _ = _mirror(entity, item, code)
                else:
                    sub, _ = _mirror(entity, None, code)
                    _set_primitive(entity, sub, item)
                items.append(sub)
            data[name] = items
            deep = deep or bool(items)
        elif label == "entity":
            data[name] = _mirror(entity, None, code)[0] if entity is not None else None
        elif label == "value" and request is not None and not top and name in _IDENTITY:
            for alias in _ALIASES.get(name, (name,)):
                value = getattr(request, alias, None)
                if value is not None:
                    data[name] = value
                    break
    for name, label, kafka_type, _ in shape:
        if kafka_type == "error_code" and not deep:
            data[name] = code
    return data, deep


def _set_primitive(cls: type, data: dict, value) -> None:
    """A request list of plain values (partition indexes, keys, ids): the value goes to
    the response entry's first field of its type."""
    want = int if isinstance(value, int) else str
    for name, label, kafka_type, _ in _shape(cls):
        if label == "value" and kafka_type != "error_code" and kafka_type not in ("bool",):
            zero = answer_wire._zero(kafka_type, None)
            if isinstance(zero, want) and not isinstance(zero, bool):
                data[name] = value
                return


def error_name(code: int) -> str:
    """Kafka's name of an error code: NOT_ENOUGH_REPLICAS."""
    return ErrorCode(code).name.upper()


def parse_error(text: str | int) -> int:
    """An error code from its Kafka name (any case) or its number; ValueError if it is
    neither, or NONE."""
    if isinstance(text, int) or (isinstance(text, str) and text.strip().lstrip("-").isdigit()):
        code = int(text)
        ErrorCode(code)
    else:
        try:
            code = int(ErrorCode[str(text).strip().lower()])
        except KeyError:
            raise ValueError(text) from None
    if code == 0:
        raise ValueError(text)
    return code
