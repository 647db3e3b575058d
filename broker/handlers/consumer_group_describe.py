"""ConsumerGroupDescribe (69): v0-v1. A KIP-848 group's state, epochs, assignor and
members with their current and target assignments; a classic or unknown group gets
GROUP_ID_NOT_FOUND, as Kafka answers. Authorized operations (KIP-430) when asked, for the
groups described without error."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, NOT_REQUESTED, allowed, authorized_operations

API_KEY = 69
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # v1's MemberType


def _assignment(partitions, topic_names) -> dict:
    return {"topic_partitions": [
        {"topic_id": topic_id, "topic_name": topic_names.get(topic_id, ""), "partitions": sorted(ps)}
        for topic_id, ps in sorted(partitions.items(), key=lambda i: topic_names.get(i[0], ""))
    ]}


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    coordinator = groups.coordinator
    topic_names = {topic_id: name for name, (topic_id, _n) in coordinator.topics().items()}
    described = []
    for group_id in request.group_ids:
        if allowed(ctx, DESCRIBE, GROUP, group_id):
            error, message, group = coordinator.consumer_group_describe(group_id)
        else:
            error, message, group = GROUP_DENIED, None, None
        if group is None:
            described.append({"error_code": error, "error_message": message, "group_id": group_id,
                              "group_state": "Dead", "group_epoch": 0, "assignment_epoch": 0,
                              "assignor_name": "", "members": [], "authorized_operations": NOT_REQUESTED})
            continue
        described.append({
            "error_code": error, "error_message": None, "group_id": group_id, "group_state": group.state,
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.preferred_assignor(coordinator.config.consumer.assignors[0]),
            "authorized_operations": authorized_operations(ctx, GROUP, group_id)
            if request.include_authorized_operations else NOT_REQUESTED,
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": _assignment(m.assigned, topic_names),
                "target_assignment": _assignment(group.target.get(m.member_id, {}), topic_names),
                "member_type": CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE,
            } for m in group.members.values()],
        })
    return {"throttle_time": 0, "groups": described}
