"""AlterPartitionReassignments (45): new replica lists for partitions. Storage is shared
by every node, so a reassignment completes at once (nothing is ever "ongoing"); a
leader that is no longer a replica hands over to the first new replica in the ISR.
A null replica list cancels a reassignment: there is none to cancel
(NO_REASSIGNMENT_IN_PROGRESS)."""

from broker.cluster.cluster import ReassignmentError
from broker.errors import code
from protocol.answer_wire import answer_type

API_KEY = 45
Answer = answer_type(API_KEY)


def _partition(cluster, topic: str, p):
    if p.replicas is None:
        return Answer.ReassignablePartitionResponse(
            partition_index=p.partition_index, error_code=code("NO_REASSIGNMENT_IN_PROGRESS"),
            error_message="No reassignment is in progress for this partition.")
    try:
        cluster.reassign_partition(topic, p.partition_index, list(p.replicas))
    except ReassignmentError as e:
        return Answer.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code(e.error_name),
                                                    error_message=str(e))
    return Answer.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=0, error_message=None)


async def handle(ctx, request):
    responses = [Answer.ReassignableTopicResponse(
        name=t.name, partitions=[_partition(ctx.cluster, t.name, p) for p in t.partitions]) for t in request.topics]
    return Answer(error_code=0, error_message=None, responses=responses)
