"""Apache Kafka's broker settings (broker/kafka_settings_table.py, generated from Kafka's
own classes) and the rules Kafka applies to them: which may change at run time and
where, and how a value is type-checked, with Kafka's messages.

AlterConfigs and IncrementalAlterConfigs on a broker resource use it now; start-up
acceptance of every Kafka setting name can use the same table (``KAFKA_BROKER_SETTINGS``,
``parse_value``).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.kafka_settings_table import BROKER_SETTINGS, KAFKA_VERSION, REQUIRED
from broker.cluster.topic_configs import ConfigDef, InvalidTopicConfig

READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"
LISTENER_PREFIX = "listener.name."
# Kafka's ConfigDef types this module checks as one of topic_configs' kinds
_KINDS = {"SHORT": "INT", "CLASS": "STRING", "PASSWORD": "STRING"}
_SHORT = (-(2**15), 2**15 - 1)

__all__ = ["KAFKA_BROKER_SETTINGS", "KAFKA_VERSION", "KafkaSetting", "KafkaSettingRefused", "REQUIRED",
           "check_dynamic_change", "kafka_setting", "parse_value"]


class KafkaSettingRefused(ValueError):
    """A change Kafka refuses, with Kafka's message."""


@dataclass(frozen=True, slots=True)
class KafkaSetting:
    name: str
    kind: str  # Kafka's ConfigDef type: BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD
    default: str | None  # as Kafka renders it; None: no default; REQUIRED: must be set
    update_mode: str  # read-only, per-broker or cluster-wide (DescribeConfigs' documentation words)
    low: float | None
    high: float | None
    choices: tuple[str, ...]
    flags: tuple[str, ...]

    @property
    def dynamic(self) -> bool:
        return self.update_mode != READ_ONLY

    @property
    def per_broker_only(self) -> bool:
        return "per-broker-only" in self.flags

    @property
    def listener_prefix_only(self) -> bool:
        return "listener-prefix-only" in self.flags

    @property
    def internal(self) -> bool:
        return "internal" in self.flags

    def definition(self) -> ConfigDef:
        kind = _KINDS.get(self.kind, self.kind)
        low, high = (_SHORT if self.kind == "SHORT" and self.low is None and self.high is None
                     else (self.low, self.high))
        choices = self.choices if "list-items-checked" in self.flags or self.kind != "LIST" else ()
        return ConfigDef(self.name, kind, self.default, low, high, choices)


KAFKA_BROKER_SETTINGS: dict[str, KafkaSetting] = {row[0]: KafkaSetting(*row) for row in BROKER_SETTINGS}


def kafka_setting(name: str) -> KafkaSetting | None:
    """The setting ``name`` names, also through Kafka's ``listener.name.<listener>.`` prefix."""
    setting = KAFKA_BROKER_SETTINGS.get(name)
    if setting is None and name.startswith(LISTENER_PREFIX):
        _, _, rest = name[len(LISTENER_PREFIX):].partition(".")
        setting = KAFKA_BROKER_SETTINGS.get(rest)
    return setting


def parse_value(name: str, raw: str) -> object:
    """The typed value of a Kafka setting, or KafkaSettingRefused with Kafka's message
    ("Invalid value abc for configuration x: Not a number of type LONG", ...)."""
    setting = kafka_setting(name)
    if setting is None:
        return raw
    if setting.kind == "CLASS" and not raw.strip():
        # Kafka loads the class; only a blank name is known here not to be one
        raise KafkaSettingRefused(f"Invalid value {raw} for configuration {name}: Class {raw} could not be found.")
    try:
        return setting.definition().parse(raw)
    except InvalidTopicConfig as e:
        raise KafkaSettingRefused(str(e)) from None


def check_dynamic_change(values: dict[str, str], per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs for the overrides a broker resource would
    have after a change: read-only names, security settings without a listener prefix,
    types, then per-broker names at the cluster-default level. Names Kafka does not know
    pass, as in Kafka."""
    _refuse("Cannot update these configs dynamically",
            [n for n in values if (s := KAFKA_BROKER_SETTINGS.get(n)) is not None and not s.dynamic])
    _refuse("These security configs can be dynamically updated only per-listener using the listener prefix",
            [n for n in values if (s := KAFKA_BROKER_SETTINGS.get(n)) is not None and s.listener_prefix_only])
    for name, raw in values.items():
        parse_value(name, raw)
    if not per_broker:
        _refuse("Cannot update these configs at default cluster level, broker id must be specified",
                [n for n in values if n.startswith(LISTENER_PREFIX)
                 or (s := KAFKA_BROKER_SETTINGS.get(n)) is not None and s.per_broker_only])


def _refuse(message: str, names: list[str]) -> None:
    if names:
        raise KafkaSettingRefused(f"{message}: [{', '.join(sorted(names))}]")
