"""WriteTxnMarkers (27): the partition leader appends a COMMIT or ABORT control batch for
each listed partition and ends the producer's transaction there (LSO moves, aborted
index grows). Fenced markers (older producer or coordinator epoch) are refused; a v2
marker of transaction version 2 must carry an epoch newer than the partition's (KIP-1228).

A marker on a __consumer_offsets partition also decides the producer's pending
transactional offsets there: it goes through the group coordinator's runtime, which
appends it and completes those offsets in one step, and is answered once the ISR has it
(the error otherwise, which the sender retries on).

Only brokers send it: with the authorizer on a client needs ALTER or CLUSTER_ACTION on the
cluster, else every partition is answered CLUSTER_AUTHORIZATION_FAILED, as in Kafka."""

import logging

from broker.security.acls import ALTER, CLUSTER, CLUSTER_ACTION, CLUSTER_DENIED, CLUSTER_NAME
from broker.errors import code
from broker.log.partition import ProduceRejected
from broker.log.descriptors import storage_error
from protocol.answer_wire import answer_type
from protocol.names import CONSUMER_OFFSETS

log = logging.getLogger(__name__)

API_KEY = 27
Answer = answer_type(API_KEY)

log = logging.getLogger(__name__)


async def _write(ctx, marker, topic: str, index: int, now: int):
    part, error = ctx.led_partition(topic, index)
    if error is not None:
        return code(error)
    args = (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch, now)
    try:
        if topic == CONSUMER_OFFSETS:  # an event of the group coordinator's runtime
            not_replicated = await ctx.node.groups.write_marker(index, *args)
            if not_replicated is not None:
                log.info("the %s marker for %s-%d was not replicated: %s", "COMMIT" if marker.transaction_result
                         else "ABORT", topic, index, not_replicated)
                return code(not_replicated)
        else:
            part.write_marker(*args, getattr(marker, "transaction_version", 0))
    except ProduceRejected as e:
        # Said here too: the coordinator that sent it may have stopped waiting for the answer.
        log.info("refused the %s marker for %s-%d: %s (%s)", "COMMIT" if marker.transaction_result else "ABORT",
                 topic, index, e.error_name, e)
        return code(e.error_name)
    except OSError as e:  # out of file descriptors, a failing disk: nothing was appended
        log.warning("marker for %s-%d failed: %s", topic, index, storage_error(e))
        return code("KAFKA_STORAGE_ERROR")
    return 0


def _may_write(ctx) -> bool:
    return ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME) or ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)


async def handle(ctx, request):
    if not _may_write(ctx):
        return Answer(markers=[Answer.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            Answer.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                Answer.WritableTxnMarkerPartitionResult(partition_index=i, error_code=CLUSTER_DENIED)
                for i in t.partition_indexes]) for t in m.topics])
            for m in request.markers])
    now = ctx.clock.now_ms()
    markers = []
    for marker in request.markers:
        topics = [Answer.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            Answer.WritableTxnMarkerPartitionResult(partition_index=i,
                                                    error_code=await _write(ctx, marker, t.name, i, now))
            for i in t.partition_indexes]) for t in marker.topics]
        markers.append(Answer.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    return Answer(markers=markers)
