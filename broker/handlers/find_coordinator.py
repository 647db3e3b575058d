"""FindCoordinator (10): the node that owns a group's or transactional id's partition, or
(key type 2, where share groups are on) a share-partition's ("group:topic id:partition")
partition of __share_group_state, which brokers ask for (CLUSTER_ACTION).

v0-v3 ask for one key, v4+ for a batch of keys (coordinator_keys). With the authorizer
on, a key needs DESCRIBE on its group or transactional id, as Kafka checks it: else
GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED and no node (v0-v3
with the error's message, as Kafka's error response carries it).
"""

from broker.security.acls import (
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_DENIED,
    CLUSTER_NAME,
    DENIED_MESSAGES,
    DESCRIBE,
    GROUP,
    GROUP_DENIED,
    TRANSACTIONAL_ID,
    TRANSACTIONAL_ID_DENIED,
)
from broker.errors import code
from protocol.answer_wire import answer_type
from protocol.names import (
    CONSUMER_OFFSETS, GROUP_KEY_TYPE, SHARE_GROUP_STATE, SHARE_KEY_TYPE, TRANSACTION_KEY_TYPE, TRANSACTION_STATE,
)

API_KEY = 10
Answer = answer_type(API_KEY)


def _denied(ctx, key: str, key_type: int):
    if key_type == GROUP_KEY_TYPE and not ctx.allowed(DESCRIBE, GROUP, key):
        return GROUP_DENIED
    if key_type == TRANSACTION_KEY_TYPE and not ctx.allowed(DESCRIBE, TRANSACTIONAL_ID, key):
        return TRANSACTIONAL_ID_DENIED
    if key_type == SHARE_KEY_TYPE and not ctx.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        return CLUSTER_DENIED
    return None


def _share_key_valid(key: str) -> bool:
    parts = key.rsplit(":", 2)
    return len(parts) == 3 and all(parts) and parts[2].lstrip("-").isdigit()


def _answer(ctx, key: str, key_type: int):
    """The coordinator of one key: each of v4+'s coordinators, and what v0-v3 answer with."""
    shares_on = "share.version" in ctx.broker.apis.features
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) and not (key_type == SHARE_KEY_TYPE and shares_on):
        return _no_coordinator(key, code("INVALID_REQUEST"), f"unknown key type {key_type}")
    if key_type == SHARE_KEY_TYPE and not _share_key_valid(key):
        return _no_coordinator(key, code("INVALID_REQUEST"), "Invalid coordinator key.")
    denied = _denied(ctx, key, key_type)
    if denied is not None:
        return _no_coordinator(key, denied, DENIED_MESSAGES[denied] if ctx.version < 4 else None)
    # The coordinator's topic is created here, as Kafka's FindCoordinator creates it.
    topic = {TRANSACTION_KEY_TYPE: TRANSACTION_STATE, SHARE_KEY_TYPE: SHARE_GROUP_STATE}.get(key_type, CONSUMER_OFFSETS)
    ctx.broker.start_coordinators(topic)
    node = ctx.broker.coordinator_node(key, key_type)
    # a coordinator with no address on this request's listener: Kafka answers
    # COORDINATOR_NOT_AVAILABLE (it looks the node up by the request's listener)
    address = ctx.address(node) if node is not None and node.is_up else None
    if address is None:
        return _no_coordinator(key, code("COORDINATOR_NOT_AVAILABLE"), None)
    return Answer.Coordinator(key=key, error_code=0, error_message=None, node_id=node.node_id, host=address[0],
                              port=address[1])


def _no_coordinator(key: str, error_code: int, error_message: str | None):
    return Answer.Coordinator(key=key, error_code=error_code, error_message=error_message, node_id=-1, host="",
                              port=-1)


async def handle(ctx, request):
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if ctx.version >= 4:
        return Answer(coordinators=[_answer(ctx, k, key_type) for k in request.coordinator_keys])
    c = _answer(ctx, request.key, key_type)
    return Answer(coordinators=(), error_code=c.error_code, error_message=c.error_message, node_id=c.node_id,
                  host=c.host, port=c.port)
