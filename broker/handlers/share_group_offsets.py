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
    service = await ctx.node.shares.state_coordinator(key)
    if service is None:
        return None
    for _ in range(1000):
        error, snapshot = service.coordinator.read_state(key)
        if error is not E.coordinator_load_in_progress:
            return snapshot
        await ctx.clock.sleep(0.01)
    return None


def lag(snapshot: ShareSnapshot, high_watermark: int) -> int:
    """Records not yet delivered for good: from the start offset to the high watermark,
    less those acknowledged or archived beyond the start."""
    done = sum(b.last_offset - b.first_offset + 1 for b in snapshot.state_batches
               if b.delivery_state in (ACKNOWLEDGED, ARCHIVED))
    return max(0, high_watermark - snapshot.start_offset - done)


async def replace_state(ctx, key: StateKey, start_offset: int | None) -> ErrorCode:
    """Sets the share-partition's start offset (a new state epoch, nothing in flight), or
    deletes its state (``start_offset`` None)."""
    shares = ctx.node.shares
    service = await shares.state_coordinator(key)
    if service is None:
        return E.coordinator_not_available
    current = await read(ctx, key)
    if start_offset is None:
        error = service.run(key, lambda: service.coordinator.delete_state(key))
    else:
        snapshot = ShareSnapshot(0, 0 if current is None else current.state_epoch + 1,
                                 0 if current is None else current.leader_epoch, start_offset, 0, 0, ())
        error = service.run(key, lambda: service.coordinator.write_state(key, snapshot, ctx.clock.now_ms()))
    for node in ctx.broker.nodes:
        if node._shares is not None:
            node._shares.partitions.pop((key.group_id, key.topic_id, key.partition), None)
    return error
