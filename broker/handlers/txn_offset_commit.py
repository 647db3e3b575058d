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
not come. It is asked where Kafka's transactional write asks it: after the ACLs, the
partitions of unknown topics and the group coordinator's checks (an empty group id is
INVALID_GROUP_ID on any node). The question crosses the network to the transaction
coordinator's node (broker/coordinators/txn_verification.py); a cut link, a lost
message or a paused node answers
COORDINATOR_LOAD_IN_PROGRESS (the client retries without looking the coordinator up
again), the coordinator's own errors come back as it gave them.
"""

from kio.schema.errors import ErrorCode

from broker.security.acls import TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED, WRITE
from broker.coordinators.offset_requests import commit_offsets, errors_by_topic, refused_by_acls
from coordinator.group.coordinator import offset_errors
from coordinator.runtime import Result
from protocol.answer_wire import answer_type
from protocol.names import CONSUMER_OFFSETS

API_KEY = 28
Answer = answer_type(API_KEY)
FIRST_VERSION_WITH_MEMBER = 3
# The offsets batch carries no sequence a verification could hold back.
_ANY_SEQUENCE = 2**31 - 1


async def _verify(ctx, request, offsets_partition: int):
    """(NONE, verification) when the offsets may be written in the producer's
    transaction, else (the error, None). As Kafka's group coordinator: a producer with a
    transaction ongoing on the offsets partition at its epoch needs no question (the
    verification is then None); otherwise the transaction coordinator is asked across
    the network (broker/coordinators/txn_verification.py)."""
    from broker.coordinators import txn_verification as tv  # loads only for transactions

    await ctx.node.groups.ready()  # creates __consumer_offsets on first use
    part, error = ctx.led_partition(CONSUMER_OFFSETS, offsets_partition)
    if error is not None:  # not this group's coordinator: nothing to verify for
        refused = ErrorCode.not_coordinator if error == "NOT_LEADER_OR_FOLLOWER" else ErrorCode.coordinator_not_available
        return refused, None
    operation = tv.txn_offset_commit_operation(ctx.version)
    verification = part.producer_state.start_verification(
        request.producer_id, _ANY_SEQUENCE, request.producer_epoch, ctx.clock.now_ms(), operation == tv.ADD_PARTITION)
    if verification is None:
        return ErrorCode.none, None
    unverified = await ctx.broker.transaction_verifier.verify(
        ctx.node.node_id, request.transactional_id, request.producer_id, request.producer_epoch,
        [(CONSUMER_OFFSETS, offsets_partition)], operation)
    if unverified:
        return tv.txn_offset_commit_error(next(iter(unverified.values()))), None
    return ErrorCode.none, verification


async def handle(ctx, request):
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        return Answer(topics=errors_by_topic(partitions, dict.fromkeys(partitions, TRANSACTIONAL_ID_DENIED), Answer))
    refused = refused_by_acls(ctx, request, Answer)
    if refused is not None:
        return refused
    member = ctx.version >= FIRST_VERSION_WITH_MEMBER
    offsets_partition = ctx.node.groups.partition_for(request.group_id)
    verified = bool(request.transactional_id) and any(t.partitions for t in request.topics)
    verification = None

    def commit(offsets):
        groups = ctx.node.groups
        if verified:  # Kafka's VerificationGuard, checked where the offsets are appended
            state = ctx.cluster.partition(CONSUMER_OFFSETS, offsets_partition).producer_state
            if not state.has_ongoing_transaction(request.producer_id, request.producer_epoch) and (
                    verification is None or state.verification(request.producer_id) is not verification):
                # the transaction ended before the write: nothing written, each offset refused
                return Result(response=offset_errors(offsets, lambda _o: ErrorCode.invalid_txn_state))
        return groups.coordinator.txn_offset_commit(
            transactional_id=request.transactional_id, group_id=request.group_id,
            producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            generation_id=request.generation_id if member else -1,
            member_id=request.member_id if member else "",
            group_instance_id=request.group_instance_id if member else None,
            offsets=offsets, api_version=ctx.version, now_ms=ctx.clock.now_ms(),
            newest_producer_epoch=groups.producer_epoch(offsets_partition, request.producer_id))

    async def verify() -> ErrorCode:
        nonlocal verification
        error, verification = await _verify(ctx, request, offsets_partition)
        return error

    return await commit_offsets(ctx, request, commit, Answer, verify if verified else None, group_id_checked=True)
