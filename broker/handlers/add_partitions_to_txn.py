"""AddPartitionsToTxn (24): v0-v3 from producers, one transaction per request; v4+ from
brokers, batched, optionally VerifyOnly (KIP-890 verification of a produce).

Partitions of unknown topics fail with UNKNOWN_TOPIC_OR_PARTITION and the others are
then not attempted (OPERATION_NOT_ATTEMPTED), as Kafka does.
"""

from broker.errors import code

API_KEY = 24


def _by_topic(errors: dict) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": error})
    return [{"name": t, "results_by_partition": ps} for t, ps in topics.items()]


async def _one(ctx, transactional_id, producer_id, producer_epoch, topics, verify_only: bool) -> dict:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    unknown = {tp for tp in partitions if ctx.cluster.partition(*tp) is None}
    if unknown:
        return {tp: code("UNKNOWN_TOPIC_OR_PARTITION") if tp in unknown else code("OPERATION_NOT_ATTEMPTED")
                for tp in partitions}
    txns = ctx.node.transactions
    if verify_only:
        return txns.coordinator.verify_partitions_in_txn(transactional_id, producer_id, producer_epoch,
                                                         partitions).response.errors
    response = await txns.run(transactional_id, lambda: txns.coordinator.add_partitions_to_txn(
        transactional_id, producer_id, producer_epoch, partitions, ctx.version, ctx.clock.now_ms()))
    return {tp: response.error for tp in partitions}


async def handle(ctx, request):
    if ctx.version < 4:
        errors = await _one(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
        return {"results_by_topic_v3_and_below": _by_topic(errors)}
    results = []
    for txn in request.transactions:
        errors = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                            txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _by_topic(errors)})
    return {"error_code": 0, "results_by_transaction": results}
