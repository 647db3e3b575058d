"""The KIP-932 share-group records of __consumer_offsets, in Kafka 4.4's layouts.

Keys and values are laid out as the consumer-group records (consumer_log_codec): an
int16 key version naming the record, int16-length strings; flexible version-0 values.

  key 10 ShareGroupMemberMetadata(group, member)
         value: rack id?, client id, client host, subscribed topic names []
  key 11 ShareGroupMetadata(group)                value: epoch int32, metadata hash int64
  key 12 ShareGroupTargetAssignmentMetadata(group)
         value: assignment epoch int32, tag 0: assignment timestamp int64
  key 13 ShareGroupTargetAssignmentMember(group, member)   value: [topic id, [partition]]
  key 14 ShareGroupCurrentMemberAssignment(group, member)
         value: member epoch int32, previous member epoch int32, state int8,
                assigned [topic id, [partition]]
  key 15 ShareGroupStatePartitionMetadata(group)
         value: initializing [topic id, topic name, [partition]],
                initialized [topic id, topic name, [partition]], deleting [topic id, topic name]
A None value is a tombstone.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from coordinator.group.assignors import Partitions
from coordinator.group.consumer_log_codec import _key, _Reader, _Writer
from coordinator.group.log_codec import LogCodecError
from coordinator.contract import CoordinatorRecord

MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_METADATA = 12
TARGET_MEMBER = 13
CURRENT_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15
SHARE_KEY_VERSIONS = frozenset({10, 11, 12, 13, 14, 15})
_WITH_MEMBER = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
_ASSIGNMENT_TIMESTAMP_TAG = 0
STABLE_MEMBER_STATE = 0  # MemberState.STABLE: share members never wait on revocations


@dataclass(frozen=True, slots=True)
class ShareKey:
    kind: int
    group: str
    member: str | None = None


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    assigned: Partitions


# topic id -> (topic name, partitions)
NamedPartitions = dict[uuid.UUID, tuple[str, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class StatePartitionMetadataValue:
    initializing: NamedPartitions
    initialized: NamedPartitions
    deleting: dict[uuid.UUID, str]


def decode_key(version: int, data: bytes) -> ShareKey:
    pos = 2
    strings = []
    for _ in range(2 if version in _WITH_MEMBER else 1):
        if pos + 2 > len(data):
            raise LogCodecError("share group record key is truncated")
        (n,) = struct.unpack_from(">h", data, pos)
        strings.append(data[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
    return ShareKey(version, *strings)


def member_metadata_record(group: str, member: str, value: MemberMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(_key(MEMBER_METADATA, group, member), None)
    w = _Writer()
    w.string(value.rack_id)
    w.string(value.client_id)
    w.string(value.client_host)
    w.varint(len(value.subscribed_topic_names) + 1)
    for name in value.subscribed_topic_names:
        w.string(name)
    return CoordinatorRecord(_key(MEMBER_METADATA, group, member), w.done())


def group_metadata_record(group: str, epoch: int | None, metadata_hash: int = 0) -> CoordinatorRecord:
    if epoch is None:
        return CoordinatorRecord(_key(GROUP_METADATA, group), None)
    w = _Writer()
    w.pack(">i", epoch)
    w.pack(">q", metadata_hash)
    return CoordinatorRecord(_key(GROUP_METADATA, group), w.done())


def target_metadata_record(group: str, assignment_epoch: int | None, timestamp_ms: int = 0) -> CoordinatorRecord:
    if assignment_epoch is None:
        return CoordinatorRecord(_key(TARGET_METADATA, group), None)
    w = _Writer()
    w.pack(">i", assignment_epoch)
    tagged = {_ASSIGNMENT_TIMESTAMP_TAG: struct.pack(">q", timestamp_ms)} if timestamp_ms else None
    return CoordinatorRecord(_key(TARGET_METADATA, group), w.done(tagged))


def target_member_record(group: str, member: str, partitions: Partitions | None) -> CoordinatorRecord:
    if partitions is None:
        return CoordinatorRecord(_key(TARGET_MEMBER, group, member), None)
    w = _Writer()
    w.partitions(partitions)
    return CoordinatorRecord(_key(TARGET_MEMBER, group, member), w.done())


def current_assignment_record(group: str, member: str, value: CurrentAssignmentValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(_key(CURRENT_ASSIGNMENT, group, member), None)
    w = _Writer()
    w.pack(">i", value.member_epoch)
    w.pack(">i", value.previous_member_epoch)
    w.pack(">b", STABLE_MEMBER_STATE)
    w.partitions(value.assigned)
    return CoordinatorRecord(_key(CURRENT_ASSIGNMENT, group, member), w.done())


def _named_partitions(w: _Writer, topics: NamedPartitions) -> None:
    w.varint(len(topics) + 1)
    for topic_id, (name, partitions) in sorted(topics.items(), key=lambda i: i[1][0]):
        w.parts.append(topic_id.bytes)
        w.string(name)
        w.varint(len(partitions) + 1)
        for p in sorted(partitions):
            w.pack(">i", p)
        w.varint(0)


def state_partition_metadata_record(group: str, value: StatePartitionMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(_key(STATE_PARTITION_METADATA, group), None)
    w = _Writer()
    _named_partitions(w, value.initializing)
    _named_partitions(w, value.initialized)
    w.varint(len(value.deleting) + 1)
    for topic_id, name in sorted(value.deleting.items(), key=lambda i: i[1]):
        w.parts.append(topic_id.bytes)
        w.string(name)
        w.varint(0)
    return CoordinatorRecord(_key(STATE_PARTITION_METADATA, group), w.done())


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = _Reader(data)
    rack_id, client_id, client_host = r.string(), r.string(), r.string()
    names = tuple(r.string() or "" for _ in range(r.varint() - 1))
    return MemberMetadataValue(rack_id, client_id or "", client_host or "", names)


def decode_group_metadata(data: bytes) -> tuple[int, int]:
    r = _Reader(data)
    return r.unpack(">i"), r.unpack(">q")


def decode_target_metadata(data: bytes) -> int:
    return _Reader(data).unpack(">i")


def decode_target_member(data: bytes) -> Partitions:
    return _Reader(data).partitions()


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    r = _Reader(data)
    member_epoch, previous = r.unpack(">i"), r.unpack(">i")
    r.unpack(">b")  # the member's state: not kept
    return CurrentAssignmentValue(member_epoch, previous, r.partitions())


def _read_named_partitions(r: _Reader) -> NamedPartitions:
    out: NamedPartitions = {}
    for _ in range(r.varint() - 1):
        topic_id = uuid.UUID(bytes=r.raw(16))
        name = r.string() or ""
        out[topic_id] = (name, frozenset(r.unpack(">i") for _ in range(r.varint() - 1)))
        r.skip_tags()
    return out


def decode_state_partition_metadata(data: bytes) -> StatePartitionMetadataValue:
    r = _Reader(data)
    initializing, initialized = _read_named_partitions(r), _read_named_partitions(r)
    deleting = {}
    for _ in range(r.varint() - 1):
        topic_id = uuid.UUID(bytes=r.raw(16))
        deleting[topic_id] = r.string() or ""
        r.skip_tags()
    return StatePartitionMetadataValue(initializing, initialized, deleting)
