"""DescribeConfigs (32): topic, broker and group configs with Kafka's sources and synonyms."""

from __future__ import annotations

from broker.config import SETTINGS, TOPIC_DEFAULTS, properties_text
from broker.cluster.dynamic_configs import DYNAMIC_BROKER_SETTINGS, GROUP_CONFIG_SYNONYMS, GROUP_CONFIGS
from broker.errors import code
from broker.kafka_settings import REQUIRED, kafka_setting
from broker.cluster.topic_configs import TOPIC_CONFIGS
from broker.cluster.topics import effective_topic_config
from protocol.answer_wire import answer_type

API_KEY = 32
Answer = answer_type(API_KEY)
TOPIC, BROKER, GROUP = 2, 4, 32
# ConfigSource ids (DescribeConfigsResponse.json)
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT, GROUP_CONFIG = 1, 2, 3, 4, 5, 8
_SOURCES = {"dynamic": DYNAMIC_BROKER, "dynamic_default": DYNAMIC_DEFAULT_BROKER, "static": STATIC_BROKER,
            "default": DEFAULT}
# ConfigType ids (v3+), by Kafka's ConfigDef type name and by Python type
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7,
                   "CLASS": 8, "PASSWORD": 9}
_TYPES = {bool: 1, str: 2, int: 5, float: 6}


def _entry(name, value, source, synonyms: list[dict], kind, doc, read_only=False):
    return Answer.DescribeConfigsResourceResult(
        name=name, value=None if value is None else _render(value), read_only=read_only, config_source=source,
        is_sensitive=False, synonyms=[Answer.DescribeConfigsSynonym(**s) for s in synonyms],
        config_type=CONFIG_TYPE_IDS.get(kind, 0) if isinstance(kind, str) else _TYPES.get(kind, 0),
        documentation=doc or None)


_render = properties_text


def _broker_synonyms(config, key: str) -> list[dict]:
    """A broker setting at every level that sets it, most specific first (Kafka's order)."""
    out = []
    if key in config.dynamic:
        out.append({"name": key, "value": _render(config.dynamic[key]), "source": DYNAMIC_BROKER})
    if key in config.dynamic_default:
        out.append({"name": key, "value": _render(config.dynamic_default[key]), "source": DYNAMIC_DEFAULT_BROKER})
    if key in config.explicit:
        out.append({"name": key, "value": _render(config.static_value(key)), "source": STATIC_BROKER})
    out.append({"name": key, "value": _render(SETTINGS[key].default), "source": DEFAULT})
    return out


def _topic_entries(ctx, name: str, keys, with_synonyms: bool) -> list:
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
            source = _SOURCES[cluster.config.source(broker_key)] if broker_key else DEFAULT
        if broker_key:
            synonyms += _broker_synonyms(cluster.config, broker_key)
        out.append(_entry(key, value, source, synonyms if with_synonyms else [], TOPIC_CONFIGS[key].kind, ""))
    return out


def _broker_entries(ctx, keys, with_synonyms: bool) -> list:
    config = ctx.cluster.config
    out = []
    for key, value in sorted(config.items()):
        if keys is not None and key not in keys:
            continue
        synonyms = _broker_synonyms(config, key) if with_synonyms else []
        # Only the settings that are topic defaults change at run time (AlterConfigs).
        out.append(_entry(key, value, _SOURCES[config.source(key)], synonyms, type(SETTINGS[key].default),
                          SETTINGS[key].doc, read_only=key not in DYNAMIC_BROKER_SETTINGS))
    # Kafka's settings this broker does not act on, where an AlterConfigs set them
    node, default = ctx.broker.dynamic_configs.broker_overrides()
    for key in sorted((node.keys() | default.keys()) - SETTINGS.keys()):
        if keys is not None and key not in keys:
            continue
        synonyms = [{"name": key, "value": v, "source": source}
                    for v, source in ((node.get(key), DYNAMIC_BROKER), (default.get(key), DYNAMIC_DEFAULT_BROKER))
                    if v is not None]
        setting = kafka_setting(key)
        if setting is not None and setting.default not in (None, REQUIRED):
            synonyms.append({"name": key, "value": setting.default, "source": DEFAULT})
        out.append(_entry(key, synonyms[0]["value"], synonyms[0]["source"], synonyms if with_synonyms else [],
                          setting.kind if setting else "STRING", "", read_only=False))
    return out


def _cluster_default_entries(ctx, keys, with_synonyms: bool) -> list:
    """The cluster-wide default resource ("") lists only what is set there, as Kafka's does."""
    _, default = ctx.broker.dynamic_configs.broker_overrides()
    out = []
    for key, value in sorted(default.items()):
        if keys is not None and key not in keys:
            continue
        setting = kafka_setting(key)
        synonyms = [{"name": key, "value": value, "source": DYNAMIC_DEFAULT_BROKER}]
        out.append(_entry(key, value, DYNAMIC_DEFAULT_BROKER, synonyms if with_synonyms else [],
                          setting.kind if setting else "STRING", "", read_only=False))
    return out


def _group_entries(ctx, group: str, keys, with_synonyms: bool) -> list:
    dynamic = ctx.broker.dynamic_configs
    out = []
    for key, definition in sorted(GROUP_CONFIGS.items()):
        if keys is not None and key not in keys:
            continue
        value, overridden = dynamic.group_value(group, key)
        synonyms = [{"name": key, "value": value, "source": GROUP_CONFIG}] if overridden else []
        synonyms.append({"name": GROUP_CONFIG_SYNONYMS[key], "value": definition.render(definition.default),
                         "source": DEFAULT})
        out.append(_entry(key, value, GROUP_CONFIG if overridden else DEFAULT,
                          synonyms if with_synonyms else [], definition.kind, ""))
    return out


async def handle(ctx, request):
    results = []
    with_synonyms = getattr(request, "include_synonyms", False)
    for r in request.resources:
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        result = Answer.DescribeConfigsResult(error_code=0, error_message=None, resource_type=r.resource_type,
                                              resource_name=r.resource_name, configs=())
        if r.resource_type == TOPIC:
            if r.resource_name not in ctx.cluster.topics.by_name:
                result = result._replace(error_code=code("UNKNOWN_TOPIC_OR_PARTITION"),
                                         error_message=f"Topic {r.resource_name} does not exist")
            else:
                result = result._replace(configs=_topic_entries(ctx, r.resource_name, keys, with_synonyms))
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(ctx.connection.node_id)):
                result = result._replace(error_code=code("INVALID_REQUEST"),
                                         error_message=f"Unexpected broker id, expected {ctx.connection.node_id}")
            else:
                entries = _cluster_default_entries if r.resource_name == "" else _broker_entries
                result = result._replace(configs=entries(ctx, keys, with_synonyms))
        elif r.resource_type == GROUP:
            if not r.resource_name:
                result = result._replace(error_code=code("INVALID_REQUEST"),
                                         error_message="Group name must not be empty")
            else:
                result = result._replace(configs=_group_entries(ctx, r.resource_name, keys, with_synonyms))
        else:
            result = result._replace(error_code=code("INVALID_REQUEST"),
                                     error_message=f"Unsupported resource type {r.resource_type}")
        results.append(result)
    return Answer(results=results)
