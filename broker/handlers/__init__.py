"""One module per Kafka API, named after it; each exposes API_KEY and ``async handle(ctx, request)``.

A handler returns the response as a dict of Kafka field names (built into the
negotiated version's kio dataclass by the server), a kio response, or None when
no response is sent (Produce with acks=0).
"""

from collections.abc import Mapping
from importlib import import_module

# API key -> module. Modules load on first use: a broker that never sees a group or
# a transaction never imports their coordinators, which keeps start-up short.
_MODULES = {
    0: "produce",
    1: "fetch",
    2: "list_offsets",
    3: "metadata",
    8: "offset_commit",
    9: "offset_fetch",
    10: "find_coordinator",
    11: "join_group",
    12: "heartbeat",
    13: "leave_group",
    14: "sync_group",
    15: "describe_groups",
    16: "list_groups",
    17: "sasl_handshake",
    18: "api_versions",
    19: "create_topics",
    20: "delete_topics",
    21: "delete_records",
    22: "init_producer_id",
    23: "offset_for_leader_epoch",
    24: "add_partitions_to_txn",
    25: "add_offsets_to_txn",
    26: "end_txn",
    27: "write_txn_markers",
    28: "txn_offset_commit",
    29: "describe_acls",
    30: "create_acls",
    31: "delete_acls",
    32: "describe_configs",
    33: "alter_configs",
    35: "describe_log_dirs",
    36: "sasl_authenticate",
    37: "create_partitions",
    42: "delete_groups",
    43: "elect_leaders",
    44: "incremental_alter_configs",
    45: "alter_partition_reassignments",
    46: "list_partition_reassignments",
    47: "offset_delete",
    50: "describe_user_scram_credentials",
    51: "alter_user_scram_credentials",
    60: "describe_cluster",
    61: "describe_producers",
    65: "describe_transactions",
    66: "list_transactions",
    68: "consumer_group_heartbeat",
    69: "consumer_group_describe",
    76: "share_group_heartbeat",
    77: "share_group_describe",
    78: "share_fetch",
    79: "share_acknowledge",
    83: "initialize_share_group_state",
    84: "read_share_group_state",
    85: "write_share_group_state",
    86: "delete_share_group_state",
    87: "read_share_group_state_summary",
    88: "streams_group_heartbeat",
    89: "streams_group_describe",
    90: "describe_share_group_offsets",
    91: "alter_share_group_offsets",
    92: "delete_share_group_offsets",
}


class _Handlers(Mapping):
    def __init__(self, modules: dict[int, str]) -> None:
        self._modules = modules
        self._loaded: dict[int, object] = {}

    def __getitem__(self, api_key: int):
        handle = self._loaded.get(api_key)
        if handle is None:
            module = import_module(f"{__name__}.{self._modules[api_key]}")
            if module.API_KEY != api_key:
                raise RuntimeError(f"{module.__name__} handles API {module.API_KEY}, not {api_key}")
            handle = self._loaded[api_key] = module.handle
        return handle

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._modules

    def __iter__(self):
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


HANDLERS = _Handlers(_MODULES)
