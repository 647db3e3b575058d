"""ShareGroupHeartbeat (76): v1, KIP-932 share groups. A member joins with epoch 0 and
its own member id, heartbeats with its epoch, and gets its assignment from the simple
assignor; -1 leaves."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, READ, TOPIC, TOPIC_DENIED, allowed
from coordinator.group.consumer_group import HeartbeatAnswer
from coordinator.group.share_group import ShareHeartbeatRequest

API_KEY = 76


async def handle(ctx, request):
    groups = ctx.node.groups
    names = request.subscribed_topic_names
    heartbeat = ShareHeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=None if names is None else tuple(names),
        client_id=ctx.header.client_id or "", client_host="/" + ctx.connection.peer.rsplit(":", 1)[0],
    )
    if not allowed(ctx, READ, GROUP, request.group_id):
        answer = HeartbeatAnswer(GROUP_DENIED)
    elif names and not all(allowed(ctx, DESCRIBE, TOPIC, n) for n in names):
        answer = HeartbeatAnswer(TOPIC_DENIED)
    else:
        answer = await groups.run(request.group_id or "", lambda: groups.coordinator.share_group_heartbeat(
            heartbeat, ctx.clock.now_ms()), HeartbeatAnswer)
    assignment = None
    if answer.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": topic_id, "partitions": sorted(ps)}
                                           for topic_id, ps in sorted(answer.assignment.items(), key=str)]}
    return {
        "throttle_time": 0, "error_code": answer.error_code, "error_message": answer.error_message,
        "member_id": answer.member_id, "member_epoch": answer.member_epoch,
        "heartbeat_interval": answer.heartbeat_interval_ms, "assignment": assignment,
    }
