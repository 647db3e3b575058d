"""The KIP-848 consumer-group records of __consumer_offsets, in Kafka's layouts.

Keys and values are laid out as every modern group's records (modern_group_records,
whose writers and readers the share-group records use too).

  key 3  ConsumerGroupMetadata(group)            value: epoch int32, metadata hash int64
  key 5  ConsumerGroupMemberMetadata(group, member)
         value: instance id?, rack id?, client id, client host, subscribed topic names [],
                subscribed topic regex?, rebalance timeout int32, server assignor?,
                tag 0: classic member metadata (session timeout int32,
                [protocol name, metadata bytes]) of a member that joined with JoinGroup
  key 6  ConsumerGroupTargetAssignmentMetadata(group)   value: assignment epoch int32
  key 7  ConsumerGroupTargetAssignmentMember(group, member)  value: [topic id, [partition]]
  key 8  ConsumerGroupCurrentMemberAssignment(group, member)
         value: member epoch int32, previous member epoch int32, state int8,
                assigned [topic id, [partition]], pending revocation [topic id, [partition]]
A None value is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.runtime import CoordinatorRecord
from coordinator.group import modern_group_records as layout
from coordinator.group.assignors import Partitions
from coordinator.group.modern_group_records import ValueReader, ValueWriter, record_key

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
_CLASSIC_TAG = 0
_WITH_MEMBER = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
MEMBER_RECORDS = (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)  # a member's tombstones, in order


@dataclass(frozen=True, slots=True)
class ConsumerKey(layout.ModernGroupKey):
    """A consumer group record's key."""


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member using the classic protocol (JoinGroup/SyncGroup/Heartbeat) in a consumer group."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Partitions
    pending_revocation: Partitions


def decode_key(version: int, data: bytes) -> ConsumerKey:
    return layout.decode_key(ConsumerKey, version, data, _WITH_MEMBER)


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return layout.group_epoch_record(GROUP_METADATA, group, None)
    return layout.group_epoch_record(GROUP_METADATA, group, value.epoch, value.metadata_hash)


def member_metadata_record(group: str, member: str, value: MemberMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(record_key(MEMBER_METADATA, group, member), None)
    w = ValueWriter()
    w.string(value.instance_id)
    w.string(value.rack_id)
    w.string(value.client_id)
    w.string(value.client_host)
    w.varint(len(value.subscribed_topic_names) + 1)
    for name in value.subscribed_topic_names:
        w.string(name)
    w.string(value.subscribed_topic_regex)
    w.pack(">i", value.rebalance_timeout_ms)
    w.string(value.server_assignor)
    tagged = None
    if value.classic is not None:
        c = ValueWriter(version=None)  # a struct: no version prefix
        c.pack(">i", value.classic.session_timeout_ms)
        c.varint(len(value.classic.protocols) + 1)
        for name, metadata in value.classic.protocols:
            c.string(name)
            c.bytes_(metadata)
            c.varint(0)
        tagged = {_CLASSIC_TAG: c.done()}
    return CoordinatorRecord(record_key(MEMBER_METADATA, group, member), w.done(tagged))


def target_metadata_record(group: str, assignment_epoch: int | None) -> CoordinatorRecord:
    return layout.assignment_epoch_record(TARGET_METADATA, group, assignment_epoch)


def target_member_record(group: str, member: str, partitions: Partitions | None) -> CoordinatorRecord:
    return layout.member_partitions_record(TARGET_MEMBER, group, member, partitions)


def current_assignment_record(group: str, member: str, value: CurrentAssignmentValue | None) -> CoordinatorRecord:
    if value is None:
        return layout.current_assignment_tombstone(CURRENT_ASSIGNMENT, group, member)
    return layout.current_assignment_record(CURRENT_ASSIGNMENT, group, member, value.member_epoch,
                                            value.previous_member_epoch, value.state, value.assigned,
                                            value.pending_revocation)


def decode_group_metadata(data: bytes) -> GroupMetadataValue:
    return GroupMetadataValue(*layout.decode_group_epoch(data))


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = ValueReader(data)
    instance_id, rack_id, client_id, client_host = r.string(), r.string(), r.string(), r.string()
    names = tuple(r.string() or "" for _ in range(r.varint() - 1))
    regex, rebalance_timeout_ms, assignor = r.string(), r.unpack(">i"), r.string()
    classic = None
    raw = r.tags().get(_CLASSIC_TAG)
    if raw is not None:
        c = ValueReader(raw, versioned=False)
        session_timeout_ms = c.unpack(">i")
        protocols = []
        for _ in range(c.varint() - 1):
            name = c.string() or ""
            protocols.append((name, c.raw(c.varint() - 1)))
            c.skip_tags()
        classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
    return MemberMetadataValue(instance_id, rack_id, client_id or "", client_host or "", names,
                               regex, assignor, rebalance_timeout_ms, classic)


decode_target_metadata = layout.decode_assignment_epoch
decode_target_member = layout.decode_member_partitions


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    return CurrentAssignmentValue(*layout.decode_current_assignment(data, with_pending_revocation=True))
