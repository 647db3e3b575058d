"""ShareGroupDescribe (77): v1. A share group's state, epochs, assignor and members
with their assignments; a group of another type or an unknown one gets
GROUP_ID_NOT_FOUND, as Kafka answers."""

from broker.coordinators.group_requests import describe, topic_assignment
from coordinator.group.share_group import DEAD, SHARE_ASSIGNOR
from protocol.answer_wire import answer_type

API_KEY = 77
Answer = answer_type(API_KEY)


def _described(_coordinator, group, topic_names, common: dict):
    return Answer.DescribedGroup(
        **common,
        assignor_name=SHARE_ASSIGNOR,
        members=[Answer.Member(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=topic_assignment(Answer, m.assigned, topic_names),
        ) for m in group.members.values()],
    )


async def handle(ctx, request):
    return await describe(ctx, request, Answer,
                          lambda coordinator, group_id: coordinator.share_group_describe(group_id),
                          {"group_state": DEAD, "group_epoch": -1, "assignment_epoch": -1, "assignor_name": ""},
                          _described)
