"""CreatePartitions (37): adds partitions to a topic."""

from broker.errors import code
from broker.handlers.create_topics import MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS
from broker.topics import TopicError

API_KEY = 37


async def handle(ctx, request):
    results = []
    topics = ctx.cluster.topics.by_name
    added = sum(max(0, t.count - topics[t.name].partitions) for t in request.topics if t.name in topics)
    for t in request.topics:
        if added > MAX_PARTITIONS_PER_REQUEST:  # the same bound as CreateTopics
            results.append({"name": t.name, "error_code": code("POLICY_VIOLATION"), "error_message": TOO_MANY_PARTITIONS})
            continue
        try:
            if request.validate_only:
                info = ctx.cluster.topics.by_name.get(t.name)
                if info is None:
                    raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
                if t.count <= info.partitions:
                    raise TopicError("INVALID_PARTITIONS", f"Topic currently has {info.partitions} partitions.")
            else:
                ctx.cluster.add_partitions(t.name, t.count)
            results.append({"name": t.name, "error_code": 0, "error_message": None})
        except TopicError as e:
            results.append({"name": t.name, "error_code": code(e.error_name), "error_message": str(e)})
    return { "results": results}
