"""ListTransactions (66): the transactions of the coordinator partitions this broker
serves, filtered by state, producer id, duration (v1) and id pattern (v2), and with the
authorizer on to the ids the client may describe, as in Kafka."""

from broker.security.acls import DESCRIBE, TRANSACTIONAL_ID
from protocol.answer_wire import answer_type

API_KEY = 66
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    response = ctx.node.transactions.coordinator.list_transactions(
        state_filters=request.state_filters,
        producer_id_filters=request.producer_id_filters,
        duration_filter_ms=getattr(request, "duration_filter", -1),
        transactional_id_pattern=getattr(request, "transactional_id_pattern", None),
        now_ms=ctx.clock.now_ms(),
    )
    return Answer(
        error_code=response.error,
        unknown_state_filters=list(response.unknown_state_filters),
        transaction_states=[
            Answer.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                    transaction_state=t.state)
            for t in response.transaction_states if ctx.allowed(DESCRIBE, TRANSACTIONAL_ID, t.transactional_id)
        ],
    )
