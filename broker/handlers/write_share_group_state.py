"""WriteShareGroupState (85): a share-partition leader writes its state (start offset and
the records in flight) whenever records are acknowledged, released or their locks end."""

from broker.coordinators.share_state_requests import answer
from protocol.answer_wire import answer_type
from coordinator.share.state_log_codec import ShareSnapshot, StateBatch

API_KEY = 85
Answer = answer_type(API_KEY)


def _snapshot(p) -> ShareSnapshot:
    return ShareSnapshot(0, p.state_epoch, p.leader_epoch, p.start_offset, 0, 0,
                         tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                               for b in p.state_batches),
                         getattr(p, "delivery_complete_count", -1))  # v1 carries it


async def handle(ctx, request):
    now_ms = ctx.clock.now_ms()
    return await answer(ctx, request, Answer, lambda service, key, p: service.run(
        key, lambda: service.coordinator.write_state(key, _snapshot(p), now_ms)), key_checked=False)
