"""The asyncio driver of the sans-IO client core (protocol/client.py).

Used by the command-line tools and by tests that need exact control over requests
(resend a batch, send an old epoch, send garbage). The nodes do not use it: their
requests to each other go through broker/cluster/network.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.clock import SYSTEM_CLOCK, Clock
from protocol.client import ClientConnection, Response
from protocol.request_wire import FrameError


class ConnectionClosed(ConnectionError):
    pass


class KafkaConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._reader = reader
        self._clock = clock
        self._writer = writer
        self._core = ClientConnection(client_id)
        self._futures: dict[int, asyncio.Future] = {}
        self._read_task = asyncio.create_task(self._read_loop())

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = "eosbroker-client",
                      clock: Clock = SYSTEM_CLOCK, tls=None) -> "KafkaConnection":
        """``tls``: an ssl.SSLContext for an SSL or SASL_SSL listener."""
        reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None)
        return cls(reader, writer, client_id, clock)

    @property
    def client_id(self) -> str | None:
        return self._core.client_id

    async def request(self, api_key: int, version: int, body: dict[str, Any] | Any, timeout: float = 30.0) -> Any:
        """Sends one request and returns the decoded kio response."""
        return await self._clock.wait_for(self.send(api_key, version, body), timeout)

    def send(self, api_key: int, version: int, body: dict[str, Any] | Any, expect_response: bool = True) -> asyncio.Future:
        """Queues a request without waiting (pipelining); the future resolves to the response."""
        if self._read_task.done():
            raise ConnectionClosed("connection is closed")
        correlation_id, data = self._core.send(api_key, version, body, expect_response)
        fut = asyncio.get_running_loop().create_future()
        if expect_response:
            self._futures[correlation_id] = fut
        else:
            fut.set_result(None)
        self._writer.write(data)
        return fut

    def send_raw(self, data: bytes) -> None:
        self._writer.write(data)

    async def closed(self, timeout: float = 10.0) -> bool:
        """Waits until the peer closes the connection; True if it did within the timeout."""
        try:
            await self._clock.wait_for(asyncio.shield(self._read_task), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                for response in self._core.receive_data(data):
                    self._resolve(response)
        except (ConnectionError, OSError, FrameError):
            pass
        finally:
            self._core.abandon()
            for fut in self._futures.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("connection closed by the broker"))
            self._futures.clear()

    def _resolve(self, response: Response) -> None:
        fut = self._futures.pop(response.correlation_id, None)
        if fut is None or fut.done():
            return
        if response.error is not None:
            fut.set_exception(response.error)
        else:
            fut.set_result(response.value)

    def abort(self) -> None:
        """Drops the connection at once (pending requests fail with ConnectionClosed)."""
        self._writer.close()

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
