"""DeleteGroups (42): removes empty groups with their offsets (tombstones); a group with
members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND."""

from broker.security.acls import DELETE, GROUP, GROUP_DENIED, allowed
from coordinator.group.messages import DeletableGroupResult, DeleteGroupsResponse

API_KEY = 42


async def handle(ctx, request):
    groups = ctx.node.groups
    by_partition: dict[int, list[str]] = {}
    for group_id in request.groups_names:
        by_partition.setdefault(groups.partition_for(group_id), []).append(group_id)
    errors = {g: GROUP_DENIED for g in request.groups_names if not allowed(ctx, DELETE, GROUP, g)}
    for partition_groups in by_partition.values():
        partition_groups = [g for g in partition_groups if g not in errors]
        if not partition_groups:
            continue
        # Each partition's tombstones are appended under that partition's lock.
        response = await groups.run(partition_groups[0], lambda ids=partition_groups: (
            groups.coordinator.delete_groups(ids)), lambda error, ids=partition_groups: DeleteGroupsResponse(
            tuple(DeletableGroupResult(g, error) for g in ids)))
        errors.update((r.group_id, r.error_code) for r in response.results)
    return {"results": [{"group_id": g, "error_code": errors[g]} for g in request.groups_names]}
