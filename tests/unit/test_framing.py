"""protocol.request_wire (frames): size-prefixed frames and request/response headers."""

from __future__ import annotations

import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from protocol import answer_wire, request_wire
from protocol.request_wire import (
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    RequestHeader,
    encode_request_frame,
    peek_request_header,
    read_unsigned_varint,
    skip_tagged_fields,
)
from protocol.answer_wire import encode_response_frame


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


# ---------------------------------------------------------------------------
# FrameDecoder


def test_partial_feeds_byte_by_byte():
    decoder = FrameDecoder(max_frame_size=100)
    data = frame(b"hello world")
    for b in data[:-1]:
        decoder.feed(bytes([b]))
        assert decoder.next_frame() is None
    decoder.feed(data[-1:])
    assert decoder.next_frame() == b"hello world"
    assert decoder.next_frame() is None
    assert decoder.buffered == 0


def test_pending_frame_size_once_the_prefix_is_in():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(b"\x00\x00\x00")
    assert decoder.pending_frame_size() is None
    decoder.feed(b"\x07ab")
    assert decoder.pending_frame_size() == 7
    assert decoder.buffered == 6


def test_missing_counts_what_a_part_way_frame_still_needs():
    decoder = FrameDecoder(max_frame_size=1000)
    data = frame(b"x" * 100) + frame(b"tail")
    assert decoder.missing() == 0
    decoder.feed(data[:2])  # not even the prefix: nothing known
    assert decoder.next_frame() is None and decoder.missing() == 0
    decoder.feed(data[2:30])
    assert decoder.next_frame() is None and decoder.missing() == 104 - 30
    decoder.feed(data[30:104] + data[104:106])
    assert decoder.next_frame() == b"x" * 100
    assert decoder.next_frame() is None and decoder.missing() == 0


def test_several_frames_in_one_feed_and_a_partial_tail():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(frame(b"one") + frame(b"") + frame(b"three") + frame(b"four")[:5])
    assert decoder.next_frame() == b"one"
    assert decoder.next_frame() == b""
    assert decoder.next_frame() == b"three"
    assert decoder.next_frame() is None
    decoder.feed(frame(b"four")[5:] + frame(b"five"))
    assert decoder.next_frame() == b"four"
    assert decoder.next_frame() == b"five"
    assert decoder.next_frame() is None


def test_whole_frames_sliced_from_the_feed_and_split_ones_gathered_give_the_same_bytes():
    bodies = [b"one", b"", b"three" * 50, b"four", b"five"]
    stream = b"".join(frame(b) for b in bodies)
    for cut in range(1, len(stream) + 1):
        for kind in (bytes, bytearray, memoryview):
            decoder = FrameDecoder(max_frame_size=1000)
            got = []
            for at in range(0, len(stream), cut):
                decoder.feed(kind(stream[at:at + cut]))
                while (f := decoder.next_frame()) is not None:
                    assert type(f) is bytes
                    got.append(f)
            assert got == bodies and decoder.buffered == 0


def test_a_large_split_frame_holds_only_what_arrived_and_comes_before_the_frames_after_it():
    body = bytes(range(256)) * 4096  # 1 MiB, as a produce request over TLS arrives: in pieces
    stream = frame(body) + frame(b"next")
    decoder = FrameDecoder(max_frame_size=len(body))
    decoder.feed(stream[:104])
    assert decoder.next_frame() is None
    assert decoder.buffered == 100 and decoder.pending_frame_size() == len(body)
    for at in range(104, len(stream) - 16384, 16384):
        decoder.feed(stream[at:at + 16384])
        assert decoder.next_frame() is None
    decoder.feed(stream[at + 16384:])
    assert decoder.next_frame() == body
    assert decoder.next_frame() == b"next"
    assert decoder.next_frame() is None and decoder.buffered == 0


def test_frame_of_exactly_the_limit_is_accepted():
    decoder = FrameDecoder(max_frame_size=8)
    decoder.feed(frame(b"12345678"))
    assert decoder.next_frame() == b"12345678"


def test_frame_over_the_limit_is_refused_as_soon_as_its_prefix_arrives():
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.feed(struct.pack(">i", 1025))  # no body at all yet
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    huge = FrameDecoder(max_frame_size=100 * 1024 * 1024)
    huge.feed(b"\x7f\xff\xff\xff" + b"x" * 10)
    with pytest.raises(FrameTooLarge):
        huge.next_frame()


def test_frame_over_the_limit_after_a_good_one():
    decoder = FrameDecoder(max_frame_size=10)
    decoder.feed(frame(b"ok") + struct.pack(">i", 11))
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_negative_size_is_a_frame_error():
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(struct.pack(">i", -1))
    with pytest.raises(FrameError) as info:
        decoder.next_frame()
    assert not isinstance(info.value, FrameTooLarge)


# ---------------------------------------------------------------------------
# request headers


def test_peek_request_header_with_client_id():
    body = struct.pack(">hhih", 3, 12, 987654, 6) + b"client" + b"\x00rest"
    header, pos = peek_request_header(body)
    assert header == RequestHeader(api_key=3, api_version=12, correlation_id=987654, client_id="client")
    assert pos == 16
    assert body[pos:] == b"\x00rest"


def test_peek_request_header_with_null_and_empty_client_id():
    header, pos = peek_request_header(struct.pack(">hhih", 18, 3, -5, -1) + b"body")
    assert header == RequestHeader(18, 3, -5, None) and pos == 10
    header, pos = peek_request_header(struct.pack(">hhih", 18, 3, 1, 0))
    assert header.client_id == "" and pos == 10


def test_peek_request_header_utf8_client_id():
    name = "prodüçer".encode()
    header, _ = peek_request_header(struct.pack(">hhih", 0, 9, 1, len(name)) + name)
    assert header.client_id == "prodüçer"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        struct.pack(">hhi", 0, 9, 1),  # no client id length
        struct.pack(">hhih", 0, 9, 1, 5) + b"abcd",  # client id cut short
        struct.pack(">hhih", 0, 9, 1, 2) + b"\xff\xfe",  # client id not UTF-8
    ],
)
def test_truncated_or_bad_headers_are_frame_errors(data):
    with pytest.raises(FrameError):
        peek_request_header(data)


def test_skip_tagged_fields():
    assert skip_tagged_fields(b"\x00", 0) == 1
    # two fields: tag 0 with 3 bytes, tag 200 (two-byte varint) with 1 byte
    buf = b"XX" + b"\x02" + b"\x00\x03abc" + b"\xc8\x01\x01z" + b"after"
    assert buf[skip_tagged_fields(buf, 2) :] == b"after"


@pytest.mark.parametrize(
    "buf",
    [
        b"",  # no count
        b"\x01",  # count without a field
        b"\x01\x00",  # tag without size
        b"\x01\x00\x05abc",  # field shorter than its size
        b"\x80\x80\x80\x80\x80\x01",  # count varint longer than 5 bytes
    ],
)
def test_skip_tagged_fields_rejects_truncation(buf):
    with pytest.raises(FrameError):
        skip_tagged_fields(buf, 0)


def test_read_unsigned_varint():
    assert read_unsigned_varint(b"\x00", 0) == (0, 1)
    assert read_unsigned_varint(b"\x7f", 0) == (127, 1)
    assert read_unsigned_varint(b"\x80\x01", 0) == (128, 2)
    assert read_unsigned_varint(b"x\xff\xff\xff\xff\x0f", 1) == (0xFFFFFFFF, 6)


# ---------------------------------------------------------------------------
# encoding


def test_encode_response_frame_v0():
    out = encode_response_frame(0x01020304, False, b"body")
    assert out == struct.pack(">i", 8) + b"\x01\x02\x03\x04" + b"body"


def test_encode_response_frame_v1_has_empty_tagged_fields():
    out = encode_response_frame(-7, True, b"body")
    assert out == struct.pack(">i", 9) + struct.pack(">i", -7) + b"\x00" + b"body"


def test_encode_response_frame_with_empty_body():
    assert encode_response_frame(1, False, b"") == struct.pack(">ii", 4, 1)


@pytest.mark.parametrize("client_id", ["eos-client", "", None])
def test_encode_request_frame_round_trip_v1_header(client_id):
    body = answer_wire.encode(answer_wire.build_request(3, 0, {"topics": [{"name": "orders"}]}))
    decoder = FrameDecoder(max_frame_size=1 << 20)
    decoder.feed(encode_request_frame(3, 0, 42, client_id, False, body))
    request = decoder.next_frame()
    header, pos = peek_request_header(request)
    assert header == RequestHeader(3, 0, 42, client_id)
    assert request[pos:] == body
    assert request_wire.decode_request(3, 0, request, pos).topics[0].name == "orders"


def test_encode_request_frame_round_trip_v2_header():
    request_body = answer_wire.build_request(18, 3, {"client_software_name": "eos", "client_software_version": "1.0"})
    body = answer_wire.encode(request_body)
    decoder = FrameDecoder(max_frame_size=1 << 20)
    decoder.feed(encode_request_frame(18, 3, 7, "c", True, body) + encode_request_frame(18, 3, 8, None, True, body))
    for correlation_id, client_id in ((7, "c"), (8, None)):
        request = decoder.next_frame()
        header, pos = peek_request_header(request)
        assert header == RequestHeader(18, 3, correlation_id, client_id)
        pos = skip_tagged_fields(request, pos)
        assert request[pos:] == body
        assert request_wire.decode_request(18, 3, request, pos) == request_body
    assert decoder.next_frame() is None


def test_the_request_shape_check_reads_varints_with_the_framing_reader():
    """A flexible request whose tagged-field count varint is cut short, or longer than
    5 bytes, is refused before kio decodes it, with the framing reader's reason."""
    ok = b"\x07client\x041.0\x00"  # compact strings client_software_name/version, no tags
    request_wire.check_shape(ApiVersionsRequest, ok)
    with pytest.raises(request_wire.ShapeError, match="varint truncated in the request"):
        request_wire.check_shape(ApiVersionsRequest, ok[:-1] + b"\x80")
    with pytest.raises(request_wire.ShapeError, match="varint too long in the request"):
        request_wire.check_shape(ApiVersionsRequest, ok[:-1] + b"\x80\x80\x80\x80\x80\x01")
