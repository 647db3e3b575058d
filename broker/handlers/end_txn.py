"""EndTxn (26), transaction version 1: PREPARE_COMMIT/PREPARE_ABORT is persisted before
the answer; the markers follow, then COMPLETE_*."""


API_KEY = 26


async def handle(ctx, request):
    txns = ctx.node.transactions
    response = await txns.run(request.transactional_id, lambda: txns.coordinator.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed, ctx.version,
        ctx.clock.now_ms()))
    return {"error_code": response.error, "producer_id": -1, "producer_epoch": -1}
