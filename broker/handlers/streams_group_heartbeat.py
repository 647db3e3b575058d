"""StreamsGroupHeartbeat (88): v0-1, KIP-1071 streams groups. A Kafka Streams client's
threads join with epoch 0, their topology and process id, heartbeat with their epoch
and the tasks they own, and are given active tasks by the broker's sticky assignor;
-1 leaves. Internal topics the group reports missing (MISSING_INTERNAL_TOPICS) are
created here, after the coordinator answered, as Kafka's request handler creates them.
v1 (KIP-1331): the int64 AcceptableRecoveryLag, TopologyDescriptionRequired (never set:
no topology description plugin, Kafka's default) and the MISSING_CLIENT_TAGS status."""

from __future__ import annotations

import logging

from broker.cluster.topics import TopicError
from broker.security.acls import (
    CLUSTER, CLUSTER_NAME, CREATE, DESCRIBE, GROUP, GROUP_DENIED, READ, TOPIC, TOPIC_DENIED,
)
from coordinator.group.streams_group import (
    MISSING_INTERNAL_TOPICS, StreamsHeartbeatAnswer, StreamsHeartbeatRequest,
)
from coordinator.group.streams_log_codec import CopartitionGroup, Subtopology, TopicInfo, Topology
from protocol.answer_wire import answer_type, ms

API_KEY = 88
Answer = answer_type(API_KEY)
log = logging.getLogger(__name__)


def _tasks(task_ids) -> dict | None:
    if task_ids is None:
        return None
    return {t.subtopology_id: frozenset(t.partitions) for t in task_ids}


def _offsets(task_offsets) -> dict | None:
    if task_offsets is None:
        return None
    return {(t.subtopology_id, t.partition): t.offset for t in task_offsets}


def _topic_info(info) -> TopicInfo:
    return TopicInfo(info.name, info.partitions, info.replication_factor,
                     tuple((c.key, c.value) for c in info.topic_configs))


def _topology(topology) -> Topology | None:
    if topology is None:
        return None
    return Topology(topology.epoch, tuple(
        Subtopology(s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
                    tuple(_topic_info(i) for i in s.state_changelog_topics), tuple(s.repartition_sink_topics),
                    tuple(_topic_info(i) for i in s.repartition_source_topics),
                    tuple(CopartitionGroup(tuple(g.source_topics), tuple(g.source_topic_regex),
                                           tuple(g.repartition_source_topics)) for g in s.copartition_groups))
        for s in topology.subtopologies))


def _named_topics(topology: Topology) -> set[str]:
    return {n for s in topology.subtopologies for n in (
        *s.source_topics, *s.repartition_sink_topics, *(i.name for i in s.changelog_topics),
        *(i.name for i in s.repartition_source_topics))}


def _task_ids(tasks: dict | None) -> list | None:
    if tasks is None:
        return None
    return [Answer.TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(tasks.items())]


def _topic_partitions(by_topic: dict) -> list:
    return [Answer.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]


def create_internal_topics(ctx, topics: tuple[TopicInfo, ...]) -> str | None:
    """Creates the group's missing internal topics; what could not be, for the status."""
    refused, failed = [], []
    for info in topics:
        if not (ctx.allowed(CREATE, CLUSTER, CLUSTER_NAME) or ctx.allowed(CREATE, TOPIC, info.name)):
            refused.append(info.name)
            continue
        try:
            ctx.cluster.create_topic(info.name, info.partitions, info.replication_factor or -1, dict(info.configs))
            log.info("created the streams internal topic %s (%d partitions)", info.name, info.partitions)
        except TopicError as e:
            if e.error_name != "TOPIC_ALREADY_EXISTS":  # another member's heartbeat made it
                failed.append(f"{info.name}: {e}")
    detail = []
    if refused:
        detail.append("Unauthorized to CREATE on topics " + ", ".join(refused) + ".")
    if failed:
        detail.append("Failed to create internal topics: " + "; ".join(failed))
    return " ".join(detail) or None


async def handle(ctx, request):
    topology = _topology(request.topology)
    endpoint = request.user_endpoint
    beat = StreamsHeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        endpoint_information_epoch=request.endpoint_information_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=ms(request.rebalance_timeout),
        topology=topology, active_tasks=_tasks(request.active_tasks), standby_tasks=_tasks(request.standby_tasks),
        warmup_tasks=_tasks(request.warmup_tasks), process_id=request.process_id,
        user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
        client_tags=None if request.client_tags is None else tuple((t.key, t.value) for t in request.client_tags),
        shutdown_application=request.shutdown_application, version=request.__version__,
        task_offsets=_offsets(request.task_offsets), task_end_offsets=_offsets(request.task_end_offsets),
        client_id=ctx.header.client_id or "", client_host="/" + ctx.connection.peer.rsplit(":", 1)[0],
    )
    groups = ctx.node.groups
    if not ctx.allowed(READ, GROUP, request.group_id):
        answer = StreamsHeartbeatAnswer(GROUP_DENIED)
    elif topology is not None and not all(ctx.allowed(DESCRIBE, TOPIC, n) for n in _named_topics(topology)):
        answer = StreamsHeartbeatAnswer(TOPIC_DENIED)
    else:
        answer = await groups.run(request.group_id or "", lambda: groups.coordinator.streams_group_heartbeat(
            beat, ctx.clock.now_ms()), StreamsHeartbeatAnswer,
            lambda: groups.coordinator.heartbeat_request_error(beat))
    statuses = [Answer.Status(status_code=c, status_detail=d) for c, d in answer.statuses]
    if answer.topics_to_create:
        problem = create_internal_topics(ctx, answer.topics_to_create)
        if problem:
            statuses = [s if s.status_code != MISSING_INTERNAL_TOPICS else
                        s._replace(status_detail=f"{s.status_detail}. {problem}") for s in statuses]
    by_endpoint = None
    if answer.partitions_by_endpoint is not None:
        by_endpoint = [Answer.EndpointToPartitions(
            user_endpoint=Answer.Endpoint(host=e.endpoint[0], port=e.endpoint[1]),
            active_partitions=_topic_partitions(e.active), standby_partitions=_topic_partitions(e.standby),
        ) for e in answer.partitions_by_endpoint]
    config = groups.coordinator.config.streams
    sent = answer.active_tasks is not None
    return Answer(
        error_code=answer.error_code, error_message=answer.error_message,
        member_id=answer.member_id or request.member_id, member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        # Kafka 4.4 sets only v1's int64 field; v0's int32 AcceptableRecoveryLagLegacy stays 0
        acceptable_recovery_lag=config.acceptable_recovery_lag if request.__version__ >= 1 else 0,
        task_offset_interval_ms=config.task_offset_interval_ms,
        status=statuses if answer.error_code == 0 else None,
        active_tasks=_task_ids(answer.active_tasks), standby_tasks=_task_ids(answer.standby_tasks),
        warmup_tasks=[] if sent else None,
        endpoint_information_epoch=answer.endpoint_information_epoch,
        partitions_by_user_endpoint=by_endpoint,
    )
