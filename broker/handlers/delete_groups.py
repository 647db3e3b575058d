"""DeleteGroups (42): removes empty groups with their offsets (tombstones); a group with
members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND. An empty share group's
share-partition state is deleted first (DeleteShareGroupState to the share coordinator,
tombstones in __share_group_state), as Kafka does: a group of the same id made later
starts afresh (share.auto.offset.reset); when that fails the group stays, answered with
the error."""

from broker.security.acls import DELETE, GROUP, GROUP_DENIED
from coordinator.group.messages import DeletableGroupResult, DeleteGroupsResponse
from kio.schema.errors import ErrorCode
from protocol.answer_wire import answer_type

API_KEY = 42
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    groups = ctx.node.groups
    by_partition: dict[int, list[str]] = {}
    for group_id in request.groups_names:
        by_partition.setdefault(groups.partition_for(group_id), []).append(group_id)
    errors = {g: GROUP_DENIED for g in request.groups_names if not ctx.allowed(DELETE, GROUP, g)}
    await groups.ready()
    for group_id in request.groups_names:
        if group_id not in errors:
            failed = await _delete_share_state(ctx, group_id)
            if failed:
                errors[group_id] = failed
    for partition_groups in by_partition.values():
        partition_groups = [g for g in partition_groups if g not in errors]
        if not partition_groups:
            continue
        # Each partition's tombstones are appended under that partition's lock.
        response = await groups.run(partition_groups[0], lambda ids=partition_groups: (
            groups.coordinator.delete_groups(ids)), lambda error, ids=partition_groups: DeleteGroupsResponse(
            tuple(DeletableGroupResult(g, error) for g in ids)))
        errors.update((r.group_id, r.error_code) for r in response.results)
    return Answer(results=[Answer.DeletableGroupResult(group_id=g, error_code=errors[g]) for g in request.groups_names])


async def _delete_share_state(ctx, group_id: str) -> ErrorCode:
    """Deletes an empty share group's share-partition state; the error when that failed
    (a group with members is left to delete_groups to refuse)."""
    group = ctx.node.groups.coordinator.share_group(group_id)
    if group is None or group.members:
        return ErrorCode.none
    partitions = sorted(group.state_partitions(), key=str)
    if partitions:
        errors = await ctx.node.shares.persister.delete(group_id, partitions)
        failed = next((e for e in errors.values() if e), ErrorCode.none)
        if failed:
            return failed
    for node in ctx.broker.nodes:
        if (shares := node.made("shares")) is not None:
            shares.forget(group_id)
    return ErrorCode.none
