"""FindCoordinator (10): the node that owns a group's or transactional id's partition.

v0-v3 ask for one key, v4+ for a batch of keys (coordinator_keys).
"""

from broker.errors import code

API_KEY = 10
GROUP, TRANSACTION = 0, 1


def _answer(ctx, key: str, key_type: int) -> dict:
    if key_type not in (GROUP, TRANSACTION):
        return {"error_code": code("INVALID_REQUEST"), "error_message": f"unknown key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    # Transactions create their topic here; groups on their first request (as before).
    topic = "__transaction_state" if key_type == TRANSACTION else "__consumer_offsets"
    if key_type == TRANSACTION or topic in ctx.cluster.topics.by_name:
        ctx.broker.start_coordinators(topic)
    node = ctx.broker.coordinator_node(key, key_type)
    if node is None or not node.is_up:
        return {"error_code": code("COORDINATOR_NOT_AVAILABLE"), "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": 0, "error_message": None, "node_id": node.node_id, "host": node.host,
            "port": node.port}


async def handle(ctx, request):
    key_type = getattr(request, "key_type", GROUP)
    if ctx.version >= 4:
        return {"coordinators": [{"key": k} | _answer(ctx, k, key_type) for k in request.coordinator_keys]}
    return _answer(ctx, request.key, key_type)
