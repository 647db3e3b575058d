"""Produce (0), v3+: validate each partition's single batch by its header and CRC,
assign offsets in place, append the bytes.

acks=0 sends no response; as Kafka does, a failed acks=0 produce closes the
connection so the client notices. v0-v2 are advertised for old librdkafka's exact
version checks and refused here with UNSUPPORTED_VERSION, as Kafka 4 does.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from broker import allocator
from broker.acls import TOPIC, TRANSACTIONAL_ID, WRITE, allowed
from broker.errors import ProtocolViolation, code
from broker.partition import ProduceRejected
from broker.storage.descriptors import storage_error
from protocol import messages
from protocol.framing import RequestHeader, encode_response_frame
from protocol.names import INTERNAL_TOPICS
from protocol.record_codec import check_keys_for_compaction
from protocol.records import (
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
    InvalidBatch,
    RecordBatch,
    validate_produce_records,
)

API_KEY = 0
KIP_951_VERSION = 10  # current_leader and node_endpoints in NOT_LEADER_OR_FOLLOWER answers
FIRST_VERSION_WITH_IMPLICIT_ADD = 12
_ATTRIBUTES_LOW_BYTE = 22  # attributes are the big-endian int16 at 21; the flags are in its low byte

log = logging.getLogger(__name__)

# log_start_offset is -1 for these errors, the partition's log start offset otherwise.
_NO_LOG_START = frozenset({"NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "CORRUPT_MESSAGE", "MESSAGE_TOO_LARGE",
                           "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"})


def _error(index: int, error: str, log_start_offset: int = -1, message: str | None = None,
           record_errors: tuple[tuple[int, str], ...] = ()) -> dict:
    return {
        "index": index,
        "error_code": code(error),
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": -1 if error in _NO_LOG_START else log_start_offset,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in record_errors],
        "error_message": message,
    }


def _produce_partition(ctx, topic: str, data, now: int, transactional_id: str | None) -> dict:
    cluster = ctx.cluster
    if not allowed(ctx, WRITE, TOPIC, topic):
        return _error(data.index, "TOPIC_AUTHORIZATION_FAILED")
    partition, error = ctx.led_partition(topic, data.index)
    if error == "NOT_LEADER_OR_FOLLOWER" and ctx.version >= KIP_951_VERSION:
        return _error(data.index, error) | {"current_leader": ctx.current_leader(topic, data.index)}
    if error is not None:
        return _error(data.index, error)
    if topic in INTERNAL_TOPICS:
        return _error(data.index, "INVALID_TOPIC_EXCEPTION", partition.log_start_offset,
                      f"Cannot append to internal topic {topic}")
    try:
        batch = validate_produce_records(data.records or b"", cluster.max_message_bytes(topic))
        if partition.log.config.compacts:
            check_keys_for_compaction(batch, f"{topic}-{data.index}")
    except InvalidBatch as e:
        return _error(data.index, e.error_name, partition.log_start_offset, str(e), e.record_errors)
    h = batch.header  # the fields read once, not through the batch's properties
    if h.attributes & TRANSACTIONAL_FLAG and cluster.config["transaction.partition.verification.enable"]:
        if partition.producer_state.start_verification(h.producer_id, h.base_sequence, h.producer_epoch, now):
            error = ctx.broker.verify_produce(transactional_id, h.producer_id, h.producer_epoch,
                                              topic, data.index, ctx.version)
            if error is not None:
                return _error(data.index, error, partition.log_start_offset,
                              f"partition {topic}-{data.index} is not part of producer {h.producer_id}'s transaction")
    try:
        appended = partition.append_from_client(batch, now, cluster.config["transaction.refuse.sequence.reuse"])
    except ProduceRejected as e:
        return _error(data.index, e.error_name, partition.log_start_offset, str(e))
    except OSError as e:  # disk full, read-only or failing: nothing was appended
        log.warning("produce to %s-%d failed: %s", topic, data.index, storage_error(e))
        return _error(data.index, "KAFKA_STORAGE_ERROR", partition.log_start_offset, f"append failed: {e}")
    return {
        "index": data.index,
        "error_code": 0,
        "base_offset": appended.base_offset,
        "log_append_time": appended.log_append_time if appended.log_append_time >= 0 else None,
        "log_start_offset": appended.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }


def _has_transactional_records(request) -> bool:
    """ProduceRequest.hasTransactionalRecords: any partition's first batch is transactional
    (read from the attributes' low byte: no header parse per partition)."""
    return any(
        data.records is not None and len(data.records) >= RECORD_BATCH_OVERHEAD
        and data.records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_FLAG
        for topic in request.topic_data for data in topic.partition_data
    )


async def _add_to_transaction(ctx, request) -> dict[tuple[str, int], str]:
    """Produce v12+ (KIP-890 part 2, as Kafka 4.4 answers): a transactional batch for a
    partition the transaction does not hold yet adds it, as AddPartitionsToTxn would.
    Returns the produce error of each partition the coordinator refused."""
    wanted, producer = [], None
    for t in request.topic_data:
        for d in t.partition_data:
            part = ctx.cluster.partition(t.name, d.index)
            records = d.records or b""
            if part is None or len(records) < RECORD_BATCH_OVERHEAD:
                continue  # the append path answers these
            header = RecordBatch(records).header  # the batch itself is validated later
            # Only an open transaction at the batch's own epoch holds the partition: a
            # batch of the next transaction (TV2 bumped the epoch) that arrives before the
            # previous one's marker must be added, not folded into the old transaction.
            if header.attributes & TRANSACTIONAL_FLAG and not part.producer_state.has_ongoing_transaction(
                    header.producer_id, header.producer_epoch):
                wanted.append((t.name, d.index))
                producer = (header.producer_id, header.producer_epoch)
    if not wanted:
        return {}
    from broker.transaction_service import produce_error  # the coordinator loads only for transactions

    tid = request.transactional_id
    config = ctx.cluster.config
    backoff_s = config["add.partitions.to.txn.retry.backoff.ms"] / 1000
    give_up_ms = ctx.clock.now_ms() + config["add.partitions.to.txn.retry.backoff.max.ms"]
    while True:
        txns = ctx.broker.transactions_for(tid)
        if txns is None:
            return dict.fromkeys(wanted, "NOT_ENOUGH_REPLICAS")  # retriable, as for verification
        response = await txns.run(tid, lambda: txns.coordinator.add_partitions_to_txn(
            tid, producer[0], producer[1], wanted, FIRST_VERSION_WITH_IMPLICIT_ADD, ctx.clock.now_ms()))
        if response.error is ErrorCode.none:
            return {}
        # The previous transaction's markers are being written: as Kafka, try again
        # briefly before making the client back off.
        if response.error is not ErrorCode.concurrent_transactions or ctx.clock.now_ms() >= give_up_ms:
            return dict.fromkeys(wanted, produce_error(response.error, ctx.version))
        await ctx.clock.sleep(backoff_s)


async def handle(ctx, request):
    if not allocator.tuned:
        allocator.keep_freed_buffers()
    now = ctx.clock.now_ms()
    acks = request.acks
    version = ctx.version
    responses = []
    if request.transactional_id is None and _has_transactional_records(request):
        # Kafka answers the whole request so: transactional records need a transactional id
        # (whose authorization is checked, hence the name).
        return {"responses": [
            {"name": topic.name, "partition_responses": [
                _error(data.index, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED") for data in topic.partition_data]}
            for topic in request.topic_data]}
    txn_denied = request.transactional_id is not None and not allowed(
        ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id)
    refused = {}
    if request.transactional_id and not txn_denied and version >= FIRST_VERSION_WITH_IMPLICIT_ADD:
        refused = await _add_to_transaction(ctx, request)
    leaders = set()  # KIP-951: the leaders NOT_LEADER_OR_FOLLOWER answers name
    for topic in request.topic_data:
        results = []
        for data in topic.partition_data:
            if txn_denied:
                results.append(_error(data.index, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"))
            elif refused and (topic.name, data.index) in refused:
                results.append(_error(data.index, refused[(topic.name, data.index)]))
            elif acks not in (0, 1, -1):
                results.append(_error(data.index, "INVALID_REQUIRED_ACKS"))
            else:
                result = _produce_partition(ctx, topic.name, data, now, request.transactional_id)
                if "current_leader" in result:
                    leaders.add(result["current_leader"]["leader_id"])
                results.append(result)
        responses.append({"name": topic.name, "partition_responses": results})
    if acks == -1 and not ctx.broker.replication.quiet():
        await _wait_for_isr(ctx, request, responses)
    if acks == 0:
        failed = [(t["name"], p) for t in responses for p in t["partition_responses"] if p["error_code"]]
        if failed:
            name, p = failed[0]
            raise ProtocolViolation(f"acks=0 produce to {name}-{p['index']} failed with {p['error_code'].name}")
        return None
    if not leaders:  # the tagged field's default, written as nothing: cheaper to leave out than to encode
        return {"responses": responses}
    return {"responses": responses, "node_endpoints": ctx.node_endpoints(leaders)}


async def _wait_for_isr(ctx, request, responses: list[dict]) -> None:
    """acks=all: each appended partition waits for its ISR (broker/replication.py); a
    partition that could not be replicated in time answers REQUEST_TIMED_OUT instead."""
    appended = [p for t in responses for p in t["partition_responses"] if not p["error_code"]]
    names = [t["name"] for t in responses for p in t["partition_responses"] if not p["error_code"]]
    timeout_s = max(messages.ms(request.timeout), 0) / 1000
    errors = await asyncio.gather(*(ctx.broker.replication.wait_for_isr(name, p["index"], timeout_s)
                                    for name, p in zip(names, appended)))
    for p, error in zip(appended, errors):
        if error is not None:
            p.update(_error(p["index"], error))


def unsupported_v2_response(header: RequestHeader, frame: bytes, pos: int) -> bytes:
    """Answers Produce v2 with UNSUPPORTED_VERSION for every partition.

    kio has no v2 schema, but v3 only prepends a nullable transactional_id to the
    v2 request, and the v2 and v3 responses share one layout.
    """
    request = messages.decode_request(API_KEY, 3, b"\xff\xff" + frame[pos:])
    body = messages.encode(
        messages.build_response(
            API_KEY,
            3,
            {
                "responses": [
                    {"name": t.name, "partition_responses": [_error(p.index, "UNSUPPORTED_VERSION") for p in t.partition_data]}
                    for t in request.topic_data
                ]
            },
        )
    )
    return encode_response_frame(header.correlation_id, False, body)
