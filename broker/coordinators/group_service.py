"""The group coordinator in the broker: its runtime over __consumer_offsets, parked
JoinGroup/SyncGroup requests, the rebalance timers, and transaction markers.

A JoinGroup or SyncGroup that must wait is parked on an asyncio future: the
coordinator keeps the future as the request's reply token and a ``Reply`` effect of a
later request, or of a timer, resolves it. Only the parked request's own connection
waits (the server answers a connection's requests in order, as Kafka does).

The timer loop sleeps until the coordinator's next deadline, or until a handler wakes
it because deadlines may have moved, then runs the coordinator's poll on each owned partition through the runtime.

A request that wrote is answered once the partition's high watermark covers its
records, as Kafka 4.4's coordinator runtime does: it appends with acks=1 (so
min.insync.replicas never refuses a group write) and holds the answer until every
replica in the ISR has the records (and, as the high watermark, while the ISR is below
min.insync.replicas). Followers that cannot fetch hold it until they
leave the ISR (replica.lag.time.max.ms) or offsets.commit.timeout.ms passes; the
timeout is answered as each API of Kafka's GroupCoordinatorService maps it
(COORDINATOR_NOT_AVAILABLE; NOT_COORDINATOR when the leadership moved meanwhile). The
write stays, in the log and in memory, as Kafka's runtime keeps a timed-out write
(it commits once the followers catch up). Timer writes wait for nothing (nobody is
answered).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.cluster import Cluster
from broker.config import BrokerConfig
from broker.coordinators.coordinator_topic import CoordinatorTopic
from broker.coordinators.group_history import GroupHistory
from coordinator.group import GroupConfig, GroupCoordinator, Reply
from coordinator.group.consumer_group import ConsumerGroupConfig
from coordinator.group.coordinator import ShareMemberGone
from coordinator.group.share_group import InitializeShareState, ShareGroupConfig
from coordinator.group.streams_group import StreamsGroupConfig
from coordinator.contract import Result
from protocol.names import CONSUMER_OFFSETS

log = logging.getLogger(__name__)

TOPIC = CONSUMER_OFFSETS
# Never sleep longer than this between polls: a safety net, not a schedule.
_MAX_SLEEP_S = 30.0
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
            share=ShareGroupConfig(max_size=config["group.share.max.size"]),
            streams=StreamsGroupConfig(
                session_timeout_ms=config["group.streams.session.timeout.ms"],
                heartbeat_interval_ms=config["group.streams.heartbeat.interval.ms"],
                max_size=config["group.streams.max.size"],
                initial_rebalance_delay_ms=config["group.streams.initial.rebalance.delay.ms"],
                assignment_interval_ms=config["group.streams.assignment.interval.ms"],
            ),
        ))
        self.coordinator.topics = lambda: {
            t.name: (t.topic_id, t.partitions) for t in cluster.topics.by_name.values()}
        self.topic = CoordinatorTopic(
            "group coordinator", TOPIC, config["offsets.topic.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"])},
            self.coordinator, cluster, node_id, self._perform,
            on_loaded=self.wake,  # loaded members now have session deadlines
        )
        self.topic.load_delay_s = config["emulate.fault.coordinator.load.ms"] / 1000
        self.topic.serving = serving
        self.runtime = self.topic.runtime
        self._history = GroupHistory(cluster.history, self.coordinator) if cluster.history.enabled else None
        if self._history is not None:
            self.runtime.written = self._history.written
        self._wake = asyncio.Event()
        self._parked: set[asyncio.Future] = set()
        # Where a share member's leaving is told (the share partitions of every node).
        self.share_member_gone: Callable[[str, str], None] = lambda _group_id, _member_id: None
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

    async def run(self, group_id: str, handler: Callable[[], Result], failed: Callable[[ErrorCode], Any]) -> Any:
        """Runs a coordinator handler through the runtime on the group's partition and,
        when it wrote, waits for the ISR to have it. ``failed(error)``: the API's answer
        when that wait fails, given the error Kafka maps the failure to."""
        await self.ready()
        await self.topic.wait_while_paused()
        partition = self.partition_for(group_id)
        response = self.runtime.run(partition, handler, self.clock.now_ms())
        written = self.runtime.last_offset >= 0
        if self._history is not None:
            self._history.ran(group_id)
        self.wake()
        if written and self.replication is not None:
            error = await self.replication.wait_for_isr(TOPIC, partition, self._write_timeout_s)
            if error is not None:
                log.warning("%s-%d: a group coordinator write for %s was not replicated (%s); answered %s (the write "
                            "stays)", TOPIC, partition, group_id, error, write_failed(error).name.upper())
                return failed(write_failed(error))
        return response

    async def run_parked(self, group_id: str, handler: Callable[[asyncio.Future], Result],
                         failed: Callable[[ErrorCode], Any]) -> Any:
        """Runs a JoinGroup/SyncGroup handler; if the coordinator parks the request,
        waits for the ``Reply`` that answers it."""
        answer = asyncio.get_running_loop().create_future()
        self._parked.add(answer)
        answer.add_done_callback(self._parked.discard)
        response = await self.run(group_id, lambda: handler(answer), failed)
        if response is not None:
            self._parked.discard(answer)  # answered at once: nobody holds the token
            return response
        return await answer

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

    def _perform(self, effect) -> None:
        if isinstance(effect, ShareMemberGone):
            self.share_member_gone(effect.group_id, effect.member_id)
            return
        if isinstance(effect, InitializeShareState):
            task = asyncio.get_running_loop().create_task(self._initialize_share_state(effect))
            self._initializing.add(task)
            task.add_done_callback(self._initializing.discard)
            return
        if not isinstance(effect, Reply):
            raise TypeError(f"unknown group coordinator effect {effect!r}")
        answer: asyncio.Future = effect.reply_to
        if not answer.done():
            answer.set_result(effect.response)

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

    # -- timers --------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    async def run_timers(self) -> None:
        """Fires the coordinator's timers as they fall due, for as long as the broker runs."""
        while True:
            deadline = self.coordinator.next_deadline()
            self._wake.clear()
            if deadline is None or deadline > self.clock.now_ms():
                timeout = _MAX_SLEEP_S if deadline is None else min((deadline - self.clock.now_ms()) / 1000, _MAX_SLEEP_S)
                try:
                    await self.clock.wait_for(self._wake.wait(), max(timeout, 0))
                except asyncio.TimeoutError:
                    pass
                continue
            await self.topic.wait_while_paused()  # a hung node's timers do not fire
            try:
                self.poll(self.clock.now_ms())
            except Exception:
                log.exception("group coordinator timers failed")
                await self.clock.sleep(1)
            await self.clock.sleep(0.001)  # a timer that failed to move cannot spin the loop

    def poll(self, now: int) -> None:
        fired = self.runtime.run_timers(lambda p: self.coordinator.poll(now, partition=p), now)
        if fired and self._history is not None:
            self._history.timers_fired({partition for partition, _result in fired})
