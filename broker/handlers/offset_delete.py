"""OffsetDelete (47): deletes a group's committed offsets of topics no member is
subscribed to (GROUP_SUBSCRIBED_TO_TOPIC otherwise); partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION."""

from broker.security.acls import DELETE, GROUP, GROUP_DENIED, READ, TOPIC, TOPIC_DENIED
from broker.errors import code
from broker.coordinators.offset_requests import answer_topics, unknown_partitions
from coordinator.group.messages import OffsetDeleteResponse
from protocol.answer_wire import answer_type

API_KEY = 47
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(DELETE, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED, topics=())
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied = {tp for tp in partitions if not ctx.allowed(READ, TOPIC, tp[0])}
    unknown = unknown_partitions(ctx.cluster, partitions) | denied
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        if (topic, partition) not in unknown:
            topics.setdefault(topic, []).append(partition)
    groups = ctx.node.groups
    response = await groups.run(request.group_id, lambda: groups.coordinator.offset_delete(
        group_id=request.group_id, topics=list(topics.items())), OffsetDeleteResponse,
        groups.group_id_given(request.group_id, OffsetDeleteResponse))
    if response.error_code:
        return Answer(error_code=response.error_code, topics=())
    refused = dict.fromkeys(unknown, code("UNKNOWN_TOPIC_OR_PARTITION")) | dict.fromkeys(denied, TOPIC_DENIED)
    return Answer(error_code=0, topics=answer_topics(partitions, refused, response, Answer))
