"""DeleteShareGroupOffsets (92): v0. Deletes the share-partition state of topics of an
empty share group; its next fetch starts again from share.auto.offset.reset."""

from broker.security.acls import DELETE, DESCRIBE, GROUP, GROUP_DENIED, TOPIC
from broker.errors import code
from broker.handlers.share_group_offsets import group_error, replace_state
from coordinator.share.state_log_codec import StateKey
from protocol.answer_wire import answer_type

API_KEY = 92
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(DELETE, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED, responses=[])
    error, message, group = await group_error(ctx, request.group_id, must_be_empty=True)
    if not error and group is None:
        error, message = code("GROUP_ID_NOT_FOUND"), f"Group {request.group_id} not found."
    if error:
        return Answer(error_code=error, error_message=message, responses=[])
    responses = []
    for t in request.topics:
        info = ctx.cluster.topics.by_name.get(t.topic_name)
        failed = 0
        if info is None or not ctx.allowed(DESCRIBE, TOPIC, t.topic_name):
            failed = code("UNKNOWN_TOPIC_OR_PARTITION")
        else:
            for index in range(info.partitions):
                failed = failed or await replace_state(ctx, StateKey(request.group_id, info.topic_id, index), None)
        responses.append(Answer.DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=info.topic_id if info else None, error_code=failed))
    return Answer(error_code=0, responses=responses)
