"""Readiness probe: a raw-socket Metadata v1 request, so start-up time is not blurred by
a client library's own reconnect backoff.

Metadata v1 with an empty topic list asks for brokers only; it uses request header v1
and response header v0 (no tagged fields), which every Kafka-compatible broker speaks.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time

from protocol.request_wire import encode_request_frame
from protocol.answer_wire import build_request, decode_response, encode

METADATA = 3
METADATA_VERSION = 1
_INT32 = struct.Struct(">i")
_MAX_RESPONSE = 1 << 20
_RETRY_PAUSE_S = 0.002


class ProbeError(Exception):
    """The broker answered, but not with a Metadata response we could read."""


class BrokerNotReady(Exception):
    """The broker exited, or gave no Metadata answer before the deadline."""


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionResetError("connection closed by the broker mid-response")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def metadata_request(host: str, port: int, timeout_s: float, correlation_id: int = 1):
    """One connection, one Metadata v1 request; returns the decoded response."""
    body = encode(build_request(METADATA, METADATA_VERSION, {"topics": []}))
    frame = encode_request_frame(METADATA, METADATA_VERSION, correlation_id, "bench-probe", False, body)
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(frame)
        (size,) = _INT32.unpack(read_exactly(sock, 4))
        if not 4 <= size <= _MAX_RESPONSE:
            raise ProbeError(f"implausible response size {size}")
        payload = read_exactly(sock, size)
    (answered_id,) = _INT32.unpack_from(payload, 0)
    if answered_id != correlation_id:
        raise ProbeError(f"correlation id {answered_id}, expected {correlation_id}")
    try:
        response = decode_response(METADATA, METADATA_VERSION, payload, 4)
    except Exception as e:  # kio raises several types for malformed input
        raise ProbeError(f"undecodable Metadata v1 response: {e}") from e
    if not response.brokers:
        raise ProbeError("Metadata response lists no brokers")
    return response


def wait_for_metadata(process: subprocess.Popen, host: str, port: int, timeout_s: float) -> float:
    """Polls until the first good Metadata answer; returns perf_counter() at that moment."""
    deadline = time.perf_counter() + timeout_s
    last_error: Exception | None = None
    attempt = 0
    while True:
        if process.poll() is not None:
            raise BrokerNotReady(f"process exited with code {process.returncode} before answering Metadata")
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise BrokerNotReady(f"no Metadata answer within {timeout_s:.1f} s (last error: {last_error!r})")
        attempt += 1
        try:
            metadata_request(host, port, min(1.0, remaining), correlation_id=attempt)
            return time.perf_counter()
        except (OSError, ProbeError) as e:
            last_error = e
        time.sleep(_RETRY_PAUSE_S)
