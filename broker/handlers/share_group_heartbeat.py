"""ShareGroupHeartbeat (76): v1, KIP-932 share groups. A member joins with epoch 0 and
its own member id, heartbeats with its epoch, and gets its assignment from the simple
assignor; -1 leaves."""

from broker.coordinators.group_requests import heartbeat
from coordinator.group.share_group import ShareHeartbeatRequest
from protocol.answer_wire import answer_type

API_KEY = 76
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    names = request.subscribed_topic_names
    beat = ShareHeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=None if names is None else tuple(names),
        client_id=ctx.header.client_id or "", client_host="/" + ctx.connection.peer.rsplit(":", 1)[0],
    )
    return await heartbeat(ctx, request, beat,
                           lambda coordinator, now_ms: coordinator.share_group_heartbeat(beat, now_ms),
                           Answer)
