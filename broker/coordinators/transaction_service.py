"""The transaction coordinator in the broker: its runtime over __transaction_state, the
one write path (answered once the ISR has the write) that requests, marker completions
and the coordinator's timers (timed-out transactions aborted, idle ids expired; timed by
the coordinator topic) all take, and the delivery of its markers.

The markers (``MarkerSender``): COMMIT/ABORT markers go from the coordinator's node to
each partition's leader as WriteTxnMarkers through the in-process network, retried until
every partition has acknowledged, as Kafka's TransactionMarkerChannelManager does; then
the service writes the transaction's Complete record (``_markers_written``). As in
Kafka's TransactionMarkerRequestCompletionHandler, an answer saying the marker was fenced
(INVALID_PRODUCER_EPOCH: the partition has seen a newer epoch of the producer;
TRANSACTION_COORDINATOR_FENCED: a newer coordinator wrote there) cancels the
transaction's markers: retrying cannot succeed, and the transaction stays in its Prepare
state here until a newer coordinator or producer epoch takes it over."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from functools import lru_cache
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.cluster import Cluster
from broker.config import BrokerConfig
from broker.coordinators.coordinator_topic import CoordinatorTopic
from coordinator.runtime import CoordinatorRefused, TimerEvent, with_error
from coordinator.transaction.coordinator import (
    AddPartitionsResponse,
    TIMEOUT_ABORTS,
    ProducerIdTaken,
    SendMarkers,
    TransactionConfig,
    TransactionCoordinator,
)
from protocol.answer_wire import kio_request, request_type
from protocol.names import INTERNAL_TOPICS, TRANSACTION_STATE

log = logging.getLogger(__name__)

TOPIC = TRANSACTION_STATE

_APPEND_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms, which its coordinators' appends wait up to
_NONE = ErrorCode.none
_COMPLETE_RETRY_S = 0.05  # between writes of a Complete record while too few replicas are in sync


class TransactionService:
    def __init__(self, config: BrokerConfig, cluster: Cluster, node_id: int, producer_ids, network,
                 serving: asyncio.Event | None = None, replication=None) -> None:
        self.config = config
        self.cluster = cluster
        self.clock = cluster.clock
        self.coordinator = TransactionCoordinator(
            TransactionConfig(
                transaction_max_timeout_ms=config["transaction.max.timeout.ms"],
                transaction_state_log_num_partitions=config["transaction.state.log.num.partitions"],
                transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
                offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
                abort_timed_out_transaction_cleanup_interval_ms=config[
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                remove_expired_transaction_cleanup_interval_ms=config[
                    "transaction.remove.expired.transaction.cleanup.interval.ms"],
            ),
        )
        self.producer_ids = producer_ids
        self.replication = replication  # broker.cluster.replication.Replication: writes wait for the ISR
        self.markers = MarkerSender(network, cluster, node_id, self._markers_written)
        self.markers.hold = config["emulate.fault.hold.txn.markers"]
        # The event history when one is kept (a control API serves it), else None: then
        # nothing here tells it anything.
        self._history = cluster.history if cluster.history.enabled else None
        if self._history is not None:
            self.markers.on_acked = self._markers_acked
        self._completions: dict[str, asyncio.Event] = {}
        # While a request's write waits for the ISR: its markers, sent only once it is there.
        self._held_markers: list[SendMarkers] | None = None
        self._hold_s = config["emulate.concurrent.transactions.hold.ms"] / 1000
        self.topic = CoordinatorTopic(
            "transaction coordinator", TOPIC, config["transaction.state.log.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
             "min.insync.replicas": str(config["transaction.state.log.min.isr"])},
            self.coordinator, cluster, node_id, self._perform,
            timers=self.coordinator.timers(), write_timer_event=self._write_timer_event,
        )
        # As Kafka's TransactionStateManager: too few in sync is retriable for the client.
        if replication is not None:
            self.topic.too_few_in_sync = ErrorCode.coordinator_not_available
            self.topic.replication = replication
        self.topic.load_delay_s = config["emulate.fault.coordinator.load.ms"] / 1000
        self.topic.serving = serving
        self.runtime = self.topic.runtime
        # A partition moving away takes its marker deliveries along: the new leader
        # resends them with its coordinator epoch.
        self.topic.on_unload = lambda p: self.markers.cancel(
            lambda m: self.coordinator.partition_for(m.transactional_id) == p)
        self.topic.on_partition_loaded = self._loaded

    def ensure_ready(self) -> None:
        """Creates and loads __transaction_state on first use: a broker that never sees a
        transaction never pays for its 50 partitions."""
        self.topic.start()

    def _perform(self, effect) -> None:
        if isinstance(effect, SendMarkers):
            if self._held_markers is not None:
                self._held_markers.append(effect)
            else:
                self.markers.send(effect)
        elif isinstance(effect, ProducerIdTaken):
            self.producer_ids.taken(effect.producer_id)
        else:
            raise TypeError(f"unknown transaction coordinator effect {effect!r}")

    async def _markers_written(self, m: SendMarkers) -> None:
        """The marker sender's completion: an event for the runtime like any request. Its
        Complete record waits for the ISR too; while too few replicas are in sync it is
        written again, as Kafka retries that append on COORDINATOR_NOT_AVAILABLE (the
        transaction stays in its Prepare state meanwhile)."""
        await self.topic.wait_while_paused()
        coordinator = self.coordinator
        observe = self.cluster.on_transaction_completed
        started_ms = -1
        if observe is not None:  # metrics on: when did the transaction start?
            md = coordinator.transaction_metadata(m.transactional_id)
            started_ms = md.txn_start_timestamp_ms if md is not None and md.state.is_prepare else -1
        partition = coordinator.partition_for(m.transactional_id)
        while True:
            now_ms = self.clock.now_ms()
            try:
                response, error = await self._write(m.transactional_id, partition, lambda: _answered(
                    coordinator.markers_written(m.transactional_id, m.producer_id, m.producer_epoch, m.commit,
                                                now_ms, m.coordinator_epoch)))
            except CoordinatorRefused:  # the partition moved away: its new coordinator rolls forward
                break
            if ErrorCode.coordinator_not_available not in (response, error):  # refused at once, or not replicated
                break
            await self.clock.sleep(_COMPLETE_RETRY_S)
            await self.topic.wait_while_paused()
        if observe is not None and started_ms >= 0:  # was the transaction completed?
            md = self.coordinator.transaction_metadata(m.transactional_id)
            if md is not None and md.state.state_name.startswith("Complete"):
                observe("commit" if m.commit else "abort", max(0, self.clock.now_ms() - started_ms) / 1000)
        self._observe(m.transactional_id)
        completed = self._completions.pop(m.transactional_id, None)
        if completed is not None:
            completed.set()

    def _markers_acked(self, m: SendMarkers, node_id: int, acked: set) -> None:
        self._history.record(
            "marker", transactional_id=m.transactional_id, producer_id=m.producer_id, producer_epoch=m.producer_epoch,
            marker="COMMIT" if m.commit else "ABORT", coordinator_epoch=m.coordinator_epoch, node=node_id,
            partitions=sorted(f"{t}-{p}" for t, p in acked))

    def _observe(self, transactional_id: str | None, reason: str | None = None) -> None:
        """The id's state after a write, for the event history."""
        if self._history is None:
            return
        md = self.coordinator.transaction_metadata(transactional_id) if transactional_id else None
        if md is None:
            return
        self._history.transaction(
            transactional_id, md.state.state_name, md.producer_id, md.producer_epoch,
            sorted(f"{t}-{p}" for t, p in md.topic_partitions), reason)

    async def run(self, transactional_id: str | None, handler, failed: Callable[[ErrorCode], Any],
                  offsets: list[int] | None = None, reason: str | None = None):
        """Runs a coordinator handler through the runtime on the id's partition.
        ``failed(error)``: the API's answer when the runtime refuses the request (the
        partition is not served here: NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS).

        CONCURRENT_TRANSACTIONS is answered at once, as Kafka does. With
        emulate.concurrent.transactions.hold.ms set, that answer is instead held while
        the id's markers are being written (up to that long) and the request is then
        run again: it saves the client's retry back-off, at the price of never
        exercising the client's retry path. ``offsets`` receives the offset of the last
        record each run wrote (-1: none), read before any wait lets another event write.
        ``reason``: why an abort this starts was not the client's own (the event history).
        """
        if not transactional_id:  # Kafka answers this before it looks for the id's coordinator
            return failed(ErrorCode.invalid_request)
        try:
            return await self._run(transactional_id, handler, offsets)
        except CoordinatorRefused as refused:
            return failed(refused.error)
        finally:
            self._observe(transactional_id, reason)

    async def _run(self, transactional_id: str | None, handler, offsets: list[int] | None):
        self.topic.start()
        await self.topic.wait_while_paused()  # paused while this request was under way
        partition = self.coordinator.partition_for(transactional_id or "")
        response = await self._run_replicated(transactional_id, partition, handler, offsets)
        if self._hold_s <= 0 or getattr(response, "error", None) is not ErrorCode.concurrent_transactions:
            return response
        completed = self._completions.setdefault(transactional_id, asyncio.Event())
        if self._markers_pending(transactional_id):
            try:
                await self.clock.wait_for(completed.wait(), self._hold_s)
            except asyncio.TimeoutError:
                return response
        await self.topic.wait_while_paused()
        return await self._run_replicated(transactional_id, partition, handler, offsets)

    async def _run_replicated(self, transactional_id: str | None, partition: int, handler,
                              offsets: list[int] | None = None):
        """Runs the handler; what it wrote is answered once the partition's ISR has it,
        as an acks=all produce (Kafka's coordinator appends with acks=-1). A failed wait
        is answered with its error instead (see ``_write``)."""
        response, error = await self._write(transactional_id, partition, handler, offsets)
        return response if error is None else with_error(response, error)

    def _write(self, transactional_id: str | None, partition: int, handler,
               offsets: list[int] | None = None) -> Coroutine[Any, Any, tuple[object, ErrorCode | None]]:
        """Runs the handler now, through the runtime; the coroutine returned waits until
        what it wrote is in the partition's ISR, and only then are its markers sent (Kafka
        sends them from the append's callback): with no wait, when it is first run, so
        that whoever awaits it comes first (a timed-out abort is told as such before its
        markers can complete it). It gives the response and, if the wait
        failed, the error to answer: too few in sync or timed out,
        COORDINATOR_NOT_AVAILABLE; leadership lost, NOT_COORDINATOR. Either way the
        transition is undone in memory, as Kafka clears the pending state (the record
        stays in the log), so a retry finds the transaction as it was, not
        CONCURRENT_TRANSACTIONS."""
        replication = self.replication
        quiet = replication is None or replication.quiet()
        logged = quiet and transactional_id is not None and log.isEnabledFor(logging.DEBUG)
        before = self.coordinator.transaction_metadata(transactional_id) if transactional_id and (
            logged or not quiet) else None
        epoch = self.coordinator.coordinator_epoch(partition)
        held = self._held_markers = []
        try:
            response = self.runtime.run(partition, handler, self.clock.now_ms())
        finally:
            self._held_markers = None
        offset = self.runtime.last_offset
        if offsets is not None:
            offsets.append(offset)
        if quiet:
            if logged and offset >= 0:
                self._log_written(transactional_id, before, partition, offset)
            return self._written_at_once(partition, response, held, epoch)
        written = self.coordinator.transaction_metadata(transactional_id) if offset >= 0 and transactional_id else None
        return self._replicated(transactional_id, partition, response, held, offset, before, written, epoch)

    async def _written_at_once(self, partition: int, response, held: list[SendMarkers],
                               epoch: int | None) -> tuple[object, None]:
        self._send_held(partition, held, epoch)
        return response, None

    def _send_held(self, partition: int, held: list[SendMarkers], epoch: int | None) -> None:
        if self.coordinator.coordinator_epoch(partition) == epoch:  # else the new load rolls forward
            for markers in held:
                self.markers.send(markers)

    async def _replicated(self, transactional_id: str | None, partition: int, response, held: list[SendMarkers],
                          offset: int, before, written, epoch: int | None) -> tuple[object, ErrorCode | None]:
        error = None
        if offset >= 0:
            error = await self.replication.wait_for_isr(TOPIC, partition, _APPEND_TIMEOUT_S)
        if error is None:
            if offset >= 0 and transactional_id and log.isEnabledFor(logging.DEBUG):
                self._log_written(transactional_id, before, partition, offset, written)
            self._send_held(partition, held, epoch)
            return response, None
        answer = ErrorCode.not_coordinator if error == "NOT_LEADER_OR_FOLLOWER" else ErrorCode.coordinator_not_available
        undone = written is not None and self.coordinator.restore(transactional_id, written, before)
        log.warning("%s-%d: a coordinator write was not replicated (%s); answered %s%s", TOPIC, partition, error,
                    answer.name.upper(), f", {transactional_id} back to {before.state.state_name}"
                    if undone and before is not None else "")
        return response, answer

    def _log_written(self, transactional_id: str, before, partition: int, offset: int, written=None) -> None:
        """One DEBUG line per transition written to __transaction_state, once the write is
        acknowledged (appended, and in the ISR where that is waited for): after a crash,
        the lines before it say what the log holds and the load's lines what came back.
        DEBUG, as Kafka's coordinator logs a successful transition: INFO would be three
        lines per transaction."""
        after = written if written is not None else self.coordinator.transaction_metadata(transactional_id)
        if after is None:
            return
        was = "nothing" if before is None else before.state.state_name
        if before is not None and (before.producer_id, before.producer_epoch) != (after.producer_id,
                                                                                  after.producer_epoch):
            was += f" (producer {before.producer_id}, epoch {before.producer_epoch})"
        added = after.topic_partitions - before.topic_partitions if before is not None else after.topic_partitions
        log.debug("transaction %s (producer %d, epoch %d): %s -> %s%s; record at %s-%d offset %d acknowledged",
                 transactional_id, after.producer_id, after.producer_epoch, was, after.state.state_name,
                 f", added {_partition_names(added)}" if added else "", TOPIC, partition, offset)

    def _loaded(self, partition: int) -> None:
        """At load, one INFO line per transaction found open (not Empty or Complete*);
        the event history learns which producer each id has (a partition's LSO held by
        a hanging transaction is named by it), and each open transaction with its
        partitions' offsets: an LSO it held before a restart, which no move tells."""
        history = self._history
        if history is not None:
            loaded = self.coordinator.transactions(partition)
            history.producers_named({md.producer_id: md.transactional_id for md in loaded if md.producer_id >= 0})
            for md in self.coordinator.open_transactions(partition):
                history.transaction_loaded(md.transactional_id, md.state.state_name, md.producer_id,
                                           md.producer_epoch, sorted(f"{t}-{p}" for t, p in md.topic_partitions),
                                           md.txn_start_timestamp_ms)
                self._record_held(md.topic_partitions)
        if not log.isEnabledFor(logging.INFO):
            return
        for md in self.coordinator.open_transactions(partition):
            log.info("transaction %s (producer %d, epoch %d) loaded from %s-%d: %s, partitions %s, last updated at %d",
                     md.transactional_id, md.producer_id, md.producer_epoch, TOPIC, partition, md.state.state_name,
                     _partition_names(md.topic_partitions), md.txn_last_update_timestamp_ms)

    def _record_held(self, partitions) -> None:
        """The offsets of an open transaction's partitions on the event history, each
        opened if no client has yet (their LSO is what a consumer waits on)."""
        for topic, index in sorted(partitions):
            if topic in INTERNAL_TOPICS:
                continue
            try:
                part = self.cluster.partition(topic, index)
            except OSError as e:  # its files cannot be opened: a fetch will say so
                log.warning("%s-%d: not opened for the event history: %s", topic, index, e)
                continue
            if part is not None:
                self._history.offsets_now(part)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], api_version: int):
        """A producer's AddPartitionsToTxn. Its record is in the log (the page cache: a
        process crash keeps it) before the answer leaves; the INFO line says where, so
        a transaction found without its partitions after a crash can be told from one
        whose request was never answered."""
        offsets: list[int] = []
        response = await self.run(transactional_id, lambda: self.coordinator.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, partitions, api_version, self.clock.now_ms()),
            AddPartitionsResponse, offsets)
        offset = offsets[-1] if offsets else -1
        if (response.error is not _NONE or offset < 0) and log.isEnabledFor(logging.INFO):
            # a written add has its transition's line (_log_written)
            added = _partition_names(partitions)
            if response.error is not _NONE:
                log.info("AddPartitionsToTxn %s (producer %d, epoch %d) of %s: %s, %s", transactional_id, producer_id,
                         producer_epoch, added, response.error.name.upper(), "nothing written" if offset < 0 else
                         f"its record (offset {offset}) not acknowledged and undone in memory")
            else:
                log.info("AddPartitionsToTxn %s (producer %d, epoch %d) of %s: already in the transaction",
                         transactional_id, producer_id, producer_epoch, added)
        return response

    def _markers_pending(self, transactional_id: str) -> bool:
        md = self.coordinator.transaction_metadata(transactional_id)
        return md is not None and md.state.is_prepare and not self.markers.hold

    # -- timers: events for the runtime ------------------------------------------------

    def _write_timer_event(self, event: TimerEvent) -> Coroutine[Any, Any, None]:
        """A due timer's event, through the path requests take, run now: a timed-out
        transaction's PrepareAbort waits for the ISR (the coroutine returned) before its
        markers leave, as EndTxn's does, and a failed wait leaves it Ongoing, for the
        timer's next round."""
        try:
            write = self._write(event.key, event.partition, lambda: _answered(event.operation()))
        except CoordinatorRefused as refused:  # an earlier event of the round resigned the partition
            write = _at_once((refused.error, None))
        return self._timer_event_written(event, write)

    async def _timer_event_written(self, event: TimerEvent, write) -> None:
        response, error = await write
        if event.timer == TIMEOUT_ABORTS and response is _NONE and error is None:
            log.info("aborting timed-out transaction %s", event.key)
            self._observe(event.key, "timed out")

    def halt(self) -> None:
        """The node stopped or died: loads and marker deliveries end and the state is
        dropped, in this turn."""
        self.topic.halt()
        self.markers.halt()


def _partition_names(partitions) -> str:
    return ", ".join(sorted(f"{t}-{p}" for t, p in partitions))


def _answered(result):
    """A completion's result with a response, so a refused append can carry its error."""
    return result if result.response is not None else result._replace(response=_NONE)


async def _at_once(value):
    return value


# -- the markers ----------------------------------------------------------------------

WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 2  # carries TransactionVersion (KIP-1228)
_MARKERS_REQUEST = request_type(WRITE_TXN_MARKERS)
# Partitions that no longer exist cannot take a marker: Kafka drops those too.
_MARKER_DONE = {0, 3}  # NONE, UNKNOWN_TOPIC_OR_PARTITION
_MARKER_CANCELLED = {47, 52}  # INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED
_MARKER_RETRY_S = 0.05


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
                await self.cluster.clock.sleep(_MARKER_RETRY_S)
        await self._on_done(markers)

    async def _write(self, node_id: int, markers: SendMarkers,
                     partitions: list[tuple[str, int]]) -> tuple[set, str | None]:
        """Sends one WriteTxnMarkers request; returns the partitions that took their
        marker and, when a partition answered that the marker is fenced, why."""
        response = await self.network.request(self.node_id, node_id, WRITE_TXN_MARKERS, MARKERS_VERSION,
                                              marker_request(markers, partitions), typed=False)
        acked = set()
        fenced = None
        for marker in response.markers:
            for topic in marker.topics:
                name = topic.name
                for p in topic.partitions:
                    error, index = int(p.error_code), p.partition_index
                    if error in _MARKER_DONE:
                        acked.add((name, index))
                    elif error in _MARKER_CANCELLED:
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
    """The WriteTxnMarkers request for ``partitions``, as kio's request of MARKERS_VERSION: built of
    ``request_type`` and turned into kio's once for each (cached) request."""
    return _marker_request(markers.producer_id, markers.producer_epoch, markers.commit, markers.coordinator_epoch,
                           markers.transaction_version, tuple(partitions))


@lru_cache(maxsize=256)  # a producer's transactions (same epoch, same partitions) send the same request
def _marker_request(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    transaction_version: int, partitions: tuple[tuple[str, int], ...]):
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        topics[topic].append(partition)
    return kio_request(WRITE_TXN_MARKERS, MARKERS_VERSION, _MARKERS_REQUEST(markers=(_MARKERS_REQUEST.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=commit,
        topics=tuple(_MARKERS_REQUEST.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()),
        coordinator_epoch=coordinator_epoch,
        transaction_version=transaction_version,
    ),)))
