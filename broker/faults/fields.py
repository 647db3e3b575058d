"""What a request names, for fault rules and triggers: transactional ids, group ids,
producer ids, topics and partitions, found by walking the decoded kio request.

One walk serves every API: fields are recognised by Kafka's names
(``transactional_id``, ``group_id``, ``producer_id``, a tuple whose name contains
``topic`` holding topics, one containing ``partition`` inside a topic holding
partitions), a Produce batch's producer id is read from its header, and
FindCoordinator's keys count as transactional or group ids by their key type. The same
names, looked up in the request schemas instead of a request, say which APIs can name
what, so a rule that can never match (a topic on InitProducerId) is refused up front.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from uuid import UUID

from protocol.kio_private import classify_field, EntityField, EntityTupleField, PrimitiveTupleField

from protocol import request_wire

FIND_COORDINATOR = 10
_KEY_TYPES = {0: "group_ids", 1: "transactional_ids"}
_TOPIC_NAME_FIELDS = ("name", "topic", "topic_name")
_PARTITION_FIELDS = ("partition_index", "partition", "index", "partition_id")
_BATCH_PRODUCER_ID = struct.Struct(">q")  # at byte 43 of a v2 record batch (magic at byte 16)


@dataclass
class Named:
    """The transactional ids, groups, producer ids and partitions one request names."""

    transactional_ids: set[str] = field(default_factory=set)
    group_ids: set[str] = field(default_factory=set)
    producer_ids: set[int] = field(default_factory=set)
    # (topic, partition); the partition is None where a request names a whole topic
    partitions: set[tuple[str | None, int | None]] = field(default_factory=set)

    @property
    def topics(self) -> set[str | None]:
        return {t for t, _ in self.partitions}


def named_in(api_key: int, request, topic_name: Callable[[UUID], str | None]) -> Named:
    """Everything ``request`` names; ``topic_name`` resolves topic ids (Fetch v13+)."""
    out = Named()
    _walk(request, None, False, out, topic_name)
    if api_key == FIND_COORDINATOR:
        key_type = getattr(request, "key_type", 0)
        keys = list(getattr(request, "coordinator_keys", ()) or ())
        if getattr(request, "key", None):
            keys.append(request.key)
        getattr(out, _KEY_TYPES.get(key_type, "group_ids")).update(keys)
    return out


def _walk(obj, topic, in_topic: bool, out: Named, topic_name) -> None:
    for f in dataclasses.fields(obj):
        name = f.name
        value = getattr(obj, name)
        if value is None:
            continue
        if name.endswith("transactional_id") and isinstance(value, str):
            out.transactional_ids.add(value)
        elif name == "transactional_ids" and isinstance(value, tuple):
            out.transactional_ids.update(value)
        elif name == "group_id" and isinstance(value, str):
            out.group_ids.add(value)
        elif name in ("groups", "groups_names") and isinstance(value, tuple) and value and isinstance(value[0], str):
            out.group_ids.update(value)
        elif name.endswith("producer_id") and isinstance(value, int) and value >= 0:
            out.producer_ids.add(value)
        elif name == "records" and isinstance(value, (bytes, bytearray, memoryview)):
            _batch_producer_ids(value, out)
        elif isinstance(value, tuple):
            if "topic" in name and not in_topic:
                for item in value:
                    if isinstance(item, str):
                        out.partitions.add((item, None))
                    elif dataclasses.is_dataclass(item):
                        t = _topic_of(item, topic_name)
                        _walk(item, t, True, out, topic_name)
                        if not _has_partitions(item):
                            out.partitions.add((t, None))
            elif "partition" in name and in_topic:
                for item in value:
                    if isinstance(item, int):
                        out.partitions.add((topic, item))
                    elif dataclasses.is_dataclass(item):
                        out.partitions.add((topic, _partition_of(item)))
                        _walk(item, topic, in_topic, out, topic_name)
            else:
                for item in value:
                    if dataclasses.is_dataclass(item):
                        _walk(item, topic, in_topic, out, topic_name)
        elif dataclasses.is_dataclass(value):
            _walk(value, topic, in_topic, out, topic_name)


def _topic_of(item, topic_name) -> str | None:
    for name in _TOPIC_NAME_FIELDS:
        value = getattr(item, name, None)
        if isinstance(value, str) and value:
            return value
    topic_id = getattr(item, "topic_id", None)
    return topic_name(topic_id) if isinstance(topic_id, UUID) else None


def _partition_of(item) -> int | None:
    for name in _PARTITION_FIELDS:
        value = getattr(item, name, None)
        if isinstance(value, int):
            return value
    return None


def _has_partitions(item) -> bool:
    return any("partition" in f.name and isinstance(getattr(item, f.name), tuple) and getattr(item, f.name)
               for f in dataclasses.fields(item))


def _batch_producer_ids(records, out: Named) -> None:
    view = memoryview(records)
    pos = 0
    while pos + 61 <= len(view):  # a v2 batch header is 61 bytes
        length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if view[pos + 16] == 2:
            (producer_id,) = _BATCH_PRODUCER_ID.unpack_from(view, pos + 43)
            if producer_id >= 0:
                out.producer_ids.add(producer_id)
        if length <= 0:
            return
        pos += 12 + length


# -- what an API can name, from its schemas ------------------------------------------------

KINDS = ("transactional_id", "group_id", "producer_id", "topic", "partition")


@cache
def kinds_named_by(api_key: int, version: int) -> frozenset[str]:
    """Which of KINDS a request of this API version can name."""
    found: set[str] = set()
    if api_key == FIND_COORDINATOR:
        found.update(("transactional_id", "group_id"))
    _kinds(request_wire.request_class(api_key, version), False, found, set())
    return frozenset(found)


def _kinds(cls: type, in_topic: bool, found: set[str], seen: set[type]) -> None:
    if cls in seen:
        return
    seen.add(cls)
    for f in dataclasses.fields(cls):
        name = f.name
        if name.startswith("__"):
            continue
        kind = classify_field(f)
        if name.endswith("transactional_id") or name == "transactional_ids":
            found.add("transactional_id")
        elif name == "group_id" or (name in ("groups", "groups_names") and isinstance(kind, PrimitiveTupleField)):
            found.add("group_id")
        elif name.endswith("producer_id") or name == "records":
            found.add("producer_id")
        if isinstance(kind, PrimitiveTupleField):
            if "topic" in name and not in_topic:
                found.add("topic")
            elif "partition" in name and in_topic:
                found.add("partition")
        elif isinstance(kind, EntityTupleField):
            if "topic" in name and not in_topic:
                found.add("topic")
                _kinds(kind.type_, True, found, seen)
            else:
                if "partition" in name and in_topic:
                    found.add("partition")
                _kinds(kind.type_, in_topic, found, seen)
        elif isinstance(kind, EntityField):
            _kinds(kind.type_, in_topic, found, seen)
