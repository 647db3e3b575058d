"""protocol.records: the batch view, validation, and the records inside a batch.

The oracle is kafka-python's independent v2 implementation. kafka-python only
ships gzip itself; for snappy, lz4 and zstd it imports python-snappy, lz4 and
zstandard, which are not installed here, so the ``kafka_codecs`` fixture hands it
cramjam's raw primitives under those names. kafka-python still does its own batch
layout, record encoding and xerial snappy chunking; only the block codecs are shared.
"""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

import kafka.codec
import kafka.record.default_records as kafka_records
from protocol import records as record_batches
from protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    CREATE_TIME,
    LOG_APPEND_TIME,
    InvalidBatch,
    NewRecord,
    Record,
    RecordBatch,
    build_batch,
    build_control_batch,
    decode_records,
    increment_sequence,
    iter_batches,
    read_control_record,
    record_at_or_after_timestamp,
    record_with_max_timestamp,
    validate_produce_records,
)

ALL_CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
COMPRESSED = ALL_CODECS[1:]
INT32_MAX = 0x7FFFFFFF
HEADER = struct.Struct(">qiiBIhiqqqhii")


@pytest.fixture
def kafka_codecs(monkeypatch):
    monkeypatch.setattr(
        kafka.codec,
        "snappy",
        SimpleNamespace(
            compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
            decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)),
        ),
    )
    monkeypatch.setattr(kafka.codec, "lz4", SimpleNamespace())
    monkeypatch.setattr(kafka.codec, "zstd", SimpleNamespace())
    monkeypatch.setattr(kafka_records, "lz4_encode", lambda b: bytes(cramjam.lz4.compress(b)))
    monkeypatch.setattr(kafka_records, "lz4_decode", lambda b: bytes(cramjam.lz4.decompress(b)))
    monkeypatch.setattr(kafka_records, "zstd_encode", lambda b: bytes(cramjam.zstd.compress(b)))
    monkeypatch.setattr(kafka_records, "zstd_decode", lambda b: bytes(cramjam.zstd.decompress(b)))


def sample_records(n: int = 5, base_ts: int = 1_700_000_000_000) -> list[NewRecord]:
    """Compressible records with null keys/values, headers and out-of-order timestamps."""
    out = []
    for i in range(n):
        key = None if i % 3 == 2 else f"key-{i}".encode()
        value = None if i % 4 == 3 else (f"value {i} " * (20 + i)).encode()
        headers = [("trace", f"t{i}".encode()), ("empty", None)] if i % 2 == 0 else []
        ts = base_ts + (i * 7 if i != 2 else -1000)
        out.append(NewRecord(key, value, headers, ts))
    return out


def kafka_python_batch(records, compression=COMPRESSION_NONE, transactional=False, producer_id=-1,
                       producer_epoch=-1, base_sequence=-1) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for offset, (key, value, headers, ts) in enumerate(records):
        assert builder.append(offset, ts, key, value, list(headers)) is not None
    return builder.build()


def kafka_python_records(buf) -> list[Record]:
    batch = DefaultRecordBatch(bytes(buf))
    assert batch.validate_crc()
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]


def expected_records(records, base_offset=0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(headers)) for i, (key, value, headers, ts) in enumerate(records)
    ]


def with_header(buf, **changes) -> bytearray:
    """A copy of ``buf`` with header fields replaced and the CRC recomputed."""
    names = ["base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
             "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
             "base_sequence", "records_count"]
    out = bytearray(buf)
    fields = dict(zip(names, HEADER.unpack_from(out)))
    fields.update(changes)
    HEADER.pack_into(out, 0, *fields.values())
    return fix_crc(out)


def fix_crc(buf) -> bytearray:
    out = bytearray(buf)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return out


def batch_with_payload(payload: bytes, records_count: int, compression: int = COMPRESSION_NONE) -> bytearray:
    """A well-formed header (valid CRC) around an arbitrary records section."""
    out = bytearray(61) + payload
    HEADER.pack_into(out, 0, 0, len(out) - 12, 0, 2, 0, compression, max(records_count - 1, 0),
                     1000, 1000, -1, -1, -1, records_count)
    return fix_crc(out)


def zigzag(v: int) -> bytes:
    raw = (v << 1) ^ (v >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def assert_corrupt(buf, **kwargs):
    with pytest.raises(InvalidBatch) as info:
        decode_records(RecordBatch(buf), **kwargs)
    assert info.value.error_name == "CORRUPT_MESSAGE"


# ---------------------------------------------------------------------------
# the header view against kafka-python


def test_view_fields_match_kafka_python_builder():
    records = sample_records(6)
    buf = kafka_python_batch(records, transactional=True, producer_id=4242, producer_epoch=7, base_sequence=100)
    batch = RecordBatch(buf)
    oracle = DefaultRecordBatch(bytes(buf))
    assert batch.size == len(buf)
    assert batch.base_offset == oracle.base_offset == 0
    assert batch.partition_leader_epoch == oracle.leader_epoch
    assert batch.magic == 2
    assert batch.header.crc == oracle.crc
    assert batch.crc_valid()
    assert batch.attributes == oracle.attributes
    assert batch.compression == COMPRESSION_NONE
    assert batch.timestamp_type == CREATE_TIME
    assert batch.is_transactional and not batch.is_control
    assert batch.last_offset_delta == oracle.last_offset_delta == 5
    assert batch.last_offset == oracle.last_offset == 5
    assert batch.next_offset == oracle.next_offset == 6
    assert batch.records_count == oracle.records_count == 6
    assert batch.base_timestamp == oracle.first_timestamp == records[0].timestamp_ms
    assert batch.max_timestamp == oracle.max_timestamp == max(r.timestamp_ms for r in records)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 100)
    assert batch.has_producer_id
    assert batch.last_sequence == oracle.last_sequence == 105
    assert bytes(batch.bytes()) == bytes(buf)


def test_view_of_a_non_idempotent_batch():
    batch = RecordBatch(kafka_python_batch(sample_records(2)))
    assert not batch.has_producer_id and not batch.is_transactional
    assert batch.producer_id == -1 and batch.producer_epoch == -1
    assert batch.base_sequence == -1 and batch.last_sequence == -1


def test_view_at_an_offset_in_a_larger_buffer():
    first = build_batch(sample_records(2))
    second = build_batch(sample_records(3), base_offset=2)
    buf = bytearray(first + second)
    views = list(iter_batches(buf))
    assert [(b.pos, b.base_offset, b.records_count) for b in views] == [(0, 0, 2), (len(first), 2, 3)]
    assert all(b.crc_valid() for b in views)
    assert decode_records(views[1]) == expected_records(sample_records(3), base_offset=2)
    # a trailing partial batch is not yielded
    assert len(list(iter_batches(buf[:-1]))) == 1


def test_header_shorter_than_61_bytes_is_corrupt():
    with pytest.raises(InvalidBatch) as info:
        RecordBatch(bytes(60))
    assert info.value.error_name == "CORRUPT_MESSAGE"


# ---------------------------------------------------------------------------
# decode_records on kafka-python's batches, build_batch through kafka-python's reader


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_decode_records_of_kafka_python_batches(kafka_codecs, codec):
    records = sample_records(40)
    buf = kafka_python_batch(records, compression=codec, producer_id=9, producer_epoch=0, base_sequence=0)
    batch = RecordBatch(buf)
    assert batch.compression == codec  # kafka-python falls back to none when compression does not pay
    assert decode_records(batch) == expected_records(records) == kafka_python_records(buf)


def test_decode_multi_chunk_xerial_snappy_from_kafka_python(kafka_codecs):
    # kafka-python cuts the stream into 32 KiB chunks, as snappy-java does
    rng = random.Random(5)
    records = [NewRecord(None, bytes(rng.choice(b"abcdef") for _ in range(30_000)), [], 10 + i) for i in range(4)]
    buf = kafka_python_batch(records, compression=COMPRESSION_SNAPPY)
    assert RecordBatch(buf).compression == COMPRESSION_SNAPPY
    payload = bytes(buf[61:])
    assert payload.startswith(b"\x82SNAPPY\x00")
    assert decode_records(RecordBatch(buf)) == expected_records(records)


def test_decode_raw_snappy_as_librdkafka_writes_it(kafka_codecs, monkeypatch):
    monkeypatch.setattr(kafka_records, "snappy_encode", lambda b: kafka.codec.snappy_encode(b, xerial_compatible=False))
    records = sample_records(10)
    buf = kafka_python_batch(records, compression=COMPRESSION_SNAPPY)
    assert not bytes(buf[61:]).startswith(b"\x82SNAPPY")
    assert decode_records(RecordBatch(buf)) == expected_records(records)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_build_batch_read_by_kafka_python(kafka_codecs, codec):
    records = sample_records(25)
    buf = build_batch(
        records,
        base_offset=1000,
        producer_id=77,
        producer_epoch=3,
        base_sequence=INT32_MAX - 5,
        transactional=True,
        compression=codec,
        partition_leader_epoch=12,
    )
    oracle = DefaultRecordBatch(bytes(buf))
    assert oracle.validate_crc()
    assert oracle.compression_type == codec
    assert oracle.base_offset == 1000 and oracle.leader_epoch == 12
    assert oracle.is_transactional and not oracle.is_control_batch
    assert (oracle.producer_id, oracle.producer_epoch, oracle.base_sequence) == (77, 3, INT32_MAX - 5)
    assert oracle.last_offset_delta == 24 and oracle.records_count == 25
    assert oracle.first_timestamp == records[0].timestamp_ms
    assert oracle.max_timestamp == max(r.timestamp_ms for r in records)
    assert kafka_python_records(buf) == expected_records(records, base_offset=1000)
    assert decode_records(RecordBatch(buf)) == expected_records(records, base_offset=1000)


def test_build_batch_snappy_is_xerial_framed():
    data = bytes(100_000)
    buf = build_batch([(None, data, (), 1)], compression=COMPRESSION_SNAPPY)
    payload = bytes(buf[61:])
    assert payload[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    # 32 KiB uncompressed per chunk, each chunk decodable on its own
    pos, total = 16, 0
    while pos < len(payload):
        (n,) = struct.unpack_from(">i", payload, pos)
        total += len(cramjam.snappy.decompress_raw(payload[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    assert pos == len(payload) and total > len(data) and len(decode_records(RecordBatch(buf))[0].value) == len(data)


def test_build_batch_lz4_frame_has_independent_blocks():
    # Kafka's Lz4BlockInputStream decompresses each block without the previous one's dictionary
    buf = build_batch([(None, b"abc" * 100_000, (), 1)], compression=COMPRESSION_LZ4)
    payload = bytes(buf[61:])
    assert payload[:4] == bytes.fromhex("04224d18")
    flg = payload[4]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # block independence


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decode_output_larger_than_the_first_buffer_guess(codec):
    # 8 MiB of zeros compresses to a few KiB: the output buffer has to grow several times
    records = [(b"k", bytes(8 << 20), (), 5), (None, b"tail", (), 6)]
    batch = RecordBatch(build_batch(records, compression=codec))
    assert decode_records(batch) == expected_records(records)


def test_build_batch_accepts_plain_tuples_and_rejects_empty():
    assert build_batch([(b"k", b"v", [], 1)]) == build_batch([NewRecord(b"k", b"v", (), 1)])
    with pytest.raises(ValueError):
        build_batch([])


def test_build_batch_defaults_are_a_plain_producer_batch():
    batch = RecordBatch(build_batch([(None, b"v", (), 42)]))
    assert (batch.base_offset, batch.partition_leader_epoch) == (0, -1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.attributes == 0 and batch.crc_valid()
    assert (batch.base_timestamp, batch.max_timestamp) == (42, 42)


def test_varint_edges_round_trip():
    big = bytes(300)  # two-byte length varint
    records = [
        (b"", b"", [("", b"")], -(1 << 40)),  # empty (not null) fields, negative timestamp
        (big, None, [("h" * 200, big)], 1 << 40),  # timestamp delta needs a long varint
    ]
    batch = RecordBatch(build_batch(records, base_offset=(1 << 40)))
    assert decode_records(batch) == expected_records(records, base_offset=1 << 40)
    assert kafka_python_records(batch.buf) == expected_records(records, base_offset=1 << 40)


# ---------------------------------------------------------------------------
# in-place rewrites


def test_set_base_offset_and_leader_epoch_keep_the_crc_valid():
    buf = kafka_python_batch(sample_records(3))
    batch = RecordBatch(buf)
    crc = batch.header.crc
    batch.set_base_offset(123_456_789_012)
    batch.set_partition_leader_epoch(17)
    assert batch.base_offset == 123_456_789_012 and batch.partition_leader_epoch == 17
    assert batch.last_offset == 123_456_789_014
    assert batch.crc_valid() and struct.unpack_from(">I", buf, 17)[0] == crc
    assert [r.offset for r in decode_records(batch)] == [123_456_789_012, 123_456_789_013, 123_456_789_014]
    oracle = DefaultRecordBatch(bytes(buf))
    assert oracle.validate_crc() and oracle.base_offset == 123_456_789_012 and oracle.leader_epoch == 17


def test_set_log_append_time_recomputes_the_crc():
    records = sample_records(4)
    buf = build_batch(records, compression=COMPRESSION_GZIP, transactional=True, producer_id=1, producer_epoch=0,
                      base_sequence=0)
    batch = RecordBatch(buf)
    old_crc = batch.header.crc
    batch.set_log_append_time(1_800_000_000_000)
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert batch.max_timestamp == 1_800_000_000_000
    assert batch.compression == COMPRESSION_GZIP and batch.is_transactional  # other attributes kept
    assert batch.header.crc != old_crc and batch.crc_valid()
    assert [r.timestamp for r in decode_records(batch)] == [1_800_000_000_000] * 4
    oracle = DefaultRecordBatch(bytes(buf))
    assert oracle.validate_crc() and oracle.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in oracle] == [1_800_000_000_000] * 4


def test_set_on_a_memoryview_over_a_bytearray():
    store = bytearray(b"x" * 10) + build_batch(sample_records(2))
    batch = RecordBatch(memoryview(store), 10)
    batch.set_base_offset(50)
    batch.set_log_append_time(99)
    assert store[:10] == b"x" * 10
    assert RecordBatch(store, 10).crc_valid()
    assert [(r.offset, r.timestamp) for r in decode_records(RecordBatch(store, 10))] == [(50, 99), (51, 99)]


# ---------------------------------------------------------------------------
# validate_produce_records


def valid_produce_batch(**kwargs) -> bytearray:
    return build_batch(sample_records(3), **kwargs)


def assert_rejected(records, error_name, max_message_bytes=1 << 20):
    with pytest.raises(InvalidBatch) as info:
        validate_produce_records(records, max_message_bytes)
    assert info.value.error_name == error_name


def test_validate_accepts_and_copies():
    sent = bytes(valid_produce_batch(producer_id=5, producer_epoch=0, base_sequence=0, transactional=True))
    batch = validate_produce_records(sent, 1 << 20)
    batch.set_base_offset(10)
    assert batch.base_offset == 10 and batch.crc_valid()
    assert RecordBatch(sent).base_offset == 0  # the request bytes are untouched


def test_validate_rejects_a_batch_shorter_than_its_header():
    # a complete magic-2 batch whose length field makes it shorter than 61 bytes
    buf = bytearray(valid_produce_batch()[:40])
    struct.pack_into(">i", buf, 8, 28)
    assert_rejected(bytes(buf), "CORRUPT_MESSAGE")


def test_validate_rejects_two_batches():
    one = valid_produce_batch()
    assert_rejected(bytes(one + one), "INVALID_RECORD")


def test_validate_rejects_a_bad_crc():
    buf = valid_produce_batch()
    buf[-1] ^= 0xFF
    assert_rejected(bytes(buf), "CORRUPT_MESSAGE")


def test_validate_rejects_a_control_batch():
    assert_rejected(bytes(build_control_batch(5, 0, True, 1, 1000)), "INVALID_RECORD")


def test_validate_rejects_count_and_offset_delta_mismatch():
    assert_rejected(bytes(with_header(valid_produce_batch(), records_count=4)), "INVALID_RECORD")
    assert_rejected(bytes(with_header(valid_produce_batch(), last_offset_delta=1)), "INVALID_RECORD")


def test_validate_rejects_a_batch_without_records():
    assert_rejected(bytes(with_header(valid_produce_batch(), records_count=0, last_offset_delta=-1)), "INVALID_RECORD")


def test_validate_rejects_a_batch_over_max_message_bytes():
    buf = bytes(valid_produce_batch())
    validate_produce_records(buf, len(buf))
    assert_rejected(buf, "MESSAGE_TOO_LARGE", max_message_bytes=len(buf) - 1)


def test_validate_rejects_a_producer_id_without_sequence():
    assert_rejected(bytes(valid_produce_batch(producer_id=5, producer_epoch=0)), "INVALID_RECORD")


def test_validate_rejects_transactional_without_producer_id():
    assert_rejected(bytes(valid_produce_batch(transactional=True)), "INVALID_RECORD")


# ---------------------------------------------------------------------------
# sequences


def test_increment_sequence_wraps_past_int32_max():
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT32_MAX - 3, 3) == INT32_MAX
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 5) == 3
    assert increment_sequence(0, INT32_MAX) == INT32_MAX


def test_last_sequence_wraps():
    buf = build_batch(sample_records(5), producer_id=1, producer_epoch=0, base_sequence=INT32_MAX - 1)
    batch = RecordBatch(buf)
    assert batch.last_sequence == 2
    assert batch.last_sequence == DefaultRecordBatch(bytes(buf)).last_sequence


# ---------------------------------------------------------------------------
# control batches


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_layout_byte_for_byte(commit):
    buf = build_control_batch(producer_id=0x0102030405, producer_epoch=9, commit=commit, coordinator_epoch=33,
                              timestamp_ms=1_700_000_000_123, base_offset=500)
    control_type = 1 if commit else 0
    record = (
        b"\x00"  # attributes
        + zigzag(0)  # timestamp delta
        + zigzag(0)  # offset delta
        + zigzag(4) + struct.pack(">hh", 0, control_type)  # key: version 0, type
        + zigzag(6) + struct.pack(">hi", 0, 33)  # value: version 0, coordinator epoch
        + zigzag(0)  # no headers
    )
    records_section = zigzag(len(record)) + record
    assert len(buf) == 61 + len(records_section)
    assert struct.unpack_from(">q", buf, 0)[0] == 500
    assert struct.unpack_from(">i", buf, 8)[0] == len(buf) - 12
    assert struct.unpack_from(">i", buf, 12)[0] == -1
    assert buf[16] == 2
    assert struct.unpack_from(">I", buf, 17)[0] == crc32c.crc32c(bytes(buf[21:]))
    assert struct.unpack_from(">h", buf, 21)[0] == 0x30  # transactional | control, CreateTime, no compression
    assert struct.unpack_from(">i", buf, 23)[0] == 0
    assert struct.unpack_from(">q", buf, 27)[0] == 1_700_000_000_123
    assert struct.unpack_from(">q", buf, 35)[0] == 1_700_000_000_123
    assert struct.unpack_from(">q", buf, 43)[0] == 0x0102030405
    assert struct.unpack_from(">h", buf, 51)[0] == 9
    assert struct.unpack_from(">i", buf, 53)[0] == -1
    assert struct.unpack_from(">i", buf, 57)[0] == 1
    assert bytes(buf[61:]) == records_section

    batch = RecordBatch(buf)
    assert batch.is_control and batch.is_transactional and batch.crc_valid()
    assert read_control_record(batch) == (control_type, 33)
    oracle = DefaultRecordBatch(bytes(buf))
    assert oracle.validate_crc() and oracle.is_control_batch
    (marker,) = list(oracle)
    assert marker.commit == commit and marker.abort == (not commit) and marker.offset == 500


def test_control_type_constants():
    assert (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT) == (0, 1)


def test_read_control_record_of_a_kafka_python_style_marker_with_a_newer_version():
    # newer key/value versions keep the v0 fields first: only the length matters
    key = struct.pack(">hh", 1, CONTROL_TYPE_ABORT) + b"\x00\x00"
    value = struct.pack(">hi", 3, 77) + b"extra"
    buf = with_header(build_batch([(key, value, (), 5)], producer_id=1, producer_epoch=0),
                      attributes=0x30)
    assert read_control_record(RecordBatch(buf)) == (CONTROL_TYPE_ABORT, 77)


@pytest.mark.parametrize(
    "key,value",
    [
        (struct.pack(">h", 0), struct.pack(">hi", 0, 1)),  # key too short
        (None, struct.pack(">hi", 0, 1)),  # null key
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1)),  # negative key version
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1)),  # LEADER_CHANGE is not a transaction marker
        (struct.pack(">hh", 0, 1), struct.pack(">h", 0)),  # value too short
        (struct.pack(">hh", 0, 1), None),  # null value
        (struct.pack(">hh", 0, 1), struct.pack(">hi", -1, 1)),  # negative value version
    ],
)
def test_read_control_record_rejects_malformed_markers(key, value):
    buf = with_header(build_batch([(key, value, (), 5)], producer_id=1, producer_epoch=0), attributes=0x30)
    with pytest.raises(InvalidBatch) as info:
        read_control_record(RecordBatch(buf))
    assert info.value.error_name == "CORRUPT_MESSAGE"


def test_read_control_record_rejects_data_and_empty_control_batches():
    with pytest.raises(InvalidBatch) as info:
        read_control_record(RecordBatch(build_batch(sample_records(1))))
    assert info.value.error_name == "CORRUPT_MESSAGE"
    empty = with_header(batch_with_payload(b"", 0), attributes=0x30)
    with pytest.raises(InvalidBatch) as info:
        read_control_record(RecordBatch(empty))
    assert info.value.error_name == "CORRUPT_MESSAGE"


# ---------------------------------------------------------------------------
# ListOffsets helpers


def test_record_at_or_after_timestamp():
    records = [(None, b"a", (), 100), (None, b"b", (), 300), (None, b"c", (), 200), (None, b"d", (), 300)]
    batch = RecordBatch(build_batch(records, base_offset=10))
    assert record_at_or_after_timestamp(batch, 0).offset == 10
    assert record_at_or_after_timestamp(batch, 100).offset == 10
    assert record_at_or_after_timestamp(batch, 101).offset == 11
    assert record_at_or_after_timestamp(batch, 250).offset == 11
    assert record_at_or_after_timestamp(batch, 300).value == b"b"
    assert record_at_or_after_timestamp(batch, 301) is None


def test_record_with_max_timestamp_is_the_first_one_carrying_it():
    records = [(None, b"a", (), 100), (None, b"b", (), 300), (None, b"c", (), 200), (None, b"d", (), 300)]
    batch = RecordBatch(build_batch(records, base_offset=10))
    best = record_with_max_timestamp(batch)
    assert (best.offset, best.timestamp, best.value) == (11, 300, b"b")


def test_timestamp_helpers_under_log_append_time():
    buf = build_batch([(None, b"a", (), 100), (None, b"b", (), 300)], base_offset=4)
    batch = RecordBatch(buf)
    batch.set_log_append_time(50)
    assert record_with_max_timestamp(batch).offset == 4
    assert record_at_or_after_timestamp(batch, 50).offset == 4
    assert record_at_or_after_timestamp(batch, 51) is None


def test_record_with_max_timestamp_of_an_empty_batch_is_none():
    assert record_with_max_timestamp(RecordBatch(batch_with_payload(b"", 0))) is None


# ---------------------------------------------------------------------------
# malformed input: always InvalidBatch(CORRUPT_MESSAGE)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_compressed_payload_is_corrupt(codec):
    good = build_batch(sample_records(30), compression=codec)
    payload = bytes(good[61:])
    for cut in (1, len(payload) // 2, len(payload) - 1):
        assert_corrupt(batch_with_payload(payload[:cut], 30, codec))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_compressed_payload_is_corrupt(codec):
    rng = random.Random(codec)
    for size in (0, 1, 7, 16, 100, 5000):
        assert_corrupt(batch_with_payload(bytes(rng.randrange(256) for _ in range(size)), 3, codec))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_payload_inflating_past_the_limit_is_corrupt(codec):
    buf = build_batch([(None, bytes(1 << 20), (), 1)], compression=codec)
    assert_corrupt(buf, max_decompressed_bytes=1 << 19)
    assert len(decode_records(RecordBatch(buf), max_decompressed_bytes=2 << 20)[0].value) == 1 << 20


def test_declared_size_over_the_limit_is_refused_before_decompressing():
    zstd_frame = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + (1 << 40).to_bytes(8, "little") + b"\x00" * 8
    lz4_frame = b"\x04\x22\x4d\x18" + bytes([0x68, 0x40]) + (1 << 40).to_bytes(8, "little") + b"\x00" * 8
    gzip_member = bytes(cramjam.gzip.compress(b"x"))[:-4] + (1 << 31).to_bytes(4, "little")
    for codec, payload in ((COMPRESSION_ZSTD, zstd_frame), (COMPRESSION_LZ4, lz4_frame), (COMPRESSION_GZIP, gzip_member)):
        with pytest.raises(InvalidBatch) as info:
            decode_records(RecordBatch(batch_with_payload(payload, 1, codec)))
        assert info.value.error_name == "CORRUPT_MESSAGE" and "declare" in str(info.value)


def test_payloads_without_a_declared_size_still_decode_and_stay_bounded():
    section = bytes(build_batch([(None, bytes(4 << 20), (), 1)])[61:])
    streaming = cramjam.zstd.Compressor()  # streaming frames carry no content size
    streaming.compress(section)
    zstd_payload = bytes(streaming.finish())
    # two gzip members: the trailer only gives the size of the last one
    gzip_payload = bytes(cramjam.gzip.compress(section[:100])) + bytes(cramjam.gzip.compress(section[100:]))
    for codec, payload in ((COMPRESSION_ZSTD, zstd_payload), (COMPRESSION_GZIP, gzip_payload)):
        batch = RecordBatch(batch_with_payload(payload, 1, codec))
        assert len(decode_records(batch)[0].value) == 4 << 20
        assert_corrupt(batch_with_payload(payload, 1, codec), max_decompressed_bytes=1 << 20)


def test_compressed_records_that_decode_to_garbage_are_corrupt():
    for codec in COMPRESSED:
        payload = record_batches.compress(codec, b"\xff" * 64)
        assert_corrupt(batch_with_payload(payload, 1, codec))


def test_snappy_xerial_chunk_length_past_the_end_is_corrupt():
    header = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert_corrupt(batch_with_payload(header + struct.pack(">i", 1 << 30) + b"abc", 1, COMPRESSION_SNAPPY))
    assert_corrupt(batch_with_payload(header + struct.pack(">i", -5) + b"abc", 1, COMPRESSION_SNAPPY))
    assert_corrupt(batch_with_payload(header + b"\x00\x00", 1, COMPRESSION_SNAPPY))


def test_snappy_chunk_claiming_a_huge_output_is_refused_before_allocating():
    # a raw snappy preamble announcing 4 GiB, then nothing
    assert_corrupt(batch_with_payload(b"\xff\xff\xff\xff\x0f", 1, COMPRESSION_SNAPPY))


def test_unknown_codec_is_corrupt():
    good = build_batch(sample_records(2))
    assert_corrupt(with_header(good, attributes=5))
    assert_corrupt(with_header(good, attributes=7))


def test_record_sections_that_do_not_match_the_header_are_corrupt():
    section = bytes(build_batch(sample_records(3))[61:])
    assert_corrupt(batch_with_payload(section, 4))  # more records declared than present
    assert_corrupt(batch_with_payload(section, 2))  # bytes left over after the declared records
    assert_corrupt(batch_with_payload(section[:-1], 3))  # last record truncated
    assert_corrupt(batch_with_payload(b"", 1))
    assert_corrupt(batch_with_payload(b"", INT32_MAX))  # a huge count costs nothing
    assert_corrupt(batch_with_payload(section, -1))


def record_bytes(body: bytes) -> bytes:
    return zigzag(len(body)) + body


@pytest.mark.parametrize(
    "section",
    [
        record_bytes(b""),  # empty record: no attributes byte
        zigzag(-3) + b"\x00" * 10,  # negative record length
        zigzag(1 << 20) + b"\x00" * 10,  # record length past the end
        b"\x80\x80\x80\x80\x80\x80",  # record length varint longer than 5 bytes
        b"\x80\x80",  # varint runs off the end
        record_bytes(b"\x00" + b"\xff" * 11),  # timestamp varlong longer than 10 bytes
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(100) + b"k"),  # key length past the record
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(5) + b"v"),  # value past the record
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(-1)),  # negative headers
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(INT32_MAX)),  # headers missing
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(1) + zigzag(-1)),  # null header key
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(1) + zigzag(2) + b"\xff\xfe"
                     + zigzag(-1)),  # header key not UTF-8
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(1) + zigzag(1) + b"h"
                     + zigzag(9) + b"v"),  # header value past the record
        record_bytes(b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(-1) + zigzag(0) + b"extra"),  # fields short of length
    ],
)
def test_malformed_record_is_corrupt(section):
    assert_corrupt(batch_with_payload(section, 1))


def test_negative_key_and_value_lengths_read_as_null_like_java():
    body = b"\x00" + zigzag(3) + zigzag(0) + zigzag(-7) + zigzag(-2) + zigzag(0)
    (record,) = decode_records(RecordBatch(batch_with_payload(record_bytes(body), 1)))
    assert (record.key, record.value, record.timestamp) == (None, None, 1003)


def test_batch_length_past_the_buffer_is_corrupt():
    good = build_batch(sample_records(2))
    assert_corrupt(good[:-5])  # header claims more bytes than the buffer holds
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 40)  # length smaller than the header itself
    assert_corrupt(short)


def test_wrong_magic_is_corrupt_for_decoding():
    good = build_batch(sample_records(2))
    assert_corrupt(with_header(good, magic=1))


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_random_corruption_never_escapes_as_another_exception(codec):
    rng = random.Random(1000 + codec)
    good = bytes(build_batch(sample_records(8), compression=codec))
    for _ in range(150):
        buf = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(61, len(buf))] = rng.randrange(256)
        try:
            records = decode_records(RecordBatch(buf))
        except InvalidBatch as e:
            assert e.error_name == "CORRUPT_MESSAGE"
        else:
            assert len(records) == 8


def test_keyed_records_in_reads_a_chunk_of_batches_as_decode_records_does():
    """The coordinator loader's in-place walk over a log chunk: every non-control batch's
    (key, value, offset, timestamp), whatever the batch (several records, big varints,
    compressed, null key/value), markers skipped; a cut-off chunk is refused."""
    batches = [
        build_batch([(b"k1", b"v" * 300, [], 1_000)], base_offset=0),
        build_control_batch(7, 0, True, 3, 1_001, base_offset=1),
        build_batch([(b"k2", None, [], 1_002), (None, b"x", [("h", b"y")], 1_000_000), (b"k" * 200, b"v", [], 5)],
                    base_offset=2),
        build_batch([(b"k3", b"z" * 1000, [], 1_003)], base_offset=5, compression=COMPRESSION_GZIP),
        build_batch([(b"k4", b"w", [], 1_004), (b"k5", b"u", [], 1_005)], base_offset=6),
    ]
    RecordBatch(batches[-1]).set_log_append_time(9_999)
    chunk = b"".join(bytes(b) for b in batches)
    expected = [(r.key, r.value, r.offset, r.timestamp) for b in batches
                for r in ([] if RecordBatch(b).is_control else decode_records(RecordBatch(b)))]
    assert record_batches.keyed_records_in(chunk, 0, len(chunk)) == expected
    padded = b"\0" * 7 + chunk
    assert record_batches.keyed_records_in(padded, 7, len(padded)) == expected
    with pytest.raises(InvalidBatch):
        record_batches.keyed_records_in(chunk, 0, len(chunk) - 1)


@settings(max_examples=100, deadline=None)
@given(pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 2**15 - 1), commit=st.booleans(),
       coordinator_epoch=st.integers(-1, 2**31 - 1), ts=st.integers(0, 2**50), base=st.integers(0, 2**40),
       leader_epoch=st.integers(-1, 2**31 - 1))
def test_control_batch_matches_the_generic_builder(pid, epoch, commit, coordinator_epoch, ts, base, leader_epoch):
    """Markers reuse an encoded record per (commit, coordinator epoch): same bytes as
    encoding the record and assembling the batch each time."""
    from protocol.records import _CONTROL_KEY, _CONTROL_VALUE, assemble_batch, encode_record

    body = bytearray()
    encode_record(body, 0, 0, _CONTROL_KEY.pack(0, 1 if commit else 0), _CONTROL_VALUE.pack(0, coordinator_epoch), ())
    expected = assemble_batch(bytes(body), base_offset=base, partition_leader_epoch=leader_epoch,
                              attributes=0x30, last_offset_delta=0, base_timestamp=ts, max_timestamp=ts,
                              producer_id=pid, producer_epoch=epoch, base_sequence=-1, records_count=1)
    got = build_control_batch(pid, epoch, commit, coordinator_epoch, ts, base_offset=base,
                              partition_leader_epoch=leader_epoch)
    assert got == expected
    assert read_control_record(RecordBatch(got)) == (1 if commit else 0, coordinator_epoch)


_OPTIONAL_BYTES = st.none() | st.binary(max_size=300)
_RECORDS = st.lists(st.tuples(
    _OPTIONAL_BYTES, _OPTIONAL_BYTES,
    st.lists(st.tuples(st.text(max_size=20), _OPTIONAL_BYTES), max_size=3).map(tuple),
    st.integers(-1, 2**41)), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(_RECORDS, st.integers(0, 2**40), st.integers(-1, 2**40), st.integers(-1, 2**15 - 1),
       st.integers(-1, INT32_MAX), st.booleans(), st.integers(-1, 1000))
def test_build_batch_writes_what_assembling_the_encoded_records_writes(records, base_offset, producer_id,
                                                                       producer_epoch, base_sequence,
                                                                       transactional, leader_epoch):
    # build_batch writes the records straight after the header's room in one buffer:
    # the same bytes as encoding them apart and assembling the batch around them.
    body = bytearray()
    for delta, (key, value, headers, timestamp) in enumerate(records):
        record_batches.encode_record(body, delta, timestamp - records[0][3], key, value, headers)
    assembled = record_batches.assemble_batch(
        bytes(body), base_offset=base_offset, partition_leader_epoch=leader_epoch,
        attributes=0x10 if transactional else 0, last_offset_delta=len(records) - 1,
        base_timestamp=records[0][3], max_timestamp=max(r[3] for r in records), producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, records_count=len(records))
    built = build_batch(records, base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence, transactional=transactional,
                        partition_leader_epoch=leader_epoch)
    assert built == assembled
    assert RecordBatch(built).crc_valid()


@settings(max_examples=300, deadline=None)
@given(_RECORDS)
def test_built_records_read_back_as_written(records):
    """encode_record's bytes (kept varints, one join) read back field for field, by our
    decoder and by kafka-python's."""
    batch = RecordBatch(build_batch(records))
    assert decode_records(batch) == expected_records(records)
    assert kafka_python_records(batch.buf) == expected_records(records)
