"""DeleteShareGroupState (86): the group coordinator deletes a share group's state when
the group is deleted or its offsets are (a tombstone in __share_group_state)."""

from broker.coordinators.share_state_requests import answer

API_KEY = 86


async def handle(ctx, request):
    return await answer(ctx, request, lambda service, key, p: service.run(
        key, lambda: service.coordinator.delete_state(key)))
