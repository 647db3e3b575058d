"""The asyncio listener and the per-connection request pipeline.

Each connection's protocol cuts frames from the bytes as they arrive and queues them
for the connection's processor task, which answers them strictly in order, one at a
time (as Kafka does: an idempotent producer's pipelined batches must be appended in
the order sent). Read-ahead is bounded by
``queued.max.requests``; a frame over ``socket.request.max.bytes`` closes the
connection before its body is read. Anything a peer does wrong costs only its own
connection.

The dispatch: ``HANDLERS`` gives each API key's handler (one module per API in
broker/handlers/), kept in the route of each API version; while fault rules or
observers are set, the handler runs under them (broker.faults.requests.run_request).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import socket
import struct
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import import_module
from typing import TYPE_CHECKING, Any

from broker.clock import Clock
from broker.wire.connection_limits import ConnectionQuotas, request_memory
from broker.wire.listeners import LISTEN_BACKLOG, bound_socket as _bound_socket
from broker.errors import ProtocolViolation
from broker.faults.requests import DROPPED, FaultClose, run_request
from broker.security.acls import authorized
from broker.security.sasl_errors import SaslFailure, SessionExpired
from protocol import answer_wire, request_wire
from protocol.request_wire import (
    api_name,
    FrameDecoder,
    FrameError,
    RequestHeader,
    peek_request_header,
    skip_tagged_fields,
)
from protocol.answer_wire import EncodedBody, encode_response_frame

if TYPE_CHECKING:  # an annotation only: at run time it would close a cycle (cluster, replication, network, here)
    from broker.cluster.cluster import Cluster

log = logging.getLogger(__name__)

API_VERSIONS = 18
SASL_HANDSHAKE = 17
_WRITE_HIGH_WATER = 1 << 20
_DRAIN_GRACE_S = 5.0
# A frame part-way received: the socket wakes the loop only once the rest could have
# come (SO_RCVLOWAT), not at each segment. Worth a system call only for large frames; a
# TLS layer may hold up to a record's plaintext (16 kB) undecrypted, so the low-water mark
# on a TLS listener leaves twice that out; the kernel also wakes a reader whose receive
# window closes (Linux's tcp_epollin_ready; elsewhere a mark above the receive buffer
# could leave the reader asleep, so it is Linux only).
_RCVLOWAT = socket.SO_RCVLOWAT if sys.platform == "linux" else None
_RCVLOWAT_FROM = 32 * 1024
_RCVLOWAT_MAX = 256 * 1024
_TLS_HELD_BACK = 2 * 16384

# why a connection's reading is paused (any one pauses it)
_NOT_ADMITTED = 1  # max.connections: held unread, as Kafka's acceptor does
_STALLED = 2  # a frame waits for room in the queue (queued.max.requests) or for request memory
_OUTPUT_BACKED_UP = 4  # responses wait for a peer that does not read them, as Kafka mutes the channel
_ENDED = 8  # end of stream, bad framing, or the processor ended


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
    listener: str = "PLAINTEXT"  # the listener it came in on: which addresses its answers give
    # who the client is, as ACLs, super.users, metrics and log lines see it: set by the
    # listener's TLS client certificate or SASL exchange, else Kafka's anonymous principal
    principal: str = "User:ANONYMOUS"
    # a SASL listener's authentication (broker.security.sasl.SaslExchange), else None
    sasl: Any = None

    def describe(self) -> str:
        """The connection as log lines name it: its id, peer, and principal once known."""
        anonymous = self.principal == "User:ANONYMOUS"
        return f"{self.id} from {self.peer}" + ("" if anonymous else f" ({self.principal})")


# The dispatch: API key -> its handler module in broker/handlers/ (also the APIs the
# broker implements). Modules load on first use: a broker that never sees a group or a
# transaction never imports their coordinators, which keeps start-up short.
_MODULES = {
    0: "produce",
    1: "fetch",
    2: "list_offsets",
    3: "metadata",
    8: "offset_commit",
    9: "offset_fetch",
    10: "find_coordinator",
    11: "join_group",
    12: "heartbeat",
    13: "leave_group",
    14: "sync_group",
    15: "describe_groups",
    16: "list_groups",
    17: "sasl_handshake",
    18: "api_versions",
    19: "create_topics",
    20: "delete_topics",
    21: "delete_records",
    22: "init_producer_id",
    23: "offset_for_leader_epoch",
    24: "add_partitions_to_txn",
    25: "add_offsets_to_txn",
    26: "end_txn",
    27: "write_txn_markers",
    28: "txn_offset_commit",
    29: "describe_acls",
    30: "create_acls",
    31: "delete_acls",
    32: "describe_configs",
    33: "alter_configs",
    35: "describe_log_dirs",
    36: "sasl_authenticate",
    37: "create_partitions",
    42: "delete_groups",
    43: "elect_leaders",
    44: "incremental_alter_configs",
    45: "alter_partition_reassignments",
    46: "list_partition_reassignments",
    47: "offset_delete",
    50: "describe_user_scram_credentials",
    51: "alter_user_scram_credentials",
    60: "describe_cluster",
    61: "describe_producers",
    65: "describe_transactions",
    66: "list_transactions",
    68: "consumer_group_heartbeat",
    69: "consumer_group_describe",
    76: "share_group_heartbeat",
    77: "share_group_describe",
    78: "share_fetch",
    79: "share_acknowledge",
    83: "initialize_share_group_state",
    84: "read_share_group_state",
    85: "write_share_group_state",
    86: "delete_share_group_state",
    87: "read_share_group_state_summary",
    88: "streams_group_heartbeat",
    89: "streams_group_describe",
    90: "describe_share_group_offsets",
    91: "alter_share_group_offsets",
    92: "delete_share_group_offsets",
    93: "streams_group_topology_description_update",
}


class _Handlers(Mapping):
    def __init__(self, modules: dict[int, str]) -> None:
        self._modules = modules
        self._loaded: dict[int, object] = {}

    def __getitem__(self, api_key: int):
        handle = self._loaded.get(api_key)
        if handle is None:
            module = import_module(f"broker.handlers.{self._modules[api_key]}")
            if module.API_KEY != api_key:
                raise RuntimeError(f"{module.__name__} handles API {module.API_KEY}, not {api_key}")
            handle = self._loaded[api_key] = module.handle
        return handle

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._modules

    def __iter__(self):
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


HANDLERS = _Handlers(_MODULES)


@dataclass(slots=True)
class _Route:
    """How one API version is served: looked up on its first request, then kept."""

    handle: Any  # the handler coroutine function
    flexible: bool  # request header v2 (tagged fields to skip)
    flexible_response: bool  # response header v1 (ApiVersions always answers with v0)
    decode: Any  # request_wire.request_decoder
    answer: Any  # answer_wire.response_frame_encoder


class RequestContext:
    """What a handler knows of its request. version, cluster and clock are plain
    attributes, set once: handlers read them a dozen times per transaction. ``node`` is
    the node (broker.cluster.node.BrokerNode) the request was sent to; its coordinator
    services (``node.transactions``, ``node.groups``, ...) are how a handler reaches them."""

    __slots__ = ("broker", "node", "header", "connection", "version", "cluster", "clock")

    def __init__(self, broker, node, header: RequestHeader, connection: Connection) -> None:
        self.broker = broker  # broker.process.Broker
        self.node = node
        self.header = header
        self.connection = connection
        self.version: int = header.api_version
        self.cluster: Cluster = broker.cluster
        self.clock: Clock = broker.clock

    def allowed(self, operation: int, resource_type: int, name: str, log_denial: bool = True) -> bool:
        """Whether the request's client may do ``operation`` on the resource, asked as
        Kafka's AuthHelper asks: anything while no authorizer is configured, and anything
        for a request one node sent another (markers, verification), as Kafka's
        inter-broker principal may (a super user); else the authorizer's answer
        (broker/security/acls.py)."""
        if not self.broker.authorizer.enabled or self.connection.id < 0:
            return True
        return authorized(self, operation, resource_type, name, log_denial)

    def led_partition(self, topic: str | None, index: int, missing: str = "UNKNOWN_TOPIC_OR_PARTITION",
                      current_leader_epoch: int = -1):
        """(partition, None) when this node leads it, else (None, the Kafka error name).

        A client's ``current_leader_epoch`` older than the partition's is
        FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320), checked
        before leadership as Kafka does on a replica."""
        cluster = self.broker.cluster
        if topic is None or not cluster.has_partition(topic, index):
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
        try:
            return cluster.partition(topic, index), None  # opened on its first use
        except OSError as e:  # out of file descriptors, a failing disk
            from broker.log.descriptors import storage_error

            log.warning("cannot open partition %s-%d: %s", topic, index, storage_error(e))
            return None, "KAFKA_STORAGE_ERROR"

    def current_leader(self, topic: str | None, index: int) -> dict:
        """KIP-951's LeaderIdAndEpoch for a NOT_LEADER_OR_FOLLOWER answer."""
        leadership = self.broker.cluster.leadership(topic, index) if topic is not None else None
        if leadership is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": leadership.leader, "leader_epoch": leadership.leader_epoch}

    def address(self, node) -> tuple[str, int] | None:
        """Where ``node`` (a cluster.NodeRegistration) is advertised on this request's listener, or
        None when it has no such listener (Kafka then leaves it out of the answers)."""
        return node.address(self.connection.listener)

    def brokers(self, id_key: str = "node_id") -> list[dict]:
        """The live nodes with an address on this request's listener, as Metadata and
        DescribeCluster list them."""
        out = []
        for n in self.broker.cluster.live_nodes:
            address = n.address(self.connection.listener)
            if address is not None:
                out.append({id_key: n.node_id, "host": address[0], "port": address[1], "rack": None})
        return out

    def node_endpoints(self, leaders: set[int]) -> list[dict]:
        """KIP-951's NodeEndpoints: where the named leaders listen."""
        return [b for b in self.brokers() if b["node_id"] in leaders]


class Server:
    """Serves one emulated node on its listeners (broker.wire.listeners.Endpoint: name, host,
    port); ``host`` and ``port`` are the first one's."""

    _ids = itertools.count(1)

    def __init__(self, broker, node, binds) -> None:
        self.broker = broker
        self.node = node
        self.node_id = node.node_id
        self.binds = list(binds)  # a port 0 becomes the one bound, kept for a restart
        self.host, self.port = self.binds[0].host, self.binds[0].port
        self.connections: dict[int, Connection] = {}
        self.quotas = ConnectionQuotas(broker.config)
        self.memory = request_memory(broker.config)  # None: no limit, nothing counted
        self.sasl = broker.sasl_listeners  # listener name -> ListenerSasl, for the SASL listeners
        self._servers: list[asyncio.base_events.Server] = []
        self._routes: dict[int, _Route] = {}  # by api_key << 16 | version: what handle_frame looks up once
        self._halted: list[asyncio.Task] = []  # processors ``halt`` cancelled, for ``stop`` to wait for

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            tls_listeners = self.broker.tls  # listener name -> TlsListener, for the SSL and SASL_SSL listeners
            if tls_listeners:  # the ssl module only where a listener needs it
                from broker.security.tls import server_protocol
            for i, bind in enumerate(self.binds):
                tls = tls_listeners.get(bind.name)

                def reader(name=bind.name, tls=tls):
                    if tls is None:
                        return _RequestReader(self, name)
                    app = _RequestReader(self, name, tls)
                    return server_protocol(loop, app, tls, app.accepted,
                                           functools.partial(self._handshake_ended, name, app))
                sock = self.broker.early_socket(bind) or _bound_socket(bind.host, bind.port)
                if sock is None:  # a name, or "" for every interface: the loop resolves it
                    server = await loop.create_server(reader, bind.host or None, bind.port, backlog=LISTEN_BACKLOG)
                else:
                    server = await loop.create_server(reader, sock=sock, backlog=LISTEN_BACKLOG)
                self._servers.append(server)
                self.binds[i] = replace(bind, port=server.sockets[0].getsockname()[1])
        except BaseException:
            for server in self._servers:
                server.close()
            self._servers = []
            raise
        self.host, self.port = self.binds[0].host, self.binds[0].port

    def _handshake_ended(self, listener: str, reader: "_RequestReader", peer: str, error: BaseException | None) -> None:
        """A TLS connection's handshake ended: one that never reached the reader (failed,
        or the client left) gives back its count toward max.connections.per.ip."""
        if reader._counted and reader.transport is None:
            self.quotas.leave(reader._ip, False)
        if error is None:
            return
        from broker.security.tls import handshake_failure_reason

        if isinstance(error, (ConnectionResetError, BrokenPipeError)):  # the client left (a port probe): as Kafka
            log.debug("node %d: connection from %s on listener %s closed during the TLS handshake", self.node_id,
                      peer, listener)
            return
        # worded as Kafka's Selector and the SASL failures word it: one text to look for
        log.info("Failed authentication with %s (node %d, listener %s): SSL handshake failed: %s",
                 peer, self.node_id, listener, handshake_failure_reason(error))

    @property
    def bound_ports(self) -> dict[str, int]:
        return {bind.name: bind.port for bind in self.binds}

    def halt(self, abort: bool = False) -> None:
        """Stops accepting and ends every connection at once (``abort``: with a reset, as
        a crashed host's peers see it), its request processing cancelled: a request
        being handled is abandoned unanswered, one read but not yet handled is dropped.
        Only answers already sent or queued in this turn go out."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections.values()):
            if abort:
                conn.unsent = None  # a dead host sends nothing more
                conn.writer.transport.abort()
            else:
                self._close(conn)  # what was answered before this instant still goes out
            if conn.processor is not None and not conn.processor.done():
                conn.processor.cancel()
                self._halted.append(conn.processor)

    async def stop(self, abort: bool = False) -> None:
        """``halt``, then waits for the cancelled request processing to end, so nothing
        touches the logs after the broker closes them."""
        self.halt(abort)
        processors, self._halted = [p for p in self._halted if not p.done()], []
        if processors:
            _, stuck = await asyncio.wait(processors, timeout=_DRAIN_GRACE_S)
            if stuck:
                log.warning("node %d: %d connections still processing after %.0f s; leaving them",
                            self.node_id, len(stuck), _DRAIN_GRACE_S)
        for server in self._servers:
            try:
                await self.broker.clock.wait_for(server.wait_closed(), _DRAIN_GRACE_S)
            except asyncio.TimeoutError:
                log.warning("node %d: listener did not close within %.0f s", self.node_id, _DRAIN_GRACE_S)
        self._servers = []

    @staticmethod
    def _send(conn: Connection, response: bytes, more_coming: bool) -> None:
        """Sends a response, or with ``more_coming`` (requests already read wait behind
        it) queues it for this loop turn's single write to the connection. Without more
        to come, what is queued goes out at once: before anything the handler scheduled
        (marker delivery, a waiter it woke) runs and delays the answer."""
        if conn.unsent is None:
            if not more_coming:
                transport = conn.writer.transport  # StreamWriter.write only forwards to it
                if not transport.is_closing():
                    transport.write(response)
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
        transport = conn.writer.transport
        if not unsent or transport.is_closing():
            return
        if len(unsent) == 1:
            transport.write(unsent[0])
        else:
            transport.writelines(unsent)

    def _close(self, conn: Connection) -> None:
        """Closes after sending what was already answered (a fault's close_after, a bad
        next request)."""
        self._flush(conn)
        conn.writer.close()

    def close_idle(self, max_idle_s: float) -> None:
        cutoff = self.broker.clock.monotonic() - max_idle_s
        for conn in list(self.connections.values()):
            if conn.last_active < cutoff:
                log.info("closing connection %s: idle longer than connections.max.idle.ms", conn.describe())
                conn.writer.close()

    async def _process(self, reading: _RequestReader) -> None:
        """Answers the connection's requests strictly in order, one at a time."""
        conn = reading.conn
        writer = conn.writer
        transport = writer.transport
        node = self.node
        serving = node.serving
        clock = self.broker.clock
        memory = self.memory
        frames = reading.frames
        try:
            while True:
                frame = reading.next_frame() if frames else await reading.wait_frame()
                if frame is None:
                    return
                if not serving.is_set():
                    await serving.wait()  # paused: read, but not handled until resumed
                if transport.is_closing() or not node.is_up:
                    if memory is not None:
                        memory.release(len(frame))
                    return
                try:
                    try:
                        out = await self.handle_frame(frame, conn)
                    finally:
                        if memory is not None:
                            memory.release(len(frame))
                except ProtocolViolation as e:
                    log.warning("closing connection %s: %s", conn.describe(), e)
                    return
                except SaslFailure as e:
                    await self._authentication_failed(conn, e)
                    return
                except SessionExpired as e:
                    log.info("closing connection %s: %s", conn.describe(), e)
                    return
                except Exception:
                    log.exception("closing connection %s: unexpected error handling a request", conn.describe())
                    return
                if conn.sasl is not None and conn.sasl.authenticating is not reading.frames_limited:
                    reading.limit_frames(conn.sasl.authenticating)
                if out is not None:
                    if not serving.is_set():  # paused while handling: the answer waits too
                        await serving.wait()
                        if not node.is_up:
                            return
                    self._send(conn, out, bool(frames))
                    conn.last_active = clock.monotonic()
                    if transport.get_write_buffer_size() + len(out) > _WRITE_HIGH_WATER:
                        self._flush(conn)
                        reading.pause(_OUTPUT_BACKED_UP)
                        try:
                            await writer.drain()
                        except ConnectionError:
                            return
                        finally:
                            reading.resume(_OUTPUT_BACKED_UP)
        finally:
            reading.finished()

    async def _authentication_failed(self, conn: Connection, failure: SaslFailure) -> None:
        """Ends a connection whose SASL exchange failed, as Kafka's Selector does: a failed
        authentication is answered (if at all) and closed after
        connection.failed.authentication.delay.ms; anything else is closed at once."""
        if not failure.authentication:
            log.warning("closing connection %s: %s", conn.describe(), failure)
            return
        sasl = conn.sasl
        log.info("Failed %sauthentication with %s (connection %s): %s", "re-" if sasl.reauthenticating else "",
                 conn.peer, conn.id, failure)
        self._observe_authentication(conn, None)
        if sasl.failed_delay_s > 0:
            await self.broker.clock.sleep(sasl.failed_delay_s)
        if failure.frame is not None:
            self._send(conn, failure.frame, False)

    async def handle_frame(self, frame: bytes, conn: Connection) -> bytes | bytearray | None:
        broker = self.broker
        sasl = conn.sasl
        if sasl is not None and sasl.expects_bare_token:  # after a v0 handshake: a bare token
            reply = sasl.bare_token(bytes(frame), broker.clock.now_ms(), broker.clock.monotonic())
            self._authenticated(conn)
            return struct.pack(">i", len(reply)) + reply
        observer = broker.request_observer
        started = broker.clock.monotonic() if observer is not None else 0.0
        try:
            header, pos = peek_request_header(frame)
        except FrameError as e:
            if sasl is not None and sasl.authenticating:
                raise sasl.unparsable(f"bad request header: {e}") from None
            raise ProtocolViolation(f"bad request header: {e}") from None
        api_key = header.api_key
        version = header.api_version
        if sasl is not None and (sasl.session_expiry is not None or sasl.authenticating):  # else nothing to check
            if not sasl.authenticating:
                now = broker.clock.monotonic()
                if not (api_key == SASL_HANDSHAKE and sasl.begin_reauthentication(now)) and sasl.expired(now):
                    raise SessionExpired("its SASL session expired and it did not re-authenticate "
                                         "(connections.max.reauth.ms, or the token's expiry)")
            if sasl.authenticating:
                return await self._authenticating(sasl, frame, header, pos, conn)
        route = self._routes.get((api_key << 16) | (version & 0xFFFF))
        if route is None:
            route = self._route(header, frame, pos)
            if route.__class__ is bytes:
                return route
        if route.flexible:
            if pos < len(frame) and frame[pos] == 0:  # no tagged fields, as clients send it
                pos += 1
            else:
                try:
                    pos = skip_tagged_fields(frame, pos)
                except FrameError as e:
                    raise ProtocolViolation(f"bad request header tagged fields: {e}") from None
        try:
            request = route.decode(frame, pos)
        except request_wire.DecodeError as e:
            raise ProtocolViolation(str(e)) from None
        ctx = RequestContext(broker, self.node, header, conn)
        faults = broker.faults
        triggers = broker.triggers
        if triggers is not None:  # a scenario's triggers may pause or stop this very node
            await triggers.arrived(self.node, api_key, header.client_id, request)
            await self._still_serving()
        if not faults.active:
            result = await route.handle(ctx, request)
        else:
            try:
                result = await run_request(broker, self.node_id, header, request, lambda: route.handle(ctx, request),
                                           lambda: self.node.is_up)
            except FaultClose as e:
                raise ProtocolViolation(str(e)) from None
        if triggers is not None:
            await triggers.answering(self.node, api_key, header.client_id, request)
            await self._still_serving()
        if result is DROPPED:
            return None
        out = None
        if result is not None:
            if observer is None:
                out = route.answer(header.correlation_id, result)
            elif result.__class__ is EncodedBody:  # an answer kept encoded (ApiVersions): no error in it to count
                out = route.answer(header.correlation_id, result)
                result = None
            else:  # the observer counts the error codes of the kio response
                result = answer_wire.kio_response(api_key, version, result)
                out = route.answer(header.correlation_id, result)
        if observer is not None:
            try:
                observer(api_key, version, broker.clock.monotonic() - started, len(frame),
                         0 if out is None else len(out), result)
            except Exception:  # metrics never cost a client its answer
                log.exception("request metrics failed for %s v%d", api_name(header.api_key), version)
        return out

    async def _authenticating(self, sasl, frame: bytes, header: RequestHeader, pos: int,
                              conn: Connection) -> bytes:
        """A request on a connection whose SASL exchange is under way: ApiVersions and
        the exchange's own requests are answered, anything else ends the connection."""
        api_key, version = header.api_key, header.api_version
        try:
            sasl.admit(api_key, _enum_name(api_key))
        except SaslFailure as failure:
            if failure.error_code is not None:  # answered with the error, in the request's own shape
                from broker.faults.answers import error_answer

                try:
                    route, request = self._decoded(header, frame, pos)
                except ProtocolViolation:
                    raise failure from None  # unanswerable: closed all the same
                if route.__class__ is bytes:
                    raise failure
                answer = error_answer(api_key, version, request, failure.error_code)
                if answer is not None:
                    failure.frame = route.answer(header.correlation_id, answer)
            raise
        try:
            route, request = self._decoded(header, frame, pos)
        except ProtocolViolation as e:
            raise sasl.unparsable(str(e)) from None
        if route.__class__ is bytes:  # an ApiVersions version it does not know: answered, state unchanged
            return route
        clock = self.broker.clock
        try:
            if api_key == SASL_HANDSHAKE:
                result = sasl.handshake(request.mechanism, version)
            elif api_key == API_VERSIONS:
                result = await route.handle(RequestContext(self.broker, self.node, header, conn), request)
                sasl.api_versions_answered()
            else:
                result = sasl.authenticate(bytes(request.auth_bytes), version, clock.now_ms(), clock.monotonic())
                self._authenticated(conn)
        except SaslFailure as failure:
            if failure.answer is not None:
                failure.frame = route.answer(header.correlation_id, failure.answer)
            raise
        return route.answer(header.correlation_id, result)

    def _decoded(self, header: RequestHeader, frame: bytes, pos: int):
        """(route, decoded request) of a frame; the route is the refusing answer (bytes)
        for an ApiVersions version not served. ProtocolViolation if it does not decode."""
        api_key, version = header.api_key, header.api_version
        route = self._routes.get((api_key << 16) | (version & 0xFFFF)) or self._route(header, frame, pos)
        if route.__class__ is bytes:
            return route, None
        if route.flexible:
            try:
                pos = skip_tagged_fields(frame, pos)
            except FrameError as e:
                raise ProtocolViolation(f"bad request header tagged fields: {e}") from None
        try:
            return route, route.decode(frame, pos)
        except request_wire.DecodeError as e:
            raise ProtocolViolation(str(e)) from None

    def _observe_authentication(self, conn: Connection, principal: str | None) -> None:
        sasl = conn.sasl
        observer = self.broker.authentication_observer
        if observer is not None:
            try:
                observer(conn.listener, sasl.mechanism, principal,
                         sasl.reauthenticating if principal is None else sasl.logins > 1)
            except Exception:  # metrics never cost a client its login
                log.exception("authentication metrics failed")

    def _authenticated(self, conn: Connection) -> None:
        """After a token: once the exchange has completed, the connection is its principal's."""
        sasl = conn.sasl
        if sasl.authenticating:
            return
        conn.principal = sasl.principal
        lifetime = "" if sasl.session_expiry is None else f", session lifetime {sasl.session_lifetime_ms} ms"
        log.info("connection %s from %s %s as %s with %s%s", conn.id, conn.peer,
                 "re-authenticated" if sasl.logins > 1 else "authenticated", sasl.principal, sasl.mechanism, lifetime)
        self._observe_authentication(conn, sasl.principal)

    def _route(self, header: RequestHeader, frame: bytes, pos: int) -> _Route | bytes:
        """The route of a request's API version, made on its first request and kept; for a
        version the broker does not accept, the answer that refuses it (or
        ProtocolViolation, when the request gets none)."""
        api_key, version = header.api_key, header.api_version
        api = self.broker.apis.ranges.get(api_key)
        if api is None or api_key not in HANDLERS:
            raise ProtocolViolation(f"unknown or unsupported API key {api_key}")
        if not api.accepts(version):
            if api_key == API_VERSIONS:
                return self._unsupported_api_versions(header)
            return self._unsupported_version(header, frame, pos)
        flexible = api.flexible(version)
        flexible_response = flexible and api_key != API_VERSIONS
        route = _Route(HANDLERS[api_key], flexible, flexible_response, request_wire.request_decoder(api_key, version),
                       answer_wire.response_frame_encoder(api_key, version, flexible_response))
        self._routes[(api_key << 16) | (version & 0xFFFF)] = route
        return route

    async def _still_serving(self) -> None:
        """After a scenario trigger: wait out a pause; a stopped node answers nothing."""
        if not self.node.serving.is_set():
            await self.node.serving.wait()
        if not self.node.is_up:
            raise ProtocolViolation("the node stopped (scenario trigger)")

    def _unsupported_api_versions(self, header: RequestHeader) -> bytes:
        r = self.broker.apis.get(API_VERSIONS)
        answer = answer_wire.answer_type(API_VERSIONS)
        body = answer_wire.encode(answer_wire.build_response(API_VERSIONS, 0, answer(
            error_code=35, api_keys=[answer.ApiVersion(api_key=API_VERSIONS, min_version=r.advertised_min,
                                                       max_version=r.max)])))
        return encode_response_frame(header.correlation_id, False, body)

    def _unsupported_version(self, header: RequestHeader, frame: bytes, pos: int) -> bytes:
        from broker.handlers import produce

        if header.api_key == produce.API_KEY and header.api_version == 2:
            try:
                return produce.unsupported_v2_response(header, frame, pos)
            except request_wire.DecodeError as e:  # its answer names the partitions: the body must decode
                raise ProtocolViolation(str(e)) from None
        raise ProtocolViolation(
            f"{api_name(header.api_key)} v{header.api_version} is not supported "
            f"(this broker accepts {self.broker.apis.get(header.api_key).accepted_min}-{self.broker.apis.get(header.api_key).max})"
        )


class _RequestReader(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """One client connection's reading side: frames are cut from the bytes as they
    arrive (no stream buffer and no reader task between the socket and the processor)
    and queued for the connection's processor task, which answers them in order.

    Read-ahead is bounded by ``queued.max.requests`` and the broker-wide request memory
    (``queued.max.request.bytes``): a frame that finds no room stalls, and reading
    pauses until the processor makes room. When the peer ends its side, or the
    connection breaks, requests already read still take effect (an acks=0 produce must
    not be lost), but a parked or long-polling one is not waited for beyond a grace
    period."""

    def __init__(self, server: Server, listener: str, tls=None) -> None:
        super().__init__()
        self.server = server
        self.listener = listener
        self.tls = tls  # broker.security.tls.TlsListener on an SSL listener: reached after the handshake
        self._principal = "User:ANONYMOUS"
        self._counted = False  # toward max.connections.per.ip
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.conn: Connection | None = None
        self.frames: deque[bytes] = deque()  # read, memory reserved, not yet taken
        self.stalled: bytes | None = None  # read, waiting for room or memory
        self._decoder: FrameDecoder | None = None
        self._early: list[bytes] = []  # read before the connection was admitted
        self._max_queued = 1
        self.frames_limited = False  # to sasl.server.max.receive.size, while SASL authentication is under way
        self._waiter: asyncio.Future | None = None  # the processor's, while nothing is queued
        # the _NOT_ADMITTED.. reasons reading is paused for (not FlowControlMixin's _paused,
        # which is whether the transport paused our writing)
        self._read_paused = 0
        self._reading = True
        self._ip = "?"
        self._peer = "?"
        self._admitting: asyncio.Task | None = None
        self._had_slot = False
        self._lost = False
        self._closed: asyncio.Future | None = None  # for StreamWriter.wait_closed, made when asked
        self._reserving = False
        self._grace = None
        self._done = False
        self._socket = None  # for the receive low-water mark
        self._rcvlowat = 1

    # -- transport callbacks ---------------------------------------------------------

    def accepted(self, transport: asyncio.Transport) -> bool:
        """A new TCP connection, counted toward max.connections.per.ip (as Kafka's acceptor
        counts it, before any TLS handshake); False when over the limit: closed."""
        peername = transport.get_extra_info("peername")
        self._peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        self._ip = peername[0] if peername else "?"
        exceeded = self.server.quotas.admit(self._ip)
        if exceeded is not None:
            log.warning("closing connection from %s: %s already has the configured maximum of %d connections "
                        "(max.connections.per.ip)", self._peer, self._ip, exceeded)
            self._done = True
            transport.close()
            return False
        self._counted = True
        return True

    def connection_made(self, transport: asyncio.Transport) -> None:
        server = self.server
        self.transport = transport  # on a TLS listener, after the handshake (counted at accept)
        if self.tls is None and not self.accepted(transport):
            return
        self._loop = asyncio.get_running_loop()  # kept: each lookup of the running loop costs a getpid()
        if _RCVLOWAT is not None:
            self._socket = transport.get_extra_info("socket")
        if self.tls is not None:
            # here: a broker without TLS listeners does not compile the rules' grammar at start
            from broker.security.principal_mapping import PrincipalMappingError

            try:
                self._principal = self.tls.principal(transport.get_extra_info("ssl_object"))
            except PrincipalMappingError as e:  # Kafka closes it: the principal cannot be built
                log.warning("closing connection from %s on listener %s: failed to map the client certificate's "
                            "name based on ssl.principal.mapping.rules: %s", self._peer, self.listener, e)
                server.quotas.leave(self._ip, False)
                self._done = True
                transport.close()
                return
        if server.quotas.try_slot():
            self._had_slot = True
            self._start()
        else:
            self.pause(_NOT_ADMITTED)
            self._admitting = asyncio.get_running_loop().create_task(self._admit())

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None:  # not admitted yet: kept unread (the transport may start reading
            self._early.append(data)  # before a pause in connection_made takes effect)
            self._reading = True
            self.pause(_NOT_ADMITTED)
            return
        if self._read_paused & _ENDED:
            return
        conn.last_active = self.server.broker.clock.monotonic()
        try:
            decoder = self._decoder
            decoder.feed(data)
            self._cut()
            awaited = decoder.missing() - (_TLS_HELD_BACK if self.tls is not None else 0)
            if awaited >= _RCVLOWAT_FROM or self._rcvlowat != 1:
                self._await_bytes(min(awaited, _RCVLOWAT_MAX) if awaited >= _RCVLOWAT_FROM else 1)
        except FrameError as e:
            if conn.sasl is not None and conn.sasl.authenticating:
                log.info("Failed authentication with %s (connection %s): Failing SASL authentication due to invalid "
                         "receive size (a frame of %s bytes; sasl.server.max.receive.size=%d)", conn.peer, conn.id,
                         self._decoder.pending_frame_size(), conn.sasl.settings.max_receive_size)
                self.server._observe_authentication(conn, None)
            else:
                log.warning("closing connection %s: %s", conn.describe(), e)
            self._end()

    def _await_bytes(self, count: int) -> None:
        """Readable (for the event loop) once ``count`` bytes have arrived, or at the end of the stream."""
        if count == self._rcvlowat or self._socket is None:
            return
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, _RCVLOWAT, count)
        except OSError:
            self._socket = None  # not a TCP socket that takes it: read as it comes
            return
        self._rcvlowat = count

    def eof_received(self) -> bool:
        self._end()
        # keep the transport open: answers to requests already read still go out (TLS
        # cannot: its close_notify ends both directions)
        return self.tls is None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._lost = True
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        if self._admitting is not None:
            self._admitting.cancel()
        elif self._reserving and self.conn is not None:
            self.conn.processor.cancel()  # waiting for memory for a request nobody will read
        self._end()

    def pause(self, reason: int) -> None:
        self._read_paused |= reason
        if self._reading and not self.transport.is_closing():
            self._reading = False
            self.transport.pause_reading()

    def resume(self, reason: int) -> None:
        self._read_paused &= ~reason
        if not self._read_paused and not self._reading and not self.transport.is_closing():
            self._reading = True
            self.transport.resume_reading()

    # -- admission and end -----------------------------------------------------------

    async def _admit(self) -> None:
        try:
            await self.server.quotas.slot()
        except asyncio.CancelledError:  # gone while waiting for a slot
            self.server.quotas.leave(self._ip, False)
            self._done = True
            raise
        self._had_slot = True
        self._admitting = None
        self._start()
        if self._lost:
            self._end()
        else:
            self.resume(_NOT_ADMITTED)

    def _start(self) -> None:
        server = self.server
        loop = asyncio.get_running_loop()
        writer = asyncio.StreamWriter(self.transport, self, None, loop)
        self.conn = Connection(next(server._ids), self._peer, server.node_id, server.broker.clock.monotonic(), writer,
                               listener=self.listener, principal=self._principal)
        server.connections[self.conn.id] = self.conn
        config = server.broker.config
        self._decoder = FrameDecoder(config["socket.request.max.bytes"])
        sasl = server.sasl.get(self.listener)
        if sasl is not None:
            from broker.security.sasl import SaslExchange

            self.conn.sasl = SaslExchange(sasl)
            self.limit_frames(True)
        self._max_queued = max(1, config["queued.max.requests"])
        self.conn.processor = loop.create_task(server._process(self))
        if self._early:
            early, self._early = self._early, []
            for data in early:
                self.data_received(data)

    def limit_frames(self, authenticating: bool) -> None:
        """Before SASL authentication completes, a frame may be at most
        sasl.server.max.receive.size (a 100 MB "token" is refused before it is read)."""
        self.frames_limited = authenticating
        limit = self.server.broker.config["socket.request.max.bytes"]
        if authenticating:
            limit = min(limit, self.conn.sasl.settings.max_receive_size)
        self._decoder.max_frame_size = limit

    def _end(self) -> None:
        """Nothing more is read: the processor answers what was read, then closes; a
        request it is still parked on gets a grace period."""
        self.pause(_ENDED)
        self._wake()
        conn = self.conn
        if conn is not None and self._grace is None and not self._done:
            self._grace = self.server.broker.clock.call_later(_DRAIN_GRACE_S, conn.processor.cancel)

    def finished(self) -> None:
        """The processor has ended: give back what was read but never handled, close."""
        if self._done:
            return
        self._done = True
        server = self.server
        if self._grace is not None:
            self._grace.cancel()
        self.pause(_ENDED)
        memory = server.memory
        while self.frames:
            frame = self.frames.popleft()
            if memory is not None:
                memory.release(len(frame))
        self.stalled = None
        server.connections.pop(self.conn.id, None)
        shares = server.node.made("shares")
        if shares is not None:
            shares.connection_closed(self.conn.id)
        server._close(self.conn)
        server.quotas.leave(self._ip, self._had_slot)

    def _get_close_waiter(self, stream) -> asyncio.Future:
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
            if self._lost:
                self._closed.set_result(None)
        return self._closed

    # -- frames ----------------------------------------------------------------------

    def _cut(self) -> None:
        decoder = self._decoder
        memory = self.server.memory
        while self.stalled is None and (frame := decoder.next_frame()) is not None:
            if len(self.frames) < self._max_queued and (memory is None or memory.try_reserve(len(frame))):
                self.frames.append(frame)
            else:
                self.stalled = frame
                self.pause(_STALLED)
        self._wake()

    def _unstall(self, reserved: bool = False) -> None:
        """After the processor took a frame (or got memory for the stalled one): queue the
        stalled frame if there is room now, then what else was read behind it, and read on."""
        frame = self.stalled
        if frame is None or len(self.frames) >= self._max_queued:
            return
        memory = self.server.memory
        if not reserved and memory is not None and not memory.try_reserve(len(frame)):
            return
        self.stalled = None
        self.frames.append(frame)
        try:
            self._cut()
        except FrameError as e:
            log.warning("closing connection %s: %s", self.conn.describe(), e)
            self._end()
            return
        if self.stalled is None:
            self.resume(_STALLED)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def next_frame(self) -> bytes:
        frame = self.frames.popleft()
        if self.stalled is not None:
            self._unstall()
        return frame

    async def wait_frame(self) -> bytes | None:
        """The next request, or None once nothing more will come."""
        while not self.frames:
            if self.stalled is not None:  # no room in request memory: wait for some
                memory = self.server.memory
                if memory is not None:
                    self._reserving = True
                    try:
                        await memory.reserve(len(self.stalled))
                    finally:
                        self._reserving = False
                self._unstall(reserved=True)
                continue
            if self._read_paused & _ENDED:
                return None
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.next_frame()


def _enum_name(api_key: int) -> str:
    """An API as Kafka's ApiKeys enum names it in messages: METADATA, INIT_PRODUCER_ID."""
    import re

    name = api_name(api_key)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper() if not name.startswith("api-") else name
