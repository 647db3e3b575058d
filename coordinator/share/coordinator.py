"""The share coordinator (Kafka's ShareCoordinatorShard) over the __share_group_state
partitions it owns: the durable state of each share-partition (its start offset and the
delivery state of the records in flight), one ShareSnapshot record per write, the
newest per key being the state. Sans-IO: handlers return ``Result``s the runtime
appends and replays (coordinator/runtime.py).

The rules are Kafka 4.4's: a share-partition is initialized (InitializeShareGroupState,
by the group coordinator) before it is read or written (else INVALID_REQUEST); a write
with an older leader epoch is FENCED_LEADER_EPOCH, one with an older state epoch
FENCED_STATE_EPOCH; each write moves the snapshot epoch on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from coordinator.group.log_codec import LogCodecError
from coordinator.partitioning import partition_for
from coordinator.runtime import CoordinatorRecord, PartitionLoads, Result
from coordinator.share.state_log_codec import (
    ShareSnapshot, StateKey, decode_key, decode_snapshot, snapshot_record,
)

log = logging.getLogger(__name__)
E = ErrorCode
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
NULL_TOPIC_ID = "The topic id cannot be null."
NEGATIVE_PARTITION = "The partition id cannot be a negative number."
# Kafka answers fencing with the errors' own messages
FENCED_LEADER = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE = "The coordinator rejected the request because the state epoch did not match."


@dataclass(frozen=True, slots=True)
class StateAnswer:
    """One share-partition's answer to a state API: the error first (the runtime answers
    a refused append with ``StateAnswer(error)``), the snapshot read."""

    error: ErrorCode
    message: str | None = None
    snapshot: ShareSnapshot | None = None


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int = 0
    states: dict[StateKey, ShareSnapshot] = field(default_factory=dict)


class ShareCoordinator:
    # Each snapshot is its key's whole state: load replays the newest per key.
    replays_latest_record_per_key = True

    def __init__(self, partitions: int = 50) -> None:
        self.partition_count = partitions
        self._partitions: dict[int, _Partition] = {}
        # Whether each partition is loaded: the runtime that drives this coordinator keeps it.
        self.loads = PartitionLoads()

    def partition_for(self, key: StateKey) -> int:
        return partition_for(key.coordinator_key(), self.partition_count)

    # -- the runtime's contract ------------------------------------------------------------

    def load_partition(self, partition: int, coordinator_epoch: int = 0) -> None:
        self._partitions[partition] = _Partition(coordinator_epoch)

    def finish_loading(self, partition: int, now_ms: int) -> list[Result]:
        return []

    def unload_partition(self, partition: int) -> list[Result]:
        self._partitions.pop(partition, None)
        return []

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

    # -- the state APIs (Kafka's ShareCoordinatorShard) ------------------------------------

    def _serving(self, key: StateKey) -> tuple[ErrorCode | None, _Partition | None]:
        """For the reads asked outside the runtime (the summary, snapshots): the key's
        partition, or why it is not served here."""
        partition = self.partition_for(key)
        refusal = self.loads.refusal(partition)
        return (refusal, None) if refusal is not None else (None, self._partitions[partition])

    @staticmethod
    def key_error(key: StateKey) -> StateAnswer | None:
        """A key no state can have (no topic id, a negative partition), as Kafka's shard
        checks it first in each state API; None: a key that can."""
        if key.topic_id is None:
            return StateAnswer(E.invalid_request, NULL_TOPIC_ID)
        if key.partition < 0:
            return StateAnswer(E.invalid_request, NEGATIVE_PARTITION)
        return None

    def _served(self, key: StateKey) -> _Partition:
        """The key's partition, for the writes: the runtime runs them on served partitions only."""
        return self._partitions[self.partition_for(key)]

    def read_state(self, key: StateKey, leader_epoch: int, now_ms: int) -> Result[StateAnswer]:
        """ReadShareGroupState: the snapshot of an initialized share-partition. A leader
        reading with a newer leader epoch records it (a new snapshot), so a write from the
        leader before it is fenced; one with an older epoch is FENCED_LEADER_EPOCH."""
        if (bad_key := self.key_error(key)) is not None:
            return Result(response=bad_key)
        if leader_epoch < 0:
            return Result(response=StateAnswer(E.invalid_request, NEGATIVE_LEADER_EPOCH))
        state = self._served(key)
        current = state.states.get(key)
        if current is None:
            return Result(response=StateAnswer(E.invalid_request, READ_UNINITIALIZED))
        if leader_epoch < current.leader_epoch:
            return Result(response=StateAnswer(E.fenced_leader_epoch, FENCED_LEADER))
        if leader_epoch > current.leader_epoch:
            updated = self._next(current, replace(current, leader_epoch=leader_epoch), now_ms)
            return Result(records=(snapshot_record(key, updated),), response=StateAnswer(E.none, None, updated))
        return Result(response=StateAnswer(E.none, None, current))

    def read_summary(self, key: StateKey) -> StateAnswer:
        """ReadShareGroupStateSummary: the snapshot, or none for a share-partition never
        initialized (answered with start offset -1, as Kafka does)."""
        error, state = self._serving(key)
        if state is None:
            return StateAnswer(error)
        return StateAnswer(E.none, None, state.states.get(key))

    def snapshot(self, key: StateKey) -> tuple[ErrorCode | None, ShareSnapshot | None]:
        """(error or None, the snapshot or None) as held now, for inspection."""
        error, state = self._serving(key)
        return error, None if state is None else state.states.get(key)

    def states(self, group_id: str) -> dict[StateKey, ShareSnapshot]:
        """Every share-partition state of a group this coordinator serves."""
        served = self.loads.loaded()
        return {k: v for p, s in self._partitions.items() if p in served
                for k, v in s.states.items() if k.group_id == group_id}

    def initialize_state(self, key: StateKey, state_epoch: int, start_offset: int, now_ms: int
                         ) -> Result[StateAnswer]:
        """InitializeShareGroupState: a new state at ``state_epoch`` (nothing in flight;
        start offset -1 leaves it to the leader's share.auto.offset.reset)."""
        if state_epoch < 0:
            return Result(response=StateAnswer(E.invalid_request, NEGATIVE_STATE_EPOCH))
        state = self._served(key)
        current = state.states.get(key)
        if current is not None and state_epoch < current.state_epoch:
            return Result(response=StateAnswer(E.fenced_state_epoch, FENCED_STATE))
        fresh = ShareSnapshot(0, state_epoch, -1 if current is None else current.leader_epoch, start_offset,
                              0, 0, ())
        written = self._next(current, fresh, now_ms)
        return Result(records=(snapshot_record(key, written),), response=StateAnswer(E.none))

    def write_state(self, key: StateKey, snapshot: ShareSnapshot, now_ms: int) -> Result[StateAnswer]:
        """WriteShareGroupState: the snapshot given, with the next snapshot epoch, onto an
        initialized share-partition; an older leader or state epoch is fenced."""
        if (bad_key := self.key_error(key)) is not None:
            return Result(response=bad_key)
        if snapshot.leader_epoch < 0 or snapshot.state_epoch < 0:
            return Result(response=StateAnswer(E.invalid_request, NEGATIVE_LEADER_EPOCH if snapshot.leader_epoch < 0
                                               else NEGATIVE_STATE_EPOCH))
        state = self._served(key)
        current = state.states.get(key)
        if current is None:
            return Result(response=StateAnswer(E.invalid_request, WRITE_UNINITIALIZED))
        if snapshot.leader_epoch < current.leader_epoch:
            return Result(response=StateAnswer(E.fenced_leader_epoch, FENCED_LEADER))
        if snapshot.state_epoch < current.state_epoch:
            return Result(response=StateAnswer(E.fenced_state_epoch, FENCED_STATE))
        return Result(records=(snapshot_record(key, self._next(current, snapshot, now_ms)),),
                      response=StateAnswer(E.none))

    def delete_state(self, key: StateKey) -> Result[StateAnswer]:
        """DeleteShareGroupState: a tombstone (none for a state never initialized)."""
        state = self._served(key)
        if key not in state.states:
            return Result(response=StateAnswer(E.none))
        return Result(records=(snapshot_record(key, None),), response=StateAnswer(E.none))

    @staticmethod
    def _next(current: ShareSnapshot | None, snapshot: ShareSnapshot, now_ms: int) -> ShareSnapshot:
        return replace(snapshot, snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
                       create_timestamp_ms=now_ms if current is None else current.create_timestamp_ms,
                       write_timestamp_ms=now_ms)
