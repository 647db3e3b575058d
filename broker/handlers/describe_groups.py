"""DescribeGroups (15): state, protocol and members of each group; an unknown group is
described as Dead, as Kafka does. v3+ may ask for the client's authorized operations on
each group it may describe (KIP-430)."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, authorized_operations
from protocol.answer_wire import answer_from, answer_type

API_KEY = 15
Answer = answer_type(API_KEY)
# Kafka's answer when the client did not ask for authorized operations.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    response = groups.coordinator.describe_groups(request.groups)
    asked = getattr(request, "include_authorized_operations", False)
    return Answer(groups=[
        answer_from(Answer.DescribedGroup, g)._replace(
            authorized_operations=authorized_operations(ctx, GROUP, g.group_id) if asked
            else AUTHORIZED_OPERATIONS_OMITTED)
        if ctx.allowed(DESCRIBE, GROUP, g.group_id) else
        Answer.DescribedGroup(error_code=GROUP_DENIED, group_id=g.group_id, group_state="", protocol_type="",
                              protocol_data="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        for g in response.groups])
