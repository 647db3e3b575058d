"""The share coordinator (Kafka's ShareCoordinatorShard) over the __share_group_state
partitions it owns: the durable state of each share-partition (its start offset and the
delivery state of the records in flight), one ShareSnapshot record per write, the
newest per key being the state. Sans-IO: handlers return ``Result``s the runtime
appends and replays (coordinator/contract.py).

Writes follow Kafka's WriteShareGroupState rules: a write with an older state epoch is
FENCED_STATE_EPOCH, one from an older leader epoch FENCED_LEADER_EPOCH; each write moves
the snapshot epoch on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from coordinator.group.log_codec import LogCodecError
from coordinator.partitioning import partition_for
from coordinator.contract import CoordinatorRecord, Result
from coordinator.share.state_log_codec import (
    ShareSnapshot, StateKey, decode_key, decode_snapshot, snapshot_record,
)

log = logging.getLogger(__name__)
E = ErrorCode


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int = 0
    loading: bool = True
    states: dict[StateKey, ShareSnapshot] = field(default_factory=dict)


class ShareCoordinator:
    # Each snapshot is its key's whole state: load replays the newest per key.
    replays_latest_record_per_key = True

    def __init__(self, partitions: int = 50) -> None:
        self.partition_count = partitions
        self._partitions: dict[int, _Partition] = {}

    def partition_for(self, key: StateKey) -> int:
        return partition_for(key.coordinator_key(), self.partition_count)

    # -- the runtime's contract ------------------------------------------------------------

    def load_partition(self, partition: int, coordinator_epoch: int = 0) -> None:
        self._partitions[partition] = _Partition(coordinator_epoch)

    def finish_loading(self, partition: int, now_ms: int) -> list[Result]:
        self._partitions[partition].loading = False
        return []

    def unload_partition(self, partition: int) -> list[Result]:
        self._partitions.pop(partition, None)
        return []

    def owned_partitions(self) -> frozenset[int]:
        return frozenset(p for p, s in self._partitions.items() if not s.loading)

    def loading_partitions(self) -> frozenset[int]:
        return frozenset(p for p, s in self._partitions.items() if s.loading)

    def coordinator_epoch(self, partition: int) -> int | None:
        state = self._partitions.get(partition)
        return None if state is None else state.coordinator_epoch

    def replay(self, record: CoordinatorRecord, offset: int, timestamp_ms: int, producer_id: int = -1) -> None:
        try:
            key = decode_key(record.key)
            if key is None:
                return  # a ShareUpdate: this coordinator writes snapshots only
            state = self._partitions.get(self.partition_for(key))
            if state is None:
                return
            if record.value is None:
                state.states.pop(key, None)
            else:
                state.states[key] = decode_snapshot(record.value)
        except LogCodecError as bad:
            log.warning("skipping a malformed share state record at offset %d: %s", offset, bad)

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        pass  # nothing transactional is written here

    def next_deadline(self) -> int | None:
        return None

    def poll(self, now_ms: int, partition: int | None = None) -> list[Result]:
        return []

    # -- the state APIs ---------------------------------------------------------------------

    def _serving(self, key: StateKey) -> tuple[ErrorCode | None, _Partition | None]:
        state = self._partitions.get(self.partition_for(key))
        if state is None:
            return E.not_coordinator, None
        if state.loading:
            return E.coordinator_load_in_progress, None
        return None, state

    def read_state(self, key: StateKey) -> tuple[ErrorCode, ShareSnapshot | None]:
        """ReadShareGroupState: the snapshot, or None when the share-partition has none."""
        error, state = self._serving(key)
        if state is None:
            return error, None
        return E.none, state.states.get(key)

    def states(self, group_id: str) -> dict[StateKey, ShareSnapshot]:
        """Every share-partition state of a group this coordinator serves (the summary
        DescribeShareGroupOffsets reads)."""
        return {k: v for s in self._partitions.values() if not s.loading
                for k, v in s.states.items() if k.group_id == group_id}

    def write_state(self, key: StateKey, snapshot: ShareSnapshot, now_ms: int) -> Result[ErrorCode]:
        """WriteShareGroupState (and InitializeShareGroupState, which starts a new state
        epoch): the snapshot given, with the next snapshot epoch."""
        error, state = self._serving(key)
        if state is None:
            return Result(response=error)
        current = state.states.get(key)
        if current is not None:
            if snapshot.state_epoch < current.state_epoch:
                return Result(response=E.fenced_state_epoch)
            if snapshot.leader_epoch < current.leader_epoch:
                return Result(response=E.fenced_leader_epoch)
        written = replace(snapshot, snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
                          create_timestamp_ms=now_ms if current is None else current.create_timestamp_ms,
                          write_timestamp_ms=now_ms)
        return Result(records=(snapshot_record(key, written),), response=E.none)

    def delete_state(self, key: StateKey) -> Result[ErrorCode]:
        """DeleteShareGroupState: a tombstone."""
        error, state = self._serving(key)
        if state is None:
            return Result(response=error)
        if key not in state.states:
            return Result(response=E.none)
        return Result(records=(snapshot_record(key, None),), response=E.none)
