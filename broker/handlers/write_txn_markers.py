"""WriteTxnMarkers (27): the partition leader appends a COMMIT or ABORT control batch for
each listed partition and ends the producer's transaction there (LSO moves, aborted
index grows). Fenced markers (older producer or coordinator epoch) are refused; a v2
marker of transaction version 2 must carry an epoch newer than the partition's (KIP-1228).

A marker on a __consumer_offsets partition also decides the producer's pending
transactional offsets there: it goes through the group coordinator's runtime, which
appends it and completes those offsets in one step."""

from broker.errors import code
from broker.partition import ProduceRejected
from protocol.names import CONSUMER_OFFSETS

API_KEY = 27


def _write(ctx, marker, topic: str, index: int, now: int):
    part, error = ctx.led_partition(topic, index)
    if error is not None:
        return code(error)
    args = (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch, now)
    try:
        if topic == CONSUMER_OFFSETS:  # an event of the group coordinator's runtime
            ctx.node.groups.write_marker(index, *args)
        else:
            part.write_marker(*args, getattr(marker, "transaction_version", 0))
    except ProduceRejected as e:
        return code(e.error_name)
    return 0


async def handle(ctx, request):
    now = ctx.clock.now_ms()
    markers = []
    for marker in request.markers:
        topics = [{"name": t.name, "partitions": [
            {"partition_index": i, "error_code": _write(ctx, marker, t.name, i, now)}
            for i in t.partition_indexes]} for t in marker.topics]
        markers.append({"producer_id": marker.producer_id, "topics": topics})
    return {"markers": markers}
