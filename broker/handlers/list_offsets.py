"""ListOffsets (2), v1+: earliest, latest, by timestamp, max timestamp.

Latest is the high watermark, or the last stable offset under read_committed; a
timestamp lookup finds the batch through the time index and the record inside it.
"""

from __future__ import annotations

import logging

from broker.security.acls import DESCRIBE, TOPIC
from broker.errors import code
from broker.log.descriptors import storage_error
from protocol.records import record_at_or_after_timestamp, record_with_max_timestamp
from protocol.answer_wire import answer_type

log = logging.getLogger(__name__)

API_KEY = 2
Answer = answer_type(API_KEY)
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1


def _lookup(part, timestamp: int, committed: bool) -> tuple[int, int]:
    """(offset, timestamp) Kafka answers for one partition; -1 where nothing matches."""
    upper = part.last_stable_offset if committed else part.high_watermark
    if timestamp in (LATEST, LATEST_TIERED):
        return upper, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return part.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = part.log.max_timestamp()
        if found is None:
            return -1, -1
        record = record_with_max_timestamp(found[1])
        return (record.offset, record.timestamp) if record.offset < upper else (-1, -1)
    batch = part.log.find_offset_by_timestamp(timestamp)
    while batch is not None and batch.base_offset < upper:
        record = record_at_or_after_timestamp(batch, timestamp)
        if record is not None:
            if record.offset < part.log_start_offset:
                return part.log_start_offset, record.timestamp
            return (record.offset, record.timestamp) if record.offset < upper else (-1, -1)
        batch = next(iter(part.log.batches(batch.next_offset)), None)
    return -1, -1


async def handle(ctx, request):
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in request.topics:
        partitions = []
        describable = ctx.allowed(DESCRIBE, TOPIC, t.name)
        for p in t.partitions:
            part, error = ctx.led_partition(t.name, p.partition_index,
                                            current_leader_epoch=getattr(p, "current_leader_epoch", -1))
            if not describable:
                part, error = None, "TOPIC_AUTHORIZATION_FAILED"
            result = Answer.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0,
                                                         timestamp=-1, offset=-1, leader_epoch=-1)
            if error is not None:
                result = result._replace(error_code=code(error))
            elif p.timestamp < 0 and p.timestamp not in (LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED):
                result = result._replace(error_code=code("INVALID_REQUEST"))
            else:
                try:
                    offset, timestamp = _lookup(part, p.timestamp, committed)
                    result = result._replace(offset=offset, timestamp=timestamp, leader_epoch=part.log.leader_epoch)
                except OSError as e:  # out of file descriptors, a failing disk
                    log.warning("list offsets of %s-%d failed: %s", t.name, p.partition_index, storage_error(e))
                    result = result._replace(error_code=code("KAFKA_STORAGE_ERROR"))
            partitions.append(result)
        topics.append(Answer.ListOffsetsTopicResponse(name=t.name, partitions=partitions))
    return Answer(topics=topics)
