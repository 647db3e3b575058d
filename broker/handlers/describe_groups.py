"""DescribeGroups (15): state, protocol and members of each group; an unknown group is
described as Dead, as Kafka does."""

import dataclasses

API_KEY = 15
# Kafka's answer when the client did not ask for authorized operations.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    response = groups.coordinator.describe_groups(request.groups)
    return {"groups": [dataclasses.asdict(g) | {"authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
                       for g in response.groups]}
