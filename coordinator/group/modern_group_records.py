"""The __consumer_offsets record layouts the modern groups share (KIP-848 consumer
groups, KIP-932 share groups): each record writer and reader here serves both, given the
record's key version (consumer_log_codec and share_log_codec name their versions).

Keys are not flexible: an int16 key version (which record it is) then int16-length
strings (the group, and the member for per-member records). Values are flexible
version 0: compact strings and arrays (unsigned varint length + 1, 0 for null) and a
tagged-field section at the end. A None value is a tombstone.

  group epoch          epoch int32, metadata hash int64
  assignment epoch     assignment epoch int32, tag 0: assignment timestamp int64 (when set)
  member partitions    [topic id, [partition]]
  current assignment   member epoch int32, previous member epoch int32, state int8,
                       assigned [topic id, [partition]], then, in the consumer layout,
                       pending revocation [topic id, [partition]]
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TypeVar

from coordinator.runtime import CoordinatorRecord
from coordinator.group.assignors import Partitions
from coordinator.group.log_codec import LogCodecError
from protocol.request_wire import FrameError, read_unsigned_varint, write_unsigned_varint

VALUE_VERSION = 0
_ASSIGNMENT_TIMESTAMP_TAG = 0


class ValueWriter:
    """A flexible value: its version, then fields; ``done`` adds the tagged fields."""

    def __init__(self, version: int | None = VALUE_VERSION) -> None:
        self.parts = [] if version is None else [struct.pack(">h", version)]  # None: a nested struct

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


class ValueReader:
    def __init__(self, data: bytes, versioned: bool = True) -> None:
        self.data = data
        self.pos = 0
        if versioned and self.unpack(">h") != VALUE_VERSION:
            raise LogCodecError("unknown group record value version")

    def unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise LogCodecError("group record value is truncated")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def varint(self) -> int:
        try:
            value, self.pos = read_unsigned_varint(self.data, self.pos)
        except FrameError as e:
            raise LogCodecError(f"group record value: {e}") from None
        return value

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise LogCodecError("group record value is truncated")
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


@dataclass(frozen=True, slots=True)
class ModernGroupKey:
    """A modern group record's key: its version (which record), the group, and the member
    of per-member records. Each group type has its own subclass, which replay dispatches on."""

    kind: int
    group: str
    member: str | None = None


K = TypeVar("K", bound=ModernGroupKey)
V = TypeVar("V")


def record_key(version: int, group: str, member: str | None = None) -> bytes:
    parts = [struct.pack(">h", version)]
    for s in (group,) if member is None else (group, member):
        raw = s.encode()
        parts.append(struct.pack(">h", len(raw)) + raw)
    return b"".join(parts)


def replay_per_member(values: dict[str, V], member: str, value: bytes | None, decode: Callable[[bytes], V]
                      ) -> None:
    """A per-member record replayed into ``values`` (member -> decoded value): a tombstone
    removes the member's entry."""
    if value is None:
        values.pop(member, None)
    else:
        values[member] = decode(value)


def member_tombstones(group: str, member: str, versions: tuple[int, ...]) -> list[CoordinatorRecord]:
    """Tombstones of a member's records, given their key versions (each codec's
    MEMBER_RECORDS: current assignment, target, metadata, the order Kafka deletes them)."""
    return [CoordinatorRecord(record_key(version, group, member), None) for version in versions]


def members_tombstones(group: str, members: Collection[str], targets: Iterable[str], member_records: tuple[int, ...],
                        target_member: int) -> list[CoordinatorRecord]:
    """Tombstones of every member's records, then of the target assignments left of
    members no longer there (key version ``target_member``): how a group's deletion starts."""
    records = [r for m in members for r in member_tombstones(group, m, member_records)]
    records += [CoordinatorRecord(record_key(target_member, group, m), None) for m in targets if m not in members]
    return records


def decode_key(key_type: type[K], version: int, data: bytes, with_member: Collection[int]) -> K:
    """The key of version ``version`` (its group, and its member where the version is
    in ``with_member``), as ``key_type``."""
    return key_type(version, *decode_key_strings(data, version in with_member))


def decode_key_strings(data: bytes, with_member: bool) -> list[str]:
    """The group (and member) a key names."""
    pos = 2
    strings = []
    for _ in range(2 if with_member else 1):
        if pos + 2 > len(data):
            raise LogCodecError("group record key is truncated")
        (n,) = struct.unpack_from(">h", data, pos)
        if n < 0 or pos + 2 + n > len(data):
            raise LogCodecError("group record key is truncated")
        strings.append(data[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
    return strings


def group_epoch_record(version: int, group: str, epoch: int | None, metadata_hash: int = 0,
                       tagged: dict[int, bytes] | None = None) -> CoordinatorRecord:
    """``tagged``: a group type's own tagged fields (the streams group's validated topology epoch)."""
    if epoch is None:
        return CoordinatorRecord(record_key(version, group), None)
    w = ValueWriter()
    w.pack(">i", epoch)
    w.pack(">q", metadata_hash)
    return CoordinatorRecord(record_key(version, group), w.done(tagged))


def decode_group_epoch(data: bytes) -> tuple[int, int]:
    """(epoch, metadata hash)."""
    r = ValueReader(data)
    return r.unpack(">i"), r.unpack(">q")


def assignment_epoch_record(version: int, group: str, assignment_epoch: int | None, timestamp_ms: int = 0
                            ) -> CoordinatorRecord:
    if assignment_epoch is None:
        return CoordinatorRecord(record_key(version, group), None)
    w = ValueWriter()
    w.pack(">i", assignment_epoch)
    tagged = {_ASSIGNMENT_TIMESTAMP_TAG: struct.pack(">q", timestamp_ms)} if timestamp_ms else None
    return CoordinatorRecord(record_key(version, group), w.done(tagged))


def decode_assignment_epoch(data: bytes) -> int:
    return ValueReader(data).unpack(">i")


def decode_assignment_epoch_and_timestamp(data: bytes) -> tuple[int, int | None]:
    """(assignment epoch, assignment timestamp or None)."""
    r = ValueReader(data)
    epoch = r.unpack(">i")
    timestamp = r.tags().get(_ASSIGNMENT_TIMESTAMP_TAG)
    return epoch, struct.unpack(">q", timestamp)[0] if timestamp and len(timestamp) == 8 else None


def member_partitions_record(version: int, group: str, member: str, partitions: Partitions | None
                             ) -> CoordinatorRecord:
    if partitions is None:
        return CoordinatorRecord(record_key(version, group, member), None)
    w = ValueWriter()
    w.partitions(partitions)
    return CoordinatorRecord(record_key(version, group, member), w.done())


def decode_member_partitions(data: bytes) -> Partitions:
    return ValueReader(data).partitions()


def current_assignment_record(version: int, group: str, member: str, member_epoch: int, previous_member_epoch: int,
                              state: int, assigned: Partitions, pending_revocation: Partitions | None
                              ) -> CoordinatorRecord:
    """``pending_revocation`` None: the share layout, which has no such field."""
    w = ValueWriter()
    w.pack(">i", member_epoch)
    w.pack(">i", previous_member_epoch)
    w.pack(">b", state)
    w.partitions(assigned)
    if pending_revocation is not None:
        w.partitions(pending_revocation)
    return CoordinatorRecord(record_key(version, group, member), w.done())


def current_assignment_tombstone(version: int, group: str, member: str) -> CoordinatorRecord:
    return CoordinatorRecord(record_key(version, group, member), None)


def decode_current_assignment(data: bytes, with_pending_revocation: bool
                              ) -> tuple[int, int, int, Partitions, Partitions]:
    """(member epoch, previous member epoch, state, assigned, pending revocation or {})."""
    r = ValueReader(data)
    member_epoch, previous, state = r.unpack(">i"), r.unpack(">i"), r.unpack(">b")
    assigned = r.partitions()
    return member_epoch, previous, state, assigned, r.partitions() if with_pending_revocation else {}
