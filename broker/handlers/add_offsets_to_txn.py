"""AddOffsetsToTxn (25): adds the group's __consumer_offsets partition to the transaction,
so its offsets (TxnOffsetCommit) commit or abort with it."""


from broker.security.acls import GROUP, GROUP_DENIED, READ, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED, WRITE
from coordinator.transaction.coordinator import AddPartitionsResponse
from protocol.answer_wire import answer_type

API_KEY = 25
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return Answer(error_code=TRANSACTIONAL_ID_DENIED)
    if not ctx.allowed(READ, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED)
    txns = ctx.node.transactions
    response = await txns.run(request.transactional_id, lambda: txns.coordinator.add_offsets_to_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, ctx.version,
        ctx.clock.now_ms()), AddPartitionsResponse)
    return Answer(error_code=response.error)
