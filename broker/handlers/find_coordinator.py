"""FindCoordinator (10): the node that owns a group's or transactional id's partition.

v0-v3 ask for one key, v4+ for a batch of keys (coordinator_keys). With the authorizer
on, a key needs DESCRIBE on its group or transactional id, as Kafka checks it: else
GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED and no node (v0-v3
with the error's message, as Kafka's error response carries it).
"""

from broker.security.acls import (
    DENIED_MESSAGES,
    DESCRIBE,
    GROUP,
    GROUP_DENIED,
    TRANSACTIONAL_ID,
    TRANSACTIONAL_ID_DENIED,
    allowed,
)
from broker.errors import code
from protocol.names import CONSUMER_OFFSETS, GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, TRANSACTION_STATE

API_KEY = 10


def _denied(ctx, key: str, key_type: int):
    if key_type == GROUP_KEY_TYPE and not allowed(ctx, DESCRIBE, GROUP, key):
        return GROUP_DENIED
    if key_type == TRANSACTION_KEY_TYPE and not allowed(ctx, DESCRIBE, TRANSACTIONAL_ID, key):
        return TRANSACTIONAL_ID_DENIED
    return None


def _answer(ctx, key: str, key_type: int) -> dict:
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return {"error_code": code("INVALID_REQUEST"), "error_message": f"unknown key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    denied = _denied(ctx, key, key_type)
    if denied is not None:
        return {"error_code": denied, "error_message": DENIED_MESSAGES[denied] if ctx.version < 4 else None,
                "node_id": -1, "host": "", "port": -1}
    # Transactions create their topic here; groups on their first request (as before).
    topic = TRANSACTION_STATE if key_type == TRANSACTION_KEY_TYPE else CONSUMER_OFFSETS
    if key_type == TRANSACTION_KEY_TYPE or topic in ctx.cluster.topics.by_name:
        ctx.broker.start_coordinators(topic)
    node = ctx.broker.coordinator_node(key, key_type)
    # a coordinator with no address on this request's listener: Kafka answers
    # COORDINATOR_NOT_AVAILABLE (it looks the node up by the request's listener)
    address = ctx.address(node) if node is not None and node.is_up else None
    if address is None:
        return {"error_code": code("COORDINATOR_NOT_AVAILABLE"), "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": 0, "error_message": None, "node_id": node.node_id, "host": address[0],
            "port": address[1]}


async def handle(ctx, request):
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if ctx.version >= 4:
        return {"coordinators": [{"key": k} | _answer(ctx, k, key_type) for k in request.coordinator_keys]}
    return _answer(ctx, request.key, key_type)
