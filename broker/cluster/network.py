"""The network between the nodes of the process.

The requests one node sends another go through ``Network.request``: a coordinator's
markers to partition leaders (broker/coordinators/transaction_service.py) and a
partition leader's KIP-890 verification, AddPartitionsToTxn to the transaction coordinator, for Produce and
TxnOffsetCommit (broker/coordinators/txn_verification.py), and the share-state requests to
the share coordinator (broker/coordinators/share_persister.py). The request is built as the kio message
the wire would carry and handed to the same handler a TCP connection reaches, on the
target node's behalf, under the request fault rules (client id ``eosbroker-node-N``);
the response comes back as the kio response a client would decode. A stopped target
refuses the connection, a paused one never answers (the caller's timeout fires), a
paused source sends nothing until it resumes, and the fault points (cut links, delay,
loss, each per direction: the request crosses source->target, the answer
target->source) live here, in one place. A node that stops or dies is a dead host
for requests in flight: a request it sent that had not yet been handled never lands,
and a request to it is not answered (its handler, run as the node's work, is abandoned
at the stop; an answer computed before it is dropped): the sender sees Unreachable.
What Kafka's nodes learn from the controller (leaders, ISRs, producer id blocks) they
read from the process's shared state (broker/cluster/cluster.py, broker/cluster/producer_ids.py), without
a request. Followers fetch from their leaders through here too (broker/cluster/replication.py,
client id ``broker-N-fetcher-0``), whenever a fault is in force.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from broker.faults.requests import DROPPED, FaultClose, run_request
from broker.wire.server import HANDLERS
from broker.wire.server import Connection, RequestContext
from protocol import answer_wire
from protocol.answer_wire import EncodedBody
from protocol.request_wire import RequestHeader

log = logging.getLogger(__name__)


class Unreachable(ConnectionError):
    """The target node is down, or the link to it is cut or lost the message."""


@dataclass
class LinkFaults:
    """What happens to messages from one node to another (``None`` matches any node)."""

    cut: bool = False
    delay_ms: int = 0
    loss: float = 0.0  # probability a message is lost (the caller sees a timeout)
    seed: int | None = None  # of the loss draws: same seed, same losses

    def __post_init__(self) -> None:
        import random  # here: a broker without link faults never loads it

        if self.seed is None:
            self.seed = random.randrange(2**31)
        self._rng = random.Random(self.seed)

    def lost(self) -> bool:
        """Draws whether the next message on this link is lost."""
        return bool(self.loss) and self._rng.random() < self.loss

    def describe(self) -> dict:
        return {"cut": self.cut, "delay_ms": self.delay_ms, "loss": self.loss,
                "seed": self.seed if self.loss else None}


@dataclass
class Network:
    broker: Any  # broker.process.Broker
    links: dict[tuple[int | None, int | None], LinkFaults] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Each node on the network by id (``join``, ``forget``): a request finds its two ends here.
        self.hosts: dict[int, Any] = {}  # broker.cluster.node.BrokerNode
        # What Kafka's inter-broker clients wait; read-only, as in Kafka.
        self.timeout_s = self.broker.config["request.timeout.ms"] / 1000
        self._correlation = itertools.count(1)
        self._connection_ids = itertools.count(-1, -1)  # negative: never a client's
        # one connection from each node to each other, as Kafka's brokers keep
        self._connections: dict[tuple[int, int], Connection] = {}

    def join(self, node) -> None:
        """``node`` (broker.cluster.node.BrokerNode) is on the network: requests reach it."""
        self.hosts[node.node_id] = node

    def forget(self, node_id: int) -> None:
        """Drops a node that left the cluster, with the connections from and to it: a node
        added later under the same id is a new machine and connects afresh."""
        self.hosts.pop(node_id, None)
        for pair in [pair for pair in self._connections if node_id in pair]:
            del self._connections[pair]

    def faults(self, source: int, target: int) -> LinkFaults | None:
        if not self.links or source == target:  # usual: no link faults; a node's request to itself crosses none
            return None
        for key in ((source, target), (source, None), (None, target), (None, None)):
            if key in self.links:
                return self.links[key]
        return None

    async def request(self, source: int, target: int, api_key: int, version: int, body: Any,
                      typed: bool = True, client_id: str | None = None, timeout_s: float | None = -1) -> Any:
        """Sends ``body`` (a request of the API's ``request_type``, or the kio request
        already built; a dict is refused) from node ``source`` to node ``target`` and
        returns the kio response.
        Raises Unreachable, or asyncio.TimeoutError after ``request.timeout.ms`` (what
        Kafka's inter-broker clients wait; ``timeout_s`` instead when given, None: the
        caller times it out), as a TCP client would fail. ``client_id``: the header's
        (``eosbroker-node-N`` unless given).

        ``typed=False``: a handler's answer comes back as the handler built it, not as
        the kio response (the marker sender reads both; building it cost more than the
        rest of a marker's trip)."""
        if timeout_s is None:
            return await self._deliver(source, target, api_key, version, body, typed, client_id)
        if timeout_s < 0:
            timeout_s = self.timeout_s
        return await self.broker.clock.wait_for(
            self._deliver(source, target, api_key, version, body, typed, client_id), timeout_s)

    async def _deliver(self, source: int, target: int, api_key: int, version: int, body: Any,
                       typed: bool = True, client_id: str | None = None) -> Any:
        sender = self.hosts.get(source)
        if sender is not None:
            if not sender.is_up:
                raise Unreachable(f"node {source} is not running: it sends nothing")
            sent_by = sender.incarnation
            if not sender.serving.is_set():
                await sender.serving.wait()  # a paused (hung) node sends nothing until it resumes
        node = self.hosts.get(target)
        if node is None or not node.is_up:
            raise Unreachable(f"node {target} is not running")
        incarnation = node.incarnation
        faults = self.faults(source, target)
        if faults is not None:
            if faults.cut:
                raise Unreachable(f"the link from node {source} to node {target} is cut")
            if faults.delay_ms:
                await self.broker.clock.sleep(faults.delay_ms / 1000)
            if faults.lost():
                await asyncio.Event().wait()  # lost: never answered; the caller's timeout ends it
        if not node.serving.is_set():
            await node.serving.wait()
        request = answer_wire.kio_request(api_key, version, body)
        conn = self._connections.get((source, target))
        if conn is None:
            conn = self._connections[source, target] = Connection(
                next(self._connection_ids), f"node {source}", target, self.broker.clock.monotonic(), None,
                listener=self.broker.listeners.inter_broker)
        header = RequestHeader(api_key, version, next(self._correlation), client_id or f"eosbroker-node-{source}")
        ctx = RequestContext(self.broker, node, header, conn)

        def handle():
            # Checked when the handler would start (after a fault rule's delay or hold too):
            # a request from a node stopped since it was sent never lands, one to a
            # node stopped meanwhile meets a dead host.
            if sender is not None and (sender.incarnation != sent_by or not sender.is_up):
                raise Unreachable(f"node {source} stopped: its request is lost")
            if node.incarnation != incarnation or not node.is_up:
                raise Unreachable(f"node {target} stopped")
            return _handled_on(node, HANDLERS[api_key](ctx, request))

        if not self.broker.faults.active:
            result = await handle()
        else:  # request fault rules apply between nodes too (client id eosbroker-node-N)
            try:
                result = await run_request(self.broker, target, header, request, handle, lambda: node.is_up)
            except FaultClose as e:
                raise Unreachable(str(e)) from None
            if result is DROPPED:
                await asyncio.Event().wait()  # never answered; the caller's timeout ends it
        if not node.serving.is_set():
            await node.serving.wait()  # paused after handling: the answer is held
        if node.incarnation != incarnation or not node.is_up:
            raise Unreachable(f"node {target} stopped before answering")  # a dead host answers nothing
        back = self.faults(target, source)
        if back is not None:  # the answer crosses the link the other way
            if back.cut:
                raise Unreachable(f"the link from node {target} to node {source} is cut: no answer")
            if back.delay_ms:
                await self.broker.clock.sleep(back.delay_ms / 1000)
            if back.lost():
                await asyncio.Event().wait()
        if isinstance(result, EncodedBody):  # an answer the handler keeps encoded (ApiVersions)
            return answer_wire.decode_response(api_key, version, result)
        if typed and result is not None:
            return answer_wire.kio_response(api_key, version, result)
        return result


class _NodeWork:
    """A request being handled for a node, in the sender's task: what the node's ``halt``
    cancels to abandon it."""

    __slots__ = ("task", "cancelling", "abandoned")

    def __init__(self, task: asyncio.Task) -> None:
        self.task = task
        self.cancelling = task.cancelling()
        self.abandoned = False

    def cancel(self) -> None:
        self.abandoned = True
        self.task.cancel()


async def _handled_on(node, handler) -> Any:
    """Runs a handler as the target node's work, in the sender's task (a task of its own
    would make each request wait two turns of the event loop): the node stopping abandons
    it (its ``halt`` cancels it), which the sender sees as the connection going,
    Unreachable."""
    work = _NodeWork(asyncio.current_task())
    node.handling.add(work)
    try:
        answer = await handler
    except asyncio.CancelledError:
        # ours only if no one else cancelled the sender too (then theirs propagates)
        if work.abandoned and work.task.uncancel() <= work.cancelling:
            raise Unreachable(f"node {node.node_id} stopped while handling the request") from None
        raise
    finally:
        node.handling.discard(work)
    if work.abandoned:  # the handler took the cancel in and finished: the sender is not cancelled
        work.task.uncancel()
    return answer
