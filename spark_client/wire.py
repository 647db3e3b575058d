"""The blocking driver of the sans-IO client core (protocol/client.py), for the Spark data source.

Spark runs the data source in plain Python worker processes, so this client is
synchronous: one socket per broker, requests pipelined on it (responses come back in
order), no threads. It knows just what the sink and the reader need: metadata and
partition leaders, transaction coordinators (FindCoordinator key_type 1),
InitProducerId, AddPartitionsToTxn, Produce with sequences, EndTxn by
(transactional id, producer id, epoch) alone, DescribeTransactions, ListOffsets,
Fetch and CreateTopics.

Only error codes are retried here that Kafka documents as "try again": coordinator
moves and loads, CONCURRENT_TRANSACTIONS. Anything else raises ``KafkaError`` and the
caller (a Spark task, which Spark retries as a new attempt) decides.
"""

from __future__ import annotations

import collections
import socket
import time
from dataclasses import dataclass
from typing import Any, Iterable

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from protocol import answer_wire
from protocol.answer_wire import request_type
from protocol.client import (
    FIND_COORDINATOR,
    METADATA,
    ClientConnection,
    Response,
    find_coordinator_request,
    metadata_request,
    parse_bootstrap,
    parse_find_coordinator,
    parse_metadata,
)
from protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, build_batch, increment_sequence

# The versions this client speaks; Kafka 4.0 and eosbroker accept all of them.
PRODUCE_V = 9
FETCH_V = 12
LIST_OFFSETS_V = 7
METADATA_V = 12
FIND_COORDINATOR_V = 4
CREATE_TOPICS_V = 5
INIT_PRODUCER_ID_V = 4
ADD_PARTITIONS_V = 3
END_TXN_V = 3
DESCRIBE_TXNS_V = 0
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

COORDINATOR_RETRIABLE = frozenset({
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.concurrent_transactions,
})
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})

EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class KafkaError(Exception):
    """A broker answered with an error code the caller must handle."""

    def __init__(self, error: ErrorCode, context: str) -> None:
        self.error = ErrorCode(error)
        self.context = context
        super().__init__(f"{self.error.name.upper()} ({int(self.error)}): {context}")

    def __reduce__(self):
        # Spark pickles exceptions between its processes; the default rebuilds from the message alone.
        return type(self), (self.error, self.context)


class Connection:
    """One blocking socket to one broker; requests can be pipelined. With ``security``
    (spark_client.security.ClientSecurity) the socket is wrapped in TLS and the client
    logs in with SASL before its first request, and again before the session ends
    (KIP-368)."""

    def __init__(self, host: str, port: int, client_id: str = "eosbroker-spark", timeout: float = 30.0,
                 security=None, ssl_context=None) -> None:
        self.address = (host, port)
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._core = ClientConnection(client_id)
        self._ready: dict[int, Response] = {}
        self._security = security
        self._reauthenticate_at: float | None = None
        try:
            if ssl_context is not None:
                self._sock = ssl_context.wrap_socket(self._sock, server_hostname=host)
            if security is not None and security.sasl:
                self._login()
        except BaseException:
            self.close()
            raise

    def _login(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the mechanism is done."""
        from protocol.sasl_client import SaslClientError, mechanism_client, unsecured_token

        security = self._security
        handshake = self.request(SASL_HANDSHAKE, 1, request_type(SASL_HANDSHAKE)(mechanism=security.mechanism),
                                 login=True)
        if handshake.error_code != ErrorCode.none:
            raise KafkaError(handshake.error_code, f"SASL mechanism {security.mechanism} at {self.address}; "
                                                   f"the broker offers {', '.join(handshake.mechanisms) or 'none'}")
        client = mechanism_client(security.mechanism, security.username, security.password,
                                  unsecured_token(security.oauth_subject) if security.oauth_subject else None)
        token: bytes | None = client.first()
        lifetime_ms = 0
        while token is not None:
            answer = self.request(SASL_AUTHENTICATE, 2, request_type(SASL_AUTHENTICATE)(auth_bytes=token), login=True)
            if answer.error_code != ErrorCode.none:
                raise KafkaError(answer.error_code, f"SASL {security.mechanism} login at {self.address}: "
                                                    f"{answer.error_message}")
            lifetime_ms = answer_wire.ms(answer.session_lifetime) or 0
            try:
                token = client.next(answer.auth_bytes)
            except SaslClientError as e:
                raise KafkaError(ErrorCode.sasl_authentication_failed, f"{self.address}: {e}") from None
        # re-authenticate well before the broker closes the session
        self._reauthenticate_at = time.monotonic() + 0.85 * lifetime_ms / 1000 if lifetime_ms > 0 else None

    def send(self, api_key: int, version: int, body, login: bool = False) -> int:
        """Writes one request (of the API's ``request_type``) and returns its correlation
        id, without waiting."""
        if (not login and self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at
                and not self._core.pending and not self._ready):
            self._login()
        correlation_id, data = self._core.send(api_key, version, body)
        self._sock.sendall(data)
        return correlation_id

    def wait(self, correlation_id: int) -> Any:
        """The response to ``correlation_id``; earlier responses are kept for their callers."""
        while correlation_id not in self._ready:
            data = self._sock.recv(1 << 20)
            if not data:
                raise ConnectionError(f"broker {self.address} closed the connection")
            for response in self._core.receive_data(data):
                self._ready[response.correlation_id] = response
        response = self._ready.pop(correlation_id)
        if response.error is not None:
            raise response.error
        return response.value

    def request(self, api_key: int, version: int, body, login: bool = False) -> Any:
        return self.wait(self.send(api_key, version, body, login))

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


@dataclass(frozen=True, slots=True)
class TxnHandle:
    """What EndTxn needs to finish a transaction from any process."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    error: ErrorCode
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int


class Client:
    """A client's view of a cluster: connections by node id, partition leaders and
    transaction coordinators."""

    def __init__(self, bootstrap: str, client_id: str = "eosbroker-spark", timeout: float = 30.0,
                 security=None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.security = security  # spark_client.security.ClientSecurity, or None for PLAINTEXT
        self._ssl_context = security.ssl_context() if security is not None and security.tls else None
        self._by_address: dict[tuple[str, int], Connection] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._partition_counts: dict[str, int] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}

    # -- connections ----------------------------------------------------------------

    def connection(self, address: tuple[str, int]) -> Connection:
        conn = self._by_address.get(address)
        if conn is None:
            conn = Connection(address[0], address[1], self.client_id, self.timeout, self.security, self._ssl_context)
            self._by_address[address] = conn
        return conn

    def any_connection(self) -> Connection:
        last: Exception | None = None
        for address in list(self._by_address) + self.bootstrap:
            try:
                return self.connection(address)
            except OSError as e:
                last = e
        raise ConnectionError(f"no bootstrap server reachable: {last}")

    def drop(self, conn: Connection) -> None:
        conn.close()
        self._by_address.pop(conn.address, None)

    def close(self) -> None:
        for conn in self._by_address.values():
            conn.close()
        self._by_address.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metadata -------------------------------------------------------------------

    def refresh_metadata(self, topics: Iterable[str]) -> None:
        metadata = parse_metadata(self.any_connection().request(METADATA, METADATA_V, metadata_request(topics)))
        for node in metadata.nodes.values():
            self._nodes[node.node_id] = node.address
        for t in metadata.topics.values():
            if t.error != ErrorCode.none:
                raise KafkaError(t.error, f"metadata for topic {t.name!r}")
            self._partition_counts[t.name] = len(t.leaders)
            for p, leader in t.leaders.items():
                self._leaders[(t.name, p)] = leader

    def partition_count(self, topic: str) -> int:
        if topic not in self._partition_counts:
            self.refresh_metadata([topic])
        return self._partition_counts[topic]

    def leader(self, topic: str, partition: int) -> Connection:
        if (topic, partition) not in self._leaders:
            self.refresh_metadata([topic])
        node = self._leaders.get((topic, partition), -1)
        if node not in self._nodes:
            raise KafkaError(ErrorCode.leader_not_available, f"{topic}-{partition} has no leader")
        return self.connection(self._nodes[node])

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        """Creates ``name`` unless it exists (an existing topic keeps its settings)."""
        create = request_type(19)
        r = self.any_connection().request(19, CREATE_TOPICS_V, create(timeout_ms=30000, topics=(create.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=-1, assignments=(),
            configs=tuple(create.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items())),)))
        error = r.topics[0].error_code
        if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise KafkaError(error, f"creating topic {name!r}: {r.topics[0].error_message}")

    def list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int, isolation: int) -> dict[int, int]:
        """Offsets by partition: EARLIEST (log start), LATEST (LSO under read_committed)."""
        by_leader: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
        for p in partitions:
            by_leader[self.leader(topic, p).address].append(p)
        out = {}
        for address, ps in by_leader.items():
            lists = request_type(2)
            r = self.connection(address).request(2, LIST_OFFSETS_V, lists(
                replica_id=-1, isolation_level=isolation, timeout_ms=0, topics=(lists.ListOffsetsTopic(
                    name=topic, partitions=tuple(lists.ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=-1, timestamp=timestamp) for p in ps)),)))
            for p in r.topics[0].partitions:
                if p.error_code != ErrorCode.none:
                    raise KafkaError(p.error_code, f"ListOffsets {topic}-{p.partition_index}")
                out[p.partition_index] = p.offset
        return out

    # -- transaction coordinators ---------------------------------------------------

    def coordinator(self, transactional_id: str) -> Connection:
        if transactional_id not in self._coordinators:
            self.find_coordinators([transactional_id])
        return self.connection(self._coordinators[transactional_id])

    def find_coordinators(self, transactional_ids: Iterable[str], deadline: float | None = None) -> None:
        """One FindCoordinator for every id not yet known; waits out COORDINATOR_NOT_AVAILABLE."""
        wanted = [t for t in dict.fromkeys(transactional_ids) if t not in self._coordinators]
        deadline = deadline or time.monotonic() + self.timeout
        backoff = Backoff()
        while wanted:
            r = self.any_connection().request(FIND_COORDINATOR, FIND_COORDINATOR_V,
                                              find_coordinator_request(FIND_COORDINATOR_V, wanted))
            retry = []
            for c in parse_find_coordinator(FIND_COORDINATOR_V, wanted, r):
                if c.error == ErrorCode.none:
                    self._coordinators[c.key] = c.node.address
                elif c.error in COORDINATOR_RETRIABLE:
                    retry.append(c.key)
                else:
                    raise KafkaError(c.error, f"FindCoordinator for transactional id {c.key!r}")
            wanted = retry
            if wanted:
                backoff.sleep(deadline, f"FindCoordinator for {wanted}")

    def forget_coordinator(self, transactional_id: str) -> None:
        self._coordinators.pop(transactional_id, None)

    def coordinator_request(self, transactional_id: str, api_key: int, version: int, body, deadline: float) -> Any:
        """A coordinator request, retried through coordinator moves, loads and concurrent transactions."""
        backoff = Backoff()
        while True:
            try:
                conn = self.coordinator(transactional_id)
                r = conn.request(api_key, version, body)
            except OSError as e:  # the coordinator went away: find it again
                self.forget_coordinator(transactional_id)
                for c in list(self._by_address.values()):
                    self.drop(c)
                backoff.sleep(deadline, f"{api_key_map[api_key]} for {transactional_id!r}: {e}")
                continue
            error = getattr(r, "error_code", ErrorCode.none)
            if error not in COORDINATOR_RETRIABLE:
                return r
            if error in _COORDINATOR_MOVED:
                self.forget_coordinator(transactional_id)
            backoff.sleep(deadline, f"{api_key_map[api_key]} for {transactional_id!r} answered {error.name}")


class Backoff:
    """Exponential backoff from 20 ms to 1 s, bounded by a deadline."""

    def __init__(self) -> None:
        self.delay = 0.02

    def sleep(self, deadline: float, what: str) -> None:
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(f"gave up retrying: {what}")
        time.sleep(min(self.delay, deadline - now))
        self.delay = min(self.delay * 2, 1.0)


# -- transactions -------------------------------------------------------------------


def init_producer_id(cluster: Client, transactional_id: str, transaction_timeout_ms: int,
                     deadline: float) -> TxnHandle:
    """InitProducerId: a fresh producer id/epoch; aborts and fences whatever the id had open."""
    r = cluster.coordinator_request(transactional_id, 22, INIT_PRODUCER_ID_V, request_type(22)(
        transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms,
        producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH), deadline)
    if r.error_code != ErrorCode.none:
        raise KafkaError(r.error_code, f"InitProducerId for {transactional_id!r}")
    return TxnHandle(transactional_id, r.producer_id, r.producer_epoch)


def add_partitions(cluster: Client, txn: TxnHandle, partitions: Iterable[tuple[str, int]], deadline: float) -> None:
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for topic, p in partitions:
        by_topic[topic].append(p)
    add = request_type(24)
    r = cluster.coordinator_request(txn.transactional_id, 24, ADD_PARTITIONS_V, add(
        transactions=(), v3_and_below_transactional_id=txn.transactional_id,
        v3_and_below_producer_id=txn.producer_id, v3_and_below_producer_epoch=txn.producer_epoch,
        v3_and_below_topics=tuple(add.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                  for t, ps in by_topic.items())), deadline)
    errors = [(t.name, p.partition_index, p.partition_error_code)
              for t in r.results_by_topic_v3_and_below for p in t.results_by_partition
              if p.partition_error_code != ErrorCode.none]
    retriable = [e for e in errors if e[2] in COORDINATOR_RETRIABLE or e[2] == ErrorCode.operation_not_attempted]
    if errors and len(retriable) == len(errors):
        Backoff().sleep(deadline, f"AddPartitionsToTxn {errors}")
        add_partitions(cluster, txn, [(t, p) for t, p, _ in errors], deadline)
        return
    for topic, p, error in errors:
        if error != ErrorCode.operation_not_attempted:
            raise KafkaError(error, f"AddPartitionsToTxn {topic}-{p} for {txn.transactional_id!r}")


def end_txn(cluster: Client, txn: TxnHandle, commit: bool, deadline: float) -> ErrorCode:
    """EndTxn by (transactional id, producer id, epoch); returns the final error code.

    NONE also when the same outcome was already reached (a retried or recovered commit).
    """
    r = cluster.coordinator_request(txn.transactional_id, 26, END_TXN_V, _end_txn_request(txn, commit), deadline)
    return ErrorCode(r.error_code)


def _end_txn_request(txn: TxnHandle, commit: bool):
    return request_type(26)(transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                            producer_epoch=txn.producer_epoch, committed=commit)


def describe_transactions(cluster: Client, transactional_ids: Iterable[str],
                          deadline: float) -> dict[str, TxnDescription]:
    ids = list(dict.fromkeys(transactional_ids))
    cluster.find_coordinators(ids, deadline)
    by_coordinator: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    for t in ids:
        by_coordinator[cluster.coordinator(t).address].append(t)
    out = {}
    for address, group in by_coordinator.items():
        backoff = Backoff()
        while group:
            r = cluster.connection(address).request(65, DESCRIBE_TXNS_V,
                                                    request_type(65)(transactional_ids=tuple(group)))
            again = []
            for s in r.transaction_states:
                if s.error_code == ErrorCode.coordinator_load_in_progress:
                    again.append(s.transactional_id)
                    continue
                out[s.transactional_id] = TxnDescription(
                    s.transactional_id, ErrorCode(s.error_code), s.transaction_state, s.producer_id,
                    s.producer_epoch, answer_wire.ms(s.transaction_timeout))
            group = again
            if group:
                backoff.sleep(deadline, f"DescribeTransactions {group}")
    return out


# -- producing ----------------------------------------------------------------------


class Producer:
    """Buffers records per partition and ships v2 batches with pipelined Produce requests.

    With a ``transactional_id`` every batch is transactional: InitProducerId on the
    first record, AddPartitionsToTxn before a partition's first batch, sequences per
    partition. Without one, batches carry no producer id (plain at-least-once).
    Nothing is committed here: ``flush`` waits for every acknowledgement and the
    returned ``TxnHandle`` can be committed by anyone.
    """

    def __init__(self, cluster: Client, *, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000, batch_bytes: int = 512 * 1024, max_in_flight: int = 5,
                 request_timeout_ms: int = 30000) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.batch_bytes = batch_bytes
        self.max_in_flight = max_in_flight
        self.request_timeout_ms = request_timeout_ms
        self.txn: TxnHandle | None = None
        self.started_ms = -1
        self.records_sent = 0
        self._buffers: dict[tuple[str, int], list] = {}
        self._buffer_bytes: dict[tuple[str, int], int] = {}
        self._sequences: dict[tuple[str, int], int] = {}
        self._in_txn: set[tuple[str, int]] = set()
        self._in_flight: dict[tuple[str, int], collections.deque] = collections.defaultdict(collections.deque)

    def _deadline(self) -> float:
        return time.monotonic() + self.request_timeout_ms / 1000

    def send(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
             headers: tuple = (), timestamp_ms: int | None = None) -> None:
        tp = (topic, partition)
        buf = self._buffers.get(tp)
        if buf is None:
            buf = self._buffers[tp] = []
            self._buffer_bytes[tp] = 0
        buf.append((key, value, headers, timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)))
        size = self._buffer_bytes[tp] + 24 + (len(key) if key else 0) + (len(value) if value else 0)
        self._buffer_bytes[tp] = size
        if size >= self.batch_bytes:
            self._ship([tp])

    def flush(self) -> TxnHandle | None:
        """Ships what is buffered and waits for every acknowledgement. A producer that was
        given no record opens no transaction (returns None): it has nothing to commit."""
        pending = [tp for tp, buf in self._buffers.items() if buf]
        if pending:
            self._ship(pending)
        for address in list(self._in_flight):
            self._drain(address, 0)
        return self.txn

    def abort(self) -> None:
        """Aborts this producer's transaction, if it opened one (best effort on a broken connection)."""
        if self.txn is None:
            return
        error = end_txn(self.cluster, self.txn, False, self._deadline())
        if error not in (ErrorCode.none, ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch,
                         ErrorCode.invalid_txn_state):
            raise KafkaError(error, f"EndTxn(abort) for {self.txn.transactional_id!r}")

    def _ship(self, tps: list[tuple[str, int]]) -> None:
        if self.transactional_id is not None:
            if self.txn is None:
                self.started_ms = int(time.time() * 1000)  # no later than the coordinator's start
                self.txn = init_producer_id(self.cluster, self.transactional_id, self.transaction_timeout_ms,
                                            self._deadline())
            new = [tp for tp in tps if tp not in self._in_txn]
            if new:
                add_partitions(self.cluster, self.txn, new, self._deadline())
                self._in_txn.update(new)
        for tp in tps:
            records = self._buffers[tp]
            if not records:
                continue
            self._buffers[tp] = []
            self._buffer_bytes[tp] = 0
            if self.txn is not None:
                sequence = self._sequences.get(tp, 0)
                self._sequences[tp] = increment_sequence(sequence, len(records))
                batch = build_batch(records, producer_id=self.txn.producer_id,
                                    producer_epoch=self.txn.producer_epoch, base_sequence=sequence,
                                    transactional=True)
            else:
                batch = build_batch(records)
            conn = self.cluster.leader(*tp)
            queue = self._in_flight[conn.address]
            if len(queue) >= self.max_in_flight:
                self._drain(conn.address, self.max_in_flight - 1)
            produce = request_type(0)
            cid = conn.send(0, PRODUCE_V, produce(
                transactional_id=self.transactional_id, acks=-1, timeout_ms=self.request_timeout_ms,
                topic_data=(produce.TopicProduceData(name=tp[0], partition_data=(
                    produce.PartitionProduceData(index=tp[1], records=bytes(batch)),)),)))
            queue.append((cid, tp, len(records)))

    def _drain(self, address: tuple[str, int], keep: int) -> None:
        queue = self._in_flight[address]
        conn = self.cluster.connection(address)
        while len(queue) > keep:
            cid, tp, count = queue.popleft()
            r = conn.wait(cid)
            for topic in r.responses:
                for p in topic.partition_responses:
                    if p.error_code != ErrorCode.none:
                        raise KafkaError(p.error_code, f"Produce to {topic.name}-{p.index}: {p.error_message}")
            self.records_sent += count


def fence(cluster: Client, transactional_id: str, deadline: float) -> TxnHandle:
    """Aborts whatever ``transactional_id`` has open and fences its producer (a new epoch)."""
    return init_producer_id(cluster, transactional_id, 60000, deadline)


def end_txns(cluster: Client, txns: Iterable[TxnHandle], commit: bool, deadline: float) -> dict[str, ErrorCode]:
    """EndTxn for many transactions at once: pipelined per coordinator, retriable answers retried.

    Returns the final error code by transactional id.
    """
    txns = list(txns)
    cluster.find_coordinators([t.transactional_id for t in txns], deadline)
    sent: list[tuple[TxnHandle, Connection, int]] = []
    results: dict[str, ErrorCode] = {}
    retry: list[TxnHandle] = []
    for t in txns:
        try:
            conn = cluster.coordinator(t.transactional_id)
            sent.append((t, conn, conn.send(26, END_TXN_V, _end_txn_request(t, commit))))
        except OSError:
            retry.append(t)
    for t, conn, cid in sent:
        try:
            error = ErrorCode(conn.wait(cid).error_code)
        except OSError:
            retry.append(t)
            continue
        if error in COORDINATOR_RETRIABLE:
            retry.append(t)
        else:
            results[t.transactional_id] = error
    for t in retry:  # one at a time, through coordinator_request's retry loop
        results[t.transactional_id] = end_txn(cluster, t, commit, deadline)
    return results
