"""The __transaction_state record layout, byte for byte as Kafka writes it.

Key (TransactionLogKey): int16 record type 0, then TransactionalId as a non-flexible
string (int16 length). Value (TransactionLogValue): int16 version, then
  v0 (non-flexible): ProducerId i64, ProducerEpoch i16, TransactionTimeoutMs i32,
     TransactionStatus i8, TransactionPartitions nullable array (i32 count, -1 = null) of
     {Topic string, PartitionIds [i32]}, LastUpdateTimestampMs i64, StartTimestampMs i64;
  v1 (flexible): the same fields with compact (uvarint length + 1) strings and arrays,
     a tagged-field section after every struct, and in the top-level section
     PreviousProducerId (tag 0, i64), NextProducerId (tag 1, i64),
     ClientTransactionVersion (tag 2, i16), NextProducerEpoch (tag 3, i16),
     each written only when it differs from its default.
TransactionPartitions is null when the state is Empty. A tombstone (None value) means
the transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from coordinator.runtime import UnknownKeyVersion, UnknownValueVersion
from coordinator.transaction.metadata import NO_PRODUCER_EPOCH, TransactionMetadata, TransactionState
from protocol.request_wire import FrameError, read_unsigned_varint, write_unsigned_varint
from protocol.names import TopicPartition

TRANSACTION_LOG_KEY_TYPE = 0
HIGHEST_VALUE_VERSION = 1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2
_TAG_NEXT_PRODUCER_EPOCH = 3


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    # (topic, partition ids) in write order; None is the null array (state Empty).
    transaction_partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    next_producer_epoch: int = -1
    client_transaction_version: int = 0


# -- key ---------------------------------------------------------------------------------


@lru_cache(maxsize=4096)  # every transaction writes three records under its id's key
def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", TRANSACTION_LOG_KEY_TYPE, len(raw)) + raw


def decode_key(data: bytes) -> str:
    (version,) = _I16.unpack_from(data, 0)
    if version != TRANSACTION_LOG_KEY_TYPE:
        raise UnknownKeyVersion("transaction log", version)
    reader = _Reader(data, 2)
    transactional_id = reader.string()
    if transactional_id is None:
        raise ValueError("transaction log key has a null transactional id")
    return transactional_id


# -- value -------------------------------------------------------------------------------


_HEAD = struct.Struct(">hqhib")  # version, ProducerId, ProducerEpoch, TransactionTimeoutMs, TransactionStatus
_TIMES = struct.Struct(">qq")  # LastUpdateTimestampMs, StartTimestampMs
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# A tagged field: tag and payload size (each a single varint byte), then the payload
_TAGGED_I64 = struct.Struct(">BBq")
_TAGGED_I16 = struct.Struct(">BBh")


def encode_value(value: TransactionLogValue, version: int = HIGHEST_VALUE_VERSION) -> bytes:
    return _encode_value(version, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                         value.transaction_status, value.transaction_partitions,
                         value.transaction_last_update_timestamp_ms, value.transaction_start_timestamp_ms,
                         value.previous_producer_id, value.next_producer_id, value.client_transaction_version,
                         value.next_producer_epoch)


def encode_metadata_value(metadata: TransactionMetadata) -> bytes:
    """``encode_value(value_from_metadata(metadata))`` without building the value in
    between: the coordinator writes three per transaction."""
    return _encode_value(HIGHEST_VALUE_VERSION, metadata.producer_id, metadata.producer_epoch,
                         metadata.txn_timeout_ms, metadata.state.id, _value_partitions(metadata),
                         metadata.txn_last_update_timestamp_ms, metadata.txn_start_timestamp_ms,
                         metadata.previous_producer_id, metadata.next_producer_id,
                         metadata.client_transaction_version, -1)


def _encode_value(version: int, producer_id: int, producer_epoch: int, timeout_ms: int, status: int,
                  partitions: tuple[tuple[str, tuple[int, ...]], ...] | None, last_update_ms: int, start_ms: int,
                  previous_producer_id: int, next_producer_id: int, client_transaction_version: int,
                  next_producer_epoch: int) -> bytes:
    """Written with prepared structs, joined once."""
    if version not in (0, 1):
        raise UnknownValueVersion("transaction log", version)
    flexible = version >= 1
    parts = [_HEAD.pack(version, producer_id, producer_epoch, timeout_ms, status),
             _partitions_bytes(partitions, flexible), _TIMES.pack(last_update_ms, start_ms)]
    if flexible:
        tagged = []  # each written only when it differs from its default
        if previous_producer_id != -1:
            tagged.append(_TAGGED_I64.pack(_TAG_PREVIOUS_PRODUCER_ID, 8, previous_producer_id))
        if next_producer_id != -1:
            tagged.append(_TAGGED_I64.pack(_TAG_NEXT_PRODUCER_ID, 8, next_producer_id))
        if client_transaction_version != 0:
            tagged.append(_TAGGED_I16.pack(_TAG_CLIENT_TRANSACTION_VERSION, 2, client_transaction_version))
        if next_producer_epoch != -1:
            tagged.append(_TAGGED_I16.pack(_TAG_NEXT_PRODUCER_EPOCH, 2, next_producer_epoch))
        parts.append(bytes((len(tagged),)))  # their count: at most 4, one varint byte
        parts += tagged
    return b"".join(parts)


@lru_cache(maxsize=1024)  # a transaction's Ongoing and Prepare records carry the same partitions
def _partitions_bytes(partitions: tuple[tuple[str, tuple[int, ...]], ...] | None, flexible: bool) -> bytes:
    """TransactionPartitions as the value writes them (None: the null array)."""
    out = bytearray()
    if partitions is None:
        if flexible:
            out.append(0)
        else:
            out += _I32.pack(-1)
        return bytes(out)
    if flexible:
        write_unsigned_varint(out, len(partitions) + 1)
    else:
        out += _I32.pack(len(partitions))
    for topic, ids in partitions:
        raw = topic.encode()
        if flexible:
            write_unsigned_varint(out, len(raw) + 1)
            out += raw
            write_unsigned_varint(out, len(ids) + 1)
        else:
            out += _I16.pack(len(raw))
            out += raw
            out += _I32.pack(len(ids))
        out += struct.pack(f">{len(ids)}i", *ids)
        if flexible:
            out.append(0)  # no tagged fields in a partition entry
    return bytes(out)


def decode_value(data: bytes) -> TransactionLogValue:
    (version,) = _I16.unpack_from(data, 0)
    if version not in (0, 1):
        raise UnknownValueVersion("transaction log", version)
    flexible = version >= 1
    r = _Reader(data, 0)
    _, producer_id, producer_epoch, timeout_ms, status = r.unpack(_HEAD)
    count = r.compact_length() if flexible else r.unpack(_I32)[0]
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    if count < 0:
        partitions = None
    else:
        entries = []
        for _ in range(count):
            topic = r.compact_string() if flexible else r.string()
            if topic is None:
                raise ValueError("transaction log partition entry has a null topic")
            n = r.compact_length() if flexible else r.unpack(_I32)[0]
            ids = r.unpack(_partition_ids(max(n, 0)))
            if flexible:
                r.skip_tagged_fields()
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update_ms, start_ms = r.unpack(_TIMES)
    previous_producer_id = next_producer_id = next_producer_epoch = -1
    client_transaction_version = 0
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            payload = r.take(size)
            if tag == _TAG_PREVIOUS_PRODUCER_ID:
                previous_producer_id = struct.unpack(">q", payload)[0]
            elif tag == _TAG_NEXT_PRODUCER_ID:
                next_producer_id = struct.unpack(">q", payload)[0]
            elif tag == _TAG_CLIENT_TRANSACTION_VERSION:
                client_transaction_version = struct.unpack(">h", payload)[0]
            elif tag == _TAG_NEXT_PRODUCER_EPOCH:
                next_producer_epoch = struct.unpack(">h", payload)[0]
            # Tags from newer versions are skipped, as Kafka's generated readers do.
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, status, partitions, last_update_ms,
                               start_ms, previous_producer_id, next_producer_id, next_producer_epoch,
                               client_transaction_version)


@lru_cache(maxsize=64)
def _partition_ids(count: int) -> struct.Struct:
    return struct.Struct(f">{count}i")


# -- metadata <-> value ------------------------------------------------------------------


def _value_partitions(metadata: TransactionMetadata) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The value's TransactionPartitions for the metadata: null when Empty."""
    if metadata.state is TransactionState.DEAD:
        raise ValueError("a Dead transactional id is written as a tombstone, not a value")
    if metadata.state is TransactionState.EMPTY:
        if metadata.topic_partitions:
            raise ValueError(
                f"transactional id {metadata.transactional_id!r} is Empty but has partitions"
            )
        return None
    return partitions_by_topic(metadata.topic_partitions)


def value_from_metadata(metadata: TransactionMetadata) -> TransactionLogValue:
    return TransactionLogValue(
        metadata.producer_id,
        metadata.producer_epoch,
        metadata.txn_timeout_ms,
        metadata.state.id,
        _value_partitions(metadata),
        metadata.txn_last_update_timestamp_ms,
        metadata.txn_start_timestamp_ms,
        metadata.previous_producer_id,
        metadata.next_producer_id,
        -1,  # next_producer_epoch: not kept in the metadata
        metadata.client_transaction_version,
    )


@lru_cache(maxsize=1024)  # a transaction's Ongoing and Prepare records carry the same set
def partitions_by_topic(partitions: frozenset[TopicPartition]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The partitions as (topic, partition ids), both sorted: the log value's order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return tuple((topic, tuple(ids)) for topic, ids in by_topic.items())


def metadata_from_value(
    transactional_id: str, value: TransactionLogValue, last_producer_epoch: int = NO_PRODUCER_EPOCH
) -> TransactionMetadata:
    state = TransactionState.from_id(value.transaction_status)
    partitions: frozenset[tuple[str, int]] = frozenset()
    if state is not TransactionState.EMPTY and value.transaction_partitions:
        partitions = frozenset((topic, p) for topic, ids in value.transaction_partitions for p in ids)
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        next_producer_id=value.next_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=last_producer_epoch,
        txn_timeout_ms=value.transaction_timeout_ms,
        state=state,
        topic_partitions=partitions,
        txn_start_timestamp_ms=value.transaction_start_timestamp_ms,
        txn_last_update_timestamp_ms=value.transaction_last_update_timestamp_ms,
        client_transaction_version=value.client_transaction_version,
    )


# -- primitives --------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("transaction log record is truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(chunk)

    def unpack(self, layout: struct.Struct) -> tuple:
        pos = self.pos
        if pos + layout.size > len(self.data):
            raise ValueError("transaction log record is truncated")
        self.pos = pos + layout.size
        return layout.unpack_from(self.data, pos)

    def uvarint(self) -> int:
        try:
            value, self.pos = read_unsigned_varint(self.data, self.pos)
        except FrameError as e:
            raise ValueError(f"transaction log record: {e}") from None
        return value

    def compact_length(self) -> int:
        """Compact arrays/strings store length + 1; 0 is null (-1)."""
        return self.uvarint() - 1

    def string(self) -> str | None:
        (n,) = self.unpack(_I16)
        return None if n < 0 else self.take(n).decode()

    def compact_string(self) -> str | None:
        n = self.compact_length()
        return None if n < 0 else self.take(n).decode()

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())
