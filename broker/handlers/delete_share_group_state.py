"""DeleteShareGroupState (86): the group coordinator deletes a share group's state when
the group is deleted or its offsets are (a tombstone in __share_group_state)."""

from broker.coordinators.share_state_requests import answer
from protocol.answer_wire import answer_type

API_KEY = 86
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    return await answer(ctx, request, Answer, lambda service, key, p: service.run(
        key, lambda: service.coordinator.delete_state(key)))
