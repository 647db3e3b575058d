"""ShareGroupDescribe (77): v1. A share group's state, epochs, assignor and members
with their assignments; a group of another type or an unknown one gets
GROUP_ID_NOT_FOUND, as Kafka answers."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, NOT_REQUESTED, allowed, authorized_operations
from coordinator.group.share_group import DEAD, SHARE_ASSIGNOR

API_KEY = 77


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
            error, message, group = coordinator.share_group_describe(group_id)
        else:
            error, message, group = GROUP_DENIED, None, None
        if group is None:
            described.append({"error_code": error, "error_message": message, "group_id": group_id,
                              "group_state": DEAD, "group_epoch": -1, "assignment_epoch": -1,
                              "assignor_name": "", "members": [], "authorized_operations": NOT_REQUESTED})
            continue
        described.append({
            "error_code": error, "error_message": None, "group_id": group_id, "group_state": group.state,
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
            "assignor_name": SHARE_ASSIGNOR,
            "authorized_operations": authorized_operations(ctx, GROUP, group_id)
            if request.include_authorized_operations else NOT_REQUESTED,
            "members": [{
                "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "assignment": _assignment(m.assigned, topic_names),
            } for m in group.members.values()],
        })
    return {"throttle_time": 0, "groups": described}
