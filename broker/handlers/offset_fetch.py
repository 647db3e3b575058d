"""OffsetFetch (9): v1-v9; one group up to v7, a batch of groups from v8. With
require_stable (v7+) a partition whose offset is pending in an open transaction answers
UNSTABLE_OFFSET_COMMIT, so the consumer waits for the transaction to end."""

import dataclasses

from coordinator.group import OffsetFetchGroup

API_KEY = 9
FIRST_VERSION_WITH_GROUP_ERROR = 2
FIRST_BATCHED_VERSION = 8


def _wanted(group_id: str, topics, member_id: str | None = None, member_epoch: int = -1) -> OffsetFetchGroup:
    wanted = None if topics is None else tuple((t.name, tuple(t.partition_indexes)) for t in topics)
    return OffsetFetchGroup(group_id, wanted, member_id, member_epoch)


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    require_stable = getattr(request, "require_stable", False)
    if ctx.version >= FIRST_BATCHED_VERSION:
        response = groups.coordinator.offset_fetch([_wanted(g.group_id, g.topics, getattr(g, "member_id", None),
                                                                   getattr(g, "member_epoch", -1))
                                                           for g in request.groups],
                                                   require_stable)
        return {"groups": [dataclasses.asdict(g) for g in response.groups]}
    (group,) = groups.coordinator.offset_fetch([_wanted(request.group_id, request.topics)], require_stable).groups
    topics = [dataclasses.asdict(t) for t in group.topics]
    if ctx.version < FIRST_VERSION_WITH_GROUP_ERROR and group.error_code:
        # v1 has no group-level error: each requested partition carries it.
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": group.error_code}
            for p in t.partition_indexes]} for t in request.topics]
    return {"topics": topics, "error_code": group.error_code}
