"""ConsumerGroupHeartbeat (68): v0-v1, the KIP-848 consumer group protocol. A member
joins with epoch 0, heartbeats with its epoch and owned partitions, and gets its
assignment from the broker's assignor; -1 leaves, -2 leaves for now (static member).
v1 members bring their own member id."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, READ, TOPIC, TOPIC_DENIED, allowed
from coordinator.group.consumer_group import HeartbeatAnswer, HeartbeatRequest
from protocol.messages import ms

API_KEY = 68


def _owned(topic_partitions):
    if topic_partitions is None:
        return None
    return {t.topic_id: frozenset(t.partitions) for t in topic_partitions}


async def handle(ctx, request):
    groups = ctx.node.groups
    names = request.subscribed_topic_names
    heartbeat = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor, owned=_owned(request.topic_partitions),
        client_id=ctx.header.client_id or "", client_host="/" + ctx.connection.peer.rsplit(":", 1)[0],
        api_version=ctx.version,
    )
    if not allowed(ctx, READ, GROUP, request.group_id):
        answer = HeartbeatAnswer(GROUP_DENIED)
    elif names and not all(allowed(ctx, DESCRIBE, TOPIC, n) for n in names):
        # Clients may not learn of topics they cannot describe (Kafka checks the same).
        answer = HeartbeatAnswer(TOPIC_DENIED)
    else:
        answer = await groups.run(request.group_id or "", lambda: groups.coordinator.consumer_group_heartbeat(
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
