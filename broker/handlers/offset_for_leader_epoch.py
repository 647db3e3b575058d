"""OffsetForLeaderEpoch (23), v2+: where a leader epoch ends on the leader's log.

A consumer that saw records of epoch E asks, after a leader change, for the end of E;
an answer below its position means the log it read was truncated (KIP-320). The
leader answers from its leader epoch cache; ``current_leader_epoch`` is checked as
Fetch checks it (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH)."""

from broker.errors import code
from protocol.answer_wire import answer_type

API_KEY = 23
Answer = answer_type(API_KEY)


def _partition(ctx, topic: str, p):
    part, error = ctx.led_partition(topic, p.partition, current_leader_epoch=p.current_leader_epoch)
    if error is not None:
        return Answer.EpochEndOffset(error_code=code(error), partition=p.partition, leader_epoch=-1, end_offset=-1)
    epoch, end_offset = part.leader_epochs.end_offset_for(p.leader_epoch, part.log.log_end_offset)
    return Answer.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end_offset)


async def handle(ctx, request):
    return Answer(topics=[Answer.OffsetForLeaderTopicResult(
        topic=t.topic, partitions=[_partition(ctx, t.topic, p) for p in t.partitions]) for t in request.topics])
