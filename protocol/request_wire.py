"""The request side of the wire, sans-IO: frames, request headers, the API table, the
shape check and the decoding of request bodies into kio's request messages.

Frames: ``FrameDecoder`` is fed bytes and hands back whole frames; it refuses a frame
whose length prefix exceeds the limit before buffering its body, so an absurd prefix
costs nothing. Header layouts are the request header v1/v2 of Kafka's RequestHeader.json.

The API table: the version ranges the broker supports. ``advertised_min`` can be lower
than ``accepted_min``: librdkafka < 2.11.1 enables features only when the broker's range
contains exact old versions (Produce 2..2, OffsetCommit 1..2, ...), so, like Kafka 4
(KAFKA-18659), we advertise them and reject the removed versions when a request actually
uses them. Version profiles (``emulate.kafka.version``) cap the maxima at what that Kafka
release advertised, so clients that infer the broker version from ApiVersions
(kafka-python) behave as they would against it.

The shape check: kio reserves memory for an array from its declared count before reading
the elements, and a failed reservation aborts the process: one frame declaring a few
billion elements would take the broker down. ``check_shape`` follows the same schema
(kio's dataclasses), reads only the length prefixes and skips fixed-size fields, and
refuses a body whose length, count or tagged field runs past its end, or that is null
where the schema says it cannot be (as Kafka's parser does; handlers then never see None
there). It builds nothing, so its cost is a few operations per field; record batches are
skipped whole.
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader

from protocol.kio_private import classify_field, EntityField, EntityTupleField, is_optional, PrimitiveTupleField

_INT32 = struct.Struct(">i")
_REQUEST_HEADER_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


class FrameError(Exception):
    """The peer broke framing; the connection must be closed."""


class FrameTooLarge(FrameError):
    pass


class FrameDecoder:
    """Accumulates bytes; ``next_frame`` returns one frame body at a time.

    Frames that arrive whole within one fed ``bytes`` are sliced straight from it (one
    copy). A frame split across feeds has its body's pieces kept as they come and joined
    once when the last arrives (one copy, where growing a buffer piece by piece copies
    it again at each growth); only pieces actually received are held, whatever the
    length prefix claims."""

    __slots__ = ("max_frame_size", "_buf", "_pos", "_chunk", "_chunk_pos", "_parts", "_have", "_size")

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._chunk: bytes | None = None  # the latest feed, while frames are read from it
        self._chunk_pos = 0
        self._parts: list | None = None  # the pieces of a split frame's body, while it is gathered
        self._have = 0  # bytes in _parts
        self._size = 0  # the split frame's body length

    def feed(self, data: bytes) -> None:
        parts = self._parts
        if parts is not None and self._have < self._size:
            need = self._size - self._have
            if type(data) is not bytes:
                data = bytes(data)  # the caller may reuse its buffer
            if len(data) <= need:
                parts.append(data)
                self._have += len(data)
                return
            view = memoryview(data)
            parts.append(view[:need])
            self._have = self._size
            data = view[need:]  # the frames after it
        if self._chunk is not None:
            self._spill()
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        if self._buf or type(data) is not bytes:
            self._buf += data
        elif data:
            self._chunk = data
            self._chunk_pos = 0

    def _spill(self) -> None:
        """Moves the unread rest of the latest feed into the buffer."""
        chunk, self._chunk = self._chunk, None
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += memoryview(chunk)[self._chunk_pos :]

    @property
    def buffered(self) -> int:
        chunk = self._chunk
        gathered = self._have if self._parts is not None else 0
        return len(self._buf) - self._pos + (len(chunk) - self._chunk_pos if chunk is not None else 0) + gathered

    def missing(self) -> int:
        """Bytes the frame part-way received still needs (0 when none is)."""
        return self._size - self._have if self._parts is not None else 0

    def pending_frame_size(self) -> int | None:
        """The length of the frame being received, once its prefix has arrived."""
        if self._parts is not None:
            return self._size
        if self._chunk is not None:
            self._spill()
        if self.buffered < 4:
            return None
        return _INT32.unpack_from(self._buf, self._pos)[0]

    def _check(self, size: int) -> None:
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameTooLarge(f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame_size}")

    def next_frame(self) -> bytes | None:
        parts = self._parts
        if parts is not None:  # a split frame comes before whatever was fed after it
            if self._have < self._size:
                return None
            self._parts = None
            return b"".join(parts)
        chunk = self._chunk
        if chunk is not None:
            pos = self._chunk_pos
            if len(chunk) - pos >= 4:
                size = _INT32.unpack_from(chunk, pos)[0]
                self._check(size)
                end = pos + 4 + size
                if end <= len(chunk):
                    if end == len(chunk):
                        self._chunk = None
                    else:
                        self._chunk_pos = end
                    return chunk[pos + 4 : end]
            self._spill()  # a frame split across feeds
        if len(self._buf) - self._pos < 4:
            return None  # the usual end of a feed of whole frames, without two more calls
        size = self.pending_frame_size()
        self._check(size)
        start = self._pos + 4
        if len(self._buf) - start < size:
            # the rest of its body comes in later feeds: gathered there (the buffer
            # holds nothing after it)
            with memoryview(self._buf) as view:
                self._parts = [bytes(view[start:])]
            self._have, self._size = len(self._buf) - start, size
            self._buf.clear()
            self._pos = 0
            return None
        with memoryview(self._buf) as view:
            frame = bytes(view[start : start + size])
        self._pos = start + size
        return frame


@dataclass(slots=True)  # not frozen: a frozen init costs one object.__setattr__ per field, per request
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """Reads the fields shared by request header v0-v2 and returns the offset after them.

    The caller skips the header's tagged fields (v2) once it knows the version is
    flexible (see ``skip_tagged_fields``).
    """
    if len(frame) < _REQUEST_HEADER_FIXED.size:
        raise FrameError(f"request header truncated: {len(frame)} bytes")
    api_key, api_version, correlation_id, client_len = _REQUEST_HEADER_FIXED.unpack_from(frame, 0)
    pos = _REQUEST_HEADER_FIXED.size
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise FrameError("request header client_id truncated")
        try:
            client_id = frame[pos : pos + client_len].decode("utf-8")
        except UnicodeDecodeError as e:
            raise FrameError("request header client_id is not UTF-8") from e
        pos += client_len
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def write_unsigned_varint(out: bytearray, n: int) -> None:
    """Appends ``n`` (>= 0) as an unsigned varint."""
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_unsigned_varint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes ending before ``end`` (default: the buffer's end)."""
    if end is None:
        end = len(buf)
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise FrameError("varint truncated")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint too long")


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = read_unsigned_varint(buf, pos)
    for _ in range(count):
        _tag, pos = read_unsigned_varint(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        pos += size
        if pos > len(buf):
            raise FrameError("tagged field truncated")
    return pos


def encode_request_frame(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible_header: bool, body: bytes
) -> bytes:
    """Used by the broker's own clients (marker sender, tests)."""
    cid = client_id.encode() if client_id is not None else None
    head = _REQUEST_HEADER_FIXED.pack(api_key, api_version, correlation_id, -1 if cid is None else len(cid))
    parts = [head]
    if cid:
        parts.append(cid)
    if flexible_header:
        parts.append(b"\x00")
    parts.append(body)
    payload = b"".join(parts)
    return _INT32.pack(len(payload)) + payload


# ---------------------------------------------------------------------------
# The API table

@dataclass(frozen=True, slots=True)
class ApiRange:
    """The versions of one API a broker advertises, accepts and serves."""

    api_key: int
    name: str
    advertised_min: int
    accepted_min: int
    max: int

    def accepts(self, version: int) -> bool:
        return self.accepted_min <= version <= self.max

    def flexible(self, version: int) -> bool:
        """Whether this version uses request header v2 / response header v1."""
        return flexible_from(self.api_key) <= version


# First version with flexible (tagged-field) headers, from Kafka's message definitions
# ("flexibleVersions"); tests check it against kio's schemas. Absent: never flexible.
FLEXIBLE_FROM: dict[int, int] = {
    0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5, 16: 3, 18: 3,
    19: 5, 20: 4, 21: 2, 22: 2, 23: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 29: 2, 30: 2, 31: 2, 32: 4, 33: 2,
    35: 2, 36: 2, 37: 2, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 50: 0, 51: 0, 60: 0, 61: 0, 65: 0, 66: 0, 68: 0, 69: 0,
    76: 0, 77: 0, 78: 0, 79: 0, 83: 0, 84: 0, 85: 0, 86: 0, 87: 0, 88: 0, 89: 0, 90: 0, 91: 0, 92: 0, 93: 0,
}
NEVER_FLEXIBLE = 1 << 15


def flexible_from(api_key: int) -> int:
    """The first version of an API that uses flexible (tagged-field) headers."""
    return FLEXIBLE_FROM.get(api_key, NEVER_FLEXIBLE)


# api_key: (name, advertised_min, accepted_min, max) as Apache Kafka 4.0 advertises.
KAFKA_4_0: dict[int, tuple[str, int, int, int]] = {
    0: ("Produce", 0, 3, 12),
    1: ("Fetch", 4, 4, 17),
    2: ("ListOffsets", 1, 1, 10),
    3: ("Metadata", 0, 0, 13),
    8: ("OffsetCommit", 1, 2, 9),
    9: ("OffsetFetch", 1, 1, 9),
    10: ("FindCoordinator", 0, 0, 6),
    11: ("JoinGroup", 0, 0, 9),
    12: ("Heartbeat", 0, 0, 4),
    13: ("LeaveGroup", 0, 0, 5),
    14: ("SyncGroup", 0, 0, 5),
    15: ("DescribeGroups", 0, 0, 5),
    16: ("ListGroups", 0, 0, 5),
    17: ("SaslHandshake", 0, 0, 1),
    18: ("ApiVersions", 0, 0, 4),
    19: ("CreateTopics", 2, 2, 7),
    20: ("DeleteTopics", 1, 1, 6),
    21: ("DeleteRecords", 0, 0, 2),
    22: ("InitProducerId", 0, 0, 5),
    23: ("OffsetForLeaderEpoch", 2, 2, 4),
    24: ("AddPartitionsToTxn", 0, 0, 5),
    25: ("AddOffsetsToTxn", 0, 0, 4),
    26: ("EndTxn", 0, 0, 5),  # v5: transaction version 2
    27: ("WriteTxnMarkers", 1, 1, 2),
    28: ("TxnOffsetCommit", 0, 0, 5),
    29: ("DescribeAcls", 1, 1, 3),
    30: ("CreateAcls", 1, 1, 3),
    31: ("DeleteAcls", 1, 1, 3),
    32: ("DescribeConfigs", 1, 1, 4),
    33: ("AlterConfigs", 0, 0, 2),
    35: ("DescribeLogDirs", 1, 1, 4),
    36: ("SaslAuthenticate", 0, 0, 2),
    37: ("CreatePartitions", 0, 0, 3),
    42: ("DeleteGroups", 0, 0, 2),
    43: ("ElectLeaders", 0, 0, 2),
    44: ("IncrementalAlterConfigs", 0, 0, 1),
    45: ("AlterPartitionReassignments", 0, 0, 0),
    46: ("ListPartitionReassignments", 0, 0, 0),
    47: ("OffsetDelete", 0, 0, 0),
    50: ("DescribeUserScramCredentials", 0, 0, 0),
    51: ("AlterUserScramCredentials", 0, 0, 0),
    60: ("DescribeCluster", 0, 0, 1),
    61: ("DescribeProducers", 0, 0, 0),
    65: ("DescribeTransactions", 0, 0, 0),
    66: ("ListTransactions", 0, 0, 2),  # v2 (id pattern filter) is from Kafka 4.1: admin clients filter with it
    68: ("ConsumerGroupHeartbeat", 0, 0, 1),  # KIP-848: served from Kafka 4.0
    69: ("ConsumerGroupDescribe", 0, 0, 1),
    # KIP-932 share groups: served from Kafka 4.2 (the 4.2 and 4.4 profiles here)
    76: ("ShareGroupHeartbeat", 1, 1, 1),
    77: ("ShareGroupDescribe", 1, 1, 1),
    78: ("ShareFetch", 1, 1, 2),  # v2: renew acknowledgements (KIP-1222)
    79: ("ShareAcknowledge", 1, 1, 2),
    83: ("InitializeShareGroupState", 0, 0, 0),  # 83-87: the share-state APIs between brokers
    84: ("ReadShareGroupState", 0, 0, 0),
    85: ("WriteShareGroupState", 0, 0, 1),  # v1: DeliveryCompleteCount
    86: ("DeleteShareGroupState", 0, 0, 0),
    87: ("ReadShareGroupStateSummary", 0, 0, 1),
    # KIP-1071 streams groups: served from Kafka 4.2, where streams.version 1 is finalized.
    # v1 and API 93 (KIP-1331 topology descriptions) from protocol/own_schemas.py.
    88: ("StreamsGroupHeartbeat", 0, 0, 1),
    89: ("StreamsGroupDescribe", 0, 0, 1),
    90: ("DescribeShareGroupOffsets", 0, 0, 1),
    91: ("AlterShareGroupOffsets", 0, 0, 0),
    92: ("DeleteShareGroupOffsets", 0, 0, 0),
    93: ("StreamsGroupTopologyDescriptionUpdate", 0, 0, 0),
}
# The share group (KIP-932, with its share-state APIs) and streams group (KIP-1071) APIs:
# off before the 4.2 profile.
APIS_FROM_4_2 = {76: None, 77: None, 78: None, 79: None, 83: None, 84: None, 85: None, 86: None, 87: None,
                 88: None, 89: None, 90: None, 91: None, 92: None, 93: None}

# Maxima of older releases, for the version profile. Only keys that differ from 4.0
# and matter to clients' version inference are listed; missing APIs did not exist.
PROFILE_MAXIMA: dict[str, dict[int, int | None]] = {
    "4.0": dict(APIS_FROM_4_2),
    "2.4": {
        0: 8, 1: 11, 2: 5, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5,
        16: 3, 17: 1, 18: 3, 19: 5, 20: 4, 21: 1, 22: 2, 24: 1, 25: 1, 26: 1, 27: 0, 28: 2,
        23: 3, 29: 1, 30: 1, 31: 1, 32: 2, 33: 1, 35: 1, 36: 1, 37: 1, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 47: 0,
        50: None, 51: None, 60: None, 61: None, 65: None, 66: None, 68: None, 69: None, **APIS_FROM_4_2,
    },
}
# From each release's message definitions (validVersions), capped at what is implemented.
PROFILE_MAXIMA["2.8"] = {
    0: 9, 1: 12, 2: 6, 3: 11, 8: 8, 9: 7, 10: 3, 11: 7, 12: 4, 13: 4, 14: 5, 15: 5, 16: 4, 18: 3, 19: 7,
    20: 6, 21: 2, 22: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 29: 2, 30: 2, 31: 2, 32: 4, 33: 2, 35: 2, 37: 3,
    42: 2, 44: 1, 47: 0, 50: 0, 51: 0, 60: 0, 61: 0, 65: None, 66: None, 68: None, 69: None, **APIS_FROM_4_2,
}
PROFILE_MAXIMA["3.6"] = {
    0: 9, 1: 15, 2: 8, 3: 12, 9: 8, 10: 4, 16: 4, 18: 3, 22: 4, 24: 4, 25: 3, 26: 3, 28: 3, 60: 0, 66: 0,
    68: None, 69: None,  # KIP-848 was early access in 3.7-3.9 and off by default
    **APIS_FROM_4_2,
}
PROFILE_MAXIMA["3.9"] = {0: 11, 2: 9, 26: 4, 60: 1, 66: 1, 68: None, 69: None, **APIS_FROM_4_2}
# share and streams groups production-ready (share.version, streams.version 1); KIP-1331
# (StreamsGroupHeartbeat/Describe v1, StreamsGroupTopologyDescriptionUpdate) came after 4.2
PROFILE_MAXIMA["4.2"] = {88: 0, 89: 0, 93: None}
PROFILE_MAXIMA["4.4"] = {}  # everything implemented is within what 4.4 advertises
_OLD_MINIMA = {0: 3, 2: 1, 8: 2}  # versions Kafka 4 removed (KIP-896) stay refused here
PROFILE_MINIMA: dict[str, dict[int, int]] = {"4.0": {}, "4.2": {}, "4.4": {}, "2.4": _OLD_MINIMA, "2.8": _OLD_MINIMA,
                                             "3.6": _OLD_MINIMA, "3.9": _OLD_MINIMA}
# transaction.version (KIP-890) a profile supports and finalizes, or None before 4.0. Kafka
# 4.x finalizes 2 on a new cluster: clients end transactions with EndTxn v5 (epoch bump),
# add partitions with Produce v12 and TxnOffsetCommit v5.
TRANSACTION_VERSION: dict[str, int | None] = {"2.4": None, "2.8": None, "3.6": None, "3.9": None,
                                              "4.0": 2, "4.2": 2, "4.4": 2}
# share.version (KIP-932) and streams.version (KIP-1071) a profile finalizes: 1 from Kafka
# 4.2 (its metadata version 4.2-IV1 bootstraps both), where share and streams groups are on.
SHARE_VERSION: dict[str, int] = {"4.2": 1, "4.4": 1}
STREAMS_VERSION: dict[str, int] = {"4.2": 1, "4.4": 1}


class ApiTable:
    """The ranges in force for one version profile, restricted to implemented APIs."""

    def __init__(self, implemented: set[int], profile: str = "4.0", transaction_version: int | None = None) -> None:
        """``transaction_version``: the finalized level of the transaction.version feature, as
        an operator sets it (kafka-features.sh upgrade/downgrade); None: the profile's."""
        if profile not in PROFILE_MAXIMA:
            raise ValueError(f"unknown emulate.kafka.version {profile!r}; known: {sorted(PROFILE_MAXIMA)}")
        self.profile = profile
        supported = TRANSACTION_VERSION.get(profile)
        if transaction_version is not None and (supported is None or not 0 <= transaction_version <= supported):
            raise ValueError(f"emulate.transaction.version {transaction_version}: profile {profile} supports "
                             + ("no transaction.version feature" if supported is None else f"0 to {supported}"))
        self.transaction_version = supported if transaction_version is None else transaction_version
        maxima = PROFILE_MAXIMA[profile]
        self.ranges: dict[int, ApiRange] = {}
        for key, (name, adv_min, acc_min, max_v) in KAFKA_4_0.items():
            if key not in implemented:
                continue
            if key in maxima:
                if maxima[key] is None:
                    continue
                max_v = maxima[key]
            acc_min = max(acc_min, PROFILE_MINIMA[profile].get(key, acc_min))
            adv_min = min(adv_min, acc_min)
            if max_v < acc_min:
                continue
            self.ranges[key] = ApiRange(key, name, adv_min, acc_min, max_v)

    def get(self, api_key: int) -> ApiRange | None:
        return self.ranges.get(api_key)

    def accepts(self, api_key: int, version: int) -> bool:
        r = self.ranges.get(api_key)
        return r is not None and r.accepts(version)

    @property
    def supported_features(self) -> dict[str, int]:
        """Feature levels the broker supports (name -> highest level)."""
        level = TRANSACTION_VERSION.get(self.profile)
        out = {} if level is None else {"transaction.version": level}
        if self.profile in SHARE_VERSION:
            out["share.version"] = SHARE_VERSION[self.profile]
        if self.profile in STREAMS_VERSION:
            out["streams.version"] = STREAMS_VERSION[self.profile]
        return out

    @property
    def features(self) -> dict[str, int]:
        """Finalized feature levels ApiVersions v3+ reports (name -> level); level 0 is not
        listed, as Kafka leaves out a feature finalized at 0."""
        level = self.transaction_version
        out = {} if not level else {"transaction.version": level}
        if self.profile in SHARE_VERSION:
            out["share.version"] = SHARE_VERSION[self.profile]
        if self.profile in STREAMS_VERSION:
            out["streams.version"] = STREAMS_VERSION[self.profile]
        return out


def api_name(api_key: int) -> str:
    entry = KAFKA_4_0.get(api_key)
    return entry[0] if entry else api_key_map.get(api_key, f"api-{api_key}")


# ---------------------------------------------------------------------------
# The shape check

_FIXED_SIZES = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16, "error_code": 2}
_INT16 = struct.Struct(">h")


class ShapeError(ValueError):
    pass


def _shape_uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # the usual one-byte case, without a call
        return buf[pos], pos + 1
    try:
        return read_unsigned_varint(buf, pos, end)
    except FrameError as e:
        raise ShapeError(f"{e} in the request") from None


def _shape_length(buf, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """(length or -1 for null, position after the prefix)."""
    if flexible:
        n, pos = _shape_uvarint(buf, pos, end)
        return n - 1, pos
    fmt = _INT32 if wide else _INT16
    if pos + fmt.size > end:
        raise ShapeError("length prefix runs past the end of the request")
    n = fmt.unpack_from(buf, pos)[0]
    if n < -1:
        raise ShapeError(f"negative length {n}")
    return n, pos + fmt.size


@cache
def _shape_plan(cls: type) -> tuple[bool, tuple]:
    """(flexible, steps); runs of fixed-size fields are merged into one ("skip", n) step."""
    steps: list = []
    for f in fields(cls):
        if f.name.startswith("__") or "tag" in f.metadata:
            continue  # tagged fields are skipped by size in the tagged section
        kind = classify_field(f)
        nullable = is_optional(f)
        if isinstance(kind, EntityField):
            steps.append(("entity", kind.type_, nullable))
        elif isinstance(kind, EntityTupleField):
            steps.append(("entities", kind.type_, nullable))
        elif isinstance(kind, PrimitiveTupleField):
            steps.append(("values", f.metadata["kafka_type"], nullable))
        elif f.metadata["kafka_type"] in _FIXED_SIZES:
            size = _FIXED_SIZES[f.metadata["kafka_type"]]
            if steps and steps[-1][0] == "skip":
                size += steps.pop()[1]
            steps.append(("skip", size, False))
        else:
            steps.append(("value", f.metadata["kafka_type"], nullable))
    return bool(getattr(cls, "__flexible__", False)), tuple(steps)


# Each schema's walk is compiled once into straight-line Python: the plan's steps become
# statements, the one-byte varint of a flexible length is read inline, and an array of
# fixed-size values is skipped in one step. Refusals and their messages are the walk's.

def _shape_length_code(var: str, flexible: bool, wide: bool) -> list[str]:
    """Reads a length or count into ``var`` (-1 for null), as ``_shape_length`` does: a
    fixed-size prefix or a varint of one byte, or two (a produced batch's length), without a call."""
    if not flexible:
        size = 4 if wide else 2
        return [f"if pos + {size} > end: raise ShapeError('length prefix runs past the end of the request')",
                f"{var} = {'_int32' if wide else '_int16'}(buf, pos)[0]",
                f"if {var} < -1: raise ShapeError(f'negative length {{{var}}}')",
                f"pos += {size}"]
    return [f"if pos < end and buf[pos] < 0x80: {var} = buf[pos] - 1; pos += 1",
            f"elif pos + 1 < end and buf[pos + 1] < 0x80: {var} = (buf[pos] & 0x7F | buf[pos + 1] << 7) - 1; pos += 2",
            f"else: {var}, pos = _shape_length(buf, pos, end, True, {wide})"]


def _shape_value_code(kafka_type: str, flexible: bool, nullable: bool) -> list[str]:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return [f"pos += {size}", f"if pos > end: raise ShapeError({kafka_type + ' runs past the end of the request'!r})"]
    lines = _shape_length_code("n", flexible, wide=kafka_type != "string")
    if not nullable:
        lines.append(f"if n < 0: raise ShapeError({'non-nullable ' + kafka_type + ' was serialized as null'!r})")
    lines += ["if n > 0: pos += n",
              f"if pos > end: raise ShapeError({kafka_type + ' runs past the end of the request'!r})"]
    return lines


class _ShapeCompiler:
    def __init__(self) -> None:
        self.env: dict = {"ShapeError": ShapeError, "_shape_length": _shape_length, "_shape_uvarint": _shape_uvarint,
                          "_int16": _INT16.unpack_from, "_int32": _INT32.unpack_from}
        self.names: dict[type, str] = {}
        self.sources: list[str] = []

    def walk(self, cls: type) -> str:
        if cls in self.names:
            return self.names[cls]
        name = self.names[cls] = f"_walk_{len(self.names)}"
        flexible, steps = _shape_plan(cls)
        body = ["if depth > 16: raise ShapeError('structures nested too deep')"]
        for kind, arg, nullable in steps:
            if kind == "skip":
                body += [f"pos += {arg}", "if pos > end: raise ShapeError('request truncated')"]
            elif kind == "value":
                body += _shape_value_code(arg, flexible, nullable)
            elif kind == "entity" and nullable:  # an int8 before it: -1 for null (as kio reads it)
                body += ["if pos >= end: raise ShapeError('request truncated')",
                         "pos += 1",
                         f"if buf[pos - 1] < 0x80: pos = {self.walk(arg)}(buf, pos, end, depth + 1)"]
            elif kind == "entity":
                body.append(f"pos = {self.walk(arg)}(buf, pos, end, depth + 1)")
            else:
                body += _shape_length_code("count", flexible, wide=True)
                if not nullable:  # Kafka: "non-nullable field was serialized as null"
                    body.append("if count < 0: raise ShapeError('non-nullable array was serialized as null')")
                body.append("if count > end - pos:"
                            " raise ShapeError(f'array of {count} elements in {end - pos} remaining bytes')")
                if kind == "entities":
                    body += ["for _ in range(count):", f"    pos = {self.walk(arg)}(buf, pos, end, depth + 1)"]
                elif arg in _FIXED_SIZES:  # every element the same size: one step
                    body += [f"if count > 0: pos += count * {_FIXED_SIZES[arg]}",
                             f"if pos > end: raise ShapeError({arg + ' runs past the end of the request'!r})"]
                else:
                    body += ["for _ in range(count):"] + ["    " + line for line in _shape_value_code(arg, flexible, True)]
        if flexible:
            body += [
                "if pos < end and buf[pos] == 0: pos += 1  # no tagged fields: the usual case",
                "else:",
                "    tags, pos = _shape_uvarint(buf, pos, end)",
                "    if tags > end - pos: raise ShapeError(f'{tags} tagged fields in {end - pos} remaining bytes')",
                "    for _ in range(tags):",
                "        _tag, pos = _shape_uvarint(buf, pos, end)",
                "        size, pos = _shape_uvarint(buf, pos, end)",
                "        pos += size",
                "        if pos > end: raise ShapeError('tagged field runs past the end of the request')",
            ]
        body.append("return pos")
        self.sources.append(f"def {name}(buf, pos, end, depth):\n" + "\n".join("    " + line for line in body))
        return name


@cache
def _shape_walk(cls: type):
    compiler = _ShapeCompiler()
    name = compiler.walk(cls)
    exec(compile("\n\n".join(compiler.sources), f"<shape walk {cls.__module__}.{cls.__name__}>", "exec"), compiler.env)
    return compiler.env[name]


def shape_walker(cls: type):
    """``cls``'s walk, called as ``walk(buf, offset, len(buf), 0)`` (what ``check`` does)."""
    return _shape_walk(cls)


def check_shape(cls: type, buf, offset: int = 0) -> None:
    """Raises ShapeError unless every length and count in ``buf[offset:]`` fits."""
    _shape_walk(cls)(buf, offset, len(buf), 0)


# ---------------------------------------------------------------------------
# Decoding

class DecodeError(ValueError):
    """A request body kio could not parse."""


# The APIs some of whose versions kio has no schema for (protocol/own_schemas.py has them);
# that module is loaded only when one of them is first decoded or answered.
OWN_SCHEMA_APIS = frozenset({88, 89, 93})


def own_schema(api_key: int, version: int, direction: str) -> type | None:
    """The message class protocol/own_schemas.py defines for ``api_key`` v``version``
    (``direction`` "REQUESTS" or "RESPONSES"), or None where kio has it."""
    if api_key not in OWN_SCHEMA_APIS:
        return None
    from protocol import own_schemas

    return getattr(own_schemas, direction).get((api_key, version))


def kio_schema(api_key: int, version: int, kind: str) -> type:
    """kio's message class of ``api_key`` v``version`` (``kind``: "request" or "response"),
    found by its path in kio's schema index, as kio.index finds it, without loading
    kio.index and pkgutil's name resolver (whose pattern the first request would compile).
    KeyError where kio has no such schema."""
    module, _, name = schema_name_map[api_key_map[api_key]][version][EntityType[kind]].partition(":")
    return getattr(importlib.import_module(module), name)


@cache
def request_class(api_key: int, version: int) -> type:
    own = own_schema(api_key, version, "REQUESTS")
    return own if own is not None else kio_schema(api_key, version, "request")


@cache
def _reader(cls: type):
    return entity_reader(cls)


# A transactional producer sends the same AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
# body in every transaction; kio's messages are immutable, so one decoded copy of each
# body serves its repeats (at most _REPEATS_KEPT bodies of up to _REPEAT_BYTES each per
# API version, so what a client can make the broker keep stays small).
_REPEATING_APIS = frozenset({24, 25, 26})
_REPEATS_KEPT = 64
_REPEAT_BYTES = 1024


@cache
def request_decoder(api_key: int, version: int):
    """``decode_request`` for one API version, its class, reader and shape walk looked up
    once: the request path calls it for every request."""
    cls = request_class(api_key, version)
    read = _reader(cls)
    walk = shape_walker(cls)

    def decode(body: bytes | memoryview, offset: int = 0):
        try:
            walk(body, offset, len(body), 0)  # kio's native reader aborts on absurd counts
            return read(body, offset)[0]
        except Exception as e:  # kio raises several types for malformed input
            raise DecodeError(f"cannot decode {api_name(api_key)} v{version}: {e}") from e

    if api_key not in _REPEATING_APIS:
        return decode
    decoded: dict[bytes, Any] = {}

    def decode_repeat(body: bytes | memoryview, offset: int = 0):
        if len(body) - offset > _REPEAT_BYTES:
            return decode(body, offset)
        key = bytes(body[offset:])
        request = decoded.get(key)
        if request is None:
            request = decode(body, offset)
            if len(decoded) >= _REPEATS_KEPT:
                decoded.clear()
            decoded[key] = request
        return request

    return decode_repeat


def decode_request(api_key: int, version: int, body: bytes | memoryview, offset: int = 0):
    return request_decoder(api_key, version)(body, offset)
