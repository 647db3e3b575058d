"""DeleteRecords (21): moves a partition's log start offset (-1 means the high watermark)."""

from broker.errors import code
from broker.log.partition_log import OffsetOutOfRange
from protocol.answer_wire import answer_type

API_KEY = 21
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            part, error = ctx.led_partition(t.name, p.partition_index)
            result = Answer.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                                         error_code=0)
            if error is not None:
                result = result._replace(error_code=code(error))
            else:
                offset = part.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > part.high_watermark:
                    result = result._replace(error_code=code("OFFSET_OUT_OF_RANGE"))
                else:
                    try:
                        result = result._replace(
                            low_watermark=part.log.delete_records_before(max(offset, part.log_start_offset)))
                        part.log_start_moved()
                    except OffsetOutOfRange:
                        result = result._replace(error_code=code("OFFSET_OUT_OF_RANGE"))
            partitions.append(result)
        topics.append(Answer.DeleteRecordsTopicResult(name=t.name, partitions=partitions))
    return Answer(topics=topics)
