"""DescribeConfigs (32): topic and broker configs with their sources and synonyms."""

from __future__ import annotations

from broker.config import SETTINGS, TOPIC_DEFAULTS
from broker.errors import code
from broker.topic_configs import TOPIC_CONFIGS
from broker.topics import effective_topic_config

API_KEY = 32
TOPIC, BROKER = 2, 4
# ConfigSource ids (DescribeConfigsResponse.json)
TOPIC_CONFIG, DYNAMIC_BROKER, STATIC_BROKER, DEFAULT = 1, 2, 4, 5
# ConfigType ids (v3+), by Kafka's ConfigDef type name and by Python type
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7,
                   "CLASS": 8, "PASSWORD": 9}
_TYPES = {bool: 1, str: 2, int: 5, float: 6}


def _entry(name, value, source, synonyms, kind, doc, read_only=False) -> dict:
    return {"name": name, "value": None if value is None else _render(value), "read_only": read_only,
            "config_source": source, "is_sensitive": False,
            "synonyms": synonyms, "config_type": CONFIG_TYPE_IDS.get(kind, 0) if isinstance(kind, str)
            else _TYPES.get(kind, 0), "documentation": doc or None}


def _render(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _topic_entries(ctx, name: str, keys, with_synonyms: bool) -> list[dict]:
    cluster = ctx.cluster
    info = cluster.topics.by_name[name]
    values = effective_topic_config(info, cluster.config)
    out = []
    for key, value in sorted(values.items()):
        if keys is not None and key not in keys:
            continue
        broker_key = TOPIC_DEFAULTS.get(key)
        synonyms = []
        if key in info.configs:
            source = TOPIC_CONFIG
            synonyms.append({"name": key, "value": info.configs[key], "source": TOPIC_CONFIG})
        else:
            source = STATIC_BROKER if broker_key in cluster.config.explicit else DEFAULT
        if broker_key and with_synonyms:
            synonyms.append({"name": broker_key, "value": _render(cluster.config[broker_key]),
                             "source": STATIC_BROKER if broker_key in cluster.config.explicit else DEFAULT})
        out.append(_entry(key, value, source, synonyms if with_synonyms else [], TOPIC_CONFIGS[key].kind, ""))
    return out


def _broker_entries(ctx, keys) -> list[dict]:
    config = ctx.cluster.config
    out = []
    for key, value in sorted(config.items()):
        if keys is not None and key not in keys:
            continue
        source = STATIC_BROKER if key in config.explicit else DEFAULT
        # Broker settings are static: they change only with a restart.
        out.append(_entry(key, value, source, [], type(SETTINGS[key].default), SETTINGS[key].doc, read_only=True))
    return out


async def handle(ctx, request):
    results = []
    with_synonyms = getattr(request, "include_synonyms", False)
    for r in request.resources:
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        result = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                  "resource_name": r.resource_name, "configs": []}
        if r.resource_type == TOPIC:
            if r.resource_name not in ctx.cluster.topics.by_name:
                result.update(error_code=code("UNKNOWN_TOPIC_OR_PARTITION"),
                              error_message=f"Topic {r.resource_name} does not exist")
            else:
                result["configs"] = _topic_entries(ctx, r.resource_name, keys, with_synonyms)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(ctx.connection.node_id)):
                result.update(error_code=code("INVALID_REQUEST"),
                              error_message=f"Unexpected broker id, expected {ctx.connection.node_id}")
            else:
                result["configs"] = _broker_entries(ctx, keys)
        else:
            result.update(error_code=code("INVALID_REQUEST"),
                          error_message=f"Unsupported resource type {r.resource_type}")
        results.append(result)
    return {"results": results}
