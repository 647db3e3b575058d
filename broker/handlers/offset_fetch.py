"""OffsetFetch (9): v1-v9; one group up to v7, a batch of groups from v8. With
require_stable (v7+) a partition whose offset is pending in an open transaction answers
UNSTABLE_OFFSET_COMMIT, so the consumer waits for the transaction to end."""

import dataclasses

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, TOPIC, TOPIC_DENIED
from coordinator.group import OffsetFetchGroup
from coordinator.group.messages import FetchedPartition, FetchedTopic, OffsetFetchResponseGroup
from protocol.answer_wire import answer_from, answer_type

API_KEY = 9
Answer = answer_type(API_KEY)
FIRST_VERSION_WITH_GROUP_ERROR = 2
FIRST_BATCHED_VERSION = 8


def _wanted(group_id: str, topics, member_id: str | None = None, member_epoch: int = -1) -> OffsetFetchGroup:
    wanted = None if topics is None else tuple((t.name, tuple(t.partition_indexes)) for t in topics)
    return OffsetFetchGroup(group_id, wanted, member_id, member_epoch)


def _authorized(ctx, group: OffsetFetchGroup, answer) -> OffsetFetchResponseGroup:
    """The group's answer as the client may see it: DESCRIBE on the group, else
    GROUP_AUTHORIZATION_FAILED; requested topics it may not describe get
    TOPIC_AUTHORIZATION_FAILED, and "every topic" leaves them out, as Kafka answers."""
    if answer is None:
        return OffsetFetchResponseGroup(group.group_id, GROUP_DENIED)
    topics = []
    for t in answer.topics:
        if ctx.allowed(DESCRIBE, TOPIC, t.name):
            topics.append(t)
        elif group.topics is not None:
            topics.append(FetchedTopic(t.name, tuple(FetchedPartition(p.partition_index, error_code=TOPIC_DENIED)
                                                      for p in t.partitions)))
    return dataclasses.replace(answer, topics=tuple(topics))


def _fetch(ctx, wanted: list[OffsetFetchGroup], require_stable: bool) -> list[OffsetFetchResponseGroup]:
    may = [g for g in wanted if ctx.allowed(DESCRIBE, GROUP, g.group_id)]
    answers = iter(ctx.node.groups.coordinator.offset_fetch(may, require_stable).groups)
    return [_authorized(ctx, g, next(answers) if g in may else None) for g in wanted]


async def handle(ctx, request):
    groups = ctx.node.groups
    await groups.ready()
    require_stable = getattr(request, "require_stable", False)
    if ctx.version >= FIRST_BATCHED_VERSION:
        answered = _fetch(ctx, [_wanted(g.group_id, g.topics, getattr(g, "member_id", None),
                                        getattr(g, "member_epoch", -1)) for g in request.groups], require_stable)
        return Answer(groups=[answer_from(Answer.OffsetFetchResponseGroup, g) for g in answered])
    (group,) = _fetch(ctx, [_wanted(request.group_id, request.topics)], require_stable)
    topics = [answer_from(Answer.OffsetFetchResponseTopic, t) for t in group.topics]
    if ctx.version < FIRST_VERSION_WITH_GROUP_ERROR and group.error_code:
        # v1 has no group-level error: each requested partition carries it.
        topics = [Answer.OffsetFetchResponseTopic(name=t.name, partitions=[
            Answer.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="",
                                                error_code=group.error_code)
            for p in t.partition_indexes]) for t in request.topics]
    return Answer(groups=(), topics=topics, error_code=group.error_code)
