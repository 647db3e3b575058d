"""InitProducerId (22): a producer id and epoch for an idempotent or transactional producer.

With a null transactional id any broker answers with a fresh producer id at epoch 0
(also when a KIP-360 client sends its current id and epoch: Kafka then hands out a new
id, since nothing else knows that producer). Transactional ids go to the coordinator,
which persists the new epoch before this answer leaves; it is handed the id a new
mapping would get and reports whether it took it.
"""

from broker.security.acls import TRANSACTIONAL_ID, WRITE, may_write_idempotently
from broker.errors import code
from coordinator.transaction.coordinator import NO_PRODUCER_ID, InitProducerIdResponse
from protocol.answer_wire import answer_type, ms

API_KEY = 22
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if request.transactional_id is None:
        if not may_write_idempotently(ctx):
            return Answer(error_code=code("CLUSTER_AUTHORIZATION_FAILED"), producer_id=-1, producer_epoch=-1)
        return Answer(error_code=0, producer_id=ctx.broker.producer_ids.next_producer_id(), producer_epoch=0)
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return Answer(error_code=code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"), producer_id=-1, producer_epoch=-1)
    txns = ctx.node.transactions
    invalid = txns.coordinator.init_producer_id_request_error(
        request.transactional_id, ms(request.transaction_timeout), getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1))
    if invalid is not None:  # answered before the coordinator could refuse it, as Kafka does
        return Answer(error_code=invalid, producer_id=-1, producer_epoch=-1)
    response = await txns.run(request.transactional_id, lambda: txns.coordinator.init_producer_id(
        request.transactional_id,
        ms(request.transaction_timeout),
        getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1),
        ctx.version,
        ctx.clock.now_ms(),
        # The allocator is asked only when the coordinator may take an id.
        ctx.broker.producer_ids.peek() if txns.coordinator.needs_producer_id(request.transactional_id)
        else NO_PRODUCER_ID,
    ), InitProducerIdResponse, reason="fenced")
    return Answer(error_code=response.error, producer_id=response.producer_id, producer_epoch=response.producer_epoch)
