"""Kafka's answers (ProduceRequest.validateRecords, ByteBufferLogInputStream, UnifiedLog.analyzeAndValidateRecords)."""
import struct

import pytest

from protocol.records import InvalidBatch, build_batch, validate_produce_records


def rejected(records) -> str:
    with pytest.raises(InvalidBatch) as info:
        validate_produce_records(records, 1 << 20)
    return info.value.error_name


def good() -> bytearray:
    return build_batch([(None, b"v", (), 1)])


def test_no_batch_at_all_is_invalid_record():
    assert rejected(b"") == "INVALID_RECORD"  # "must have at least one record batch per partition"
    assert rejected(bytes(good()[:11])) == "INVALID_RECORD"  # not even a length field
    assert rejected(bytes(good()[:16])) == "INVALID_RECORD"  # no magic byte yet
    assert rejected(bytes(good()[:-1])) == "INVALID_RECORD"  # the batch overruns the section


def test_old_magic_is_invalid_record():
    buf = good()
    buf[16] = 1
    assert rejected(bytes(buf)) == "INVALID_RECORD"  # "only allowed to contain record batches with magic version 2"


def test_unknown_magic_and_tiny_length_are_corrupt_message():
    buf = good()
    buf[16] = 3
    assert rejected(bytes(buf)) == "CORRUPT_MESSAGE"  # "Invalid magic found in record"
    tiny = bytearray(good())
    struct.pack_into(">i", tiny, 8, 13)  # below LegacyRecord.RECORD_OVERHEAD_V0 (14)
    assert rejected(bytes(tiny)) == "CORRUPT_MESSAGE"


def test_client_batch_with_a_base_offset_is_invalid_record():
    assert rejected(bytes(build_batch([(None, b"v", (), 1)], base_offset=5))) == "INVALID_RECORD"
