"""TxnOffsetCommit (28): offsets committed inside a producer's transaction (KIP-447).

They are written to the group's __consumer_offsets partition in a transactional batch
of the producer and stay pending until its COMMIT or ABORT marker arrives there. v3+
carry the consumer's generation, member id and instance id, which are checked as an
OffsetCommit's are (fencing a zombie that fell out of the group). The group
coordinator refuses a producer epoch older than the one the partition's log has seen
(INVALID_PRODUCER_EPOCH, as Kafka's log append does); this handler hands it that epoch.
"""

from broker.handlers.offset_commits import commit_offsets

API_KEY = 28
FIRST_VERSION_WITH_MEMBER = 3


async def handle(ctx, request):
    member = ctx.version >= FIRST_VERSION_WITH_MEMBER

    def commit(offsets):
        groups = ctx.node.groups
        return groups.coordinator.txn_offset_commit(
            transactional_id=request.transactional_id, group_id=request.group_id,
            producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            generation_id=request.generation_id if member else -1,
            member_id=request.member_id if member else "",
            group_instance_id=request.group_instance_id if member else None,
            offsets=offsets, api_version=ctx.version, now_ms=ctx.clock.now_ms(),
            newest_producer_epoch=groups.producer_epoch(groups.partition_for(request.group_id), request.producer_id))

    return await commit_offsets(ctx, request, commit)
