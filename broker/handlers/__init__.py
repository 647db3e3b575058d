"""One module per Kafka API, named after it; each exposes API_KEY and ``async handle(ctx, request)``.

A handler returns the response as a dict of Kafka field names (built into the
negotiated version's kio dataclass by the server), a kio response, or None when
no response is sent (Produce with acks=0).
"""

from importlib import import_module

_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "find_coordinator",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "delete_records",
    "describe_configs",
    "describe_cluster",
    "init_producer_id",
    "describe_producers",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "describe_transactions",
    "list_transactions",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "describe_groups",
    "list_groups",
    "delete_groups",
    "offset_commit",
    "offset_fetch",
    "offset_delete",
    "txn_offset_commit",
)

HANDLERS = {}
for _name in _MODULES:
    _module = import_module(f"{__name__}.{_name}")
    HANDLERS[_module.API_KEY] = _module.handle
