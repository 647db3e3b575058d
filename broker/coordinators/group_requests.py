"""What the KIP-848 consumer group, KIP-932 share group and KIP-1071 streams group
handlers share: the heartbeat's ACL checks, its run through the group coordinator and
its answer (consumer and share groups), and the describe loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.security.acls import (
    DESCRIBE, GROUP, GROUP_DENIED, NOT_REQUESTED, READ, TOPIC, TOPIC_DENIED, authorized_operations,
)
from coordinator.group.consumer_group import HeartbeatAnswer


async def heartbeat(ctx, request, beat_request, beat: Callable[[Any, int], HeartbeatAnswer], answer: type):
    """ConsumerGroupHeartbeat and ShareGroupHeartbeat: READ on the group and DESCRIBE on
    every subscribed topic (clients may not learn of topics they cannot describe, as
    Kafka checks), then ``beat(coordinator, now_ms)`` through the group service, once
    ``beat_request`` (the coordinator's form of the request) passes its own checks; the
    answer is of type ``answer`` (the API's answer type)."""
    groups = ctx.node.groups
    names = request.subscribed_topic_names
    if not ctx.allowed(READ, GROUP, request.group_id):
        beaten = HeartbeatAnswer(GROUP_DENIED)
    elif names and not all(ctx.allowed(DESCRIBE, TOPIC, n) for n in names):
        beaten = HeartbeatAnswer(TOPIC_DENIED)
    else:
        beaten = await groups.run(request.group_id or "", lambda: beat(groups.coordinator, ctx.clock.now_ms()),
                                  HeartbeatAnswer, lambda: groups.coordinator.heartbeat_request_error(beat_request))
    assignment = None
    if beaten.assignment is not None:
        assignment = answer.Assignment(topic_partitions=[
            answer.TopicPartitions(topic_id=topic_id, partitions=sorted(ps))
            for topic_id, ps in sorted(beaten.assignment.items(), key=str)])
    return answer(error_code=beaten.error_code, error_message=beaten.error_message, member_id=beaten.member_id,
                  member_epoch=beaten.member_epoch, heartbeat_interval_ms=beaten.heartbeat_interval_ms,
                  assignment=assignment)


def topic_assignment(answer: type, partitions, topic_names: dict):
    """Partitions by topic id, with their names, ordered by name, as an ``answer.Assignment``
    (``answer`` is the API's answer type)."""
    return answer.Assignment(topic_partitions=[
        answer.TopicPartitions(topic_id=topic_id, topic_name=topic_names.get(topic_id, ""), partitions=sorted(ps))
        for topic_id, ps in sorted(partitions.items(), key=lambda i: topic_names.get(i[0], ""))
    ])


async def describe(ctx, request, answer: type, find: Callable[[Any, str], tuple], unknown: dict,
                   described: Callable[..., Any]):
    """ConsumerGroupDescribe, ShareGroupDescribe and StreamsGroupDescribe, answered with
    ``answer`` (the API's answer type): ``find(coordinator, group_id)`` gives (error,
    message, group or None); a group not found (or not allowed) is answered with
    ``unknown``'s fields, a found one by ``described(coordinator, group, topic_names,
    common)``, an ``answer.DescribedGroup`` of the ``common`` fields and its own (its
    members, assignor, topology)."""
    groups = ctx.node.groups
    await groups.ready()
    coordinator = groups.coordinator
    topic_names = {topic_id: name for name, (topic_id, _n) in coordinator.topics().items()}
    answers = []
    for group_id in request.group_ids:
        if ctx.allowed(DESCRIBE, GROUP, group_id):
            error, message, group = find(coordinator, group_id)
        else:
            error, message, group = GROUP_DENIED, None, None
        if group is None:
            answers.append(answer.DescribedGroup(error_code=error, error_message=message, group_id=group_id,
                                                 members=[], authorized_operations=NOT_REQUESTED, **unknown))
            continue
        answers.append(described(coordinator, group, topic_names, dict(
            error_code=error, error_message=None, group_id=group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            authorized_operations=authorized_operations(ctx, GROUP, group_id)
            if request.include_authorized_operations else NOT_REQUESTED)))
    return answer(groups=answers)
