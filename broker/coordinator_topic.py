"""A coordinator's internal topic in the broker (__consumer_offsets, __transaction_state):
the I/O around the sans-IO ``coordinator.runtime.CoordinatorRuntime``.

It creates the topic on first use (as Kafka does), loads the partitions this node
leads in the background (requests for a partition not yet loaded get
COORDINATOR_LOAD_IN_PROGRESS), loads and unloads single partitions when coordinators
move, and is the runtime's ``CoordinatorLog`` over the topic's partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from broker.cluster import Cluster
from coordinator.runtime import CoordinatorRuntime, StateMachine
from protocol.records import RecordBatch

log = logging.getLogger(__name__)


class CoordinatorTopic:
    def __init__(self, name: str, topic: str, partitions: int, topic_configs: dict[str, str],
                 machine: StateMachine, cluster: Cluster, node_id: int, perform: Callable[[Any], None],
                 on_loaded: Callable[[], None] = lambda: None) -> None:
        self.name = name
        self.topic = topic
        self.partition_count = partitions
        self.topic_configs = topic_configs
        self.cluster = cluster
        self.clock = cluster.clock
        self.node_id = node_id
        self.runtime = CoordinatorRuntime(machine, self, perform)
        self._on_loaded = on_loaded
        self._loading: asyncio.Task | None = None
        self._fresh_topic = False

    # -- loading -------------------------------------------------------------------------

    def start(self) -> None:
        """Creates the topic on first use and starts loading the partitions this node
        leads in the background. Later calls do nothing."""
        if self._loading is not None:
            return
        self._fresh_topic = self.topic not in self.cluster.topics.by_name
        self.cluster.ensure_topic(self.topic, self.partition_count, self.topic_configs)
        owned = [p for p in range(self.partition_count) if self.cluster.leader_of(self.topic, p) == self.node_id]
        for p in owned:
            self.runtime.begin_load(p, 0)
        self._loading = asyncio.get_running_loop().create_task(self._load_all(owned))

    async def started(self) -> None:
        """``start``, then, for a topic created just now, waits for its (empty) load: the
        first request is served rather than told to come back."""
        self.start()
        if self._fresh_topic and not self._loading.done():
            await asyncio.shield(self._loading)

    def stop_loading(self) -> None:
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()

    async def _load_all(self, owned: list[int]) -> None:
        started = self.clock.now_ms()
        records = 0
        for p in owned:
            records += self.runtime.load(p, self.clock.now_ms())
            self._on_loaded()
            await asyncio.sleep(0)  # let requests in between partitions
        log.info("%s loaded %d records from %s in %d ms", self.name, records, self.topic,
                 self.clock.now_ms() - started)

    def load_partition(self, partition: int, coordinator_epoch: int) -> int:
        """This node became the partition's coordinator (epoch ``coordinator_epoch``):
        replays it now; returns the records read."""
        self.runtime.begin_load(partition, coordinator_epoch)
        records = self.runtime.load(partition, self.clock.now_ms())
        self._on_loaded()
        return records

    def unload_partition(self, partition: int) -> None:
        """The partition's coordinator moved to another node."""
        self.runtime.unload(partition)

    # -- the runtime's CoordinatorLog ------------------------------------------------------

    def append(self, partition: int, batch: RecordBatch, now_ms: int) -> int:
        return self.cluster.partition(self.topic, partition).append(batch, now_ms).base_offset

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, now_ms: int) -> None:
        """Raises ProduceRejected when the partition refuses the marker (fenced)."""
        self.cluster.partition(self.topic, partition).write_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, now_ms)

    def batches(self, partition: int) -> Iterable[RecordBatch]:
        return self.cluster.partition(self.topic, partition).log.batches()
