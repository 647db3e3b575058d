"""The embedded consumer protocol of classic groups (protocol type "consumer"): the
subscription a member puts in its JoinGroup protocol metadata and the assignment a
SyncGroup hands back (Kafka's ConsumerProtocolSubscription v0-v3 and
ConsumerProtocolAssignment v0-v3; neither is flexible).

The group coordinator reads them itself when a classic member is in a KIP-848 consumer
group: the server-side assignor assigns it, and its SyncGroup answer is encoded here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_VERSION = 3


class MalformedProtocol(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: dict[str, frozenset[int]]
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> int:
        try:
            (v,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error:
            raise MalformedProtocol("truncated consumer protocol metadata") from None
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.unpack(">h")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise MalformedProtocol("truncated consumer protocol metadata")
        try:
            out = self.data[self.pos:self.pos + n].decode()
        except UnicodeDecodeError:
            raise MalformedProtocol("a topic name is not UTF-8") from None
        self.pos += n
        return out

    def count(self) -> int:
        n = self.unpack(">i")
        if n < 0 or n > len(self.data):
            raise MalformedProtocol("bad array length in consumer protocol metadata")
        return n

    def skip_bytes(self) -> None:
        n = self.unpack(">i")
        if n > 0:
            self.pos += n


def decode_subscription(metadata: bytes) -> Subscription:
    """Raises MalformedProtocol. Fields of versions newer than 3 are ignored, as the
    protocol allows."""
    r = _Reader(metadata)
    version = r.unpack(">h")
    if version < 0:
        raise MalformedProtocol(f"bad consumer protocol version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    r.skip_bytes()  # user data
    owned: dict[str, frozenset[int]] = {}
    rack = None
    if version >= 1:
        for _ in range(r.count()):
            topic = r.string() or ""
            owned[topic] = frozenset(r.unpack(">i") for _ in range(r.count()))
    if version >= 2:
        r.unpack(">i")  # generation id
    if version >= 3:
        rack = r.string()
    return Subscription(version, topics, owned, rack)


def subscription_version(metadata: bytes) -> int:
    return decode_subscription(metadata).version


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The partitions of a ConsumerProtocolAssignment (any version). Raises MalformedProtocol."""
    r = _Reader(data)
    if r.unpack(">h") < 0:
        raise MalformedProtocol("bad consumer protocol version")
    out: dict[str, frozenset[int]] = {}
    for _ in range(r.count()):
        topic = r.string() or ""
        out[topic] = out.get(topic, frozenset()) | frozenset(r.unpack(">i") for _ in range(r.count()))
    return out


def encode_assignment(partitions: dict[str, frozenset[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment (no user data) at ``version``, capped at 3 (every
    version has the same fields)."""
    parts = [struct.pack(">hi", min(max(version, 0), MAX_VERSION), len(partitions))]
    for topic in sorted(partitions):
        raw = topic.encode()
        ps = sorted(partitions[topic])
        parts.append(struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    parts.append(struct.pack(">i", -1))  # null user data
    return b"".join(parts)
