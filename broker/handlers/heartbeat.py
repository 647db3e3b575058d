"""Heartbeat (12): v0-v4. Keeps a member's session alive; REBALANCE_IN_PROGRESS tells it
to rejoin."""


from broker.security.acls import GROUP, GROUP_DENIED, READ
from coordinator.group.messages import HeartbeatResponse
from protocol.answer_wire import answer_type

API_KEY = 12
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(READ, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED)
    groups = ctx.node.groups
    response = await groups.run(request.group_id, lambda: groups.coordinator.heartbeat(
        group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None), now_ms=ctx.clock.now_ms()), HeartbeatResponse,
        groups.group_id_given(request.group_id, HeartbeatResponse))
    return Answer(error_code=response.error_code)
