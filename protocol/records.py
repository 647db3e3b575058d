"""RecordBatch v2 (magic 2) as a zero-copy view over bytes.

Layout (DefaultRecordBatch.java): the 61-byte header is read in place with struct;
records are only decoded when a feature needs them (see protocol.record_codec).
The broker rewrites base offset and partition leader epoch in place: neither is
covered by the CRC, which runs from the attributes field (offset 21) to the end.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from protocol import crc

RECORD_BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # base offset + length: bytes not counted by the length field
MAGIC_V2 = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)

CREATE_TIME = 0
LOG_APPEND_TIME = 1

# Offsets of header fields.
_BASE_OFFSET = 0
_LENGTH = 8
_LEADER_EPOCH = 12
_MAGIC = 16
_CRC = 17
_ATTRIBUTES = 21
_CRC_START = _ATTRIBUTES

_HEADER = struct.Struct(">qiiBIhiqqqhii")
_BASE_OFFSET_FMT = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_LENGTH_AND_MAGIC = struct.Struct(">qiiB")


class InvalidBatch(ValueError):
    """A batch that cannot be read: the Kafka error to answer is in ``error_name``."""

    def __init__(self, message: str, error_name: str = "CORRUPT_MESSAGE",
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.error_name = error_name
        # (index of the record in its batch, why it was refused): ProduceResponse's RecordErrors
        self.record_errors = record_errors


class BatchHeader(NamedTuple):
    """The fixed header fields; a NamedTuple because one is built per batch on the hot path."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


class RecordBatch:
    """A view of one batch at ``pos`` in ``buf`` (bytes, bytearray or memoryview).

    Mutating methods need a writable buffer (bytearray or a memoryview over one).
    """

    __slots__ = ("buf", "pos", "_h")

    def __init__(self, buf, pos: int = 0, header: BatchHeader | None = None) -> None:
        """``header``: the batch's header when the caller has already read it."""
        if header is None:
            if len(buf) - pos < RECORD_BATCH_OVERHEAD:
                raise InvalidBatch(f"batch header truncated: {len(buf) - pos} bytes", "CORRUPT_MESSAGE")
            header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
        self.buf = buf
        self.pos = pos
        self._h = header

    # header fields -------------------------------------------------------
    @property
    def header(self) -> BatchHeader:
        return self._h

    @property
    def base_offset(self) -> int:
        return _BASE_OFFSET_FMT.unpack_from(self.buf, self.pos)[0]

    @property
    def size(self) -> int:
        """Bytes this batch occupies, header included."""
        return self._h.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._h.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def magic(self) -> int:
        return self._h.magic

    @property
    def attributes(self) -> int:
        return self._h.attributes

    @property
    def compression(self) -> int:
        return self._h.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self._h.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._h.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self._h.attributes & CONTROL_FLAG)

    @property
    def producer_id(self) -> int:
        return self._h.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._h.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self._h.base_sequence

    @property
    def last_sequence(self) -> int:
        """base_sequence + last_offset_delta, wrapping past Int32.MAX to 0."""
        if self._h.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self._h.base_sequence, self._h.last_offset_delta)

    @property
    def records_count(self) -> int:
        return self._h.records_count

    @property
    def last_offset_delta(self) -> int:
        return self._h.last_offset_delta

    @property
    def base_timestamp(self) -> int:
        return self._h.base_timestamp

    @property
    def max_timestamp(self) -> int:
        return self._h.max_timestamp

    @property
    def partition_leader_epoch(self) -> int:
        return _INT32.unpack_from(self.buf, self.pos + _LEADER_EPOCH)[0]

    @property
    def has_producer_id(self) -> bool:
        return self._h.producer_id >= 0

    def bytes(self) -> memoryview:
        return memoryview(self.buf)[self.pos : self.pos + self.size]

    # checks --------------------------------------------------------------
    def compute_crc(self) -> int:
        end = self.pos + self.size
        return crc.crc32c(memoryview(self.buf)[self.pos + _CRC_START : end])

    def crc_valid(self) -> bool:
        return self.compute_crc() == self._h.crc

    # in-place rewrites ---------------------------------------------------
    def set_base_offset(self, offset: int) -> None:
        _BASE_OFFSET_FMT.pack_into(self.buf, self.pos, offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        _INT32.pack_into(self.buf, self.pos + _LEADER_EPOCH, epoch)

    def set_log_append_time(self, timestamp_ms: int) -> None:
        """Mark the batch LogAppendTime with ``timestamp_ms`` and recompute the CRC.

        As Kafka does, only the max timestamp is set; the records' deltas are left as
        sent, and readers take every record's timestamp from the batch max timestamp.
        """
        attrs = self._h.attributes | TIMESTAMP_TYPE_MASK
        _INT16.pack_into(self.buf, self.pos + _ATTRIBUTES, attrs)
        _INT64.pack_into(self.buf, self.pos + 35, timestamp_ms)
        self._refresh_crc()

    def _refresh_crc(self) -> None:
        _UINT32.pack_into(self.buf, self.pos + _CRC, self.compute_crc())
        self._h = BatchHeader._make(_HEADER.unpack_from(self.buf, self.pos))


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wrap past Int32.MAX."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


def peek_batch_size(buf, pos: int = 0) -> int | None:
    """Total size of the batch at ``pos`` if its length field is readable, else None."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _INT32.unpack_from(buf, pos + _LENGTH)[0] + LOG_OVERHEAD


def iter_batches(buf, pos: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
    """Batches laid end to end in ``buf``; stops at a trailing partial batch.

    Stored data was validated at append, so this only checks sizes. Use
    ``validate_produce_records`` for untrusted input.
    """
    end = len(buf) if end is None else end
    while pos < end:
        size = peek_batch_size(buf, pos)
        if size is None or size < RECORD_BATCH_OVERHEAD or pos + size > end:
            return
        yield RecordBatch(buf, pos)
        pos += size


def validate_produce_records(records, max_message_bytes: int) -> RecordBatch:
    """Checks a Produce partition's records in the order Kafka does
    (ProduceRequest.validateRecords, ByteBufferLogInputStream, UnifiedLog, LogValidator).

    Returns the single batch as a writable view over a private copy, so offsets can
    be rewritten in place. Raises InvalidBatch with the Kafka error name.
    """
    n = len(records)
    if n < LOG_OVERHEAD:
        raise InvalidBatch("Produce request must have at least one record batch per partition", "INVALID_RECORD")
    # The header is read once. Records shorter than it are read zero-padded: each field
    # past their end is only looked at after a check that has refused them.
    h = BatchHeader._make(_HEADER.unpack_from(
        records if n >= RECORD_BATCH_OVERHEAD else bytes(records).ljust(RECORD_BATCH_OVERHEAD, b"\0")))
    length = h.batch_length
    if length < 14:  # LegacyRecord.RECORD_OVERHEAD_V0: not even an old-format record
        raise InvalidBatch(f"record size {length} is less than the minimum record overhead (14)", "CORRUPT_MESSAGE")
    size = length + LOG_OVERHEAD
    if n <= _MAGIC or size > n:
        raise InvalidBatch("Produce request must have at least one record batch per partition", "INVALID_RECORD")
    magic = h.magic
    if magic > MAGIC_V2:
        raise InvalidBatch(f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}",
                           "CORRUPT_MESSAGE")
    if magic != MAGIC_V2:
        raise InvalidBatch("Produce requests are only allowed to contain record batches with magic version 2",
                           "INVALID_RECORD")
    if size != n:
        raise InvalidBatch("Produce requests are only allowed to contain exactly one record batch per partition",
                           "INVALID_RECORD")
    if size < RECORD_BATCH_OVERHEAD:
        raise InvalidBatch(f"batch of {size} bytes is shorter than the batch header", "CORRUPT_MESSAGE")
    if h.base_offset != 0:
        raise InvalidBatch(f"The baseOffset of the record batch should be 0, but it is {h.base_offset}",
                           "INVALID_RECORD")
    if size > max_message_bytes:
        raise InvalidBatch(f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}", "MESSAGE_TOO_LARGE")
    if crc.crc32c(memoryview(records)[_CRC_START:]) != h.crc:
        raise InvalidBatch("Record is corrupt (stored crc does not match the computed crc)", "CORRUPT_MESSAGE")
    attributes = h.attributes
    if attributes & CONTROL_FLAG:
        raise InvalidBatch("Clients are not allowed to write control records", "INVALID_RECORD")
    if h.records_count <= 0:
        raise InvalidBatch("a batch must hold at least one record", "INVALID_RECORD")
    if h.last_offset_delta != h.records_count - 1:
        raise InvalidBatch(
            f"last offset delta {h.last_offset_delta} does not match record count {h.records_count}",
            "INVALID_RECORD",
        )
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidBatch("a batch with a producer id must carry a sequence", "INVALID_RECORD")
    if attributes & TRANSACTIONAL_FLAG and h.producer_id < 0:
        raise InvalidBatch("a transactional batch must carry a producer id", "INVALID_RECORD")
    return RecordBatch(bytearray(records), 0, h)
