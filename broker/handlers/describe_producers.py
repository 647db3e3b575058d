"""DescribeProducers (61): the active producers of each partition (kafka-transactions.sh
describe-producers), from the partition's producer state."""

from broker.errors import code

API_KEY = 61


async def handle(ctx, request):
    topics = []
    for t in request.topics:
        partitions = []
        for index in t.partition_indexes:
            part, error = ctx.led_partition(t.name, index)
            if error is not None:
                partitions.append({"partition_index": index, "error_code": code(error),
                                   "error_message": None, "active_producers": []})
                continue
            partitions.append({
                "partition_index": index,
                "error_code": 0,
                "error_message": None,
                "active_producers": [
                    {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                     "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                     "coordinator_epoch": p.coordinator_epoch,
                     "current_txn_start_offset": p.current_txn_start_offset}
                    for p in part.producer_state.describe()
                ],
            })
        topics.append({"name": t.name, "partitions": partitions})
    return {"topics": topics}
