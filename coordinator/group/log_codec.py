"""The classic-group records of __consumer_offsets, byte for byte as Kafka writes them.

Every key and value starts with an int16 version. Strings are int16-length UTF-8 (-1 is
null where nullable), bytes are int32-length, arrays an int32 count.

Keys (the key version says which record it is):
  0, 1  OffsetCommitKey: group string, topic string, partition int32
  2     GroupMetadataKey: group string
  3+    records of the KIP-848 consumer/share/streams groups; not ours (UnknownKeyVersion)
OffsetCommitValue, by version:
  v0, v2  offset int64, metadata string, commit timestamp int64
  v1      offset int64, metadata string, commit timestamp int64, expire timestamp int64
  v3      offset int64, leader epoch int32, metadata string, commit timestamp int64
GroupMetadataValue, by version:
  protocol type string, generation int32, protocol nullable string, leader nullable
  string, [v2+] current state timestamp int64, members array of
  {member id string, [v3+] group instance id nullable string, client id string,
   client host string, [v1+] rebalance timeout int32, session timeout int32,
   subscription bytes, assignment bytes}
We write OffsetCommitValue v3 (v1 when the commit carries an expire timestamp, as Kafka
does) and GroupMetadataValue v3, and read v0-v3 of both. A None value is a tombstone:
the offset, or the whole group, was deleted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from coordinator.runtime import CoordinatorRecord, LogCodecError, UnknownKeyVersion
from protocol.names import CONSUMER_OFFSETS

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp_ms: int
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp_ms: int = -1  # only v1 stores it


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


# -- writing -----------------------------------------------------------------------------


class _Writer:
    def __init__(self, version: int) -> None:
        self.parts: list[bytes] = [struct.pack(">h", version)]

    def int32(self, v: int) -> None:
        self.parts.append(struct.pack(">i", v))

    def int64(self, v: int) -> None:
        self.parts.append(struct.pack(">q", v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.parts.append(struct.pack(">h", -1))
            return
        raw = v.encode()
        if len(raw) > 0x7FFF:
            raise LogCodecError(f"string of {len(raw)} bytes does not fit an int16 length")
        self.parts.append(struct.pack(">h", len(raw)) + raw)

    def bytes_(self, v: bytes) -> None:
        self.parts.append(struct.pack(">i", len(v)) + bytes(v))

    def done(self) -> bytes:
        return b"".join(self.parts)


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return w.done()


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.done()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp_ms >= 0:
        # Kafka keeps an explicit expire timestamp (OffsetCommit v2-v4 retention) in v1.
        w = _Writer(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE)
        w.int64(value.offset)
        w.string(value.metadata)
        w.int64(value.commit_timestamp_ms)
        w.int64(value.expire_timestamp_ms)
        return w.done()
    w = _Writer(OFFSET_COMMIT_VALUE_VERSION)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp_ms)
    return w.done()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = _Writer(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp_ms)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetCommitValue | None
) -> CoordinatorRecord:
    key = encode_offset_commit_key(group, topic, partition)
    return CoordinatorRecord(key, None if value is None else encode_offset_commit_value(value))


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    key = encode_group_metadata_key(group)
    return CoordinatorRecord(key, None if value is None else encode_group_metadata_value(value))


# -- reading -----------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise LogCodecError(f"record truncated at byte {self.pos} (wanted {n} more)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        try:
            return bytes(self._take(n)).decode()
        except UnicodeDecodeError as e:
            raise LogCodecError(f"string is not UTF-8: {e}") from e

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise LogCodecError(f"null where a string is required, at byte {self.pos - 2}")
        return s

    def bytes_(self) -> bytes:
        n = self.int32()
        return b"" if n == -1 else bytes(self._take(n))

    def end(self) -> None:
        if self.pos != len(self.data):
            raise LogCodecError(f"{len(self.data) - self.pos} unexpected trailing bytes")


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        raise UnknownKeyVersion(CONSUMER_OFFSETS, version)
    r.end()
    return key


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data)
    version = r.int16()
    if version in (0, 2):
        value = OffsetCommitValue(offset=r.int64(), metadata=r.string(), commit_timestamp_ms=r.int64())
    elif version == 1:
        value = OffsetCommitValue(
            offset=r.int64(), metadata=r.string(), commit_timestamp_ms=r.int64(),
            expire_timestamp_ms=r.int64(),
        )
    elif version == 3:
        offset, leader_epoch = r.int64(), r.int32()
        value = OffsetCommitValue(
            offset=offset, leader_epoch=leader_epoch, metadata=r.string(),
            commit_timestamp_ms=r.int64(),
        )
    else:
        raise LogCodecError(f"unsupported OffsetCommitValue version {version}")
    r.end()
    return value


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise LogCodecError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp_ms = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0:
        raise LogCodecError(f"negative member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout_ms = r.int32() if version >= 1 else None
        session_timeout_ms = r.int32()
        if rebalance_timeout_ms is None:
            rebalance_timeout_ms = session_timeout_ms  # v0 predates the separate timeout
        members.append(MemberMetadata(
            member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
            client_host=client_host, rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms, subscription=r.bytes_(), assignment=r.bytes_(),
        ))
    r.end()
    return GroupMetadataValue(
        protocol_type=protocol_type, generation=generation, protocol=protocol, leader=leader,
        current_state_timestamp_ms=current_state_timestamp_ms, members=tuple(members),
    )
