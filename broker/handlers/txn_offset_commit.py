"""TxnOffsetCommit (28): offsets committed inside a producer's transaction (KIP-447).

They are written to the group's __consumer_offsets partition in a transactional batch
of the producer and stay pending until its COMMIT or ABORT marker arrives there. v3+
carry the consumer's generation, member id and instance id, which are checked as an
OffsetCommit's are (fencing a zombie that fell out of the group). A producer epoch
older than the one the partition has seen is refused with INVALID_PRODUCER_EPOCH, as
Kafka's log append refuses it.
"""

import dataclasses

from broker.cluster import now_ms
from broker.errors import code
from broker.groups import errors_by_topic, partition_errors, unknown_partitions
from coordinator.group import OffsetToCommit
from coordinator.group.log_codec import NO_LEADER_EPOCH
from coordinator.records import Result
from kio.schema.errors import ErrorCode

API_KEY = 28
FIRST_VERSION_WITH_MEMBER = 3


def _fenced(response):
    """Every offset that would have been written fails with INVALID_PRODUCER_EPOCH."""
    return dataclasses.replace(response, topics=tuple(
        dataclasses.replace(t, partitions=tuple(
            dataclasses.replace(p, error_code=ErrorCode.invalid_producer_epoch) if p.error_code is ErrorCode.none
            else p for p in t.partitions))
        for t in response.topics))


async def handle(ctx, request):
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    unknown = unknown_partitions(ctx.cluster, partitions)
    offsets = [
        OffsetToCommit(t.name, p.partition_index, p.committed_offset,
                       getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH), p.committed_metadata)
        for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in unknown
    ]
    errors = dict.fromkeys(unknown, code("UNKNOWN_TOPIC_OR_PARTITION"))
    if offsets or not partitions:
        groups = ctx.node.groups
        member = ctx.version >= FIRST_VERSION_WITH_MEMBER
        partition = groups.partition_for(request.group_id)

        def commit() -> Result:
            result = groups.coordinator.txn_offset_commit(
                transactional_id=request.transactional_id, group_id=request.group_id,
                producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                generation_id=request.generation_id if member else -1,
                member_id=request.member_id if member else "",
                group_instance_id=request.group_instance_id if member else None,
                offsets=offsets, api_version=ctx.version, now_ms=now_ms())
            current = groups.producer_epoch(partition, request.producer_id)
            if result.records and current is not None and request.producer_epoch < current:
                return Result(response=_fenced(result.response))
            return result

        errors.update(partition_errors(await groups.run(request.group_id, commit)))
    return {"topics": errors_by_topic(partitions, errors)}
