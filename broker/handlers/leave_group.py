"""LeaveGroup (13): v0-v2 name one member, v3+ a batch (with instance ids, KIP-345)."""

from broker.security.acls import GROUP, GROUP_DENIED, READ
from coordinator.group import MemberIdentity
from coordinator.group.messages import LeaveGroupResponse
from protocol.answer_wire import answer_from, answer_type

API_KEY = 13
Answer = answer_type(API_KEY)
FIRST_BATCHED_VERSION = 3


async def handle(ctx, request):
    if not ctx.allowed(READ, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED, members=())
    if ctx.version < FIRST_BATCHED_VERSION:
        members = [MemberIdentity(request.member_id)]
    else:
        members = [MemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                   for m in request.members]
    groups = ctx.node.groups
    response = await groups.run(request.group_id, lambda: groups.coordinator.leave_group(
        group_id=request.group_id, members=members, api_version=ctx.version, now_ms=ctx.clock.now_ms()),
        LeaveGroupResponse, groups.group_id_given(request.group_id, LeaveGroupResponse))
    return answer_from(Answer, response)
