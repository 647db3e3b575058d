"""DeleteRecords (21): moves a partition's log start offset (-1 means the high watermark)."""

from broker.errors import code
from broker.log.partition_log import OffsetOutOfRange

API_KEY = 21


async def handle(ctx, request):
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            part, error = ctx.led_partition(t.name, p.partition_index)
            result = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            if error is not None:
                result["error_code"] = code(error)
            else:
                offset = part.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > part.high_watermark:
                    result["error_code"] = code("OFFSET_OUT_OF_RANGE")
                else:
                    try:
                        result["low_watermark"] = part.log.delete_records_before(max(offset, part.log_start_offset))
                        part.log_start_moved()
                    except OffsetOutOfRange:
                        result["error_code"] = code("OFFSET_OUT_OF_RANGE")
            partitions.append(result)
        topics.append({"name": t.name, "partitions": partitions})
    return {"topics": topics}
