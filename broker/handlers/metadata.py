"""Metadata (3): brokers, topics, partitions and leaders; auto-creates topics on request.

v0: an empty topic list means all topics. v1+: null means all, empty means none.
v10+ carries topic ids and accepts topics by id.
"""

from broker.security.acls import (
    CLUSTER,
    CLUSTER_NAME,
    CREATE,
    DESCRIBE,
    NOT_REQUESTED,
    TOPIC,
    authorized_operations,
)
from broker.errors import ProtocolViolation, code
from broker.cluster.topics import TopicError, validate_topic_name
from protocol.answer_wire import answer_type, ZERO_UUID

API_KEY = 3
Answer = answer_type(API_KEY)
_LEADER_NOT_AVAILABLE = code("LEADER_NOT_AVAILABLE")
_LISTENER_NOT_FOUND = code("LISTENER_NOT_FOUND")


def _partitions(ctx, topic) -> list:
    cluster = ctx.cluster
    out = []
    up = {n.node_id for n in cluster.live_nodes}
    listener = ctx.connection.listener
    # leaders with no address on this listener: Kafka answers LISTENER_NOT_FOUND (v6+)
    unlisted = {n.node_id for n in cluster.live_nodes if n.address(listener) is None}
    for i in range(topic.partitions):
        state = cluster.leadership(topic.name, i)
        leader, error = state.leader, 0 if state.leader != -1 else _LEADER_NOT_AVAILABLE
        if leader in unlisted:
            leader, error = -1, _LISTENER_NOT_FOUND if ctx.version >= 6 else _LEADER_NOT_AVAILABLE
        out.append(Answer.MetadataResponsePartition(
            error_code=error,
            partition_index=i,
            leader_id=leader,
            leader_epoch=state.leader_epoch,
            replica_nodes=state.replicas,
            isr_nodes=state.isr,
            offline_replicas=[r for r in state.replicas if r not in up],
        ))
    return out


def _topic(ctx, topic, with_operations: bool = False):
    return Answer.MetadataResponseTopic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=_partitions(ctx, topic),
        topic_authorized_operations=authorized_operations(ctx, TOPIC, topic.name) if with_operations
        else NOT_REQUESTED,
    )


def _error_topic(name, error: str, topic_id=ZERO_UUID):
    return Answer.MetadataResponseTopic(error_code=code(error), name=name, topic_id=topic_id, is_internal=False,
                                        partitions=())


async def handle(ctx, request):
    cluster = ctx.cluster
    registry = cluster.topics
    requested = request.topics
    ops = getattr(request, "include_topic_authorized_operations", False)
    if requested is None or (ctx.version == 0 and len(requested) == 0):
        # only the topics the client may describe are listed (Kafka's rule with ACLs)
        topics = [_topic(ctx, t, ops) for t in registry.by_name.values() if ctx.allowed(DESCRIBE, TOPIC, t.name)]
    else:
        auto_create = getattr(request, "allow_auto_topic_creation", True) and cluster.config["auto.create.topics.enable"]
        topics = []
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and ctx.version < 12:
                # Kafka: InvalidRequestException, "Topic name can not be null for version N"
                # (v10-v11 responses cannot even carry a null name)
                raise ProtocolViolation(f"Topic name can not be null for Metadata version {ctx.version}")
            if name is None:
                info = registry.by_id.get(topic_id)
                if info is not None and not ctx.allowed(DESCRIBE, TOPIC, info.name):
                    info = None  # an id the client may not describe is unknown to it
                topics.append(_topic(ctx, info, ops) if info else _error_topic(None, "UNKNOWN_TOPIC_ID", topic_id))
                continue
            if not ctx.allowed(DESCRIBE, TOPIC, name):
                topics.append(_error_topic(name, "TOPIC_AUTHORIZATION_FAILED"))
                continue
            info = registry.by_name.get(name)
            if info is None and auto_create:
                if not (ctx.allowed(CREATE, CLUSTER, CLUSTER_NAME) or ctx.allowed(CREATE, TOPIC, name)):
                    topics.append(_error_topic(name, "TOPIC_AUTHORIZATION_FAILED"))
                    continue
                try:
                    validate_topic_name(name)
                    cluster.create_topic(name)
                except TopicError as e:
                    if e.error_name != "TOPIC_ALREADY_EXISTS":  # else being made: answered as unknown yet
                        topics.append(_error_topic(name, e.error_name))
                        continue
                # Kafka 4.x asks its controller to create the topic and answers before it
                # exists: the client asks again (the next answer has the topic).
            topics.append(_topic(ctx, info, ops) if info else _error_topic(name, "UNKNOWN_TOPIC_OR_PARTITION"))
    return Answer(
        # on the listener the request came in on
        brokers=[Answer.MetadataResponseBroker(**b) for b in ctx.brokers()],
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        topics=topics,
        cluster_authorized_operations=authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
        if getattr(request, "include_cluster_authorized_operations", False) else NOT_REQUESTED,
        error_code=0,
    )
