"""DescribeTransactions (65): the coordinator's view of each transactional id
(kafka-transactions.sh describe). Per-id errors are the coordinator's:
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND."""

API_KEY = 65


def _state(d) -> dict:
    if d.error:
        # Kafka leaves every other field at its schema default (0) when the id has no state.
        return {"error_code": d.error, "transactional_id": d.transactional_id, "transaction_state": "",
                "transaction_timeout_ms": 0, "transaction_start_time_ms": 0, "producer_id": 0,
                "producer_epoch": 0, "topics": []}
    return {
        "error_code": d.error,
        "transactional_id": d.transactional_id,
        "transaction_state": d.state,
        "transaction_timeout_ms": d.transaction_timeout_ms,
        "transaction_start_time_ms": d.transaction_start_time_ms,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "topics": [{"topic": topic, "partitions": list(partitions)} for topic, partitions in d.topics],
    }


async def handle(ctx, request):
    described = ctx.node.transactions.coordinator.describe_transactions(request.transactional_ids)
    return {"transaction_states": [_state(d) for d in described]}
