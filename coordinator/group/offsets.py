"""Committed offsets and KIP-447 pending transactional offsets of one __consumer_offsets partition.

Changed only by replay. A transactional offset commit stays pending under its producer
id until that producer's COMMIT or ABORT marker is replayed on this partition. On
COMMIT it is materialized unless a commit written later in the log (a higher record
offset) already holds the partition: log order decides, so a compacted log rebuilds
the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.names import TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int
    record_offset: int  # position of the commit record in __consumer_offsets


GroupOffsets = dict[TopicPartition, CommittedOffset]


@dataclass(slots=True)
class OffsetStore:
    committed: dict[str, GroupOffsets] = field(default_factory=dict)
    pending: dict[int, dict[str, GroupOffsets]] = field(default_factory=dict)  # by producer id

    def commit(self, group_id: str, tp: TopicPartition, value: CommittedOffset) -> None:
        self.committed.setdefault(group_id, {})[tp] = value

    def add_pending(self, producer_id: int, group_id: str, tp: TopicPartition, value: CommittedOffset) -> None:
        self.pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = value

    def delete(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone clears the partition's committed offset and any pending one."""
        _discard(self.committed, group_id, tp)
        for producer_id in list(self.pending):
            by_group = self.pending[producer_id]
            _discard(by_group, group_id, tp)
            if not by_group:
                del self.pending[producer_id]

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        by_group = self.pending.pop(producer_id, {})
        if not commit:
            return
        for group_id, offsets in by_group.items():
            for tp, value in offsets.items():
                current = self.committed.get(group_id, {}).get(tp)
                if current is None or value.record_offset > current.record_offset:
                    self.commit(group_id, tp, value)

    def get(self, group_id: str, tp: TopicPartition) -> CommittedOffset | None:
        return self.committed.get(group_id, {}).get(tp)

    def group_offsets(self, group_id: str) -> GroupOffsets:
        return self.committed.get(group_id, {})

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, {}) for by_group in self.pending.values())

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return {tp for by_group in self.pending.values() for tp in by_group.get(group_id, {})}


def _discard(offsets_by_group: dict[str, GroupOffsets], group_id: str, tp: TopicPartition) -> None:
    offsets = offsets_by_group.get(group_id)
    if offsets is None:
        return
    offsets.pop(tp, None)
    if not offsets:
        del offsets_by_group[group_id]
