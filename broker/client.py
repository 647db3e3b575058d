"""A small asyncio Kafka wire client built on protocol/.

Used where the broker talks to itself over TCP (WriteTxnMarkers to partition
leaders), by the Spark sink's transactional client, and by tests that need exact
control over requests (resend a batch, send an old epoch, send garbage).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from protocol import messages
from protocol.apis import flexible_from
from protocol.framing import FrameDecoder, encode_request_frame

_INT32 = struct.Struct(">i")


def _flexible(api_key: int, version: int) -> bool:
    return version >= flexible_from(api_key)


class ConnectionClosed(ConnectionError):
    pass


class KafkaConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[int, int, asyncio.Future]] = {}
        self._read_task = asyncio.create_task(self._read_loop())

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = "eosbroker-client") -> "KafkaConnection":
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def request(self, api_key: int, version: int, body: dict[str, Any] | Any, timeout: float = 30.0) -> Any:
        """Sends one request and returns the decoded kio response."""
        fut = self.send(api_key, version, body)
        return await asyncio.wait_for(fut, timeout)

    def send(self, api_key: int, version: int, body: dict[str, Any] | Any, expect_response: bool = True) -> asyncio.Future:
        """Queues a request without waiting (pipelining); the future resolves to the response."""
        message = messages.build_request(api_key, version, body) if isinstance(body, dict) else body
        correlation_id = next(self._correlation)
        fut = asyncio.get_running_loop().create_future()
        if expect_response:
            self._pending[correlation_id] = (api_key, version, fut)
        else:
            fut.set_result(None)
        if self._read_task.done():
            raise ConnectionClosed("connection is closed")
        frame = encode_request_frame(
            api_key, version, correlation_id, self.client_id, _flexible(api_key, version), messages.encode(message)
        )
        self._writer.write(frame)
        return fut

    def send_raw(self, data: bytes) -> None:
        self._writer.write(data)

    async def closed(self, timeout: float = 10.0) -> bool:
        """Waits until the peer closes the connection; True if it did within the timeout."""
        try:
            await asyncio.wait_for(asyncio.shield(self._read_task), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(1 << 30)
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    self._dispatch(frame)
        except (ConnectionError, OSError):
            pass
        finally:
            for _, _, fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("connection closed by the broker"))
            self._pending.clear()

    def _dispatch(self, frame: bytes) -> None:
        correlation_id = _INT32.unpack_from(frame, 0)[0]
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return
        api_key, version, fut = entry
        # ApiVersions responses always use header v0.
        offset = 5 if _flexible(api_key, version) and api_key != 18 else 4
        try:
            fut.set_result(messages.decode_response(api_key, version, frame, offset))
        except Exception as e:  # a response we cannot decode fails only its own request
            fut.set_exception(e)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass
        self._read_task.cancel()
        try:
            await self._read_task
        except (asyncio.CancelledError, Exception):
            pass

    async def __aenter__(self) -> "KafkaConnection":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
