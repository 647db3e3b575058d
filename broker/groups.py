"""The group coordinator in the broker: its runtime over __consumer_offsets, parked
JoinGroup/SyncGroup requests, the rebalance timers, and transaction markers.

A JoinGroup or SyncGroup that must wait is parked on an asyncio future: the
coordinator keeps the future as the request's reply token and a ``Reply`` effect of a
later request, or of a timer, resolves it. Only the parked request's own connection
waits (the server answers a connection's requests in order, as Kafka does).

The timer loop sleeps until the coordinator's next deadline, or until a handler wakes
it because deadlines may have moved, then polls each owned partition under its lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from broker.cluster import Cluster, now_ms
from broker.config import BrokerConfig
from broker.coordinator_runtime import CoordinatorRuntime
from coordinator.group import GroupConfig, GroupCoordinator, Reply
from coordinator.records import CoordinatorRecord, Result

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
# Never sleep longer than this between polls: a safety net, not a schedule.
_MAX_SLEEP_S = 30.0


class _Loader:
    """The coordinator as the runtime's loading protocol expects it."""

    def __init__(self, service: GroupService) -> None:
        self._service = service
        self._coordinator = service.coordinator

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        self._coordinator.load_partition(partition)

    def finish_loading(self, partition: int) -> list[Result]:
        self._coordinator.finish_loading(partition, now_ms())
        self._service.wake()  # loaded members now have session deadlines
        return []

    def owned_partitions(self) -> frozenset[int]:
        return self._coordinator.owned_partitions()

    def unload_partition(self, partition: int) -> Result:
        return self._coordinator.unload_partition(partition)

    def replay(self, record: CoordinatorRecord, offset: int, timestamp_ms: int, **batch: Any) -> None:
        self._coordinator.replay(record, offset, timestamp_ms, **batch)

    def replay_marker(self, producer_id: int, commit: bool, *, partition: int) -> None:
        self._coordinator.replay_marker(producer_id, commit, partition=partition)


class GroupService:
    def __init__(self, config: BrokerConfig, cluster: Cluster, node_id: int) -> None:
        self.cluster = cluster
        self.coordinator = GroupCoordinator(GroupConfig(
            offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
            group_initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            group_min_session_timeout_ms=config["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=config["group.max.session.timeout.ms"],
            group_max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
        ))
        self.runtime = CoordinatorRuntime(
            "group coordinator", TOPIC, config["offsets.topic.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"])},
            _Loader(self), cluster, node_id, self._perform,
        )
        self._wake = asyncio.Event()
        self._parked: set[asyncio.Future] = set()

    def ensure_ready(self) -> None:
        self.runtime.start()

    async def ready(self) -> None:
        await self.runtime.started()

    async def close(self) -> None:
        """Stops loading and gives up parked requests (their connections are closing)."""
        self.runtime.stop_loading()
        for answer in list(self._parked):
            answer.cancel()

    def partition_for(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id)

    # -- the request path ----------------------------------------------------------------

    async def run(self, group_id: str, handler: Callable[[], Result]) -> Any:
        """Runs a coordinator handler under the lock of the group's partition."""
        await self.ready()
        response = await self.runtime.run(self.partition_for(group_id), handler)
        self.wake()
        return response

    async def run_parked(self, group_id: str, handler: Callable[[asyncio.Future], Result]) -> Any:
        """Runs a JoinGroup/SyncGroup handler; if the coordinator parks the request,
        waits for the ``Reply`` that answers it."""
        answer = asyncio.get_running_loop().create_future()
        self._parked.add(answer)
        answer.add_done_callback(self._parked.discard)
        response = await self.run(group_id, lambda: handler(answer))
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

    async def write_marker(self, partition: int, producer_id: int, commit: bool, write: Callable[[], int]) -> int:
        """Writes a transaction marker on a __consumer_offsets partition with ``write``
        (which returns the error code) and, if it was written, completes the producer's
        pending offsets there, all under the partition's lock: no offset commit of the
        same partition can come between the marker and its effect."""
        async with self.runtime.lock(partition):
            error = write()
            if error == 0:
                self.coordinator.replay_marker(producer_id, commit, partition=partition)
        return error

    def _perform(self, effect) -> None:
        if not isinstance(effect, Reply):
            raise TypeError(f"unknown group coordinator effect {effect!r}")
        answer: asyncio.Future = effect.reply_to
        if not answer.done():
            answer.set_result(effect.response)

    # -- timers --------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    async def run_timers(self) -> None:
        """Fires the coordinator's timers as they fall due, for as long as the broker runs."""
        while True:
            deadline = self.coordinator.next_deadline()
            self._wake.clear()
            if deadline is None or deadline > now_ms():
                timeout = _MAX_SLEEP_S if deadline is None else min((deadline - now_ms()) / 1000, _MAX_SLEEP_S)
                try:
                    await asyncio.wait_for(self._wake.wait(), max(timeout, 0))
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                await self.poll(now_ms())
            except Exception:
                log.exception("group coordinator timers failed")
                await asyncio.sleep(1)
            await asyncio.sleep(0.001)  # a timer that failed to move cannot spin the loop

    async def poll(self, now: int) -> None:
        for p in sorted(self.coordinator.owned_partitions()):
            async with self.runtime.lock(p):
                results = self.coordinator.poll(now, partition=p)
                for result in results:
                    self.runtime.append(p, result.records)
            for result in results:
                for effect in result.effects:
                    self._perform(effect)


# -- helpers the offset handlers share ---------------------------------------------------


def unknown_partitions(cluster: Cluster, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """Partitions of topics that do not exist (or past their partition count): Kafka
    answers UNKNOWN_TOPIC_OR_PARTITION for them without asking the coordinator."""
    return {tp for tp in partitions if cluster.partition(*tp) is None}


def errors_by_topic(partitions: list[tuple[str, int]], errors: dict[tuple[str, int], Any]) -> list[dict]:
    """``topics`` of an OffsetCommit-like response, in request order."""
    topics: dict[str, list[dict]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": errors[(topic, partition)]})
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


def partition_errors(response) -> dict[tuple[str, int], Any]:
    """The per-partition errors of a coordinator OffsetCommit/TxnOffsetCommit answer."""
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
