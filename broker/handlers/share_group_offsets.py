"""What DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and
DeleteShareGroupOffsets (92) share: the group checked on its coordinator, and the
share-partition state read from and written to the share coordinator
(__share_group_state); the leader's share-partition is dropped, so its next fetch
starts from the new state."""

from __future__ import annotations

from coordinator.share.partition import ACKNOWLEDGED, ARCHIVED
from coordinator.share.state_log_codec import ShareSnapshot, StateKey
from kio.schema.errors import ErrorCode

E = ErrorCode


async def group_error(ctx, group_id: str, must_be_empty: bool) -> tuple[ErrorCode, str | None, object]:
    """(error, message, share group or None) for the offsets APIs; an unknown group is
    an error for Describe only (``must_be_empty`` False)."""
    groups = ctx.node.groups
    await groups.ready()
    error, message, group = groups.coordinator.share_group_describe(group_id)
    if group is None:
        if must_be_empty and error is E.group_id_not_found and message and message.endswith("not found."):
            return E.none, None, None
        return error, message, None
    if must_be_empty and group.members:
        return E.non_empty_group, f"Share group {group_id} is not empty.", group
    return E.none, None, group


async def read(ctx, key: StateKey) -> ShareSnapshot | None:
    """The share-partition's state summary (ReadShareGroupStateSummary); None when it has
    none or it could not be read."""
    _error, snapshot = await ctx.node.shares.persister.summary(key)
    return snapshot


def lag(snapshot: ShareSnapshot, high_watermark: int) -> int:
    """Records not yet delivered for good: from the start offset to the high watermark,
    less those acknowledged or archived beyond the start."""
    done = sum(b.last_offset - b.first_offset + 1 for b in snapshot.state_batches
               if b.delivery_state in (ACKNOWLEDGED, ARCHIVED))
    return max(0, high_watermark - snapshot.start_offset - done)


async def replace_state(ctx, key: StateKey, start_offset: int | None) -> ErrorCode:
    """Starts the share-partition's state over at ``start_offset`` (InitializeShareGroupState
    in a new state epoch, nothing in flight), or deletes it (``start_offset`` None,
    DeleteShareGroupState), and records it in the group (initialized, or no longer). The
    leaders' share-partitions are dropped, so their next fetch reads the new state."""
    persister = ctx.node.shares.persister
    partition = (key.topic_id, key.partition)
    if start_offset is None:
        error = (await persister.delete(key.group_id, [partition]))[partition]
    else:
        _error, current = await persister.summary(key)
        state_epoch = 0 if current is None else current.state_epoch + 1
        error = (await persister.initialize(key.group_id, [partition], state_epoch, start_offset))[partition]
    if error:
        return error
    groups = ctx.node.groups
    coordinator = groups.coordinator
    await groups.run(key.group_id, lambda: coordinator.share_group_state_changed(
        key.group_id, {key.topic_id: frozenset({key.partition})}, initialized=start_offset is not None),
        lambda failed: failed)
    for node in ctx.broker.nodes:
        if (shares := node.made("shares")) is not None:
            shares.forget(key.group_id, key.topic_id, key.partition)
    return E.none
