"""InitProducerId (22): a producer id and epoch for an idempotent or transactional producer.

With a null transactional id any broker answers with a fresh producer id at epoch 0
(also when a KIP-360 client sends its current id and epoch: Kafka then hands out a new
id, since nothing else knows that producer). Transactional ids go to the coordinator.
"""

from broker.errors import code

API_KEY = 22


async def handle(ctx, request):
    if request.transactional_id is None:
        return {"error_code": 0, "producer_id": ctx.broker.producer_ids.next_producer_id(), "producer_epoch": 0}
    return await ctx.broker.transactions.init_producer_id(ctx, request)


def error(name: str) -> dict:
    return {"error_code": code(name), "producer_id": -1, "producer_epoch": -1}
