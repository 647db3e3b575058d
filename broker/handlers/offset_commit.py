"""OffsetCommit (8): v2-v9 (v1 is advertised for old librdkafka and refused). Checks the
member and generation against the group; partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION."""

from broker.cluster import now_ms
from broker.errors import code
from broker.groups import errors_by_topic, partition_errors, unknown_partitions
from coordinator.group import OffsetToCommit
from coordinator.group.log_codec import NO_LEADER_EPOCH
from protocol.messages import ms

API_KEY = 8
LAST_VERSION_WITH_RETENTION = 4


async def handle(ctx, request):
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    unknown = unknown_partitions(ctx.cluster, partitions)
    offsets = [
        OffsetToCommit(t.name, p.partition_index, p.committed_offset,
                       getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH), p.committed_metadata)
        for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in unknown
    ]
    retention_ms = ms(request.retention_time) if ctx.version <= LAST_VERSION_WITH_RETENTION else -1
    errors = dict.fromkeys(unknown, code("UNKNOWN_TOPIC_OR_PARTITION"))
    if offsets or not partitions:
        groups = ctx.node.groups
        response = await groups.run(request.group_id, lambda: groups.coordinator.offset_commit(
            group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id, group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets, api_version=ctx.version, now_ms=now_ms(), retention_time_ms=retention_ms))
        errors.update(partition_errors(response))
    return {"topics": errors_by_topic(partitions, errors)}
