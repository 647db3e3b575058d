"""AddPartitionsToTxn (24): v0-v3 from producers, one transaction per request; v4+ from
brokers, batched, optionally VerifyOnly (KIP-890 verification of a produce).

Checked as Kafka checks them: v4+ needs CLUSTER_ACTION on the cluster (else the whole
answer is CLUSTER_AUTHORIZATION_FAILED); v0-v3 need WRITE on the transactional id (else
every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic, which an
internal topic never has (TOPIC_AUTHORIZATION_FAILED, also with the authorizer off).
Partitions refused so, or of unknown topics (UNKNOWN_TOPIC_OR_PARTITION), fail the
transaction's request: the others are then not attempted (OPERATION_NOT_ATTEMPTED).
"""

from broker.security.acls import (
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_DENIED,
    CLUSTER_NAME,
    TOPIC,
    TOPIC_DENIED,
    TRANSACTIONAL_ID,
    TRANSACTIONAL_ID_DENIED,
    WRITE,
)
from broker.errors import code
from protocol.answer_wire import answer_type
from protocol.names import INTERNAL_TOPICS

API_KEY = 24
Answer = answer_type(API_KEY)
FIRST_BROKER_VERSION = 4


def _by_topic(errors: dict) -> list:
    topics: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append(
            Answer.AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=error))
    return [Answer.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in topics.items()]


def _refused(ctx, transactional_id: str, partitions: list) -> dict | None:
    """Per-partition errors when the request fails before the coordinator, else None."""
    from_client = ctx.version < FIRST_BROKER_VERSION
    if from_client and not ctx.allowed(WRITE, TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, TRANSACTIONAL_ID_DENIED)
    errors = {}
    for tp in partitions:
        if from_client and (tp[0] in INTERNAL_TOPICS or not ctx.allowed(WRITE, TOPIC, tp[0])):
            errors[tp] = TOPIC_DENIED
        elif not ctx.cluster.has_partition(*tp):
            errors[tp] = code("UNKNOWN_TOPIC_OR_PARTITION")
    if not errors:
        return None
    return {tp: errors.get(tp, code("OPERATION_NOT_ATTEMPTED")) for tp in partitions}


async def _one(ctx, transactional_id, producer_id, producer_epoch, topics, verify_only: bool) -> dict:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    refused = _refused(ctx, transactional_id, partitions)
    if refused is not None:
        return refused
    txns = ctx.node.transactions
    if verify_only:
        txns.ensure_ready()
        return txns.coordinator.verify_partitions_in_txn(transactional_id, producer_id, producer_epoch,
                                                         partitions).response.errors
    response = await txns.add_partitions(transactional_id, producer_id, producer_epoch, partitions, ctx.version)
    return {tp: response.error for tp in partitions}


async def handle(ctx, request):
    if ctx.version < FIRST_BROKER_VERSION:
        errors = await _one(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
        return Answer(error_code=0, results_by_transaction=(), results_by_topic_v3_and_below=_by_topic(errors))
    if not ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        return Answer(error_code=CLUSTER_DENIED, results_by_transaction=())
    results = []
    for txn in request.transactions:
        errors = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                            txn.verify_only)
        results.append(Answer.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                       topic_results=_by_topic(errors)))
    return Answer(error_code=0, results_by_transaction=results)
