"""What the share-state APIs share on the share coordinator's side:
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87). Partition leaders and
the group coordinator send them from node to node (broker/coordinators/share_persister.py);
a client may send them too.

Each partition named is answered on its own: CLUSTER_AUTHORIZATION_FAILED without
CLUSTER_ACTION on the cluster (only brokers send them); for Initialize, Delete and the
summary, INVALID_REQUEST for a key no state can have (no topic id, a negative partition)
and UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the cluster does not have;
NOT_COORDINATOR where this node does not lead the key's __share_group_state partition,
else the share coordinator's answer (coordinator/share/coordinator.py). A read or write
is checked for its key by the share coordinator, after that refusal, as Kafka 4.4's
shard checks it (and an unknown topic there is refused as uninitialized, as Kafka 4.4
answers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.security.acls import CLUSTER, CLUSTER_ACTION, CLUSTER_DENIED, CLUSTER_NAME
from coordinator.share.coordinator import ShareCoordinator, StateAnswer
from coordinator.share.state_log_codec import StateKey
from kio.schema.errors import ErrorCode
from protocol.answer_wire import nested_type

E = ErrorCode


async def answer(ctx, request, answer_type: type, serve: Callable[[Any, StateKey, Any], StateAnswer],
                 render: Callable[[StateAnswer, dict], Any] | None = None, key_checked: bool = True):
    """``serve(service, key, partition data)`` answers one partition on this node's share
    coordinator service; the answer is of ``answer_type`` (the API's), each partition's
    an ``answer_type.PartitionResult`` of the common fields (partition, error) and, when
    given, those ``render(result, common)`` adds for the API. ``key_checked``: the key
    and its topic are checked here, before the share coordinator is asked (False: the
    coordinator checks the key, a read's or write's)."""
    permitted = ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
    service = ctx.node.share_states
    if permitted:
        service.ensure_ready()
    partition_result = answer_type.PartitionResult
    topic_result = nested_type(answer_type, "results")
    results = []
    for topic in request.topics:
        partitions = []
        for data in topic.partitions:
            key = StateKey(request.group_id, topic.topic_id, data.partition)
            if not permitted:
                result = StateAnswer(CLUSTER_DENIED, "Cluster authorization failed.")
            else:
                result = _refused(ctx, key, key_checked) or serve(service, key, data)
            common = dict(partition=data.partition, error_code=result.error, error_message=result.message)
            partitions.append(partition_result(**common) if render is None else render(result, common))
        results.append(topic_result(topic_id=topic.topic_id, partitions=partitions))
    return answer_type(results=results)


def _refused(ctx, key: StateKey, key_checked: bool) -> StateAnswer | None:
    if not key_checked:
        return None
    if (bad_key := ShareCoordinator.key_error(key)) is not None:
        return bad_key
    topic = ctx.cluster.topics.by_id.get(key.topic_id)
    if topic is None or key.partition >= topic.partitions:
        return StateAnswer(E.unknown_topic_or_partition, "This server does not host this topic-partition.")
    return None

