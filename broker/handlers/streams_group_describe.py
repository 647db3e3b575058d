"""StreamsGroupDescribe (89): v0-1. A streams group's state, epochs, topology (as
configured against the topics now) and members with their process ids, endpoints and
current and target tasks; a group of another type or an unknown one gets
GROUP_ID_NOT_FOUND, as Kafka answers. v1 (KIP-1331) adds the assignor's name and the
topology description's status: never stored here (no topology description plugin, as
Kafka without group.streams.topology.description.plugin.class), so NOT_STORED when asked."""

from broker.coordinators.group_requests import describe
from coordinator.group.streams_group import DEAD, STREAMS_ASSIGNOR, configure
from protocol.own_schemas import TOPOLOGY_DESCRIPTION_NOT_REQUESTED, TOPOLOGY_DESCRIPTION_NOT_STORED
from protocol.answer_wire import answer_type

API_KEY = 89
Answer = answer_type(API_KEY)


def _task_ids(tasks: dict) -> list:
    return [Answer.TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(tasks.items())]


def _assignment(active: dict, standby: dict):
    return Answer.Assignment(active_tasks=_task_ids(active), standby_tasks=_task_ids(standby), warmup_tasks=[])


def _task_offsets(by_task: dict) -> list:
    return [Answer.TaskOffset(subtopology_id=s, partition=p, offset=o) for (s, p), o in sorted(by_task.items())]


def _target(group, member_id: str) -> tuple[dict, dict]:
    target = group.target.get(member_id)
    return ({}, {}) if target is None else (target.active, target.standby)


def _topic_info(info, partitions: int | None = None):
    return Answer.TopicInfo(name=info.name, partitions=info.partitions if partitions is None else partitions,
                            replication_factor=info.replication_factor,
                            topic_configs=[Answer.KeyValue(key=k, value=v) for k, v in info.configs])


def _topology(coordinator, group):
    topology = group.topology
    if topology is None:
        return None
    configured = configure(topology, coordinator.topics())
    subtopologies = None
    if configured.ready:  # Kafka leaves them out while topics are missing or mis-sized
        subtopologies = [Answer.Subtopology(
            subtopology_id=s.subtopology_id,
            source_topics=list(configured.source_topics[s.subtopology_id]),
            repartition_sink_topics=list(s.repartition_sink_topics),
            state_changelog_topics=[_topic_info(i, configured.task_counts[s.subtopology_id])
                                    for i in s.changelog_topics],
            repartition_source_topics=[_topic_info(i, coordinator.topics()[i.name][1])
                                       for i in s.repartition_source_topics],
        ) for s in topology.subtopologies]
    return Answer.Topology(epoch=topology.epoch, subtopologies=subtopologies)


def _member(group, m):
    offsets, end_offsets = group.task_offsets.get(m.member_id, ({}, {}))
    return Answer.Member(
        member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id,
        rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        topology_epoch=m.topology_epoch, process_id=m.process_id,
        user_endpoint=None if m.user_endpoint is None else Answer.Endpoint(host=m.user_endpoint[0],
                                                                           port=m.user_endpoint[1]),
        client_tags=[Answer.KeyValue(key=k, value=v) for k, v in m.client_tags],
        task_offsets=_task_offsets(offsets), task_end_offsets=_task_offsets(end_offsets),
        assignment=_assignment(m.assigned, m.standby),
        target_assignment=_assignment(*_target(group, m.member_id)),
        is_classic=False,
    )


def _described(request):
    status = TOPOLOGY_DESCRIPTION_NOT_STORED if getattr(request, "include_topology_description", False) \
        else TOPOLOGY_DESCRIPTION_NOT_REQUESTED

    def described(coordinator, group, _topic_names, common: dict):
        return Answer.DescribedGroup(**common, topology=_topology(coordinator, group),
                                     members=[_member(group, m) for m in group.members.values()],
                                     topology_description_status=status, assignor_name=STREAMS_ASSIGNOR)
    return described


async def handle(ctx, request):
    return await describe(ctx, request, Answer,
                          lambda coordinator, group_id: coordinator.streams_group_describe(group_id),
                          {"group_state": DEAD, "group_epoch": -1, "assignment_epoch": -1, "topology": None},
                          _described(request))
