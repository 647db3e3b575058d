"""The group coordinator in the broker: its runtime over __consumer_offsets, parked
JoinGroup/SyncGroup requests, the one write path of requests and timers, and
transaction markers.

A JoinGroup or SyncGroup that must wait is parked on an asyncio future: the
coordinator keeps the future as the request's reply token and a ``Reply`` effect of a
later request, or of a timer, resolves it. Only the parked request's own connection
waits (the server answers a connection's requests in order, as Kafka does).

The coordinator's timer (session, rebalance and sync deadlines) is the runtime's: the
coordinator topic sleeps until the next deadline (every write wakes it, since
deadlines may have moved) and hands each due partition's firing to ``write``, the path
requests take.

A write is answered once the partition's high watermark covers its records, as Kafka
4.4's coordinator runtime does: it appends with acks=1 (so min.insync.replicas never
refuses a group write) and holds the answers, the request's own and the ``Reply``
effects to parked requests (a completed join, a timer's included), until every
replica in the ISR has the records (and, as the high watermark, while the ISR is below
min.insync.replicas). Followers that cannot fetch hold them until they
leave the ISR (replica.lag.time.max.ms) or offsets.commit.timeout.ms passes; the
timeout is answered as each API of Kafka's GroupCoordinatorService maps it
(COORDINATOR_NOT_AVAILABLE; NOT_COORDINATOR when the leadership moved meanwhile). The
write stays, in the log and in memory, as Kafka's runtime keeps a timed-out write
(it commits once the followers catch up).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.cluster.cluster import Cluster
from broker.config import BrokerConfig
from broker.coordinators.coordinator_topic import CoordinatorTopic
from broker.coordinators.group_history import GroupHistory
from coordinator.group import GroupConfig, GroupCoordinator, Reply
from coordinator.group.group_types import ConsumerGroupConfig, ShareGroupConfig, StreamsGroupConfig, tag_list
from coordinator.runtime import CoordinatorRefused, Result, TimerEvent
from protocol.names import CONSUMER_OFFSETS

if TYPE_CHECKING:
    from coordinator.group.share_group import InitializeShareState

log = logging.getLogger(__name__)

TOPIC = CONSUMER_OFFSETS
# Kafka's CoordinatorOperationExceptionHelper: what a write that failed is answered.
_WRITE_FAILED = {
    "REQUEST_TIMED_OUT": ErrorCode.coordinator_not_available,
    "NOT_LEADER_OR_FOLLOWER": ErrorCode.not_coordinator,
}


def write_failed(error: str) -> ErrorCode:
    """The error a group API answers for a write whose wait ended with ``error``."""
    return _WRITE_FAILED.get(error, ErrorCode.unknown_server_error)


class GroupService:
    def __init__(self, config: BrokerConfig, cluster: Cluster, node_id: int,
                 serving: asyncio.Event | None = None, replication=None) -> None:
        self.cluster = cluster
        self.clock = cluster.clock
        self.replication = replication  # broker.cluster.replication.Replication: writes wait for the ISR
        self._write_timeout_s = config["offsets.commit.timeout.ms"] / 1000
        self._marker_timeout_s = config["request.timeout.ms"] / 1000
        self.coordinator = GroupCoordinator(GroupConfig(
            offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
            group_initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            group_min_session_timeout_ms=config["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=config["group.max.session.timeout.ms"],
            group_max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            consumer=ConsumerGroupConfig(
                assignors=config["group.consumer.assignors"],
                session_timeout_ms=config["group.consumer.session.timeout.ms"],
                heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
                max_size=config["group.consumer.max.size"],
                migration_policy=config["group.consumer.migration.policy"],
            ),
            share=ShareGroupConfig(max_size=config["group.share.max.size"],
                                   assignment_interval_ms=config["group.share.assignment.interval.ms"]),
            streams=StreamsGroupConfig(
                session_timeout_ms=config["group.streams.session.timeout.ms"],
                heartbeat_interval_ms=config["group.streams.heartbeat.interval.ms"],
                max_size=config["group.streams.max.size"],
                initial_rebalance_delay_ms=config["group.streams.initial.rebalance.delay.ms"],
                assignment_interval_ms=config["group.streams.assignment.interval.ms"],
                num_standby_replicas=config["group.streams.num.standby.replicas"],
                rack_aware_assignment_tags=tag_list(config["group.streams.rack.aware.assignment.tags"]),
            ),
        ))
        self.coordinator.topics = lambda: {
            t.name: (t.topic_id, t.partitions) for t in cluster.topics.by_name.values()}
        self.topic = CoordinatorTopic(
            "group coordinator", TOPIC, config["offsets.topic.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"])},
            self.coordinator, cluster, node_id, self._perform,
            timers=self.coordinator.timers(), write_timer_event=self._write_timer_event,
        )
        self.topic.load_delay_s = config["emulate.fault.coordinator.load.ms"] / 1000
        self.topic.serving = serving
        self.runtime = self.topic.runtime
        self._history = GroupHistory(cluster.history, self.coordinator) if cluster.history.enabled else None
        if self._history is not None:
            self.runtime.written = self._history.written
        # Parked JoinGroup/SyncGroup answers, each with its API's answer to a failed write.
        self._parked: dict[asyncio.Future, Callable[[ErrorCode], Any]] = {}
        # While a write waits for the ISR: the effects it made, performed once it is there.
        self._held: list | None = None
        # This node's share-state calls to the share coordinator (share_persister.SharePersister).
        self.share_persister: Callable[[], Any] = lambda: None
        self._initializing: set[asyncio.Task] = set()

    def ensure_ready(self) -> None:
        self.topic.start()

    async def ready(self) -> None:
        await self.topic.started()

    def halt(self) -> None:
        """The node stopped or died: loads end, the state is dropped and parked requests
        are given up (their connections are gone), in this turn."""
        self.topic.halt()
        for answer in list(self._parked):
            answer.cancel()
        for task in list(self._initializing):
            task.cancel()

    def partition_for(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id)

    # -- the request path ----------------------------------------------------------------

    async def run(self, group_id: str, handler: Callable[[], Result], failed: Callable[[ErrorCode], Any],
                  check: Callable[[], Any] | None = None) -> Any:
        """Runs a coordinator handler through the runtime on the group's partition and,
        when it wrote, waits for the ISR to have it. ``failed(error)``: the API's answer
        when the runtime refuses the request (the partition is not served here) or the
        wait fails, given the error Kafka maps the failure to. ``check()``: the group
        coordinator's checks of the request, made before it is scheduled (as Kafka's
        service makes them, so any node answers them): their answer, or None to run
        ``handler``, which does not check again."""
        if check is not None and (refused := check()) is not None:
            return refused
        await self.ready()
        await self.topic.wait_while_paused()
        try:
            response, error = await self.write(self.partition_for(group_id), handler, group_id)
        except CoordinatorRefused as refused:
            return failed(refused.error)
        return response if error is None else failed(write_failed(error))

    def group_id_given(self, group_id: str, failed: Callable[[ErrorCode], Any]) -> Callable[[], Any]:
        """``run``'s check for the APIs that name one group: the coordinator's
        ``group_id_error``, answered ``failed(error)``."""
        def check():
            error = self.coordinator.group_id_error(group_id)
            return None if error is None else failed(error)
        return check

    async def run_parked(self, group_id: str, handler: Callable[[asyncio.Future], Result],
                         failed: Callable[[ErrorCode], Any], check: Callable[[], Any] | None = None) -> Any:
        """Runs a JoinGroup/SyncGroup handler; if the coordinator parks the request,
        waits for the ``Reply`` that answers it."""
        answer = asyncio.get_running_loop().create_future()
        self._parked[answer] = failed
        answer.add_done_callback(self._unpark)
        response = await self.run(group_id, lambda: handler(answer), failed, check)
        if response is not None:
            self._parked.pop(answer, None)  # answered at once: nobody holds the token
            return response
        return await answer

    def _unpark(self, answer: asyncio.Future) -> None:
        self._parked.pop(answer, None)

    async def write(self, partition: int, handler: Callable[[], Result],
                    group_id: str | None = None) -> tuple[Any, str | None]:
        """The one write path, of requests and timers: runs ``handler`` through the
        runtime and, when it wrote, waits until the high watermark covers the write,
        holding its effects until then. Returns the response and the error the wait
        ended with (None: replicated); parked requests a held ``Reply`` answers get
        their API's answer to that error instead."""
        return await self._write(partition, handler, group_id)

    def _write(self, partition: int, handler: Callable[[], Result],
               group_id: str | None = None) -> Coroutine[Any, Any, tuple[Any, str | None]]:
        """``write``'s run, now; the coroutine returned is its wait."""
        replication = self.replication
        if replication is None or replication.quiet():
            response = self.runtime.run(partition, handler, self.clock.now_ms())
            self._ran(partition, group_id)
            self.topic.wake_timers()
            return _at_once((response, None))
        held = self._held = []
        try:
            response = self.runtime.run(partition, handler, self.clock.now_ms())
        finally:
            self._held = None
        self._ran(partition, group_id)
        self.topic.wake_timers()  # deadlines may have moved
        return self._replicated(partition, response, held, self.runtime.last_offset >= 0, group_id)

    async def _replicated(self, partition: int, response, held: list, wrote: bool,
                          group_id: str | None) -> tuple[Any, str | None]:
        error = None
        if wrote:
            error = await self.replication.wait_for_isr(TOPIC, partition, self._write_timeout_s)
            if error is not None:
                log.warning("%s-%d: a group coordinator write%s was not replicated (%s); answered %s (the write "
                            "stays)", TOPIC, partition, f" for {group_id}" if group_id is not None else " of a timer",
                            error, write_failed(error).name.upper())
        for effect in held:
            self._perform(effect, error)
        return response, error

    def _ran(self, partition: int, group_id: str | None) -> None:
        """Tells the group history a request (``group_id``) or a timer ran: states that
        are never written, such as a rebalance's start, are read from the groups then."""
        if self._history is None:
            return
        if group_id is not None:
            self._history.ran(group_id)
        else:
            self._history.timers_fired({partition})

    def _write_timer_event(self, event: TimerEvent) -> Coroutine[Any, Any, tuple[Any, str | None]]:
        try:
            return self._write(event.partition, event.operation)
        except CoordinatorRefused as refused:  # an earlier event of the round resigned the partition
            return _at_once((refused.error, None))

    def producer_epoch(self, partition: int, producer_id: int) -> int | None:
        """The newest epoch of ``producer_id`` on a __consumer_offsets partition (its
        transactional offset commits and markers), or None if it never wrote there."""
        part = self.cluster.partition(TOPIC, partition)
        entry = None if part is None else part.producer_state.entry(producer_id)
        return None if entry is None else entry.producer_epoch

    async def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int, now_ms: int) -> str | None:
        """A COMMIT/ABORT marker on a __consumer_offsets partition: the runtime appends it
        and completes the producer's pending offsets there in the same step, so no offset
        commit comes between the two. Raises ProduceRejected when the marker is fenced.
        Returns the error when the ISR did not get it within request.timeout.ms (the
        marker stays; the sender retries), as Kafka's WriteTxnMarkers answers it for
        this topic."""
        pending = None if self._history is None else self.coordinator.pending_offsets(partition, producer_id)
        self.runtime.write_marker(partition, producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        if pending:
            self._history.completed(pending, producer_id, commit)
        if self.replication is None:
            return None
        return await self.replication.wait_for_isr(TOPIC, partition, self._marker_timeout_s)

    def _perform(self, effect, failed_with: str | None = None) -> None:
        """``failed_with``: the error the wait for the effect's write ended with."""
        if self._held is not None:
            self._held.append(effect)
            return
        if not isinstance(effect, Reply):
            self._perform_share_effect(effect)
            return
        answer: asyncio.Future = effect.reply_to
        if answer.done():
            return
        failed = self._parked.get(answer) if failed_with is not None else None
        answer.set_result(effect.response if failed is None else failed(write_failed(failed_with)))

    def _perform_share_effect(self, effect) -> None:
        """A share group's effect (its code is loaded: a share group made it)."""
        from coordinator.group.share_group import InitializeShareState

        if not isinstance(effect, InitializeShareState):
            raise TypeError(f"unknown group coordinator effect {effect!r}")
        task = asyncio.get_running_loop().create_task(self._initialize_share_state(effect))
        self._initializing.add(task)
        task.add_done_callback(self._initializing.discard)

    async def _initialize_share_state(self, effect: InitializeShareState) -> None:
        """InitializeShareGroupState for a heartbeat's new share-partitions, then the outcome
        recorded: initialized ones are assigned on the next heartbeat, failed ones leave the
        initializing set so a later heartbeat tries again."""
        try:
            await self._initialize_share_partitions(effect)
        except asyncio.CancelledError:
            raise
        except Exception:  # the partitions stay initializing: asked again after the retry interval
            log.exception("share group %s: initializing the state of its share-partitions failed", effect.group_id)

    async def _initialize_share_partitions(self, effect: InitializeShareState) -> None:
        partitions = [(t, p) for t, (_name, ps) in effect.partitions.items() for p in sorted(ps)]
        errors = await self.share_persister().initialize(effect.group_id, partitions, effect.state_epoch)
        for initialized in (True, False):
            outcome = {}
            for (topic_id, index), error in errors.items():
                if (error is ErrorCode.none) is initialized:
                    outcome[topic_id] = outcome.get(topic_id, frozenset()) | {index}
            if not outcome:
                continue
            if not initialized:
                log.warning("share group %s: the state of %d share-partition(s) was not initialized: %s",
                            effect.group_id, sum(map(len, outcome.values())),
                            sorted({e.name.upper() for e in errors.values() if e}))
            await self.run(effect.group_id, lambda o=outcome, i=initialized: (
                self.coordinator.share_group_state_changed(effect.group_id, o, i)), lambda failed: failed)


async def _at_once(value):
    return value
