"""OffsetCommit (8): v2-v9 (v1 is advertised for old librdkafka and refused). Checks the
member and generation against the group; partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION."""

from broker.coordinators.offset_requests import commit_offsets, refused_by_acls
from protocol.answer_wire import ms

API_KEY = 8
LAST_VERSION_WITH_RETENTION = 4


async def handle(ctx, request):
    refused = refused_by_acls(ctx, request)
    if refused is not None:
        return refused
    retention_ms = ms(request.retention_time) if ctx.version <= LAST_VERSION_WITH_RETENTION else -1
    return await commit_offsets(ctx, request, lambda offsets: ctx.node.groups.coordinator.offset_commit(
        group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id, group_instance_id=getattr(request, "group_instance_id", None),
        offsets=offsets, api_version=ctx.version, now_ms=ctx.clock.now_ms(), retention_time_ms=retention_ms))
