"""ListGroups (16): every group this node coordinates; states filter from v4, types
filter from v5 (only "classic" groups exist here)."""

import dataclasses

API_KEY = 16


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    response = groups.coordinator.list_groups(getattr(request, "states_filter", ()),
                                              getattr(request, "types_filter", ()))
    return dataclasses.asdict(response)
