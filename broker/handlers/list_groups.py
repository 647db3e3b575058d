"""ListGroups (16): every group this node coordinates; states filter from v4, types
filter from v5 ("classic", "consumer", "share" and "streams" groups)."""

from broker.security.acls import CLUSTER, CLUSTER_NAME, DESCRIBE, GROUP
from protocol.answer_wire import answer_from, answer_type

API_KEY = 16
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    response = groups.coordinator.list_groups(getattr(request, "states_filter", ()),
                                              getattr(request, "types_filter", ()))
    listed = answer_from(Answer, response)
    if not ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):  # else only the groups it may describe
        listed = listed._replace(groups=[g for g in listed.groups if ctx.allowed(DESCRIBE, GROUP, g.group_id)])
    return listed
