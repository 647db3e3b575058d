"""The WriteTxnMarkers sender: delivers COMMIT/ABORT markers from the coordinator's node
to each partition's leader through the in-process network, and retries until every
partition has acknowledged, as Kafka's TransactionMarkerChannelManager does.

As in Kafka's TransactionMarkerRequestCompletionHandler, an answer saying the marker
was fenced (INVALID_PRODUCER_EPOCH: the partition has seen a newer epoch of the
producer; TRANSACTION_COORDINATOR_FENCED: a newer coordinator wrote there) cancels
the transaction's markers: retrying cannot succeed, and the transaction stays in its
Prepare state here until a newer coordinator or producer epoch takes it over.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from functools import lru_cache

from kio.schema.errors import ErrorCode

from broker.cluster.cluster import Cluster
from coordinator.transaction.coordinator import SendMarkers
from protocol.answer_wire import kio_request, request_type

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
VERSION = 2  # carries TransactionVersion (KIP-1228)
_REQUEST = request_type(WRITE_TXN_MARKERS)
# Partitions that no longer exist cannot take a marker: Kafka drops those too.
_DONE = {0, 3}  # NONE, UNKNOWN_TOPIC_OR_PARTITION
_CANCEL = {47, 52}  # INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED
_RETRY_BACKOFF_S = 0.05


class MarkerSender:
    def __init__(self, network, cluster: Cluster, node_id: int,
                 on_done: Callable[[SendMarkers], Awaitable[None]]) -> None:
        self.network = network
        self.cluster = cluster
        self.node_id = node_id
        self._on_done = on_done
        self._tasks: dict[asyncio.Task, SendMarkers] = {}
        self.hold = False  # fault injection: leave prepared transactions without markers
        # (markers, node id, the partitions that took them): the event history's record
        self.on_acked: Callable[[SendMarkers, int, set], None] | None = None

    def send(self, markers: SendMarkers) -> None:
        if self.hold:
            log.warning("holding markers for %s (emulate.fault.hold.txn.markers)", markers.transactional_id)
            return
        task = asyncio.get_running_loop().create_task(self._deliver(markers))
        self._tasks[task] = markers
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        markers = self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("marker delivery for %s failed", getattr(markers, "transactional_id", "?"),
                      exc_info=task.exception())

    def cancel(self, which: Callable[[SendMarkers], bool]) -> None:
        """Stops the deliveries ``which`` selects (their coordinator partition moved)."""
        for task, markers in list(self._tasks.items()):
            if which(markers):
                task.cancel()

    async def _deliver(self, markers: SendMarkers) -> None:
        pending = sorted(set(markers.topic_partitions))  # each round asks for them in this order
        failures = 0
        leader_of = self.cluster.leader_of
        while pending:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in pending:
                by_leader.setdefault(leader_of(*tp), []).append(tp)
            for node_id, partitions in by_leader.items():
                try:
                    acked, fenced = await self._write(node_id, markers, partitions)
                except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                    if failures % 100 == 0:  # the first failure, then every few seconds
                        log.info("marker delivery for %s from node %d to node %d failed (%s); retrying",
                                 markers.transactional_id, self.node_id, node_id, e or type(e).__name__)
                    failures += 1
                    continue
                if fenced:
                    log.warning("cancelling the %s markers of %s (producer %d, epoch %d): %s",
                                "COMMIT" if markers.commit else "ABORT", markers.transactional_id,
                                markers.producer_id, markers.producer_epoch, fenced)
                    return
                if acked and self.on_acked is not None:
                    self.on_acked(markers, node_id, acked)
                pending = [tp for tp in pending if tp not in acked]
            if pending:
                await self.cluster.clock.sleep(_RETRY_BACKOFF_S)
        await self._on_done(markers)

    async def _write(self, node_id: int, markers: SendMarkers,
                     partitions: list[tuple[str, int]]) -> tuple[set, str | None]:
        """Sends one WriteTxnMarkers request; returns the partitions that took their
        marker and, when a partition answered that the marker is fenced, why."""
        response = await self.network.request(self.node_id, node_id, WRITE_TXN_MARKERS, VERSION,
                                              marker_request(markers, partitions), typed=False)
        acked = set()
        fenced = None
        for marker in response.markers:
            for topic in marker.topics:
                name = topic.name
                for p in topic.partitions:
                    error, index = int(p.error_code), p.partition_index
                    if error in _DONE:
                        acked.add((name, index))
                    elif error in _CANCEL:
                        fenced = f"{ErrorCode(error).name} from {name}-{index}"
                    else:
                        log.info("marker for %s-%d of %s: %s; retrying", name, index,
                                 markers.transactional_id, ErrorCode(error).name)
        return acked, fenced

    def halt(self) -> None:
        """Cancels every delivery (the node stopped): none sends anything more."""
        for task in self._tasks:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks)
        self.halt()
        await asyncio.gather(*tasks, return_exceptions=True)


def marker_request(markers: SendMarkers, partitions: list[tuple[str, int]]):
    """The WriteTxnMarkers request for ``partitions``, as kio's request of VERSION: built of
    ``request_type`` and turned into kio's once for each (cached) request."""
    return _marker_request(markers.producer_id, markers.producer_epoch, markers.commit, markers.coordinator_epoch,
                           markers.transaction_version, tuple(partitions))


@lru_cache(maxsize=256)  # a producer's transactions (same epoch, same partitions) send the same request
def _marker_request(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    transaction_version: int, partitions: tuple[tuple[str, int], ...]):
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        topics[topic].append(partition)
    return kio_request(WRITE_TXN_MARKERS, VERSION, _REQUEST(markers=(_REQUEST.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=commit,
        topics=tuple(_REQUEST.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()),
        coordinator_epoch=coordinator_epoch,
        transaction_version=transaction_version,
    ),)))
