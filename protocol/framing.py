"""Size-prefixed frames and request/response headers, sans-IO.

``FrameDecoder`` is fed bytes and hands back whole frames; it refuses a frame whose
length prefix exceeds the limit before buffering its body, so an absurd prefix
costs nothing. Header layouts are the request header v1/v2 and response header
v0/v1 of Kafka's RequestHeader.json / ResponseHeader.json.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_INT32 = struct.Struct(">i")
_REQUEST_HEADER_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_RESPONSE_HEAD = struct.Struct(">ii")  # size, correlation_id
_FLEXIBLE_RESPONSE_HEAD = struct.Struct(">iiB")  # size, correlation_id, no tagged fields


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


class EncodedBody(bytes):
    """A response body a handler gives already encoded (an answer that is the same for
    every request, kept from the first): framed as is, after the correlation id."""

    __slots__ = ()


def encode_response_frame(correlation_id: int, flexible_header: bool, body: bytes) -> bytes:
    """Size prefix + response header (v0, or v1 with empty tagged fields) + body.

    One concatenation: the body (a Fetch answer can be a megabyte of records) is
    copied once."""
    if flexible_header:
        return _FLEXIBLE_RESPONSE_HEAD.pack(5 + len(body), correlation_id, 0) + body
    return _RESPONSE_HEAD.pack(4 + len(body), correlation_id) + body


def response_head_size(flexible_header: bool) -> int:
    """The bytes before a response's body: size prefix and response header."""
    return _FLEXIBLE_RESPONSE_HEAD.size if flexible_header else _RESPONSE_HEAD.size


def fill_response_head(frame: bytearray, correlation_id: int, flexible_header: bool) -> None:
    """Writes size prefix and response header into the room a body was written after
    (``response_head_size`` bytes), so the body is not copied into a frame."""
    if flexible_header:
        _FLEXIBLE_RESPONSE_HEAD.pack_into(frame, 0, len(frame) - 4, correlation_id, 0)
    else:
        _RESPONSE_HEAD.pack_into(frame, 0, len(frame) - 4, correlation_id)


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
