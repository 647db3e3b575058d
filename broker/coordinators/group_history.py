"""What the group coordinator tells the event history (broker.cluster.event_history):
the offsets a group committed (pending under a transaction's producer until its marker),
the pending offsets a marker completes, offsets deleted (OffsetDelete, expiry), groups
deleted, and the rebalances: a classic group preparing one (kept in memory, never
written) and its new generation, a consumer or streams group's epoch moving ahead of
its members and their catching up, a share group's members coming and going.

Read from the records as they are written (never at load, which replays old ones) and
after each group request and timer (a rebalance starts without a write), the group's
membership as it stands once they are replayed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coordinator.group import log_codec
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.group import GroupState
from coordinator.group.group_types import key_type, type_codec
from coordinator.runtime import NO_PRODUCER_ID, CoordinatorRecord, LogCodecError, UnknownKeyVersion

_CLASSIC_REBALANCING = frozenset({GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE})
# A consumer or streams group whose epoch is ahead of its target assignment or of its members.
_MODERN_REBALANCING = frozenset({"Assigning", "Reconciling"})


class GroupHistory:
    def __init__(self, history, coordinator: GroupCoordinator) -> None:
        self.history = history
        self.coordinator = coordinator

    def written(self, partition: int, records: Sequence[CoordinatorRecord], producer_id: int) -> None:
        """The runtime's ``written``: a run of records of one producer (or of none)."""
        offsets: dict[str, dict[str, int]] = {}
        deleted: dict[str, list[str]] = {}  # offsets' tombstones, by group
        groups: dict[str, str] = {}  # groups whose own records were written, in order -> their protocol
        for record in records:
            group_type, key = _key(record)
            if isinstance(key, log_codec.OffsetCommitKey):
                name = f"{key.topic}-{key.partition}"
                if record.value is None:  # a tombstone deletes, it does not commit
                    deleted.setdefault(key.group, []).append(name)
                else:
                    offsets.setdefault(key.group, {})[name] = log_codec.decode_offset_commit_value(record.value).offset
            elif isinstance(key, log_codec.GroupMetadataKey):
                groups.setdefault(key.group, "classic")
            elif group_type is not None:
                groups.setdefault(key.group, group_type)
        transactional = producer_id != NO_PRODUCER_ID
        for group_id, committed in offsets.items():
            self.history.offsets(group_id, committed, "pending" if transactional else "committed",
                                 producer_id if transactional else None)
        for group_id, protocol in groups.items():
            if not self._membership(group_id, full=True):  # its records deleted it
                self.history.group_deleted(group_id, protocol, sorted(deleted.pop(group_id, ())))
        for group_id, names in deleted.items():
            self.history.offsets(group_id, dict.fromkeys(names), "deleted")

    def completed(self, pending: dict, producer_id: int, commit: bool) -> None:
        """``producer_id``'s marker completed its ``pending`` offsets (``GroupCoordinator.
        pending_offsets``, read before the marker)."""
        for group_id, offsets in pending.items():
            self.history.offsets(group_id, {f"{t}-{p}": v.offset for (t, p), v in offsets.items()},
                                 "committed" if commit else "aborted", producer_id)

    def ran(self, group_id: str) -> None:
        """After a request of ``group_id``: a rebalance it started or ended, written or not."""
        self._membership(group_id, full=False)

    def timers_fired(self, partitions: Iterable[int]) -> None:
        """After the coordinator's timers fired on ``partitions``: a session or rebalance
        timeout that started or ended a rebalance of a group the history has told."""
        partitions = set(partitions)
        for group_id in self.history.groups_told():
            if self.coordinator.partition_for(group_id) in partitions:
                self._membership(group_id, full=False)

    def _membership(self, group_id: str, full: bool) -> bool:
        """Tells the group's membership; False when the group is not (or no longer)
        there. Not ``full``: only when its generation or rebalancing changed, and not a
        group never told that has no member (one that only commits offsets)."""
        if not full:
            modern = self.coordinator.consumer_group(group_id) or self.coordinator.streams_group(group_id)
            if modern is not None and self.history.group_unchanged(group_id, modern.group_epoch, False):
                return True  # settled, same epoch: a rebalance starts with a new one (its state reads every member)
        found = self._group(group_id)
        if found is None:
            return False
        protocol, generation, state, rebalancing, members = found
        if not full and (self.history.group_unchanged(group_id, generation, rebalancing)
                         or not (members or rebalancing or self.history.group_told(group_id))):
            return True
        self.history.group(group_id, protocol, generation, frozenset(members), state, rebalancing)
        return True

    def _group(self, group_id: str):
        """(protocol, generation or epoch, state, rebalancing, members) of the group."""
        coordinator = self.coordinator
        group = coordinator.consumer_group(group_id)
        if group is not None:
            return "consumer", group.group_epoch, group.state, group.state in _MODERN_REBALANCING, group.members
        streams = coordinator.streams_group(group_id)
        if streams is not None:
            return "streams", streams.group_epoch, streams.state, streams.state in _MODERN_REBALANCING, streams.members
        share = coordinator.share_group(group_id)
        if share is not None:
            return "share", share.group_epoch, share.state, False, share.members
        classic = coordinator.group(group_id)
        if classic is not None and classic.state is not GroupState.DEAD:
            return ("classic", classic.generation_id, classic.state.value, classic.state in _CLASSIC_REBALANCING,
                    classic.members)
        return None


def _key(record: CoordinatorRecord):
    """(the group type of a consumer, share or streams group's record, else None; the
    record's key decoded, None when not a group coordinator record's)."""
    try:
        return None, log_codec.decode_key(record.key)
    except UnknownKeyVersion as e:
        group_type = key_type(e.version)
        if group_type is None:
            return None, None
        try:
            return group_type, type_codec(group_type).decode_key(e.version, record.key)
        except LogCodecError:
            return None, None
    except LogCodecError:
        return None, None
