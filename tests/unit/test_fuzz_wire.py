"""Property-based tests of everything that reads bytes from the wire, driven directly
(sans-IO): framing, request headers, every request schema of every accepted version,
RecordBatch validation and record decoding. Arbitrary bytes, truncations, bit flips and
oversized or negative counts and lengths must end in the module's own error (which the
server turns into a Kafka error or a closed connection), never in another exception."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from protocol import answer_wire, request_wire
from protocol.request_wire import (
    KAFKA_4_0,
    ApiTable,
    FrameDecoder,
    FrameError,
    encode_request_frame,
    peek_request_header,
    skip_tagged_fields,
)
from protocol.records import (
    InvalidBatch,
    NewRecord,
    RecordBatch,
    build_batch,
    decode_records,
    iter_batches,
    read_control_record,
    validate_produce_records,
)

# `make fuzz` raises the example counts (EOSBROKER_FUZZ_SCALE); CI runs the base counts.
SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))


def examples(n: int) -> settings:
    return settings(max_examples=n * SCALE, deadline=None, suppress_health_check=list(HealthCheck))


FUZZ = examples(200)
st.register_type_strategy(Records, st.binary(max_size=200).map(Records))

API_VERSIONS = [(key, v) for key, r in ApiTable(set(KAFKA_4_0)).ranges.items()
                for v in range(r.accepted_min, r.max + 1)]


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` truncated, with bits flipped, bytes replaced by extremes, or spliced."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "extreme", "insert", "delete"]))
        if not out:
            out += draw(st.binary(min_size=1, max_size=8))
            continue
        at = draw(st.integers(0, len(out) - 1))
        if kind == "truncate":
            del out[at:]
        elif kind == "flip":
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "extreme":  # a count or length field turned huge or negative
            pattern = draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                                            b"\xff\xff", b"\x7f\xff", b"\xff\xff\xff\xff\x0f"]))
            out[at:at + len(pattern)] = pattern
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del out[at:at + draw(st.integers(1, 16))]
    return bytes(out)


# --- framing -------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(1, 300), min_size=1, max_size=20))
def test_frame_decoder_on_arbitrary_bytes_only_raises_frame_error(data, cuts):
    decoder = FrameDecoder(max_frame_size=1000)
    pos = 0
    try:
        for cut in cuts + [len(data)]:
            decoder.feed(data[pos:pos + cut])
            pos += cut
            while (frame := decoder.next_frame()) is not None:
                assert len(frame) <= 1000
            # what it holds is at most one frame under the limit plus what was just fed
            assert decoder.buffered <= 1000 + 4 + cut
    except FrameError:
        pass


@FUZZ
@given(st.lists(st.binary(max_size=500), max_size=10), st.lists(st.integers(1, 97), min_size=1, max_size=30))
def test_frame_decoder_returns_each_frame_whatever_the_chunking(bodies, cuts):
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    decoder = FrameDecoder(max_frame_size=1000)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        decoder.feed(stream[pos:pos + step])
        pos += step
        i += 1
        while (frame := decoder.next_frame()) is not None:
            got.append(frame)
    assert got == bodies


@FUZZ
@given(st.integers(1001, 2**31 - 1) | st.integers(-(2**31), -1))
def test_frame_decoder_refuses_an_oversized_or_negative_prefix_before_the_body(size):
    decoder = FrameDecoder(max_frame_size=1000)
    decoder.feed(struct.pack(">i", size))
    try:
        decoder.next_frame()
        raise AssertionError("accepted")
    except FrameError:
        pass


@FUZZ
@given(st.binary(max_size=300))
def test_request_header_on_arbitrary_bytes(data):
    try:
        header, pos = peek_request_header(data)
    except FrameError:
        return
    assert 8 <= pos <= len(data)
    try:
        assert pos <= skip_tagged_fields(data, pos) <= len(data)
    except FrameError:
        pass


@FUZZ
@given(st.data())
def test_request_header_mutations(data):
    frame = encode_request_frame(data.draw(st.integers(-5, 70)), data.draw(st.integers(-1, 20)), 7,
                                 data.draw(st.none() | st.text(max_size=30)), True, b"\x00\x01")[4:]
    frame = data.draw(mutated(frame))
    try:
        header, pos = peek_request_header(frame)
        skip_tagged_fields(frame, pos)
    except FrameError:
        pass


# --- every request schema ------------------------------------------------------------


def _decode(key: int, version: int, body: bytes) -> None:
    try:
        request_wire.decode_request(key, version, body)
    except request_wire.DecodeError:
        pass


@examples(1000)
@given(st.sampled_from(API_VERSIONS), st.binary(max_size=400))
def test_every_request_schema_on_arbitrary_bytes(api_version, body):
    _decode(*api_version, body)


@examples(500)
@given(st.data())
def test_every_request_schema_on_mutated_valid_requests(data):
    key, version = data.draw(st.sampled_from(API_VERSIONS))
    request = data.draw(st.from_type(request_wire.request_class(key, version)))
    body = answer_wire.encode(request)
    assert request_wire.decode_request(key, version, body) is not None
    _decode(key, version, data.draw(mutated(body)))


def test_an_absurd_array_count_is_refused_before_kio_reserves_memory():
    # CreatePartitions v3 whose compact array declares ~18 billion topics: kio's native
    # reader tried to reserve 147 GB for them and aborted the process.
    body = bytes.fromhex("ede2f7b5440e8aa0704cc2e7d7193a824645b43f6925")
    with pytest.raises(request_wire.DecodeError, match="elements in 17 remaining bytes"):
        request_wire.decode_request(37, 3, body)
    for count in (2**31 - 1, 2**24):
        with pytest.raises(request_wire.DecodeError):  # Metadata v1: a legacy int32 array count
            request_wire.decode_request(3, 1, struct.pack(">i", count) + b"\x00\x01a")


# --- record batches ------------------------------------------------------------------


def _valid_batch(draw) -> bytes:
    records = draw(st.lists(st.builds(NewRecord, st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40),
                                      st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                                               max_size=2),
                                      st.integers(0, 2**41)),
                            min_size=1, max_size=5))
    producer_id = draw(st.sampled_from([-1, 7]))
    return bytes(build_batch(
        records,
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=draw(st.integers(0, 100)) if producer_id >= 0 else -1,
        transactional=draw(st.booleans()) and producer_id >= 0,
        compression=draw(st.sampled_from([0, 1, 2, 3, 4])),
    ))


def _check_batch_bytes(raw: bytes) -> None:
    try:
        batch = validate_produce_records(raw, 1 << 20)
    except InvalidBatch:
        return
    try:
        decode_records(batch)
    except InvalidBatch:
        pass
    try:
        read_control_record(batch)
    except InvalidBatch:
        pass


@FUZZ
@given(st.binary(max_size=500))
def test_record_batch_validation_on_arbitrary_bytes(raw):
    _check_batch_bytes(raw)
    for batch in iter_batches(raw):
        try:
            decode_records(batch)
        except InvalidBatch:
            pass


@examples(300)
@given(st.data())
def test_record_batch_validation_on_mutated_batches(data):
    raw = _valid_batch(data.draw)
    batch = validate_produce_records(raw, 1 << 20)
    assert len(decode_records(batch)) == batch.records_count
    _check_batch_bytes(data.draw(mutated(raw)))


@examples(300)
@given(st.data())
def test_record_decoding_with_a_valid_crc_over_corrupt_records(data):
    """The CRC only says the bytes arrived as sent: a client can send a correct CRC over
    garbage records, so decoding must hold on its own."""
    raw = bytearray(_valid_batch(data.draw))
    body = data.draw(mutated(bytes(raw[61:])))
    raw = raw[:61] + body
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    batch = RecordBatch(raw, 0)
    batch._refresh_crc()
    try:
        decode_records(batch)
    except InvalidBatch:
        pass


def test_null_where_the_schema_forbids_it_is_refused():
    # SyncGroup v0 with its (non-nullable) assignments array sent as null: the handler
    # iterated over None and the connection closed with a stack trace.
    body = answer_wire.encode(answer_wire.build_request(14, 0, {"group_id": "g", "generation_id": 1, "member_id": "m"}))
    assert body.endswith(struct.pack(">i", 0))
    with pytest.raises(request_wire.DecodeError, match="non-nullable array"):
        request_wire.decode_request(14, 0, body[:-4] + struct.pack(">i", -1))
    # Metadata v1's topics is nullable: null means every topic
    assert request_wire.decode_request(3, 1, struct.pack(">i", -1)).topics is None
