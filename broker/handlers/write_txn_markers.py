"""WriteTxnMarkers (27): the partition leader appends a COMMIT or ABORT control batch for
each listed partition and ends the producer's transaction there (LSO moves, aborted
index grows). Fenced markers (older producer or coordinator epoch) are refused.

A marker on a __consumer_offsets partition also decides the producer's pending
transactional offsets there; the group service writes it under that partition's lock
so that no offset commit comes between the marker and its effect."""

from broker.cluster import now_ms
from broker.errors import code
from broker.groups import TOPIC as GROUPS_TOPIC
from broker.partition import ProduceRejected

API_KEY = 27


def _write(ctx, marker, topic: str, index: int, now: int):
    part = ctx.cluster.partition(topic, index)
    if part is None:
        return code("UNKNOWN_TOPIC_OR_PARTITION")
    if ctx.cluster.leader_of(topic, index) != ctx.connection.node_id:
        return code("NOT_LEADER_OR_FOLLOWER")
    try:
        part.write_marker(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                          marker.coordinator_epoch, now)
    except ProduceRejected as e:
        return code(e.error_name)
    return 0


async def _write_one(ctx, marker, topic: str, index: int, now: int):
    if topic != GROUPS_TOPIC:
        return _write(ctx, marker, topic, index, now)
    return await ctx.node.groups.write_marker(index, marker.producer_id, marker.transaction_result,
                                                lambda: _write(ctx, marker, topic, index, now))


async def handle(ctx, request):
    now = now_ms()
    markers = []
    for marker in request.markers:
        topics = [{"name": t.name, "partitions": [
            {"partition_index": i, "error_code": await _write_one(ctx, marker, t.name, i, now)}
            for i in t.partition_indexes]} for t in marker.topics]
        markers.append({"producer_id": marker.producer_id, "topics": topics})
    return {"markers": markers}
