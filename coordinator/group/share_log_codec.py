"""The KIP-932 share-group records of __consumer_offsets, in Kafka 4.4's layouts.

Keys and values are laid out as every modern group's records (modern_group_records,
whose writers and readers the consumer-group records use too).

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

import uuid
from dataclasses import dataclass

from coordinator.runtime import CoordinatorRecord
from coordinator.group import modern_group_records as layout
from coordinator.group.assignors import Partitions
from coordinator.group.modern_group_records import ValueReader, ValueWriter, record_key

MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_METADATA = 12
TARGET_MEMBER = 13
CURRENT_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15
_WITH_MEMBER = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
MEMBER_RECORDS = (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)  # a member's tombstones, in order
STABLE_MEMBER_STATE = 0  # MemberState.STABLE: share members never wait on revocations


@dataclass(frozen=True, slots=True)
class ShareKey(layout.ModernGroupKey):
    """A share group record's key."""


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
    return layout.decode_key(ShareKey, version, data, _WITH_MEMBER)


def member_metadata_record(group: str, member: str, value: MemberMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(record_key(MEMBER_METADATA, group, member), None)
    w = ValueWriter()
    w.string(value.rack_id)
    w.string(value.client_id)
    w.string(value.client_host)
    w.varint(len(value.subscribed_topic_names) + 1)
    for name in value.subscribed_topic_names:
        w.string(name)
    return CoordinatorRecord(record_key(MEMBER_METADATA, group, member), w.done())


def group_metadata_record(group: str, epoch: int | None, metadata_hash: int = 0) -> CoordinatorRecord:
    return layout.group_epoch_record(GROUP_METADATA, group, epoch, metadata_hash)


def target_metadata_record(group: str, assignment_epoch: int | None, timestamp_ms: int = 0) -> CoordinatorRecord:
    return layout.assignment_epoch_record(TARGET_METADATA, group, assignment_epoch, timestamp_ms)


def target_member_record(group: str, member: str, partitions: Partitions | None) -> CoordinatorRecord:
    return layout.member_partitions_record(TARGET_MEMBER, group, member, partitions)


def current_assignment_record(group: str, member: str, value: CurrentAssignmentValue | None) -> CoordinatorRecord:
    if value is None:
        return layout.current_assignment_tombstone(CURRENT_ASSIGNMENT, group, member)
    return layout.current_assignment_record(CURRENT_ASSIGNMENT, group, member, value.member_epoch,
                                            value.previous_member_epoch, STABLE_MEMBER_STATE, value.assigned, None)


def _named_partitions(w: ValueWriter, topics: NamedPartitions) -> None:
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
        return CoordinatorRecord(record_key(STATE_PARTITION_METADATA, group), None)
    w = ValueWriter()
    _named_partitions(w, value.initializing)
    _named_partitions(w, value.initialized)
    w.varint(len(value.deleting) + 1)
    for topic_id, name in sorted(value.deleting.items(), key=lambda i: i[1]):
        w.parts.append(topic_id.bytes)
        w.string(name)
        w.varint(0)
    return CoordinatorRecord(record_key(STATE_PARTITION_METADATA, group), w.done())


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = ValueReader(data)
    rack_id, client_id, client_host = r.string(), r.string(), r.string()
    names = tuple(r.string() or "" for _ in range(r.varint() - 1))
    return MemberMetadataValue(rack_id, client_id or "", client_host or "", names)


decode_group_metadata = layout.decode_group_epoch
decode_target_metadata = layout.decode_assignment_epoch_and_timestamp  # (epoch, timestamp or None)
decode_target_member = layout.decode_member_partitions


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    member_epoch, previous, _state, assigned, _ = layout.decode_current_assignment(data, with_pending_revocation=False)
    return CurrentAssignmentValue(member_epoch, previous, assigned)  # the state: always stable, not kept


def _read_named_partitions(r: ValueReader) -> NamedPartitions:
    out: NamedPartitions = {}
    for _ in range(r.varint() - 1):
        topic_id = uuid.UUID(bytes=r.raw(16))
        name = r.string() or ""
        out[topic_id] = (name, frozenset(r.unpack(">i") for _ in range(r.varint() - 1)))
        r.skip_tags()
    return out


def decode_state_partition_metadata(data: bytes) -> StatePartitionMetadataValue:
    r = ValueReader(data)
    initializing, initialized = _read_named_partitions(r), _read_named_partitions(r)
    deleting = {}
    for _ in range(r.varint() - 1):
        topic_id = uuid.UUID(bytes=r.raw(16))
        deleting[topic_id] = r.string() or ""
        r.skip_tags()
    return StatePartitionMetadataValue(initializing, initialized, deleting)
