"""EndTxn (26): PREPARE_COMMIT/PREPARE_ABORT is persisted before the answer; the markers
follow, then COMPLETE_*. v5 is transaction version 2 (KIP-890): the epoch is bumped at
the end of every transaction and the answer carries the producer id and new epoch (a new
producer id when the epoch is exhausted: the broker's next id is handed in for that).
With the authorizer on it needs WRITE on the transactional id, as in Kafka."""

import logging

from kio.schema.errors import ErrorCode

from broker.security.acls import TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED, WRITE
from coordinator.transaction.coordinator import FIRST_END_TXN_VERSION_OF_TV2, NO_PRODUCER_ID, EndTxnResponse
from protocol.answer_wire import answer_type

API_KEY = 26
Answer = answer_type(API_KEY)
log = logging.getLogger(__name__)


async def handle(ctx, request):
    if not ctx.allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return Answer(error_code=TRANSACTIONAL_ID_DENIED, producer_id=-1, producer_epoch=-1)
    txns = ctx.node.transactions
    response = await txns.run(request.transactional_id, lambda: txns.coordinator.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed, ctx.version,
        ctx.clock.now_ms(), _next_producer_id(ctx, txns.coordinator, request.transactional_id)), EndTxnResponse)
    if response.error is ErrorCode.invalid_txn_state:  # fatal for the client: say what the coordinator holds
        md = txns.coordinator.transaction_metadata(request.transactional_id)
        log.info("EndTxn(%s) of %s (producer %d, epoch %d): INVALID_TXN_STATE; the coordinator holds %s",
                 "commit" if request.committed else "abort", request.transactional_id, request.producer_id,
                 request.producer_epoch, "nothing" if md is None else
                 f"{md.state.state_name} (producer {md.producer_id}, epoch {md.producer_epoch}, partitions "
                 f"{sorted(md.topic_partitions)})")
    return Answer(error_code=response.error, producer_id=response.producer_id, producer_epoch=response.producer_epoch)


def _next_producer_id(ctx, coordinator, transactional_id):
    """The id an end that exhausts the epoch rotates to; the allocator is asked only then."""
    if ctx.version >= FIRST_END_TXN_VERSION_OF_TV2 and coordinator.needs_producer_id(transactional_id):
        return ctx.broker.producer_ids.peek()
    return NO_PRODUCER_ID
