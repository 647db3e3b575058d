"""What the group coordinator's writes tell the event history (broker.cluster.event_history):
the offsets a group committed (pending under a transaction's producer until its marker),
the pending offsets a marker completes, and the rebalances (a classic group's new
generation, a consumer group's new epoch, members joining and leaving).

Read from the records as they are written (never at load, which replays old ones), and
the group's membership as it stands once they are replayed."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.contract import CoordinatorRecord, LogCodecError, UnknownKeyVersion
from coordinator.group import consumer_log_codec, log_codec
from coordinator.group.coordinator import GroupCoordinator
from coordinator.runtime import NO_PRODUCER_ID

_MEMBERSHIP_KINDS = (consumer_log_codec.GROUP_METADATA, consumer_log_codec.MEMBER_METADATA)


class GroupHistory:
    def __init__(self, history, coordinator: GroupCoordinator) -> None:
        self.history = history
        self.coordinator = coordinator

    def written(self, partition: int, records: Sequence[CoordinatorRecord], producer_id: int) -> None:
        """The runtime's ``written``: a run of records of one producer (or of none)."""
        offsets: dict[str, dict[str, int]] = {}
        groups: dict[str, None] = {}  # whose membership records were written, in order
        for record in records:
            key = _key(record)
            if isinstance(key, consumer_log_codec.ConsumerKey):
                if key.kind in _MEMBERSHIP_KINDS:
                    groups[key.group] = None
            elif isinstance(key, log_codec.OffsetCommitKey):
                if record.value is not None:  # a tombstone deletes, it does not commit
                    offset = log_codec.decode_offset_commit_value(record.value).offset
                    offsets.setdefault(key.group, {})[f"{key.topic}-{key.partition}"] = offset
            elif isinstance(key, log_codec.GroupMetadataKey):
                groups[key.group] = None
        transactional = producer_id != NO_PRODUCER_ID
        for group_id, committed in offsets.items():
            self.history.offsets(group_id, committed, "pending" if transactional else "committed",
                                 producer_id if transactional else None)
        for group_id in groups:
            self._membership(group_id)

    def completed(self, pending: dict, producer_id: int, commit: bool) -> None:
        """``producer_id``'s marker completed its ``pending`` offsets (``GroupCoordinator.
        pending_offsets``, read before the marker)."""
        for group_id, offsets in pending.items():
            self.history.offsets(group_id, {f"{t}-{p}": v.offset for (t, p), v in offsets.items()},
                                 "committed" if commit else "aborted", producer_id)

    def _membership(self, group_id: str) -> None:
        group = self.coordinator.consumer_group(group_id)
        if group is not None:
            self.history.group(group_id, "consumer", group.group_epoch, frozenset(group.members))
            return
        classic = self.coordinator.group(group_id)
        if classic is not None:
            self.history.group(group_id, "classic", classic.generation_id, frozenset(classic.members))


def _key(record: CoordinatorRecord):
    """The record's key decoded (a share or streams group's: None)."""
    try:
        return log_codec.decode_key(record.key)
    except UnknownKeyVersion as e:
        if e.version in consumer_log_codec.CONSUMER_KEY_VERSIONS:
            try:
                return consumer_log_codec.decode_key(e.version, record.key)
            except LogCodecError:
                return None
        return None
    except LogCodecError:
        return None
