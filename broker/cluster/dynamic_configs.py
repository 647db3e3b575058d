"""Configs changed at run time: AlterConfigs (33) and IncrementalAlterConfigs (44) for
topics, brokers and groups, as Kafka's ConfigAdminManager applies them.

Topic overrides live with the topic (broker.cluster.topics); broker overrides (this node's and
the cluster-wide default) and group configs live in ``meta/dynamic-configs.json``,
rewritten atomically on every change. A broker resource accepts what Kafka 4.4 accepts
(broker.kafka_settings); of those, the broker settings that are defaults of topic configs
(``log.retention.ms``, ``message.max.bytes``, ...) take effect, and a change re-applies
every topic's log config; the others are kept and have no effect here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.errors import code
from broker.config import SETTINGS, TOPIC_DEFAULTS, BrokerConfig, ConfigError
from broker.log.files import read_json, write_json
from broker.cluster.topic_configs import TOPIC_CONFIGS, ConfigDef, InvalidTopicConfig
from broker.cluster.topics import TopicError, validate_topic_configs

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "append", SUBTRACT: "subtract"}
DYNAMIC_BROKER_SETTINGS = frozenset(TOPIC_DEFAULTS.values())

# Kafka 4.4's GroupConfig: name -> (definition, the broker setting that gives its default)
_GROUP_DEFS = [
    (ConfigDef("consumer.assignment.interval.ms", "INT", 1000, 1), "group.consumer.assignment.interval.ms"),
    (ConfigDef("consumer.heartbeat.interval.ms", "INT", 5000, 1), "group.consumer.heartbeat.interval.ms"),
    (ConfigDef("consumer.session.timeout.ms", "INT", 45000, 1), "group.consumer.session.timeout.ms"),
    (ConfigDef("errors.deadletterqueue.copy.record.enable", "BOOLEAN", False),
     "errors.deadletterqueue.copy.record.enable"),
    (ConfigDef("errors.deadletterqueue.topic.name", "STRING", ""), "errors.deadletterqueue.topic.name"),
    (ConfigDef("share.assignment.interval.ms", "INT", 1000, 1), "group.share.assignment.interval.ms"),
    (ConfigDef("share.auto.offset.reset", "STRING", "latest"), "share.auto.offset.reset"),
    (ConfigDef("share.delivery.count.limit", "INT", 5, 2, 10), "group.share.delivery.count.limit"),
    (ConfigDef("share.heartbeat.interval.ms", "INT", 5000, 1), "group.share.heartbeat.interval.ms"),
    (ConfigDef("share.isolation.level", "STRING", "read_uncommitted",
               choices=("read_committed", "read_uncommitted")), "share.isolation.level"),
    (ConfigDef("share.partition.max.record.locks", "INT", 2000, 100), "group.share.partition.max.record.locks"),
    (ConfigDef("share.record.lock.duration.ms", "INT", 30000, 1000), "group.share.record.lock.duration.ms"),
    (ConfigDef("share.renew.acknowledge.enable", "BOOLEAN", True), "share.renew.acknowledge.enable"),
    (ConfigDef("share.session.timeout.ms", "INT", 45000, 1), "group.share.session.timeout.ms"),
    (ConfigDef("streams.assignment.interval.ms", "INT", 1000, 1), "group.streams.assignment.interval.ms"),
    (ConfigDef("streams.assignor.name", "STRING", "sticky"), "group.streams.assignors"),
    (ConfigDef("streams.heartbeat.interval.ms", "INT", 5000, 1), "group.streams.heartbeat.interval.ms"),
    (ConfigDef("streams.initial.rebalance.delay.ms", "INT", 3000, 0), "group.streams.initial.rebalance.delay.ms"),
    (ConfigDef("streams.num.standby.replicas", "INT", 0, 0), "group.streams.num.standby.replicas"),
    (ConfigDef("streams.rack.aware.assignment.tags", "LIST", []), "group.streams.rack.aware.assignment.tags"),
    (ConfigDef("streams.session.timeout.ms", "INT", 45000, 1), "group.streams.session.timeout.ms"),
]
GROUP_CONFIGS: dict[str, ConfigDef] = {d.name: d for d, _ in _GROUP_DEFS}
GROUP_CONFIG_SYNONYMS: dict[str, str] = {d.name: broker for d, broker in _GROUP_DEFS}
_SESSION_AND_HEARTBEAT = [(f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms")
                          for kind in ("consumer", "share", "streams")]


ELR_SETTING = "min.insync.replicas"


def elr_enabled(config: BrokerConfig) -> bool:
    """Eligible leader replicas are on in new Kafka 4.1+ clusters (the 4.4 profile here)."""
    return tuple(int(x) for x in config["emulate.kafka.version"].split(".")) >= (4, 1)


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One change of an IncrementalAlterConfigs request: set, delete, append or subtract."""

    name: str
    value: str | None
    op: int = SET


class ConfigChangeError(Exception):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


class DynamicConfigs:
    def __init__(self, meta_dir: Path, config: BrokerConfig) -> None:
        self._path = Path(meta_dir) / "dynamic-configs.json"
        self._config = config
        self.groups: dict[str, dict[str, str]] = {}
        self._broker: dict[str, str] = {}  # this node's overrides
        self._broker_default: dict[str, str] = {}  # the cluster-wide default (resource name "")
        if self._path.exists():
            saved = read_json(self._path)
            self.groups = saved.get("groups", {})
            self._broker = saved.get("broker", {})
            self._broker_default = saved.get("broker_default", {})
        if elr_enabled(config) and ELR_SETTING not in self._broker_default:
            # Kafka 4.1+ (KIP-966, ELR on): the controller writes the cluster-level
            # min.insync.replicas when it activates, from the static setting
            self._broker_default[ELR_SETTING] = str(config[ELR_SETTING])
            self._save()
        self._install()

    # -- the one entry point of both APIs -------------------------------------------------

    def alter(self, cluster, resource_type: int, name: str, changes: list[ConfigChange],
              incremental: bool, validate_only: bool) -> None:
        """Applies one resource's changes, or raises ConfigChangeError with Kafka's error."""
        names = [c.name for c in changes]
        if len(set(names)) != len(names):
            raise ConfigChangeError("INVALID_REQUEST", "Error due to duplicate config keys")
        if resource_type == TOPIC:
            topic = cluster.topics.by_name.get(name)
            if topic is None:
                raise ConfigChangeError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {name} does not exist")
            new = _apply(topic.configs, changes, TOPIC_CONFIGS, incremental, "topic")
            try:
                checked = validate_topic_configs(new)
            except TopicError as e:
                raise ConfigChangeError(e.error_name, str(e)) from None
            if not validate_only:
                cluster.alter_topic_configs(name, checked)
        elif resource_type == BROKER:
            scope = self._broker_scope(name)
            new = _apply(scope, changes, None, incremental, "broker")
            typed = self._check_broker(new, per_broker=scope is self._broker)
            if elr_enabled(self._config):
                if scope is self._broker_default and ELR_SETTING not in new:
                    raise ConfigChangeError("INVALID_CONFIG",
                                            "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
                if scope is self._broker and ELR_SETTING in names:
                    raise ConfigChangeError("INVALID_CONFIG",
                                            "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
            if not validate_only:
                scope.clear()
                scope.update(new)
                self._save()
                self._install(typed if scope is self._broker else None, typed if scope is self._broker_default else None)
                _reapply_log_configs(cluster)
        elif resource_type == GROUP:
            if not name:
                raise ConfigChangeError("INVALID_REQUEST", "Group name must not be empty")
            new = _apply(self.groups.get(name, {}), changes, GROUP_CONFIGS, incremental, "group")
            checked = _check_group(new)
            if not validate_only:
                if checked:
                    self.groups[name] = checked
                else:
                    self.groups.pop(name, None)
                self._save()
        else:
            raise ConfigChangeError("INVALID_REQUEST", f"Unsupported resource type {resource_type}")

    # -- reading ----------------------------------------------------------------------------

    def broker_overrides(self) -> tuple[dict[str, str], dict[str, str]]:
        """(this node's, the cluster default's) broker overrides as given, those without an
        effect here included."""
        return dict(self._broker), dict(self._broker_default)

    def group_value(self, group: str, key: str) -> tuple[str, bool]:
        """(value, whether the group overrides it)."""
        overrides = self.groups.get(group, {})
        if key in overrides:
            return overrides[key], True
        definition = GROUP_CONFIGS[key]
        return definition.render(definition.default), False

    # -- helpers ----------------------------------------------------------------------------

    def _broker_scope(self, name: str) -> dict[str, str]:
        if name == "":
            return self._broker_default
        if name != str(self._config["node.id"]):
            raise ConfigChangeError("INVALID_REQUEST", f"Unexpected broker id, expected {self._config['node.id']}, "
                                                       f"but received {name}")
        return self._broker

    def _check_broker(self, new: dict[str, str], per_broker: bool) -> dict[str, object]:
        """Kafka's rules for every name Kafka knows (accepted where Kafka accepts it, even
        with no effect here), then this broker's own settings that are not Kafka's: only the
        topic defaults change at run time. Returns the overrides that take effect."""
        # Kafka's settings table, loaded by the first change (a start never needs it)
        from broker.kafka_settings import KafkaSettingRefused, check_dynamic_change, kafka_setting

        try:
            check_dynamic_change(new, per_broker)
        except KafkaSettingRefused as e:
            raise ConfigChangeError("INVALID_REQUEST", str(e)) from None
        fixed = sorted(k for k in new if k in SETTINGS and kafka_setting(k) is None and k not in DYNAMIC_BROKER_SETTINGS)
        if fixed:
            raise ConfigChangeError("INVALID_REQUEST", f"Cannot update these configs dynamically: [{', '.join(fixed)}]")
        typed = {}
        for key, value in _effective(new).items():
            try:
                typed[key] = self._config.parse(key, value)
            except ConfigError as e:
                raise ConfigChangeError("INVALID_REQUEST", str(e)) from None
        return typed

    def _install(self, broker: dict | None = None, default: dict | None = None) -> None:
        """Puts the overrides into the broker's settings (parsing them when not given)."""
        self._config.dynamic = broker if broker is not None else {
            k: self._config.parse(k, v) for k, v in _effective(self._broker).items()}
        self._config.dynamic_default = default if default is not None else {
            k: self._config.parse(k, v) for k, v in _effective(self._broker_default).items()}

    def _save(self) -> None:
        data = {"broker": self._broker, "broker_default": self._broker_default, "groups": self.groups}
        self._path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self._path, data, indent=1, sort_keys=True)


def answer_alter_configs(ctx, request, incremental: bool, answer: type):
    """The answer (of type ``answer``, the API's answer type) of AlterConfigs and
    IncrementalAlterConfigs: each resource altered on its own, its error (if any) in its own entry."""
    responses = []
    for r in request.resources:
        result = answer.AlterConfigsResourceResponse(error_code=0, error_message=None, resource_type=r.resource_type,
                                                     resource_name=r.resource_name)
        changes = [ConfigChange(c.name, c.value, c.config_operation) if incremental else ConfigChange(c.name, c.value)
                   for c in r.configs]
        try:
            ctx.broker.dynamic_configs.alter(ctx.cluster, r.resource_type, r.resource_name, changes,
                                             incremental=incremental, validate_only=request.validate_only)
        except ConfigChangeError as e:
            result = result._replace(error_code=code(e.error_name), error_message=str(e))
        responses.append(result)
    return answer(responses=responses)


def _apply(current: dict[str, str], changes: list[ConfigChange], defs: dict[str, ConfigDef] | None,
           incremental: bool, kind: str) -> dict[str, str]:
    """The config set after the changes: AlterConfigs replaces the whole set,
    IncrementalAlterConfigs sets, deletes, appends to or subtracts from lists."""
    if not incremental:
        for c in changes:
            if c.value is None:
                raise ConfigChangeError("INVALID_REQUEST", f"Null value not supported for : {c.name}")
        return {c.name: c.value for c in changes}
    new = dict(current)
    for c in changes:
        if c.op == SET:
            if c.value is None:
                raise ConfigChangeError("INVALID_REQUEST", f"Null value not supported for : {c.name}")
            new[c.name] = c.value
        elif c.op == DELETE:
            new.pop(c.name, None)
        elif c.op in (APPEND, SUBTRACT):
            definition = defs.get(c.name) if defs is not None else None
            if definition is None or definition.kind != "LIST":
                raise ConfigChangeError("INVALID_CONFIG",
                                        f"Config value {_OP_NAMES[c.op]} is not allowed for config key: {c.name}")
            # Kafka's controller: the old value's non-empty items, the given value split as
            # Java splits (trailing empty items dropped); the result is validated as a whole
            old = new.get(c.name)
            items = [i for i in (old if old is not None else definition.render(definition.default)).split(",") if i]
            for item in _java_split(c.value or ""):
                if c.op == APPEND and item not in items:
                    items.append(item)
                elif c.op == SUBTRACT and item in items:
                    items.remove(item)
            new[c.name] = ",".join(items)
        else:
            raise ConfigChangeError("INVALID_REQUEST", f"Unknown operation type {c.op} for {kind} config {c.name}")
    return new


def _effective(overrides: dict[str, str]) -> dict[str, str]:
    """The broker overrides this broker acts on: the topic defaults. The others Kafka
    accepts are kept and have no effect here."""
    return {k: v for k, v in overrides.items() if k in DYNAMIC_BROKER_SETTINGS}


def _java_split(text: str) -> list[str]:
    """String.split(","): empty items kept, except trailing ones (all of them: "," gives none)."""
    items = text.split(",")
    if text == "":
        return items
    while items and items[-1] == "":
        items.pop()
    return items


def _check_group(new: dict[str, str]) -> dict[str, str]:
    typed: dict[str, object] = {}
    out = {}
    for key, value in new.items():
        definition = GROUP_CONFIGS.get(key)
        if definition is None:
            raise ConfigChangeError("INVALID_CONFIG", f"Unknown group config name: {key}")
        try:
            typed[key] = definition.parse(value)
        except InvalidTopicConfig as e:
            raise ConfigChangeError("INVALID_CONFIG", str(e)) from None
        out[key] = definition.render(typed[key])
    for session, heartbeat in _SESSION_AND_HEARTBEAT:
        s = typed.get(session, GROUP_CONFIGS[session].default)
        h = typed.get(heartbeat, GROUP_CONFIGS[heartbeat].default)
        if s <= h:
            raise ConfigChangeError("INVALID_CONFIG", f"{session} must be greater than {heartbeat}")
    return out


def _reapply_log_configs(cluster) -> None:
    """A broker default changed: every topic's log follows its new effective config."""
    for topic in list(cluster.topics.by_name.values()):
        cfg = cluster.log_config(topic)
        for i in range(topic.partitions):
            part = cluster.partitions.get((topic.name, i))  # one not opened yet gets it at open
            if part is not None:
                part.log.update_config(cfg)
