"""Drives a sans-IO coordinator over its compacted topic's partitions.

For every request: take the partition's lock, ask the state machine for a Result,
append its records as one batch, replay those very records (the code path start-up
recovery uses), release the lock, then hand the response back and the effects to
the broker. Loading a partition replays its whole log. The state machine never
changes until its records are in the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from broker.cluster import Cluster, now_ms
from coordinator.records import CoordinatorRecord, Result
from protocol.record_codec import build_batch, decode_records
from protocol.records import RecordBatch

log = logging.getLogger(__name__)


class CoordinatorRuntime:
    def __init__(self, name: str, topic: str, partitions: int, topic_configs: dict[str, str], machine,
                 cluster: Cluster, node_id: int, perform: Callable[[Any], None]) -> None:
        self.name = name
        self.topic = topic
        self.partition_count = partitions
        self.topic_configs = topic_configs
        self.machine = machine
        self.cluster = cluster
        self.node_id = node_id
        self._perform = perform
        self._locks: dict[int, asyncio.Lock] = {}

    # -- loading -----------------------------------------------------------------------
    def ensure_topic(self) -> None:
        self.cluster.ensure_topic(self.topic, self.partition_count, self.topic_configs)

    async def load(self, coordinator_epoch: int = 0) -> None:
        """Loads every partition this node leads; requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS."""
        started = now_ms()
        records = 0
        owned = [p for p in range(self.partition_count) if self.cluster.leader_of(self.topic, p) == self.node_id]
        for p in owned:
            self.machine.load_partition(p, coordinator_epoch)
        for p in owned:
            async with self.lock(p):
                for batch in self.cluster.partition(self.topic, p).log.batches():
                    records += self._replay_batch(batch)
                results = self.machine.finish_loading(p)
            for result in results:
                self._perform_all(result.effects)
            await asyncio.sleep(0)  # let requests in between partitions
        log.info("%s loaded %d records from %s in %d ms", self.name, records, self.topic, now_ms() - started)

    def _replay_batch(self, batch: RecordBatch) -> int:
        if batch.is_control:
            return 0
        count = 0
        for record in decode_records(batch):
            self.machine.replay(CoordinatorRecord(record.key, record.value), record.offset, record.timestamp)
            count += 1
        return count

    # -- the request path ----------------------------------------------------------------
    def lock(self, partition: int) -> asyncio.Lock:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock

    async def run(self, partition: int, handler: Callable[[], Result]) -> Any:
        """Runs ``handler`` against the partition's current state and commits its records."""
        async with self.lock(partition):
            result = handler()
            self.append(partition, result.records)
        self._perform_all(result.effects)
        return result.response

    def append(self, partition: int, records: tuple[CoordinatorRecord, ...]) -> None:
        """Appends records in one batch, then replays the same objects in order."""
        if not records:
            return
        t = now_ms()
        batch = RecordBatch(build_batch([(r.key, r.value, (), t) for r in records]), 0)
        info = self.cluster.partition(self.topic, partition).append(batch, t)
        for i, record in enumerate(records):
            self.machine.replay(record, info.base_offset + i, t)

    def _perform_all(self, effects) -> None:
        for effect in effects:
            self._perform(effect)
