"""TxnOffsetCommit (28): offsets committed inside a producer's transaction (KIP-447).

They are written to the group's __consumer_offsets partition in a transactional batch
of the producer and stay pending until its COMMIT or ABORT marker arrives there. v3+
carry the consumer's generation, member id and instance id, which are checked as an
OffsetCommit's are (fencing a zombie that fell out of the group). The group
coordinator refuses a producer epoch older than the one the partition's log has seen
(INVALID_PRODUCER_EPOCH, as Kafka's log append does); this handler hands it that epoch.

KIP-890 verification, as Kafka 4.4 answers: the group's __consumer_offsets partition must
be in the producer's ongoing transaction (AddOffsetsToTxn). If it is not, v0-v3 get
INVALID_TXN_STATE, v4 TRANSACTION_ABORTABLE, and v5 adds it to the transaction
implicitly (transaction version 2's rule), so offsets never wait for a marker that will
not come.
"""

from kio.schema.errors import ErrorCode

from broker.acls import TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED, WRITE, allowed
from broker.handlers.offset_commits import commit_offsets, errors_by_topic, refused_by_acls

API_KEY = 28
FIRST_VERSION_WITH_MEMBER = 3
FIRST_VERSION_WITH_ABORTABLE = 4
FIRST_VERSION_WITH_IMPLICIT_ADD = 5
OFFSETS_TOPIC = "__consumer_offsets"
# Verification trouble other than "not in the transaction", as a TxnOffsetCommit client
# knows it (Kafka's GroupCoordinatorService normalizes coordinator errors likewise).
_VERIFY_ERRORS = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.invalid_producer_epoch: ErrorCode.invalid_producer_epoch,
    ErrorCode.invalid_producer_id_mapping: ErrorCode.invalid_producer_id_mapping,
    ErrorCode.invalid_request: ErrorCode.invalid_request,
}


async def _verify(ctx, request, offsets_partition: int) -> ErrorCode:
    """NONE when the offsets may be written in the producer's transaction, else the error."""
    txns = ctx.broker.transactions_for(request.transactional_id)
    if txns is None:
        return ErrorCode.coordinator_not_available
    error = txns.verify(request.transactional_id, request.producer_id, request.producer_epoch,
                        OFFSETS_TOPIC, offsets_partition)
    if error is ErrorCode.none:
        return error
    if error is ErrorCode.transaction_abortable:
        if ctx.version >= FIRST_VERSION_WITH_IMPLICIT_ADD:
            added = await txns.run(request.transactional_id, lambda: txns.coordinator.add_offsets_to_txn(
                request.transactional_id, request.producer_id, request.producer_epoch, request.group_id,
                ctx.version, ctx.clock.now_ms()))
            return _VERIFY_ERRORS.get(added.error, added.error)
        if ctx.version >= FIRST_VERSION_WITH_ABORTABLE:
            return ErrorCode.transaction_abortable
        return ErrorCode.invalid_txn_state
    return _VERIFY_ERRORS.get(error, ErrorCode.coordinator_not_available)


async def handle(ctx, request):
    if not allowed(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        return {"topics": errors_by_topic(partitions, dict.fromkeys(partitions, TRANSACTIONAL_ID_DENIED))}
    refused = refused_by_acls(ctx, request)
    if refused is not None:
        return refused
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

    if request.transactional_id and any(t.partitions for t in request.topics):
        verified = await _verify(ctx, request, ctx.node.groups.partition_for(request.group_id))
        if verified is not ErrorCode.none:
            partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
            return {"topics": errors_by_topic(partitions, dict.fromkeys(partitions, verified))}
    return await commit_offsets(ctx, request, commit)
