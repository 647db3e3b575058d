"""The KIP-848 consumer-group records of __consumer_offsets, in Kafka's layouts.

Keys are not flexible: an int16 key version (which record it is) then int16-length
strings. Values are flexible version 0: compact strings and arrays (unsigned varint
length + 1, 0 for null) and an empty tagged-field section at the end.

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

import struct
import uuid
from dataclasses import dataclass

from coordinator.group.assignors import Partitions
from coordinator.group.log_codec import LogCodecError
from coordinator.contract import CoordinatorRecord
from protocol.framing import FrameError, read_unsigned_varint, write_unsigned_varint

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
CONSUMER_KEY_VERSIONS = frozenset({3, 4, 5, 6, 7, 8})
_VALUE_VERSION = 0
_CLASSIC_TAG = 0


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    kind: int
    group: str
    member: str | None = None


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


class _Writer:
    def __init__(self) -> None:
        self.parts = [struct.pack(">h", _VALUE_VERSION)]

    def pack(self, fmt: str, v: int) -> None:
        self.parts.append(struct.pack(fmt, v))

    def varint(self, v: int) -> None:
        out = bytearray()
        write_unsigned_varint(out, v)
        self.parts.append(bytes(out))

    def string(self, v: str | None) -> None:
        if v is None:
            self.varint(0)
            return
        raw = v.encode()
        self.varint(len(raw) + 1)
        self.parts.append(raw)

    def partitions(self, v: Partitions) -> None:
        self.varint(len(v) + 1)
        for topic_id, ps in sorted(v.items(), key=lambda i: str(i[0])):
            self.parts.append(topic_id.bytes)
            self.varint(len(ps) + 1)
            for p in sorted(ps):
                self.pack(">i", p)
            self.varint(0)  # the struct's tagged fields

    def bytes_(self, v: bytes) -> None:
        self.varint(len(v) + 1)
        self.parts.append(v)

    def done(self, tagged: dict[int, bytes] | None = None) -> bytes:
        self.varint(len(tagged or {}))
        for tag, data in sorted((tagged or {}).items()):
            self.varint(tag)
            self.varint(len(data))
            self.parts.append(data)
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        if self.unpack(">h") != _VALUE_VERSION:
            raise LogCodecError("unknown consumer group record value version")

    def unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise LogCodecError("consumer group record value is truncated")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def varint(self) -> int:
        try:
            value, self.pos = read_unsigned_varint(self.data, self.pos)
        except FrameError as e:
            raise LogCodecError(f"consumer group record value: {e}") from None
        return value

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise LogCodecError("consumer group record value is truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self) -> str | None:
        n = self.varint()
        return None if n == 0 else self.raw(n - 1).decode()

    def partitions(self) -> Partitions:
        out: dict[uuid.UUID, frozenset[int]] = {}
        for _ in range(self.varint() - 1):
            topic_id = uuid.UUID(bytes=self.raw(16))
            out[topic_id] = frozenset(self.unpack(">i") for _ in range(self.varint() - 1))
            self.skip_tags()
        return out

    def skip_tags(self) -> None:
        self.tags()

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.varint()):
            tag = self.varint()
            out[tag] = self.raw(self.varint())
        return out


def _key(kind: int, group: str, member: str | None = None) -> bytes:
    parts = [struct.pack(">h", kind)]
    for s in (group,) if member is None else (group, member):
        raw = s.encode()
        parts.append(struct.pack(">h", len(raw)) + raw)
    return b"".join(parts)


def decode_key(version: int, data: bytes) -> ConsumerKey:
    pos = 2
    strings = []
    for _ in range(2 if version in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT) else 1):
        if pos + 2 > len(data):
            raise LogCodecError("consumer group record key is truncated")
        (n,) = struct.unpack_from(">h", data, pos)
        strings.append(data[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
    return ConsumerKey(version, *strings)


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(_key(GROUP_METADATA, group), None)
    w = _Writer()
    w.pack(">i", value.epoch)
    w.pack(">q", value.metadata_hash)
    return CoordinatorRecord(_key(GROUP_METADATA, group), w.done())


def member_metadata_record(group: str, member: str, value: MemberMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(_key(MEMBER_METADATA, group, member), None)
    w = _Writer()
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
        c = _Writer()
        c.parts = []  # a struct: no version prefix
        c.pack(">i", value.classic.session_timeout_ms)
        c.varint(len(value.classic.protocols) + 1)
        for name, metadata in value.classic.protocols:
            c.string(name)
            c.bytes_(metadata)
            c.varint(0)
        tagged = {_CLASSIC_TAG: c.done()}
    return CoordinatorRecord(_key(MEMBER_METADATA, group, member), w.done(tagged))


def target_metadata_record(group: str, assignment_epoch: int | None) -> CoordinatorRecord:
    if assignment_epoch is None:
        return CoordinatorRecord(_key(TARGET_METADATA, group), None)
    w = _Writer()
    w.pack(">i", assignment_epoch)
    return CoordinatorRecord(_key(TARGET_METADATA, group), w.done())


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
    w.pack(">b", value.state)
    w.partitions(value.assigned)
    w.partitions(value.pending_revocation)
    return CoordinatorRecord(_key(CURRENT_ASSIGNMENT, group, member), w.done())


def decode_group_metadata(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    return GroupMetadataValue(r.unpack(">i"), r.unpack(">q"))


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = _Reader(data)
    instance_id, rack_id, client_id, client_host = r.string(), r.string(), r.string(), r.string()
    names = tuple(r.string() or "" for _ in range(r.varint() - 1))
    regex, rebalance_timeout_ms, assignor = r.string(), r.unpack(">i"), r.string()
    classic = None
    raw = r.tags().get(_CLASSIC_TAG)
    if raw is not None:
        c = _Reader(b"\0\0" + raw)
        session_timeout_ms = c.unpack(">i")
        protocols = []
        for _ in range(c.varint() - 1):
            name = c.string() or ""
            protocols.append((name, c.raw(c.varint() - 1)))
            c.skip_tags()
        classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
    return MemberMetadataValue(instance_id, rack_id, client_id or "", client_host or "", names,
                               regex, assignor, rebalance_timeout_ms, classic)


def decode_target_metadata(data: bytes) -> int:
    return _Reader(data).unpack(">i")


def decode_target_member(data: bytes) -> Partitions:
    return _Reader(data).partitions()


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    r = _Reader(data)
    return CurrentAssignmentValue(r.unpack(">i"), r.unpack(">i"), r.unpack(">b"), r.partitions(), r.partitions())
