"""Drives a sans-IO coordinator over its compacted topic's partitions.

For every request: take the partition's lock, ask the state machine for a Result,
append its records as one batch, replay those very records (the code path start-up
recovery uses), release the lock, then hand the response back and the effects to
the broker. Loading a partition replays its whole log. The state machine never
changes until its records are in the log.

Records that belong to a producer's transaction (they carry ``producer_id`` and
``producer_epoch``, as the group coordinator's transactional offset commits do) go in
a transactional batch of that producer, so the partition's producer state opens the
transaction and its COMMIT/ABORT marker closes it. At load such records are replayed
with their producer id, and markers through ``machine.replay_marker``; a log without
transactions (__transaction_state) never reaches either.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from broker.cluster import Cluster, now_ms
from coordinator.records import CoordinatorRecord, Result
from protocol.record_codec import CONTROL_TYPE_COMMIT, build_batch, decode_records, read_control_record
from protocol.records import InvalidBatch, RecordBatch

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
        self._loads: dict[int, asyncio.Task] = {}
        self._started = False
        self.on_unload: Callable[[int], None] | None = None

    # -- loading -----------------------------------------------------------------------
    def start(self) -> None:
        """Creates the topic on first use (as Kafka does) and starts loading the partitions
        this node leads in the background; requests meanwhile get
        COORDINATOR_LOAD_IN_PROGRESS. Later calls do nothing."""
        if self._started:
            return
        self._started = True
        self.cluster.ensure_topic(self.topic, self.partition_count, self.topic_configs)
        for p in range(self.partition_count):
            leadership = self.cluster.leadership(self.topic, p)
            if leadership is not None and leadership.leader == self.node_id:
                self.load_partition(p, leadership.leader_epoch)

    @property
    def started_loading(self) -> bool:
        return self._started

    async def started(self) -> None:
        """``start``, then, for a topic created by this process, waits for its (short) load:
        the first request is served rather than told to come back."""
        self.start()
        if self.topic in self.cluster.created_this_run:
            loads = [t for t in self._loads.values() if not t.done()]
            if loads:
                await asyncio.shield(asyncio.gather(*loads, return_exceptions=True))

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Takes ownership of a partition this node now leads: requests for it get
        COORDINATOR_LOAD_IN_PROGRESS until its log is replayed in the background."""
        self.unload_partition(partition, quiet=True)
        self.machine.load_partition(partition, coordinator_epoch)
        task = asyncio.get_running_loop().create_task(self.load([partition]))
        self._loads[partition] = task
        task.add_done_callback(lambda t, p=partition: self._loads.pop(p, None) if self._loads.get(p) is t else None)

    def unload_partition(self, partition: int, quiet: bool = False) -> None:
        """Gives up a partition (its leadership moved away): in-memory state is dropped,
        parked requests learn NOT_COORDINATOR, and ``on_unload`` stops its work."""
        task = self._loads.pop(partition, None)
        if task is not None and not task.done():
            task.cancel()
        result = self.machine.unload_partition(partition)
        if result is not None:
            self._perform_all(result.effects)
        if self.on_unload is not None:
            self.on_unload(partition)
        if not quiet:
            log.info("%s of node %d unloaded %s-%d", self.name, self.node_id, self.topic, partition)

    def state_of(self, partition: int) -> str:
        """"loading", "loaded" or "not loaded" (for the control API)."""
        if partition in self._loads:
            return "loading"
        return "loaded" if partition in self.machine.owned_partitions() else "not loaded"

    def stop_loading(self) -> None:
        for task in self._loads.values():
            task.cancel()
        self._loads.clear()

    async def load(self, owned: list[int]) -> None:
        started = now_ms()
        records = 0
        for p in owned:
            async with self.lock(p):
                batches = self.cluster.partition(self.topic, p).log.batches()
                if getattr(self.machine, "LATEST_RECORD_PER_KEY_IS_STATE", False):
                    records += self._replay_latest_per_key(batches)
                else:
                    for batch in batches:
                        records += self._replay_batch(p, batch)
                results = self.machine.finish_loading(p)
            for result in results:
                self._perform_all(result.effects)
            await asyncio.sleep(0)  # let requests in between partitions
        if records:
            log.info("%s of node %d loaded %d records from %s in %d ms", self.name, self.node_id, records,
                     self.topic, now_ms() - started)

    def _replay_latest_per_key(self, batches) -> int:
        """For machines whose every record is a key's whole state: replay only the newest
        record of each key, in log order (the result is the same, the work is not)."""
        latest = {}
        count = 0
        for batch in batches:
            if batch.is_control:
                continue
            for record in decode_records(batch):
                latest.pop(record.key, None)  # re-insert so dict order stays log order
                latest[record.key] = record
                count += 1
        for record in latest.values():
            self.machine.replay(CoordinatorRecord(record.key, record.value), record.offset, record.timestamp)
        return count

    def _replay_batch(self, partition: int, batch: RecordBatch) -> int:
        if batch.is_control:
            try:
                control_type, _epoch = read_control_record(batch)
            except InvalidBatch as e:
                log.warning("%s: skipping control batch at offset %d: %s", self.topic, batch.base_offset, e)
                return 0
            self.machine.replay_marker(batch.producer_id, control_type == CONTROL_TYPE_COMMIT, partition=partition)
            return 0
        count = 0
        for record in decode_records(batch):
            stored = CoordinatorRecord(record.key, record.value)
            if batch.is_transactional:
                self.machine.replay(stored, record.offset, record.timestamp,
                                    producer_id=batch.producer_id, transactional=True)
            else:
                self.machine.replay(stored, record.offset, record.timestamp)
            count += 1
        return count

    # -- the request path ----------------------------------------------------------------
    def lock(self, partition: int) -> asyncio.Lock:
        """The partition's lock, shared by every node's runtime: a node taking the
        partition over loads only after the previous leader's last append."""
        return self.cluster.coordinator_lock(self.topic, partition)

    async def run(self, partition: int, handler: Callable[[], Result]) -> Any:
        """Runs ``handler`` against the partition's current state and commits its records."""
        async with self.lock(partition):
            result = handler()
            self.append(partition, result.records)
        self._perform_all(result.effects)
        return result.response

    def append(self, partition: int, records: tuple[CoordinatorRecord, ...]) -> None:
        """Appends records, one batch per run of records of the same producer (or none),
        then replays the same objects in order."""
        t = now_ms()
        for producer, run in itertools.groupby(records, _producer_of):
            run = list(run)
            batch = RecordBatch(_build(run, producer, t), 0)
            info = self.cluster.partition(self.topic, partition).append(batch, t)
            for i, record in enumerate(run):
                self.machine.replay(record, info.base_offset + i, t)

    def _perform_all(self, effects) -> None:
        for effect in effects:
            self._perform(effect)


def _producer_of(record: CoordinatorRecord) -> tuple[int, int] | None:
    producer_id = getattr(record, "producer_id", None)
    return None if producer_id is None else (producer_id, record.producer_epoch)


def _build(records: list[CoordinatorRecord], producer: tuple[int, int] | None, t: int) -> bytearray:
    rows = [(r.key, r.value, (), t) for r in records]
    if producer is None:
        return build_batch(rows)
    # Sequence 0, as Kafka's coordinators write it: the partition leader checks no
    # sequences for its own appends, only the producer epoch (done before we get here).
    return build_batch(rows, producer_id=producer[0], producer_epoch=producer[1], base_sequence=0,
                       transactional=True)
