"""ReadShareGroupStateSummary (87): a share-partition's start offset and epochs, as
DescribeShareGroupOffsets reports them; -1 for a share-partition never initialized."""

from broker.coordinators.share_state_requests import answer
from protocol.answer_wire import answer_type

API_KEY = 87
Answer = answer_type(API_KEY)


def _summary(result, common: dict):
    snapshot = result.snapshot
    if snapshot is None:
        return Answer.PartitionResult(**common, state_epoch=0, leader_epoch=-1, start_offset=-1,
                                      delivery_complete_count=-1)
    return Answer.PartitionResult(**common, state_epoch=snapshot.state_epoch, leader_epoch=snapshot.leader_epoch,
                                  start_offset=snapshot.start_offset,
                                  delivery_complete_count=snapshot.delivery_complete_count)


async def handle(ctx, request):
    return await answer(ctx, request, Answer, lambda service, key, p: service.coordinator.read_summary(key), _summary)
