"""DescribeLogDirs (35): the one data directory, its partitions' sizes and the disk's
total and usable bytes (v4)."""

import shutil
from protocol.answer_wire import answer_type

API_KEY = 35
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    cluster = ctx.cluster
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list] = {}
    for topic, index in sorted(cluster.partition_keys()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        if cluster.leader_of(topic, index) != ctx.connection.node_id:
            continue
        by_topic.setdefault(topic, []).append(Answer.DescribeLogDirsPartition(
            partition_index=index, partition_size=cluster.partition_size(topic, index), offset_lag=0,
            is_future_key=False))
    try:
        usage = shutil.disk_usage(cluster.data_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    return Answer(error_code=0, results=[Answer.DescribeLogDirsResult(
        error_code=0, log_dir=str(cluster.data_dir.resolve()),
        topics=[Answer.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        total_bytes=total, usable_bytes=usable)])
