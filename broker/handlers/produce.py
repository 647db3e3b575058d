"""Produce (0), v3+: validate each partition's single batch by its header and CRC,
assign offsets in place, append the bytes.

acks=0 sends no response; as Kafka does, a failed acks=0 produce closes the
connection so the client notices. v0-v2 are advertised for old librdkafka's exact
version checks and refused here with UNSUPPORTED_VERSION, as Kafka 4 does.

A transactional batch that would start its producer's transaction on a partition is
first verified with the transaction coordinator (KIP-890; from v12 it is added to the
transaction instead), by a request across the network between the nodes
(broker/coordinators/txn_verification.py), and appended only if no marker ended the transaction
meanwhile.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from broker import malloc_tuning as allocator
from broker.security.acls import TOPIC, TRANSACTIONAL_ID, WRITE
from broker.errors import ProtocolViolation, code
from broker.log.partition import ProduceRejected
from broker.log.descriptors import storage_error
from protocol import answer_wire, request_wire
from protocol.request_wire import RequestHeader
from protocol.answer_wire import answer_type, encode_response_frame
from protocol.names import INTERNAL_TOPICS
from protocol.records import (
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
    InvalidBatch,
    check_keys_for_compaction,
    validate_produce_records,
)

API_KEY = 0
Answer = answer_type(API_KEY)
_Partition = Answer.PartitionProduceResponse
KIP_951_VERSION = 10  # current_leader and node_endpoints in NOT_LEADER_OR_FOLLOWER answers
_ATTRIBUTES_LOW_BYTE = 22  # attributes are the big-endian int16 at 21; the flags are in its low byte

log = logging.getLogger(__name__)

# log_start_offset is -1 for these errors, the partition's log start offset otherwise.
_NO_LOG_START = frozenset({"NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "CORRUPT_MESSAGE", "MESSAGE_TOO_LARGE",
                           "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"})


def _error(index: int, error: str, log_start_offset: int = -1, message: str | None = None,
           record_errors: tuple[tuple[int, str], ...] = ()) -> _Partition:
    return _Partition(
        index=index,
        error_code=code(error),
        base_offset=-1,
        log_append_time_ms=None,
        log_start_offset=-1 if error in _NO_LOG_START else log_start_offset,
        record_errors=[Answer.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                       for i, m in record_errors],
        error_message=message,
    )


def _not_led(ctx, topic: str, index: int, error: str) -> _Partition:
    if error == "NOT_LEADER_OR_FOLLOWER" and ctx.version >= KIP_951_VERSION:
        return _error(index, error)._replace(current_leader=Answer.LeaderIdAndEpoch(**ctx.current_leader(topic, index)))
    return _error(index, error)


def _names_leader(answer: _Partition) -> bool:
    """Whether a partition's answer names its leader (KIP-951)."""
    return answer.current_leader.leader_id >= 0 or answer.current_leader.leader_epoch >= 0


def _validate(ctx, topic: str, data) -> _Partition | tuple:
    """(partition, batch) ready for verification and append, or the partition's error answer."""
    cluster = ctx.cluster
    if not ctx.allowed(WRITE, TOPIC, topic):
        return _error(data.index, "TOPIC_AUTHORIZATION_FAILED")
    partition, error = ctx.led_partition(topic, data.index)
    if error is not None:
        return _not_led(ctx, topic, data.index, error)
    if topic in INTERNAL_TOPICS:
        return _error(data.index, "INVALID_TOPIC_EXCEPTION", partition.log_start_offset,
                      f"Cannot append to internal topic {topic}")
    try:
        batch = validate_produce_records(data.records or b"", cluster.max_message_bytes(topic))
        if partition.log.config.compacts:
            check_keys_for_compaction(batch, f"{topic}-{data.index}")
    except InvalidBatch as e:
        return _error(data.index, e.error_name, partition.log_start_offset, str(e), e.record_errors)
    return partition, batch


def _append(ctx, index: int, partition, batch, now: int, acks: int, guarded: bool, verification) -> _Partition:
    """Appends a validated batch. acks=all is refused first while the partition has fewer
    replicas in sync than min.insync.replicas, as Kafka's appendRecordsToLeader: nothing
    is appended and no producer state changes, so an idempotent retry is not a duplicate.
    ``guarded``: the batch is transactional and verification is on; then a transaction
    that is not ongoing here (any more) needs the very ``verification`` it started (None:
    it found the transaction ongoing) still standing, as Kafka's VerificationGuard: a
    marker in between means the coordinator's answer may be about a transaction that
    has since ended."""
    if acks == -1 and ctx.broker.replication.too_few_in_sync(partition.topic, index) is not None:
        return _error(index, "NOT_ENOUGH_REPLICAS", partition.log_start_offset)
    h = batch.header
    if guarded and not partition.producer_state.has_ongoing_transaction(h.producer_id, h.producer_epoch) and (
            verification is None or partition.producer_state.verification(h.producer_id) is not verification):
        return _error(index, "INVALID_TXN_STATE", partition.log_start_offset,
                      "Record was not part of an ongoing transaction")
    try:
        appended = partition.append_from_client(batch, now, ctx.cluster.config["transaction.refuse.sequence.reuse"])
    except ProduceRejected as e:
        return _error(index, e.error_name, partition.log_start_offset, str(e))
    except OSError as e:  # disk full, read-only or failing: nothing was appended
        log.warning("produce to %s-%d failed: %s", partition.topic, index, storage_error(e))
        return _error(index, "KAFKA_STORAGE_ERROR", partition.log_start_offset, f"append failed: {e}")
    return _Partition(
        index=index,
        error_code=0,
        base_offset=appended.base_offset,
        log_append_time_ms=appended.log_append_time if appended.log_append_time >= 0 else None,
        log_start_offset=appended.log_start_offset,
        record_errors=(),
        error_message=None,
    )


def _has_transactional_records(request) -> bool:
    """ProduceRequest.hasTransactionalRecords: any partition's first batch is transactional
    (read from the attributes' low byte: no header parse per partition)."""
    return any(
        data.records is not None and len(data.records) >= RECORD_BATCH_OVERHEAD
        and data.records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_FLAG
        for topic in request.topic_data for data in topic.partition_data
    )


def _unverified_answer(ctx, index: int, underlying: ErrorCode, log_start_offset: int) -> _Partition:
    """The Produce answer for a partition the coordinator's answer (``underlying``) did not
    verify, with ReplicaManager's message."""
    from broker.coordinators import txn_verification as tv

    error = tv.produce_error(underlying, tv.produce_operation(ctx.version))
    if error is ErrorCode.not_enough_replicas:
        message = ("Unable to verify the partition has been added to the transaction. "
                   f"Underlying error: {underlying.name.upper()}")
    elif error is ErrorCode.invalid_txn_state:
        message = "Partition was not added to the transaction"
    else:
        message = None
    return _error(index, error.name.upper(), log_start_offset, message)


async def _verify(ctx, transactional_id: str, batches: list[list],
                  now: int) -> dict[tuple[str, int], ErrorCode] | None:
    """KIP-890, as Kafka's ReplicaManager: the transactional batches that would start the
    producer's transaction on their partition are verified with (Produce v12+: added to
    the transaction by) the coordinator, across the network (broker/coordinators/txn_verification.py).
    Returns the coordinator's answer for each partition that did not pass (None: nothing
    needed asking); fills in the verification each batch's append must still find
    (``batches``' last field)."""
    from broker.coordinators import txn_verification as tv  # loads only for transactions

    config = ctx.cluster.config
    operation = tv.produce_operation(ctx.version)
    checking = config["transaction.partition.verification.enable"]
    wanted, producers = [], set()
    for item in batches:
        partition, batch = item[2], item[3]
        h = batch.header
        if not h.attributes & TRANSACTIONAL_FLAG:
            continue
        state = partition.producer_state
        if checking:
            item[5] = state.start_verification(h.producer_id, h.base_sequence, h.producer_epoch, now,
                                               operation == tv.ADD_PARTITION)
            if item[5] is None:
                continue
        elif operation != tv.ADD_PARTITION or state.has_ongoing_transaction(h.producer_id, h.producer_epoch):
            continue  # unverified, as Kafka before 3.6; transaction version 2 must still add it
        wanted.append((item[0], item[1]))
        producers.add((h.producer_id, h.producer_epoch))
    if not wanted:
        return None
    if len(producers) > 1:
        return dict.fromkeys(wanted, ErrorCode.invalid_producer_id_mapping)
    (producer_id, producer_epoch), = producers
    source = ctx.node.node_id
    backoff_s = config["add.partitions.to.txn.retry.backoff.ms"] / 1000
    give_up_ms = ctx.clock.now_ms() + config["add.partitions.to.txn.retry.backoff.max.ms"]
    while True:
        unverified = await ctx.broker.transaction_verifier.verify(
            source, transactional_id, producer_id, producer_epoch, wanted, operation)
        # Transaction version 2: the previous transaction's markers are being written;
        # as Kafka, ask again briefly before making the client back off.
        if (operation != tv.ADD_PARTITION or not unverified or ctx.clock.now_ms() >= give_up_ms
                or any(e is not ErrorCode.concurrent_transactions for e in unverified.values())):
            return unverified
        await ctx.clock.sleep(backoff_s)


async def handle(ctx, request):
    if not allocator.tuned:
        allocator.keep_freed_buffers()
    now = ctx.clock.now_ms()
    acks = request.acks
    responses = []
    if request.transactional_id is None and _has_transactional_records(request):
        # Kafka answers the whole request so: transactional records need a transactional id
        # (whose authorization is checked, hence the name).
        return Answer(responses=[
            Answer.TopicProduceResponse(name=topic.name, partition_responses=[
                _error(data.index, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED") for data in topic.partition_data])
            for topic in request.topic_data])
    txn_denied = request.transactional_id is not None and not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id)
    # [topic, index, partition, batch, its results list and place there, verification]
    ready: list[list] = []
    leaders = set()  # KIP-951: the leaders NOT_LEADER_OR_FOLLOWER answers name
    for topic in request.topic_data:
        results = []
        for data in topic.partition_data:
            if txn_denied:
                results.append(_error(data.index, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"))
            elif acks not in (0, 1, -1):
                results.append(_error(data.index, "INVALID_REQUIRED_ACKS"))
            else:
                checked = _validate(ctx, topic.name, data)
                if checked.__class__ is _Partition:
                    if _names_leader(checked):
                        leaders.add(checked.current_leader.leader_id)
                    results.append(checked)
                else:
                    ready.append([topic.name, data.index, checked[0], checked[1], (results, len(results)), None])
                    results.append(None)
        responses.append(Answer.TopicProduceResponse(name=topic.name, partition_responses=results))
    unverified = None
    if request.transactional_id is not None and ready:
        unverified = await _verify(ctx, request.transactional_id, ready, now)
        if unverified is not None:
            now = ctx.clock.now_ms()
    guarding = request.transactional_id is not None and ctx.cluster.config["transaction.partition.verification.enable"]
    for topic, index, partition, batch, (results, at), verification in ready:
        error = unverified.get((topic, index)) if unverified else None
        if error is not None:
            results[at] = _unverified_answer(ctx, index, error, partition.log_start_offset)
        elif unverified is not None and (moved := ctx.led_partition(topic, index)[1]) is not None:
            results[at] = _not_led(ctx, topic, index, moved)  # the leadership moved while the coordinator answered
            if _names_leader(results[at]):
                leaders.add(results[at].current_leader.leader_id)
        else:
            guarded = guarding and bool(batch.header.attributes & TRANSACTIONAL_FLAG)
            results[at] = _append(ctx, index, partition, batch, now, acks, guarded, verification)
    if acks == -1 and not ctx.broker.replication.quiet():
        await _wait_for_isr(ctx, request, responses)
    if acks == 0:
        failed = [(t.name, p) for t in responses for p in t.partition_responses if p.error_code]
        if failed:
            name, p = failed[0]
            raise ProtocolViolation(f"acks=0 produce to {name}-{p.index} failed with {ErrorCode(p.error_code).name}")
        return None
    if not leaders:  # the tagged field's default, written as nothing
        return Answer(responses=responses)
    return Answer(responses=responses,
                  node_endpoints=[Answer.NodeEndpoint(**b) for b in ctx.node_endpoints(leaders)])


async def _wait_for_isr(ctx, request, responses: list) -> None:
    """acks=all: each appended partition waits for its high watermark
    (broker/cluster/replication.py); a partition that could not be replicated in time
    answers REQUEST_TIMED_OUT instead."""
    appended = [(t, at) for t in responses for at, p in enumerate(t.partition_responses) if not p.error_code]
    timeout_s = max(answer_wire.ms(request.timeout), 0) / 1000
    errors = await asyncio.gather(*(
        ctx.broker.replication.wait_for_isr(t.name, t.partition_responses[at].index, timeout_s) for t, at in appended))
    for (t, at), error in zip(appended, errors):
        if error is not None:
            t.partition_responses[at] = _error(t.partition_responses[at].index, error)


def unsupported_v2_response(header: RequestHeader, frame: bytes, pos: int) -> bytes:
    """Answers Produce v2 with UNSUPPORTED_VERSION for every partition.

    kio has no v2 schema, but v3 only prepends a nullable transactional_id to the
    v2 request, and the v2 and v3 responses share one layout.
    """
    request = request_wire.decode_request(API_KEY, 3, b"\xff\xff" + frame[pos:])
    body = answer_wire.encode_response(API_KEY, 3, Answer(responses=[
        Answer.TopicProduceResponse(name=t.name, partition_responses=[
            _error(p.index, "UNSUPPORTED_VERSION") for p in t.partition_data])
        for t in request.topic_data]))
    return encode_response_frame(header.correlation_id, False, body)
