"""The records of __share_group_state, in Kafka 4.4's share coordinator layouts.

  key 0  ShareSnapshot(group id string, topic id uuid, partition int32)
         value (flexible v0): snapshot epoch int32, state epoch int32, leader epoch int32,
                start offset int64, create timestamp int64, write timestamp int64,
                state batches [first offset int64, last offset int64, delivery state int8,
                delivery count int16], tag 0: delivery complete count int32 (-1: unknown)
A None value is a tombstone (the state deleted).
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass

from coordinator.group.modern_group_records import ValueReader, ValueWriter
from coordinator.group.log_codec import LogCodecError
from coordinator.runtime import CoordinatorRecord

SNAPSHOT = 0
_DELIVERY_COMPLETE_COUNT_TAG = 0


@dataclass(frozen=True, slots=True)
class StateKey:
    group_id: str
    topic_id: uuid.UUID | None  # None: the zero id a request may carry (the coordinator refuses it)
    partition: int

    def coordinator_key(self) -> str:
        """The string Kafka hashes to place the key (SharePartitionKey.asCoordinatorKey)."""
        return f"{self.group_id}:{java_uuid(self.topic_id or _ZERO_UUID)}:{self.partition}"


_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


def java_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def encode_key(key: StateKey) -> bytes:
    group = key.group_id.encode()
    return struct.pack(">hh", SNAPSHOT, len(group)) + group + key.topic_id.bytes + struct.pack(">i", key.partition)


def decode_key(data: bytes) -> StateKey | None:
    """The key of a snapshot record; None for other record kinds (ShareUpdate)."""
    if len(data) < 4:
        raise LogCodecError("share state record key is truncated")
    version, n = struct.unpack_from(">hh", data, 0)
    if version != SNAPSHOT:
        return None
    if len(data) < 4 + n + 20:
        raise LogCodecError("share state record key is truncated")
    group = data[4:4 + n].decode()
    topic_id = uuid.UUID(bytes=bytes(data[4 + n:20 + n]))
    (partition,) = struct.unpack_from(">i", data, 20 + n)
    return StateKey(group, topic_id, partition)


def snapshot_record(key: StateKey, value: ShareSnapshot | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(encode_key(key), None)
    w = ValueWriter()
    w.pack(">i", value.snapshot_epoch)
    w.pack(">i", value.state_epoch)
    w.pack(">i", value.leader_epoch)
    w.pack(">q", value.start_offset)
    w.pack(">q", value.create_timestamp_ms)
    w.pack(">q", value.write_timestamp_ms)
    w.varint(len(value.state_batches) + 1)
    for b in value.state_batches:
        w.pack(">q", b.first_offset)
        w.pack(">q", b.last_offset)
        w.pack(">b", b.delivery_state)
        w.pack(">h", b.delivery_count)
        w.varint(0)
    tagged = None
    if value.delivery_complete_count != -1:
        tagged = {_DELIVERY_COMPLETE_COUNT_TAG: struct.pack(">i", value.delivery_complete_count)}
    return CoordinatorRecord(encode_key(key), w.done(tagged))


def decode_snapshot(data: bytes) -> ShareSnapshot:
    r = ValueReader(data)
    snapshot_epoch, state_epoch, leader_epoch = r.unpack(">i"), r.unpack(">i"), r.unpack(">i")
    start, created, written = r.unpack(">q"), r.unpack(">q"), r.unpack(">q")
    batches = []
    for _ in range(r.varint() - 1):
        batches.append(StateBatch(r.unpack(">q"), r.unpack(">q"), r.unpack(">b"), r.unpack(">h")))
        r.skip_tags()
    raw = r.tags().get(_DELIVERY_COMPLETE_COUNT_TAG)
    complete = struct.unpack(">i", raw)[0] if raw is not None and len(raw) == 4 else -1
    return ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start, created, written, tuple(batches), complete)
