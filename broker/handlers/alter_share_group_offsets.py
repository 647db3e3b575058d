"""AlterShareGroupOffsets (91): v0. Sets the start offset of share-partitions of an
empty (or not yet existing) share group: the share coordinator's state starts over at
that offset, in a new state epoch."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, READ, TOPIC
from broker.errors import code
from broker.handlers.share_group_offsets import group_error, replace_state
from coordinator.share.state_log_codec import StateKey
from protocol.answer_wire import answer_type

API_KEY = 91
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(READ, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED, responses=[])
    error, message, _group = await group_error(ctx, request.group_id, must_be_empty=True)
    if error:
        return Answer(error_code=error, error_message=message, responses=[])
    responses = []
    for t in request.topics:
        info = ctx.cluster.topics.by_name.get(t.topic_name)
        answers = []
        for p in t.partitions:
            if info is None or not ctx.allowed(DESCRIBE, TOPIC, t.topic_name) or p.partition_index >= info.partitions:
                failed = code("UNKNOWN_TOPIC_OR_PARTITION")
            elif p.start_offset < 0:
                failed = code("INVALID_REQUEST")
            else:
                failed = await replace_state(ctx, StateKey(request.group_id, info.topic_id, p.partition_index),
                                             p.start_offset)
            answers.append(Answer.AlterShareGroupOffsetsResponsePartition(partition_index=p.partition_index,
                                                                          error_code=failed))
        responses.append(Answer.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=info.topic_id if info else None, partitions=answers))
    return Answer(error_code=0, responses=responses)
