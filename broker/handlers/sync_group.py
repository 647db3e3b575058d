"""SyncGroup (14): v0-v5. Followers wait for the leader's assignment, which is answered
once the group's GroupMetadata record (with every assignment) is in the log."""

from broker.security.acls import GROUP, GROUP_DENIED, READ
from coordinator.group import SyncAssignment
from coordinator.group.messages import SyncGroupResponse
from protocol.answer_wire import answer_from, answer_type

API_KEY = 14
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(READ, GROUP, request.group_id):
        return answer_from(Answer, SyncGroupResponse(GROUP_DENIED))
    groups = ctx.node.groups
    response = await groups.run_parked(request.group_id, lambda answer: groups.coordinator.sync_group(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None), protocol_name=getattr(request, "protocol_name", None),
        assignments=[SyncAssignment(a.member_id, a.assignment) for a in request.assignments],
        reply_to=answer, now_ms=ctx.clock.now_ms()), SyncGroupResponse,
        groups.group_id_given(request.group_id, SyncGroupResponse))
    return answer_from(Answer, response)
