"""CreatePartitions (37): adds partitions to a topic, on the replicas asked for if any."""

from broker.errors import code
from broker.handlers.create_topics import MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS
from broker.cluster.topics import TopicError
from protocol.answer_wire import answer_type

API_KEY = 37
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    results = []
    topics = ctx.cluster.topics.by_name
    added = sum(max(0, t.count - topics[t.name].partitions) for t in request.topics if t.name in topics)
    for t in request.topics:
        if added > MAX_PARTITIONS_PER_REQUEST:  # the same bound as CreateTopics
            results.append(Answer.CreatePartitionsTopicResult(name=t.name, error_code=code("POLICY_VIOLATION"),
                                                              error_message=TOO_MANY_PARTITIONS))
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        try:
            await ctx.cluster.add_partitions(t.name, t.count, assignments, request.validate_only)
            results.append(Answer.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None))
        except TopicError as e:
            results.append(Answer.CreatePartitionsTopicResult(name=t.name, error_code=code(e.error_name),
                                                              error_message=e.args[0]))
    return Answer(results=results)
