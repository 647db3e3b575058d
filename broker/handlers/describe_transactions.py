"""DescribeTransactions (65): the coordinator's view of each transactional id
(kafka-transactions.sh describe). Per-id errors are the coordinator's:
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND. With the
authorizer on, an id needs DESCRIBE (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and only
the topics the client may describe are listed, as in Kafka."""

from broker.security.acls import DESCRIBE, TOPIC, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED
from protocol.answer_wire import answer_type

API_KEY = 65
Answer = answer_type(API_KEY)


def _error(error, transactional_id: str):
    # Kafka leaves every other field at its schema default (0) when the id has no state.
    return Answer.TransactionState(error_code=error, transactional_id=transactional_id, transaction_state="",
                                   transaction_timeout_ms=0, transaction_start_time_ms=0, producer_id=0,
                                   producer_epoch=0, topics=())


def _state(ctx, d):
    if d.error:
        return _error(d.error, d.transactional_id)
    return Answer.TransactionState(
        error_code=d.error,
        transactional_id=d.transactional_id,
        transaction_state=d.state,
        transaction_timeout_ms=d.transaction_timeout_ms,
        transaction_start_time_ms=d.transaction_start_time_ms,
        producer_id=d.producer_id,
        producer_epoch=d.producer_epoch,
        topics=[Answer.TopicData(topic=topic, partitions=list(partitions)) for topic, partitions in d.topics
                if ctx.allowed(DESCRIBE, TOPIC, topic)],
    )


async def handle(ctx, request):
    ids = [i for i in request.transactional_ids if ctx.allowed(DESCRIBE, TRANSACTIONAL_ID, i)]
    described = {d.transactional_id: d for d in ctx.node.transactions.coordinator.describe_transactions(ids)}
    return Answer(transaction_states=[_state(ctx, described[i]) if i in described
                                      else _error(TRANSACTIONAL_ID_DENIED, i) for i in request.transactional_ids])
