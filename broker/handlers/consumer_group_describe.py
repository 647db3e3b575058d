"""ConsumerGroupDescribe (69): v0-v1. A KIP-848 group's state, epochs, assignor and
members with their current and target assignments; a classic or unknown group gets
GROUP_ID_NOT_FOUND, as Kafka answers. Authorized operations (KIP-430) when asked, for the
groups described without error."""

from broker.coordinators.group_requests import describe, topic_assignment
from protocol.answer_wire import answer_type

API_KEY = 69
Answer = answer_type(API_KEY)
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # v1's MemberType


def _described(coordinator, group, topic_names, common: dict):
    return Answer.DescribedGroup(
        **common,
        assignor_name=group.preferred_assignor(coordinator.config.consumer.assignors[0]),
        members=[Answer.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=topic_assignment(Answer, m.assigned, topic_names),
            target_assignment=topic_assignment(Answer, group.target.get(m.member_id, {}), topic_names),
            member_type=CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE,
        ) for m in group.members.values()],
    )


async def handle(ctx, request):
    return await describe(ctx, request, Answer,
                          lambda coordinator, group_id: coordinator.consumer_group_describe(group_id),
                          {"group_state": "Dead", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": ""},
                          _described)
