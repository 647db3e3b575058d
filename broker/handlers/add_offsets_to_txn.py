"""AddOffsetsToTxn (25): adds the group's __consumer_offsets partition to the transaction,
so its offsets (TxnOffsetCommit) commit or abort with it."""


API_KEY = 25


async def handle(ctx, request):
    txns = ctx.node.transactions
    response = await txns.run(request.transactional_id, lambda: txns.coordinator.add_offsets_to_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, ctx.version,
        ctx.clock.now_ms()))
    return {"error_code": response.error}
