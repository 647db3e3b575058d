"""FindCoordinator (10): the node that owns a group's or transactional id's partition.

v0-v3 ask for one key, v4+ for a batch of keys (coordinator_keys).
"""

from broker.errors import code
from protocol.names import CONSUMER_OFFSETS, GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, TRANSACTION_STATE

API_KEY = 10


def _answer(ctx, key: str, key_type: int) -> dict:
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return {"error_code": code("INVALID_REQUEST"), "error_message": f"unknown key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    # Transactions create their topic here; groups on their first request (as before).
    topic = TRANSACTION_STATE if key_type == TRANSACTION_KEY_TYPE else CONSUMER_OFFSETS
    if key_type == TRANSACTION_KEY_TYPE or topic in ctx.cluster.topics.by_name:
        ctx.broker.start_coordinators(topic)
    node = ctx.broker.coordinator_node(key, key_type)
    if node is None or not node.is_up:
        return {"error_code": code("COORDINATOR_NOT_AVAILABLE"), "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": 0, "error_message": None, "node_id": node.node_id, "host": node.host,
            "port": node.port}


async def handle(ctx, request):
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if ctx.version >= 4:
        return {"coordinators": [{"key": k} | _answer(ctx, k, key_type) for k in request.coordinator_keys]}
    return _answer(ctx, request.key, key_type)
