"""InitializeShareGroupState (83): the group coordinator starts a share-partition's state
on the share coordinator (a new state epoch, start offset or -1, nothing in flight)."""

from broker.coordinators.share_state_requests import answer
from protocol.answer_wire import answer_type

API_KEY = 83
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    now_ms = ctx.clock.now_ms()
    return await answer(ctx, request, Answer, lambda service, key, p: service.run(
        key, lambda: service.coordinator.initialize_state(key, p.state_epoch, p.start_offset, now_ms)))
