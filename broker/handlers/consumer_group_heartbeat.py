"""ConsumerGroupHeartbeat (68): v0-v1, the KIP-848 consumer group protocol. A member
joins with epoch 0, heartbeats with its epoch and owned partitions, and gets its
assignment from the broker's assignor; -1 leaves, -2 leaves for now (static member).
v1 members bring their own member id."""

from broker.coordinators.group_requests import heartbeat
from coordinator.group.consumer_group import HeartbeatRequest
from protocol.answer_wire import answer_type, ms

API_KEY = 68
Answer = answer_type(API_KEY)


def _owned(topic_partitions):
    if topic_partitions is None:
        return None
    return {t.topic_id: frozenset(t.partitions) for t in topic_partitions}


async def handle(ctx, request):
    names = request.subscribed_topic_names
    beat = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor, owned=_owned(request.topic_partitions),
        client_id=ctx.header.client_id or "", client_host="/" + ctx.connection.peer.rsplit(":", 1)[0],
        api_version=ctx.version,
    )
    return await heartbeat(ctx, request, beat,
                           lambda coordinator, now_ms: coordinator.consumer_group_heartbeat(beat, now_ms),
                           Answer)
