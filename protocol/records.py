"""Record batches v2 (magic 2), sans-IO: the batch as a zero-copy view over bytes, and
the records inside it (decode, build, control markers).

Layout (DefaultRecordBatch.java): the 61-byte header is read in place with struct;
records are only decoded when a feature needs them. The broker rewrites base offset and
partition leader epoch in place: neither is covered by the CRC, which runs from the
attributes field (offset 21) to the end.

The hot path (a produced batch validated and appended, a fetch) reads headers only;
the records themselves are for compaction, timestamp lookup, coordinators writing their
logs, the Spark client, tests.

Record layout (DefaultRecord.java): length varint, attributes int8, timestamp delta
varlong, offset delta varint, key and value as varint-length bytes (-1 = null),
header count varint, headers as (varint-length utf-8 key, varint-length bytes value).
All varints are zig-zag. Decoding checks every length against the bytes left, so
garbage raises InvalidBatch(CORRUPT_MESSAGE) instead of looping or allocating.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import cramjam

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


# -- the records inside a batch ---------------------------------------------------------

# ControlRecordType.java
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

# A compressed batch may not inflate past this (a tiny zstd payload can claim gigabytes).
MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024  # uncompressed bytes per chunk, as snappy-java writes


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class NewRecord(NamedTuple):
    """A record to write; any (key, value, headers, timestamp_ms) tuple works as well."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_ms: int


def _corrupt(message: str) -> InvalidBatch:
    return InvalidBatch(message, "CORRUPT_MESSAGE")


# ---------------------------------------------------------------------------
# decoding


def decode_records(batch: RecordBatch, max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES) -> list[Record]:
    """The records of ``batch`` with absolute offsets and timestamps."""
    buf = memoryview(batch.buf)
    start = batch.pos + RECORD_BATCH_OVERHEAD
    end = batch.pos + batch.size
    if batch.magic != MAGIC_V2:
        raise _corrupt(f"unsupported magic {batch.magic}")
    if end < start or end > len(buf):
        raise _corrupt(f"batch length {batch.header.batch_length} does not fit the buffer")
    count = batch.records_count
    if count < 0:
        raise _corrupt(f"negative record count {count}")
    data = buf[start:end]
    codec = batch.compression
    if codec != COMPRESSION_NONE:
        data = _decompress(codec, data, max_decompressed_bytes)

    base_offset = batch.base_offset
    append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None
    base_timestamp = batch.base_timestamp
    records = []
    pos = 0
    size = len(data)
    for _ in range(count):  # every record consumes at least one byte, so this is bounded by size
        record, pos = _read_record(data, pos, size, base_offset, base_timestamp, append_time)
        records.append(record)
    if pos != size:
        raise _corrupt(f"{size - pos} bytes left after the {count} records the batch declares")
    return records


def keyed_records(batch: RecordBatch) -> list[tuple[bytes | None, bytes | None, int, int]]:
    """(key, value, offset, timestamp) of every record, headers skipped: what a coordinator
    load needs of its many small batches. Uncompressed batches are read in place, with
    one-byte varints (small keys, single-record batches) taken inline; anything else goes
    through ``decode_records``. Malformed input raises InvalidBatch, as there."""
    if batch.compression != COMPRESSION_NONE or batch.magic != MAGIC_V2:
        return [(r.key, r.value, r.offset, r.timestamp) for r in decode_records(batch)]
    end = batch.pos + batch.size
    if end < batch.pos + RECORD_BATCH_OVERHEAD or end > len(batch.buf):
        raise _corrupt(f"batch length {batch.header.batch_length} does not fit the buffer")
    out = []
    _read_keyed(batch.buf, batch.pos + RECORD_BATCH_OVERHEAD, end, batch.records_count, batch.base_offset,
                batch.base_timestamp, batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None, out)
    return out


# base offset, batch length, magic, attributes, base timestamp, max timestamp, record count
_KEYED_HEAD = struct.Struct(">qi4xb4xh4xqq14xi")


def keyed_records_in(buf, pos: int, end: int) -> list[tuple[bytes | None, bytes | None, int, int]]:
    """``keyed_records`` of every non-control batch among the whole batches in
    ``buf[pos:end]`` (a chunk of a log), read from the bytes without a RecordBatch per
    batch: a coordinator load walks a hundred thousand one-record batches."""
    out = []
    while pos < end:
        if end - pos < RECORD_BATCH_OVERHEAD:
            raise _corrupt(f"batch header truncated: {end - pos} bytes")
        base_offset, length, magic, attributes, base_timestamp, max_timestamp, count = _KEYED_HEAD.unpack_from(buf, pos)
        batch_end = pos + length + LOG_OVERHEAD
        if batch_end < pos + RECORD_BATCH_OVERHEAD or batch_end > end:
            raise _corrupt(f"batch length {length} does not fit the buffer")
        if not attributes & CONTROL_FLAG:
            if attributes & COMPRESSION_MASK or magic != MAGIC_V2:
                out.extend(keyed_records(RecordBatch(buf, pos)))
            else:
                _read_keyed(buf, pos + RECORD_BATCH_OVERHEAD, batch_end, count, base_offset, base_timestamp,
                            max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None, out)
        pos = batch_end
    return out


def _read_keyed(data, pos: int, end: int, count: int, base_offset: int, base_timestamp: int,
                append_time: int | None, out: list) -> None:
    """Appends (key, value, offset, timestamp) of the ``count`` records in data[pos:end]."""
    if count < 0:
        raise _corrupt(f"negative record count {count}")
    append = out.append
    for _ in range(count):
        length, pos = _read_varint(data, pos, end, 5)
        if length <= 0 or length > end - pos:
            raise _corrupt(f"record length {length} with {end - pos} bytes left")
        record_end = pos + length
        # attributes (unused in v2), then the timestamp and offset deltas: one byte each
        # in a coordinator's single-record batch
        p = pos + 1
        if p + 2 <= record_end and data[p] < 0x80 and data[p + 1] < 0x80:
            t, o = data[p], data[p + 1]
            timestamp_delta, offset_delta, p = (t >> 1) ^ -(t & 1), (o >> 1) ^ -(o & 1), p + 2
        else:
            timestamp_delta, p = _read_varint(data, p, record_end, 10)
            offset_delta, p = _read_varint(data, p, record_end, 5)
        key, p = _read_bytes(data, p, record_end)
        value, p = _read_bytes(data, p, record_end)
        append((key, value, base_offset + offset_delta,
                append_time if append_time is not None else base_timestamp + timestamp_delta))
        pos = record_end
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left after the {count} records the batch declares")


def check_keys_for_compaction(batch: RecordBatch, partition_name: str) -> None:
    """A compacted topic takes only keyed records: Kafka's LogValidator refuses the
    whole batch with INVALID_RECORD and names every keyless record's index."""
    errors = tuple(
        (i, f"Compacted topic cannot accept message without key in topic partition {partition_name}")
        for i, record in enumerate(decode_records(batch))
        if record.key is None
    )
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise InvalidBatch(
            f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]",
            "INVALID_RECORD",
            errors,
        )


def _read_varint(data, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    limit = 7 * max_bytes
    while True:
        if pos >= end:
            raise _corrupt("varint runs past the end of its record")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift >= limit:
            raise _corrupt("varint too long")


def _read_bytes(data, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos < end and data[pos] < 0x80:  # a length below 64: one byte
        b = data[pos]
        n, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        n, pos = _read_varint(data, pos, end, 5)
    if n < 0:  # Java reads any negative length as null
        return None, pos
    if n > end - pos:
        raise _corrupt(f"field of {n} bytes but only {end - pos} left in the record")
    return bytes(data[pos : pos + n]), pos + n


def _read_record(data, pos: int, size: int, base_offset: int, base_timestamp: int, append_time: int | None):
    length, pos = _read_varint(data, pos, size, 5)
    if length <= 0 or length > size - pos:
        raise _corrupt(f"record length {length} with {size - pos} bytes left")
    end = pos + length
    pos += 1  # attributes: unused in v2
    timestamp_delta, pos = _read_varint(data, pos, end, 10)
    offset_delta, pos = _read_varint(data, pos, end, 5)
    key, pos = _read_bytes(data, pos, end)
    value, pos = _read_bytes(data, pos, end)
    header_count, pos = _read_varint(data, pos, end, 5)
    if header_count < 0:
        raise _corrupt(f"negative header count {header_count}")
    headers = []
    for _ in range(header_count):
        key_len, pos = _read_varint(data, pos, end, 5)
        if key_len < 0 or key_len > end - pos:
            raise _corrupt(f"header key length {key_len} with {end - pos} bytes left")
        try:
            header_key = str(data[pos : pos + key_len], "utf-8")
        except UnicodeDecodeError as e:
            raise _corrupt("header key is not UTF-8") from e
        header_value, pos = _read_bytes(data, pos + key_len, end)
        headers.append((header_key, header_value))
    if pos != end:
        raise _corrupt(f"record declares {length} bytes but its fields use {length - (end - pos)}")
    timestamp = append_time if append_time is not None else base_timestamp + timestamp_delta
    return Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)), pos


# ---------------------------------------------------------------------------
# compression


def _decompress(codec: int, payload: memoryview, limit: int) -> memoryview:
    if codec == COMPRESSION_SNAPPY:
        return _snappy_decompress(payload, limit)
    module = {COMPRESSION_GZIP: cramjam.gzip, COMPRESSION_LZ4: cramjam.lz4, COMPRESSION_ZSTD: cramjam.zstd}.get(codec)
    if module is None:
        raise _corrupt(f"unknown compression codec {codec}")
    declared = _declared_size(codec, payload)
    if declared is not None and declared > limit:
        raise _corrupt(f"compressed records declare {declared} bytes, over the {limit} limit")
    return _bounded_decompress(module.decompress_into, payload, limit, declared)


def _declared_size(codec: int, payload: memoryview) -> int | None:
    """The uncompressed size the payload announces, if its format carries one.

    Only a hint (a later zstd/gzip frame or member may follow), but it lets a payload
    that announces gigabytes be refused before any allocation, and sizes the output
    buffer right the first time for the usual single frame.
    """
    n = len(payload)
    if codec == COMPRESSION_GZIP and n >= 18:  # ISIZE trailer: size mod 2**32 of the last member
        return int.from_bytes(payload[n - 4 :], "little")
    if codec == COMPRESSION_ZSTD and n >= 6 and bytes(payload[:4]) == b"\x28\xb5\x2f\xfd":
        descriptor = payload[4]
        single_segment = descriptor & 0x20
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
        if fcs_size == 0 or n < pos + fcs_size:
            return None
        size = int.from_bytes(payload[pos : pos + fcs_size], "little")
        return size + 256 if fcs_size == 2 else size
    if codec == COMPRESSION_LZ4 and n >= 15 and bytes(payload[:4]) == b"\x04\x22\x4d\x18" and payload[4] & 0x08:
        return int.from_bytes(payload[6:14], "little")
    return None


def _bounded_decompress(decompress_into, payload: memoryview, limit: int, declared: int | None) -> memoryview:
    # Grow the output buffer geometrically: the total work stays within twice the limit,
    # and a payload that would inflate past the limit is refused. Anonymous mmap rather
    # than bytearray: its pages cost nothing until written, so a corrupt payload that
    # fails early does not pay for zeroing a large buffer.
    size = max(1, min(limit, max(64 * 1024, 4 * len(payload), declared or 0)))
    while True:
        out = mmap.mmap(-1, size)
        try:
            n = decompress_into(payload, out)
        except cramjam.DecompressionError as e:
            if size < limit and "buffer" in str(e):  # cramjam's "failed to write whole buffer"
                size = min(limit, size * 4)
                continue
            raise _corrupt(f"cannot decompress records: {e}") from e
        except (ValueError, TypeError) as e:
            raise _corrupt(f"cannot decompress records: {e}") from e
        return memoryview(out)[:n]


def _snappy_chunks(payload: memoryview) -> list[memoryview]:
    """Raw snappy blocks: one (librdkafka) or the chunks of a xerial stream (Java client)."""
    if len(payload) < 16 or bytes(payload[:8]) != _XERIAL_MAGIC:
        return [payload]
    chunks = []
    pos = 16  # magic, version, compatible version: the versions are not checked, as in Java
    while pos < len(payload):
        if len(payload) - pos < 4:
            raise _corrupt("snappy chunk length truncated")
        (n,) = _INT32.unpack_from(payload, pos)
        pos += 4
        if n < 0 or n > len(payload) - pos:
            raise _corrupt(f"snappy chunk of {n} bytes with {len(payload) - pos} left")
        chunks.append(payload[pos : pos + n])
        pos += n
    return chunks


def _snappy_decompress(payload: memoryview, limit: int) -> memoryview:
    chunks = _snappy_chunks(payload)
    try:
        sizes = [cramjam.snappy.decompress_raw_len(chunk) for chunk in chunks]
    except cramjam.DecompressionError as e:
        raise _corrupt(f"cannot decompress records: {e}") from e
    total = sum(sizes)
    if total > limit:
        raise _corrupt(f"snappy payload inflates to {total} bytes, over the {limit} limit")
    out = bytearray(total)
    view = memoryview(out)
    pos = 0
    for chunk, n in zip(chunks, sizes):
        try:
            written = cramjam.snappy.decompress_raw_into(chunk, view[pos : pos + n])
        except cramjam.DecompressionError as e:
            raise _corrupt(f"cannot decompress records: {e}") from e
        if written != n:
            raise _corrupt("snappy chunk shorter than it declares")
        pos += n
    return view


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        parts = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == COMPRESSION_LZ4:
        # Kafka's Lz4BlockInputStream decompresses each block on its own: no linked blocks.
        compressor = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


# ---------------------------------------------------------------------------
# building


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)  # zig-zag; Python's >> keeps the sign
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(1)  # zig-zag -1
        return
    _write_varint(out, len(value))
    out += value


@functools.lru_cache(maxsize=1024)
def _varint(value: int) -> bytes:
    """``_write_varint``'s bytes for ``value``, kept: a record's deltas and lengths repeat."""
    out = bytearray()
    _write_varint(out, value)
    return bytes(out)


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers) -> None:
    parts = [b"\x00", _varint(timestamp_delta), _varint(offset_delta)]  # attributes, then the deltas
    for field in (key, value):
        if field is None:
            parts.append(b"\x01")  # zig-zag -1
        else:
            parts.append(_varint(len(field)))
            parts.append(field)
    parts.append(_varint(len(headers)))
    for header_key, header_value in headers:
        header = bytearray()
        _write_bytes(header, header_key.encode("utf-8"))
        _write_bytes(header, header_value)
        parts.append(header)
    body = b"".join(parts)
    out += _varint(len(body))
    out += body


def build_batch(
    records: Sequence[NewRecord | tuple],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    compression: int = COMPRESSION_NONE,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """A CreateTime v2 batch of ``records`` (key, value, headers, timestamp_ms) with a valid CRC.

    Offset deltas run 0..n-1; the base timestamp is the first record's, as Kafka's
    MemoryRecordsBuilder does. Uncompressed records are written after the header's
    room in the one buffer (coordinators build a batch per event).
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0][3]
    out = bytearray(RECORD_BATCH_OVERHEAD)
    for delta, (key, value, headers, timestamp_ms) in enumerate(records):
        encode_record(out, delta, timestamp_ms - base_timestamp, key, value, headers)
    if compression != COMPRESSION_NONE:
        out[RECORD_BATCH_OVERHEAD:] = compress(compression, bytes(out[RECORD_BATCH_OVERHEAD:]))
    max_timestamp = base_timestamp if len(records) == 1 else max(r[3] for r in records)
    _finish_batch(out, base_offset, partition_leader_epoch,
                  compression | (TRANSACTIONAL_FLAG if transactional else 0), len(records) - 1,
                  base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, len(records))
    return out


def assemble_batch(payload: bytes, **header: int) -> bytearray:
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    out[RECORD_BATCH_OVERHEAD:] = payload
    _finish_batch(out, header["base_offset"], header["partition_leader_epoch"], header["attributes"],
                  header["last_offset_delta"], header["base_timestamp"], header["max_timestamp"],
                  header["producer_id"], header["producer_epoch"], header["base_sequence"],
                  header["records_count"])
    return out


def _finish_batch(out: bytearray, base_offset: int, partition_leader_epoch: int, attributes: int,
                  last_offset_delta: int, base_timestamp: int, max_timestamp: int, producer_id: int,
                  producer_epoch: int, base_sequence: int, records_count: int) -> None:
    """Writes the header of the batch whose records follow it in ``out``, CRC last."""
    _HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2,
                      0, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                      producer_epoch, base_sequence, records_count)
    _UINT32.pack_into(out, _CRC, crc.crc32c(memoryview(out)[_CRC_START:]))


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """An end-transaction marker batch as MemoryRecords.writeEndTransactionalMarker writes it.

    One is written per partition per transaction: the record is encoded once per
    (commit, coordinator epoch) and the header packed straight into the batch."""
    out = bytearray(RECORD_BATCH_OVERHEAD)
    out += _control_record(commit, coordinator_epoch)
    _finish_batch(out, base_offset, partition_leader_epoch, TRANSACTIONAL_FLAG | CONTROL_FLAG, 0,
                  timestamp_ms, timestamp_ms, producer_id, producer_epoch, NO_SEQUENCE, 1)
    return out


@functools.lru_cache(maxsize=64)
def _control_record(commit: bool, coordinator_epoch: int) -> bytes:
    """The one record of a marker batch: its key holds the control type, its value the
    coordinator epoch (version 0 of both)."""
    key = _CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    body = bytearray()
    encode_record(body, 0, 0, key, value, ())
    return bytes(body)


def read_control_record(batch: RecordBatch) -> tuple[int, int]:
    """(control type, coordinator epoch) of an end-transaction marker batch."""
    if not batch.is_control:
        raise _corrupt("not a control batch")
    records = decode_records(batch)
    if not records:
        raise _corrupt("control batch without a record")
    key, value = records[0].key, records[0].value
    # ControlRecordType.parse / EndTransactionMarker.deserializeValue: newer versions
    # keep the v0 fields first, so only the length is checked.
    if key is None or len(key) < _CONTROL_KEY.size:
        raise _corrupt("control record key too short")
    key_version, control_type = _CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise _corrupt(f"invalid control record key version {key_version}")
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        raise _corrupt(f"control record type {control_type} is not a transaction marker")
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise _corrupt("end transaction marker value too short")
    value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if value_version < 0:
        raise _corrupt(f"invalid end transaction marker version {value_version}")
    return control_type, coordinator_epoch


# ---------------------------------------------------------------------------
# ListOffsets helpers


def record_at_or_after_timestamp(batch: RecordBatch, timestamp_ms: int) -> Record | None:
    """The first record whose timestamp is >= ``timestamp_ms`` (LogSegment.findOffsetByTimestamp)."""
    for record in decode_records(batch):
        if record.timestamp >= timestamp_ms:
            return record
    return None


def record_with_max_timestamp(batch: RecordBatch) -> Record | None:
    """The first record carrying the batch's largest timestamp (RecordBatch.offsetOfMaxTimestamp).

    The maximum is taken over the records themselves, so a batch whose header
    max timestamp disagrees with its records still answers consistently. None only
    for a batch with no records (compaction can leave such batches behind).
    """
    best = None
    for record in decode_records(batch):
        if best is None or record.timestamp > best.timestamp:
            best = record
    return best
