"""DeleteTopics (20), v1-v6 (v6 may name topics by id)."""

from broker.errors import code
from broker.cluster.topics import TopicError
from protocol.answer_wire import ZERO_UUID

API_KEY = 20


async def handle(ctx, request):
    cluster = ctx.cluster
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    responses = []
    for name, topic_id in wanted:
        if name is None and topic_id not in (None, ZERO_UUID):
            info = cluster.topics.by_id.get(topic_id)
            if info is None:
                responses.append({"name": None, "topic_id": topic_id, "error_code": code("UNKNOWN_TOPIC_ID"),
                                  "error_message": None})
                continue
            name = info.name
        try:
            info = cluster.delete_topic(name)
            responses.append({"name": name, "topic_id": info.topic_id, "error_code": 0, "error_message": None})
        except TopicError as e:
            responses.append({"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": code(e.error_name),
                              "error_message": str(e)})
    return { "responses": responses}
