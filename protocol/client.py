"""The client side of a Kafka connection, sans-IO (in the style of h11).

``ClientConnection`` turns requests into the bytes to write and the bytes read back
into typed responses, matched to their requests by correlation id. It owns no
socket: a driver writes what ``send`` returns and feeds ``receive_data`` what it
read. Two drivers exist: an asyncio one (``broker/wire/client.py``: the broker's marker
sender, the command-line tools, tests) and a blocking one (``spark_client/wire.py``:
Spark's worker processes).

Also here, once for every client: the Metadata and FindCoordinator requests and
what a client keeps from their answers (nodes, partition leaders, coordinators).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i64

from protocol import answer_wire
from protocol.answer_wire import request_type
from protocol.request_wire import flexible_from, FrameDecoder, encode_request_frame
from protocol.names import TRANSACTION_KEY_TYPE, TopicPartition

API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10
DESCRIBE_TRANSACTIONS = 65
MAX_RESPONSE_BYTES = 1 << 30
_INT32 = struct.Struct(">i")


def response_header_size(api_key: int, version: int) -> int:
    """Bytes of the response header: v1 (correlation id + tagged fields) for flexible
    versions, v0 (correlation id) otherwise and always for ApiVersions, whose response
    a client must read before it knows which versions the broker speaks."""
    return 5 if version >= flexible_from(api_key) and api_key != API_VERSIONS else 4


# kio reads DescribeTransactions' TransactionStartTimeMs as a datetime and refuses the -1
# Kafka sends when no transaction is in progress (and with every per-id error), so
# clients read that one field as the plain int64 it is on the wire.
# (Built with make_dataclass: kio needs real type objects, not postponed annotations.)
_DescribedState = make_dataclass(
    "_DescribedState", [("transaction_start_time", i64, field(metadata={"kafka_type": "int64"}))],
    bases=(describe_transactions_v0.TransactionState,), frozen=True, slots=True, kw_only=True)
_DescribeTransactionsResponse = make_dataclass(
    "_DescribeTransactionsResponse", [("transaction_states", tuple[_DescribedState, ...])],
    bases=(describe_transactions_v0.DescribeTransactionsResponse,), frozen=True, slots=True, kw_only=True)
_SPECIAL_READERS: dict[tuple[int, int], Callable] = {
    (DESCRIBE_TRANSACTIONS, 0): entity_reader(_DescribeTransactionsResponse),
}


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """The typed response in ``frame`` (a response without its size prefix)."""
    offset = response_header_size(api_key, version)
    special = _SPECIAL_READERS.get((api_key, version))
    if special is not None:
        return special(frame, offset)[0]
    return answer_wire.decode_response(api_key, version, frame, offset)


@dataclass(frozen=True, slots=True)
class Response:
    """A response that arrived: ``value`` is the typed response, or ``error`` is why it
    could not be decoded (that fails its own request only)."""

    correlation_id: int
    api_key: int
    version: int
    value: Any = None
    error: Exception | None = None


class ClientConnection:
    """One connection's request/response bookkeeping; no I/O."""

    def __init__(self, client_id: str | None = "eosbroker-client", max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.client_id = client_id
        self._correlation = itertools.count(1)
        self._decoder = FrameDecoder(max_response_bytes)
        self._pending: dict[int, tuple[int, int]] = {}

    def send(self, api_key: int, version: int, body: Any, expect_response: bool = True) -> tuple[int, bytes]:
        """(correlation id, the bytes to write) for a request of the API's ``request_type``
        (what the broker's tools and clients build: a misspelt field fails where it is
        written), a kio request, or a dict of Kafka field names (requests written by hand,
        in tests); each becomes kio's request of ``version`` through ``kio_request``, as a
        node's request to another does. Without ``expect_response`` (Produce acks=0) the
        request is not tracked."""
        if body.__class__ is dict:
            body = answer_wire.build_request(api_key, version, body)
        message = answer_wire.kio_request(api_key, version, body)
        correlation_id = next(self._correlation)
        frame = encode_request_frame(api_key, version, correlation_id, self.client_id,
                                     version >= flexible_from(api_key), answer_wire.encode(message))
        if expect_response:
            self._pending[correlation_id] = (api_key, version)
        return correlation_id, frame

    def receive_data(self, data: bytes) -> list[Response]:
        """Feeds bytes read from the socket; returns the responses they completed.
        Raises ``protocol.request_wire.FrameError`` when the peer broke framing."""
        self._decoder.feed(data)
        out = []
        while (frame := self._decoder.next_frame()) is not None:
            response = self._response(frame)
            if response is not None:
                out.append(response)
        return out

    @property
    def pending(self) -> list[int]:
        """Correlation ids still waiting for a response, oldest first."""
        return list(self._pending)

    def abandon(self) -> list[int]:
        """Forgets every pending request (the connection is gone); returns their ids."""
        ids = list(self._pending)
        self._pending.clear()
        return ids

    def _response(self, frame: bytes) -> Response | None:
        if len(frame) < 4:
            return None
        correlation_id = _INT32.unpack_from(frame, 0)[0]
        entry = self._pending.pop(correlation_id, None)
        if entry is None:  # not ours (or its request expected none): nothing to hand back
            return None
        api_key, version = entry
        try:
            return Response(correlation_id, api_key, version, decode_response(api_key, version, frame))
        except Exception as e:  # kio raises several types for a malformed body
            return Response(correlation_id, api_key, version, error=e)


# -- what every client asks first: nodes, leaders, coordinators ---------------------------


class InvalidBootstrap(ValueError):
    def __init__(self, entry: str) -> None:
        super().__init__(f"invalid bootstrap server entry {entry!r}: expected HOST:PORT")
        self.entry = entry


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` (IPv6 hosts in brackets) as (host, port) pairs; raises
    InvalidBootstrap for the first bad entry."""
    servers = []
    for entry in bootstrap.split(","):
        host, sep, port = entry.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit():
            raise InvalidBootstrap(entry)
        servers.append((host, int(port)))
    return servers


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


@dataclass(slots=True)
class TopicMetadata:
    name: str
    error: ErrorCode
    is_internal: bool
    leaders: dict[int, int]  # partition index -> leader node id (-1: none)


@dataclass(slots=True)
class ClusterMetadata:
    nodes: dict[int, NodeAddress]
    topics: dict[str, TopicMetadata]

    def leaders(self) -> dict[TopicPartition, int]:
        return {(t.name, p): leader for t in self.topics.values() for p, leader in t.leaders.items()}


def metadata_request(topics: Iterable[str] | None):
    """A Metadata request for ``topics`` (None: every topic); never creates topics."""
    request = request_type(METADATA)
    return request(topics=None if topics is None else tuple(request.MetadataRequestTopic(name=t, topic_id=None)
                                                            for t in topics),
                   include_topic_authorized_operations=False, allow_auto_topic_creation=False)


def parse_metadata(response) -> ClusterMetadata:
    nodes = {b.node_id: NodeAddress(b.node_id, b.host, b.port) for b in response.brokers}
    topics = {t.name: TopicMetadata(t.name, ErrorCode(t.error_code), bool(getattr(t, "is_internal", False)),
                                    {p.partition_index: p.leader_id for p in t.partitions})
              for t in response.topics}
    return ClusterMetadata(nodes, topics)


@dataclass(frozen=True, slots=True)
class CoordinatorAnswer:
    key: str
    error: ErrorCode
    node: NodeAddress | None


def find_coordinator_request(version: int, keys: list[str], key_type: int = TRANSACTION_KEY_TYPE):
    """v4+ asks for a batch of keys, older versions for exactly one."""
    if version >= 4:
        return request_type(FIND_COORDINATOR)(key_type=key_type, coordinator_keys=tuple(keys))
    if len(keys) != 1:
        raise ValueError(f"FindCoordinator v{version} asks for one key, not {len(keys)}")
    return request_type(FIND_COORDINATOR)(key=keys[0], key_type=key_type)


def parse_find_coordinator(version: int, keys: list[str], response) -> list[CoordinatorAnswer]:
    answers = response.coordinators if version >= 4 else [response]
    out = []
    for key, a in zip(keys, answers) if version < 4 else ((a.key, a) for a in answers):
        error = ErrorCode(a.error_code)
        node = NodeAddress(a.node_id, a.host, a.port) if error == ErrorCode.none else None
        out.append(CoordinatorAnswer(key, error, node))
    return out
