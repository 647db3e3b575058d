"""ReadShareGroupState (84): a share-partition leader reads the state it goes on from,
with its leader epoch (a newer one is recorded, an older one fenced)."""

from broker.coordinators.share_state_requests import answer
from protocol.answer_wire import answer_type

API_KEY = 84
Answer = answer_type(API_KEY)


def _state(result, common: dict):
    snapshot = result.snapshot
    if snapshot is None:
        return Answer.PartitionResult(**common, state_epoch=0, start_offset=-1, state_batches=[])
    return Answer.PartitionResult(**common, state_epoch=snapshot.state_epoch, start_offset=snapshot.start_offset,
                                  state_batches=[Answer.StateBatch(
                                      first_offset=b.first_offset, last_offset=b.last_offset,
                                      delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                                      for b in snapshot.state_batches])


async def handle(ctx, request):
    now_ms = ctx.clock.now_ms()
    return await answer(ctx, request, Answer, lambda service, key, p: service.run(
        key, lambda: service.coordinator.read_state(key, p.leader_epoch, now_ms)), _state, key_checked=False)
