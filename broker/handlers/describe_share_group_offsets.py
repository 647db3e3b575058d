"""DescribeShareGroupOffsets (90): v0-v1. Each share-partition's start offset (and, v1,
its lag) as the share coordinator keeps it; -1 for one that has no state. Without
topics: every topic the group has consumed."""

from broker.security.acls import DESCRIBE, GROUP, GROUP_DENIED, TOPIC
from broker.handlers.share_group_offsets import group_error, lag, read
from coordinator.share.state_log_codec import StateKey
from protocol.answer_wire import answer_type

API_KEY = 90
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    out = []
    for g in request.groups:
        if not ctx.allowed(DESCRIBE, GROUP, g.group_id):
            out.append(Answer.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[],
                                                                  error_code=GROUP_DENIED))
            continue
        error, message, group = await group_error(ctx, g.group_id, must_be_empty=False)
        if group is None:
            out.append(Answer.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[], error_code=error,
                                                                  error_message=message))
            continue
        if g.topics is None:
            wanted = [(name, sorted(ps)) for name, ps in group.initialized.values()]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
        topics = []
        for name, partitions in wanted:
            info = ctx.cluster.topics.by_name.get(name)
            if info is None or not ctx.allowed(DESCRIBE, TOPIC, name):
                continue  # as Kafka: topics it cannot describe are left out
            answers = []
            for index in partitions:
                snapshot = await read(ctx, StateKey(g.group_id, info.topic_id, index))
                part = ctx.cluster.partition(name, index) if index < info.partitions else None
                answers.append(Answer.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=index, error_code=0,
                    start_offset=-1 if snapshot is None else snapshot.start_offset,
                    leader_epoch=-1 if snapshot is None else snapshot.leader_epoch,
                    lag=-1 if snapshot is None or part is None else lag(snapshot, part.high_watermark),
                ))
            topics.append(Answer.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=info.topic_id,
                                                                     partitions=answers))
        out.append(Answer.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=topics, error_code=0))
    return Answer(groups=out)
