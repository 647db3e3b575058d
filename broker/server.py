"""The asyncio listener and the per-connection request pipeline.

Each connection has a reader that keeps reading frames while a processor answers
them strictly in order, one at a time (as Kafka does: an idempotent producer's
pipelined batches must be appended in the order sent). Read-ahead is bounded by
``queued.max.requests``; a frame over ``socket.request.max.bytes`` closes the
connection before its body is read. Anything a peer does wrong costs only its own
connection.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from broker.clock import Clock
from broker.cluster import Cluster
from broker.errors import ProtocolViolation
from broker.handlers import HANDLERS
from protocol import messages
from protocol.apis import ApiTable, api_name
from protocol.framing import (
    FrameDecoder,
    FrameError,
    RequestHeader,
    encode_response_frame,
    peek_request_header,
    skip_tagged_fields,
)

log = logging.getLogger(__name__)

API_VERSIONS = 18
_WRITE_HIGH_WATER = 1 << 20
_DRAIN_GRACE_S = 5.0


@dataclass(slots=True)
class Connection:
    id: int
    peer: str
    node_id: int
    last_active: float
    writer: asyncio.StreamWriter
    processor: asyncio.Task | None = None


@dataclass(slots=True)
class RequestContext:
    broker: Any  # broker.app.Broker
    header: RequestHeader
    connection: Connection

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def cluster(self) -> Cluster:
        return self.broker.cluster

    @property
    def clock(self) -> Clock:
        return self.broker.clock

    def led_partition(self, topic: str | None, index: int, missing: str = "UNKNOWN_TOPIC_OR_PARTITION"):
        """(partition, None) when this node leads it, else (None, the Kafka error name)."""
        part = self.broker.cluster.partition(topic, index) if topic is not None else None
        if part is None:
            return None, missing
        if self.broker.cluster.leader_of(topic, index) != self.connection.node_id:
            return None, "NOT_LEADER_OR_FOLLOWER"
        return part, None


class Server:
    """Serves one emulated node on one listener."""

    _ids = itertools.count(1)

    def __init__(self, broker, node_id: int, host: str, port: int) -> None:
        self.broker = broker
        self.node_id = node_id
        self.host = host
        self.port = port
        self.connections: dict[int, Connection] = {}
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, backlog=1024, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stops accepting, ends every connection and waits for their request processing,
        so nothing touches the logs after the broker closes them."""
        if self._server is not None:
            self._server.close()
        processors = []
        for conn in list(self.connections.values()):
            conn.writer.close()
            if conn.processor is not None and not conn.processor.done():
                conn.processor.cancel()
                processors.append(conn.processor)
        if processors:
            await asyncio.gather(*processors, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def close_idle(self, max_idle_s: float) -> None:
        cutoff = self.broker.clock.monotonic() - max_idle_s
        for conn in list(self.connections.values()):
            if conn.last_active < cutoff:
                log.info("closing connection %s from %s: idle longer than connections.max.idle.ms", conn.id, conn.peer)
                conn.writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        conn = Connection(next(self._ids), peer, self.node_id, self.broker.clock.monotonic(), writer)
        self.connections[conn.id] = conn
        config = self.broker.config
        decoder = FrameDecoder(config["socket.request.max.bytes"])
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=max(1, config["queued.max.requests"]))
        processor = conn.processor = asyncio.create_task(self._process(queue, conn))
        try:
            while not processor.done():
                data = await reader.read(1 << 18)
                if not data:
                    break
                conn.last_active = self.broker.clock.monotonic()
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    await queue.put(frame)
        except FrameError as e:
            log.warning("closing connection %s from %s: %s", conn.id, peer, e)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if not processor.done():
                # The peer is gone: requests already read still take effect (an acks=0
                # produce must not be lost), but a parked or long-polling one is not
                # waited for beyond a grace period.
                try:
                    queue.put_nowait(None)
                except asyncio.QueueFull:
                    processor.cancel()
            try:
                await self.broker.clock.wait_for(processor, _DRAIN_GRACE_S)
            except (asyncio.CancelledError, asyncio.TimeoutError):
                pass
            except Exception:  # the processor logs its own failures
                pass
            self.connections.pop(conn.id, None)
            writer.close()

    async def _process(self, queue: asyncio.Queue, conn: Connection) -> None:
        writer = conn.writer
        while True:
            frame = await queue.get()
            if frame is None or writer.is_closing():
                return
            try:
                out = await self.handle_frame(frame, conn)
            except ProtocolViolation as e:
                log.warning("closing connection %s from %s: %s", conn.id, conn.peer, e)
                writer.close()
                return
            except Exception:
                log.exception("closing connection %s from %s: unexpected error handling a request", conn.id, conn.peer)
                writer.close()
                return
            if out is not None:
                writer.write(out)
                conn.last_active = self.broker.clock.monotonic()
                if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    try:
                        await writer.drain()
                    except ConnectionError:
                        return

    async def handle_frame(self, frame: bytes, conn: Connection) -> bytes | None:
        try:
            header, pos = peek_request_header(frame)
        except FrameError as e:
            raise ProtocolViolation(f"bad request header: {e}") from None
        apis: ApiTable = self.broker.apis
        api = apis.get(header.api_key)
        if api is None or header.api_key not in HANDLERS:
            raise ProtocolViolation(f"unknown or unsupported API key {header.api_key}")
        version = header.api_version
        if not apis.accepts(header.api_key, version):
            if header.api_key == API_VERSIONS:
                return self._unsupported_api_versions(header)
            return self._unsupported_version(header, frame, pos)
        flexible = api.flexible(version)
        if flexible:
            try:
                pos = skip_tagged_fields(frame, pos)
            except FrameError as e:
                raise ProtocolViolation(f"bad request header tagged fields: {e}") from None
        try:
            request = messages.decode_request(header.api_key, version, frame, pos)
        except messages.DecodeError as e:
            raise ProtocolViolation(str(e)) from None
        ctx = RequestContext(self.broker, header, conn)
        result = await HANDLERS[header.api_key](ctx, request)
        if result is None:
            return None
        if isinstance(result, dict):
            result = messages.build_response(header.api_key, version, result)
        body = messages.encode(result)
        return encode_response_frame(header.correlation_id, flexible and header.api_key != API_VERSIONS, body)

    def _unsupported_api_versions(self, header: RequestHeader) -> bytes:
        r = self.broker.apis.get(API_VERSIONS)
        body = messages.encode(
            messages.build_response(
                API_VERSIONS,
                0,
                {
                    "error_code": 35,
                    "api_keys": [{"api_key": API_VERSIONS, "min_version": r.advertised_min, "max_version": r.max}],
                },
            )
        )
        return encode_response_frame(header.correlation_id, False, body)

    def _unsupported_version(self, header: RequestHeader, frame: bytes, pos: int) -> bytes:
        from broker.handlers import produce

        if header.api_key == produce.API_KEY and header.api_version == 2:
            return produce.unsupported_v2_response(header, frame, pos)
        raise ProtocolViolation(
            f"{api_name(header.api_key)} v{header.api_version} is not supported "
            f"(this broker accepts {self.broker.apis.get(header.api_key).accepted_min}-{self.broker.apis.get(header.api_key).max})"
        )
