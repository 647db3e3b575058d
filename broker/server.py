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
from dataclasses import dataclass, field
from typing import Any

from broker.clock import Clock
from broker.cluster import Cluster
from broker.connection_limits import ConnectionLimits
from broker.errors import ProtocolViolation
from broker.faults import DROPPED, FaultClose, run_under, seen_by
from broker.handlers import HANDLERS
from protocol import layouts, messages
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


async def _unless_ended(waiting, processor: asyncio.Task) -> bool:
    """Awaits ``waiting`` unless ``processor`` ends first (then False, ``waiting`` cancelled)."""
    task = asyncio.ensure_future(waiting)
    await asyncio.wait((task, processor), return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return True
    task.cancel()
    return False


@dataclass(slots=True)
class Connection:
    id: int
    peer: str
    node_id: int
    last_active: float
    writer: asyncio.StreamWriter
    processor: asyncio.Task | None = None
    # responses answered in this event-loop turn, sent together at its end (one writev
    # instead of one send per pipelined response); None when nothing is waiting
    unsent: list[bytes] | None = None
    # cleared while responses wait for a peer that does not read them: no read-ahead then,
    # as Kafka mutes a channel whose response is still being sent
    output_flowing: asyncio.Event = field(default_factory=asyncio.Event)


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

    @property
    def node(self):
        """The node (broker.node.BrokerNode) this request was sent to."""
        return self.broker.node(self.connection.node_id)

    def led_partition(self, topic: str | None, index: int, missing: str = "UNKNOWN_TOPIC_OR_PARTITION",
                      current_leader_epoch: int = -1):
        """(partition, None) when this node leads it, else (None, the Kafka error name).

        A client's ``current_leader_epoch`` older than the partition's is
        FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320), checked
        before leadership as Kafka does on a replica."""
        cluster = self.broker.cluster
        part = cluster.partition(topic, index) if topic is not None else None
        if part is None:
            return None, missing
        leadership = cluster.leadership(topic, index)
        node_id = self.connection.node_id
        if current_leader_epoch is not None and current_leader_epoch >= 0 and node_id in leadership.replicas:
            if current_leader_epoch < leadership.leader_epoch:
                return None, "FENCED_LEADER_EPOCH"
            if current_leader_epoch > leadership.leader_epoch:
                return None, "UNKNOWN_LEADER_EPOCH"
        if leadership.leader != node_id:
            return None, "NOT_LEADER_OR_FOLLOWER"
        return part, None

    def current_leader(self, topic: str | None, index: int) -> dict:
        """KIP-951's LeaderIdAndEpoch for a NOT_LEADER_OR_FOLLOWER answer."""
        leadership = self.broker.cluster.leadership(topic, index) if topic is not None else None
        if leadership is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": leadership.leader, "leader_epoch": leadership.leader_epoch}

    def node_endpoints(self, leaders: set[int]) -> list[dict]:
        """KIP-951's NodeEndpoints: where the named leaders listen."""
        return [{"node_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
                for n in self.broker.cluster.live_nodes if n.node_id in leaders]


class Server:
    """Serves one emulated node on one listener."""

    _ids = itertools.count(1)

    def __init__(self, broker, node, host: str, port: int) -> None:
        self.broker = broker
        self.node = node
        self.node_id = node.node_id
        self.host = host
        self.port = port
        self.connections: dict[int, Connection] = {}
        self.limits = ConnectionLimits(broker.config)
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, backlog=1024, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, abort: bool = False) -> None:
        """Stops accepting, ends every connection (``abort``: with a reset, as a crashed
        host's peers see it) and waits for their request processing, so nothing
        touches the logs after the broker closes them."""
        if self._server is not None:
            self._server.close()
        processors = []
        for conn in list(self.connections.values()):
            if abort:
                conn.writer.transport.abort()
            else:
                conn.writer.close()
            if conn.processor is not None and not conn.processor.done():
                conn.processor.cancel()
                processors.append(conn.processor)
        if processors:
            _, stuck = await asyncio.wait(processors, timeout=_DRAIN_GRACE_S)
            if stuck:
                log.warning("node %d: %d connections still processing after %.0f s; leaving them",
                            self.node_id, len(stuck), _DRAIN_GRACE_S)
        if self._server is not None:
            try:
                await self.broker.clock.wait_for(self._server.wait_closed(), _DRAIN_GRACE_S)
            except asyncio.TimeoutError:
                log.warning("node %d: listener did not close within %.0f s", self.node_id, _DRAIN_GRACE_S)
            self._server = None

    @staticmethod
    def _send(conn: Connection, response: bytes, more_coming: bool) -> None:
        """Sends a response, or with ``more_coming`` (requests already read wait behind
        it) queues it for this loop turn's single write to the connection. Without more
        to come, what is queued goes out at once: before anything the handler scheduled
        (marker delivery, a waiter it woke) runs and delays the answer."""
        if conn.unsent is None:
            if not more_coming:
                if not conn.writer.is_closing():
                    conn.writer.write(response)
                return
            conn.unsent = [response]
            asyncio.get_running_loop().call_soon(Server._flush, conn)
        else:
            conn.unsent.append(response)
            if not more_coming:
                Server._flush(conn)

    @staticmethod
    def _flush(conn: Connection) -> None:
        unsent, conn.unsent = conn.unsent, None
        if not unsent or conn.writer.is_closing():
            return
        if len(unsent) == 1:
            conn.writer.write(unsent[0])
        else:
            conn.writer.writelines(unsent)

    def _close(self, conn: Connection) -> None:
        """Closes after sending what was already answered (a fault's close_after, a bad
        next request)."""
        self._flush(conn)
        conn.writer.close()

    def close_idle(self, max_idle_s: float) -> None:
        cutoff = self.broker.clock.monotonic() - max_idle_s
        for conn in list(self.connections.values()):
            if conn.last_active < cutoff:
                log.info("closing connection %s from %s: idle longer than connections.max.idle.ms", conn.id, conn.peer)
                conn.writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        ip = peername[0] if peername else "?"
        exceeded = self.limits.admit(ip)
        if exceeded is not None:
            log.warning("closing connection from %s: %s already has the configured maximum of %d connections "
                        "(max.connections.per.ip)", peer, ip, exceeded)
            writer.close()
            return
        had_slot = False
        try:
            await self.limits.slot()  # max.connections: wait unread, as Kafka's acceptor does
            had_slot = True
            await self._serve_admitted(reader, writer, peer)
        finally:
            self.limits.leave(ip, had_slot)

    async def _serve_admitted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        conn = Connection(next(self._ids), peer, self.node_id, self.broker.clock.monotonic(), writer)
        self.connections[conn.id] = conn
        config = self.broker.config
        decoder = FrameDecoder(config["socket.request.max.bytes"])
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=max(1, config["queued.max.requests"]))
        processor = conn.processor = asyncio.create_task(self._process(queue, conn))
        conn.output_flowing.set()
        try:
            while not processor.done():
                if not conn.output_flowing.is_set() and not await _unless_ended(conn.output_flowing.wait(), processor):
                    break
                data = await reader.read(1 << 18)
                if not data:
                    break
                conn.last_active = self.broker.clock.monotonic()
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    if not await self._enqueue(queue, frame, processor):
                        break
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
            while not queue.empty():  # read but never handled: give their memory back
                if (left := queue.get_nowait()) is not None:
                    self.limits.release(len(left))
            self.connections.pop(conn.id, None)
            self._close(conn)

    async def _enqueue(self, queue: asyncio.Queue, frame: bytes, processor: asyncio.Task) -> bool:
        """Waits for request memory and room in the read-ahead queue, unless the processor
        has ended (it closed the connection): a reader parked on a queue nobody drains
        would never finish."""
        size = len(frame)
        if not self.limits.try_reserve(size) and not await _unless_ended(self.limits.reserve(size), processor):
            return False
        if not queue.full():
            queue.put_nowait(frame)
            return True
        if await _unless_ended(queue.put(frame), processor):
            return True
        self.limits.release(size)
        return False

    async def _process(self, queue: asyncio.Queue, conn: Connection) -> None:
        writer = conn.writer
        while True:
            frame = await queue.get()
            if frame is None:
                return
            if not self.node.serving.is_set():
                await self.node.serving.wait()  # paused: read, but not answered until resumed
            if writer.is_closing():
                self.limits.release(len(frame))
                return
            try:
                try:
                    out = await self.handle_frame(frame, conn)
                finally:
                    self.limits.release(len(frame))
            except ProtocolViolation as e:
                log.warning("closing connection %s from %s: %s", conn.id, conn.peer, e)
                self._close(conn)
                return
            except Exception:
                log.exception("closing connection %s from %s: unexpected error handling a request", conn.id, conn.peer)
                self._close(conn)
                return
            if out is not None:
                self._send(conn, out, more_coming=not queue.empty())
                conn.last_active = self.broker.clock.monotonic()
                if writer.transport.get_write_buffer_size() + len(out) > _WRITE_HIGH_WATER:
                    self._flush(conn)
                    conn.output_flowing.clear()
                    try:
                        await writer.drain()
                    except ConnectionError:
                        return
                    finally:
                        conn.output_flowing.set()

    async def handle_frame(self, frame: bytes, conn: Connection) -> bytes | None:
        started = self.broker.clock.monotonic()
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
        faults = self.broker.faults
        triggers = self.broker.triggers
        if triggers is not None:  # a scenario's triggers may pause or stop this very node
            await triggers.arrived(self.node, header.api_key, header.client_id, request)
            await self._still_serving()
        if faults.active:
            result = await self._under_faults(faults, ctx, request)
        else:
            result = await HANDLERS[header.api_key](ctx, request)
        if triggers is not None:
            await triggers.answering(self.node, header.api_key, header.client_id, request)
            await self._still_serving()
        if result is DROPPED:
            return None
        out = None
        observer = self.broker.request_observer
        if result is not None:
            if isinstance(result, dict) and observer is None:  # the observer is given the typed message
                body = layouts.encode_response(header.api_key, version, result)
            else:
                if isinstance(result, dict):
                    result = messages.build_response(header.api_key, version, result)
                body = messages.encode(result)
            out = encode_response_frame(header.correlation_id, flexible and header.api_key != API_VERSIONS, body)
        if observer is not None:
            try:
                observer(header.api_key, version, self.broker.clock.monotonic() - started, len(frame),
                         0 if out is None else len(out), result)
            except Exception:  # metrics never cost a client its answer
                log.exception("request metrics failed for %s v%d", api_name(header.api_key), version)
        return out

    async def _under_faults(self, faults, ctx: RequestContext, request):
        header = ctx.header
        seen = seen_by(self.broker, self.node_id, header.api_key, header.api_version, header.client_id, request)
        rule = faults.consult(seen)
        try:
            return await run_under(rule, seen, self.broker.clock, lambda: HANDLERS[header.api_key](ctx, request))
        except FaultClose as e:
            raise ProtocolViolation(str(e)) from None

    async def _still_serving(self) -> None:
        """After a scenario trigger: wait out a pause; a stopped node answers nothing."""
        if not self.node.serving.is_set():
            await self.node.serving.wait()
        if not self.node.is_up:
            raise ProtocolViolation("the node stopped (scenario trigger)")

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
            try:
                return produce.unsupported_v2_response(header, frame, pos)
            except messages.DecodeError as e:  # its answer names the partitions: the body must decode
                raise ProtocolViolation(str(e)) from None
        raise ProtocolViolation(
            f"{api_name(header.api_key)} v{header.api_version} is not supported "
            f"(this broker accepts {self.broker.apis.get(header.api_key).accepted_min}-{self.broker.apis.get(header.api_key).max})"
        )
