"""Broker and topic settings under Apache Kafka's names, with Kafka's defaults.

Where a default makes no sense for a local emulator it differs, and the README
says so (marked ``local`` below). Settings come from a server.properties file and
``--override key=value``; unknown keys are refused so a typo is not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


def _bool(v: str | bool) -> bool:
    if isinstance(v, bool):
        return v
    s = v.strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _long(v: str | int) -> int:
    return int(v)


def _str(v: str) -> str:
    return str(v).strip()


_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def consumer_assignors(v: str | tuple) -> tuple[str, ...]:
    """``group.consumer.assignors``: short names or Kafka's class names, comma separated."""
    names = v if isinstance(v, tuple) else tuple(filter(None, (p.strip() for p in str(v).split(","))))
    out = tuple(_ASSIGNOR_CLASSES.get(n, n) for n in names)
    unknown = [n for n in out if n not in ("uniform", "range")]
    if unknown or not out:
        raise ValueError(f"unknown assignor(s) {unknown or names!r}; known: uniform, range")
    return out


MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def migration_policy(v: str) -> str:
    """``group.consumer.migration.policy``: Kafka's values, any case."""
    out = str(v).strip().lower()
    if out not in MIGRATION_POLICIES:
        raise ValueError(f"{v!r} is not one of {', '.join(MIGRATION_POLICIES)}")
    return out


def host_counts(v: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: "host:count,..." as Kafka writes it."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in str(v).split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise ValueError(f"entry {item!r} is not host:count")
        out[host.strip()] = int(count)
    return out


def _host_counts_text(v: str) -> str:
    host_counts(v)
    return _str(v)


@dataclass(frozen=True)
class Setting:
    """One broker setting: its parser, its default and the topic config it feeds."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    topic_name: str | None = None  # the per-topic config this broker default feeds
    doc: str = ""
    local: bool = False  # default differs from Kafka's for a local emulator


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("node.id", _long, 1),
        Setting("broker.id", _long, 1),
        Setting("node.count", _long, 1, doc="nodes in this process, ids node.id, node.id+1, ... (also --nodes)"),
        Setting("cluster.id", _str, "eosbroker-local-cluster"),
        Setting("num.partitions", _long, 1),
        Setting("default.replication.factor", _long, 1),
        Setting("auto.create.topics.enable", _bool, True),
        Setting("delete.topic.enable", _bool, True),
        Setting("message.max.bytes", _long, 1048588, "max.message.bytes"),
        Setting("socket.request.max.bytes", _long, 104857600),
        Setting("connections.max.idle.ms", _long, 600000),
        Setting("queued.max.requests", _long, 500, doc="requests read ahead per connection"),
        Setting("queued.max.request.bytes", _long, -1,
                doc="request bytes read but not yet handled, over all connections; -1: no limit"),
        Setting("max.connections", _long, 2147483647, doc="beyond it new connections wait unread"),
        Setting("max.connections.per.ip", _long, 2147483647, doc="beyond it new connections are closed"),
        Setting("max.connections.per.ip.overrides", _host_counts_text, "", doc="host:count,... per-address limits"),
        Setting("log.segment.bytes", _long, 1073741824, "segment.bytes"),
        Setting("log.roll.ms", _long, 604800000, "segment.ms"),
        Setting("log.index.interval.bytes", _long, 4096, "index.interval.bytes"),
        Setting("log.retention.ms", _long, 604800000, "retention.ms"),
        Setting("log.retention.bytes", _long, -1, "retention.bytes"),
        Setting("log.retention.check.interval.ms", _long, 300000),
        Setting("log.cleanup.policy", _str, "delete", "cleanup.policy"),
        Setting("log.cleaner.delete.retention.ms", _long, 86400000, "delete.retention.ms"),
        Setting("log.cleaner.backoff.ms", _long, 15000),
        Setting("log.cleaner.min.cleanable.ratio", float, 0.5, "min.cleanable.dirty.ratio"),
        Setting("log.message.timestamp.type", _str, "CreateTime", "message.timestamp.type"),
        Setting("log.flush.interval.messages", _long, 2**63 - 1, "flush.messages"),
        Setting("log.flush.interval.ms", _long, 2**63 - 1, "flush.ms"),
        Setting("log.flush.offset.checkpoint.interval.ms", _long, 60000,
                doc="how often the recovery points are recorded (a crash recovery validates only beyond them)"),
        Setting("min.insync.replicas", _long, 1, "min.insync.replicas"),
        Setting("replica.lag.time.max.ms", _long, 30000,
                doc="a follower that cannot fetch this long leaves the ISR (emulated replication)"),
        Setting("compression.type", _str, "producer", "compression.type"),
        Setting("offsets.topic.num.partitions", _long, 50),
        Setting("offsets.topic.replication.factor", _long, 3, doc="capped at the node count"),
        Setting("offsets.topic.segment.bytes", _long, 104857600),
        Setting("offsets.retention.minutes", _long, 10080),
        Setting("group.initial.rebalance.delay.ms", _long, 100, local=True,
                doc="Kafka: 3000; a local emulator should not make every new group wait 3 s"),
        Setting("group.min.session.timeout.ms", _long, 6000),
        Setting("group.max.session.timeout.ms", _long, 1800000),
        Setting("group.max.size", _long, 2147483647),
        Setting("group.consumer.assignors", consumer_assignors, ("uniform", "range"),
                doc="KIP-848 server-side assignors, the first is the default: uniform, range "
                    "(or Kafka's UniformAssignor/RangeAssignor class names)"),
        Setting("group.consumer.session.timeout.ms", _long, 45000),
        Setting("group.consumer.heartbeat.interval.ms", _long, 5000),
        Setting("group.consumer.max.size", _long, 2147483647),
        Setting("group.consumer.migration.policy", migration_policy, "bidirectional",
                doc="KIP-848 online migration: upgrade (an empty classic group becomes a consumer "
                    "group), downgrade (a consumer group whose last KIP-848 member leaves while "
                    "classic members remain becomes a classic group), bidirectional, disabled"),
        Setting("offset.metadata.max.bytes", _long, 4096),
        Setting("transaction.state.log.num.partitions", _long, 50),
        Setting("transaction.state.log.segment.bytes", _long, 104857600),
        Setting("transaction.state.log.replication.factor", _long, 3, doc="capped at the node count"),
        Setting("auto.leader.rebalance.enable", _bool, True),
        Setting("leader.imbalance.check.interval.seconds", _long, 300),
        Setting("broker.session.timeout.ms", _long, 9000,
                doc="a paused node is fenced after this long (leaves the ISRs, loses its leaderships)"),
        Setting("transaction.max.timeout.ms", _long, 900000),
        Setting("transactional.id.expiration.ms", _long, 604800000),
        Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", _long, 10000),
        Setting("transaction.remove.expired.transaction.cleanup.interval.ms", _long, 3600000),
        Setting("producer.id.expiration.ms", _long, 86400000),
        Setting("producer.id.expiration.check.interval.ms", _long, 600000),
        Setting("transaction.partition.verification.enable", _bool, True,
                doc="verify with the coordinator that a transactional Produce's partition is in the "
                    "producer's transaction (KIP-890); false: accept it unverified, as Kafka before 3.6"),
        Setting("add.partitions.to.txn.retry.backoff.ms", _long, 20,
                doc="Produce v12's implicit add meeting CONCURRENT_TRANSACTIONS retries after this long"),
        Setting("add.partitions.to.txn.retry.backoff.max.ms", _long, 100,
                doc="...for up to this long before answering it (Kafka's defaults)"),
        Setting("transaction.refuse.sequence.reuse", _bool, False,
                doc="refuse with OUT_OF_ORDER_SEQUENCE_NUMBER a transactional batch whose sequences match a "
                    "batch of an already-ended transaction (Kafka answers it as a duplicate)"),
        Setting("authorizer.class.name", _str, "",
                doc="any value turns the ACL authorizer on (Kafka names StandardAuthorizer here)"),
        Setting("super.users", _str, "", doc="principals that pass every ACL check, ';'-separated"),
        Setting("allow.everyone.if.no.acl.found", _bool, False),
        Setting("emulate.fault.hold.txn.markers", _bool, False,
                doc="fault injection: persist PREPARE_COMMIT/PREPARE_ABORT but never send the markers"),
        Setting("emulate.fault.coordinator.load.ms", _long, 0,
                doc="fault injection: loading a coordinator partition takes at least this long "
                    "(COORDINATOR_LOAD_IN_PROGRESS meanwhile)"),
        Setting("emulate.concurrent.transactions.hold.ms", _long, 0,
                doc="0 answers CONCURRENT_TRANSACTIONS at once, as Kafka does; above 0 a request that meets "
                    "markers in flight is held up to this long and then run again"),
        Setting("emulate.kafka.version", _str, "4.0",
                doc="version profile: 2.4, 2.8, 3.6, 3.9, 4.0 or 4.4: that release's API versions and features; "
                    "below 2.5 the pre-KIP-360 producer state rules"),
        Setting("emulate.transaction.version", _long, -1,
                doc="the transaction.version feature level ApiVersions reports as finalized (as "
                    "kafka-features.sh sets it): 1 makes the Java client end transactions with EndTxn v4 "
                    "(transactions v1); -1: the profile's level (2 on 4.x)"),
    ]
}

# Per-topic config names (CreateTopics configs, DescribeConfigs) -> broker default.
TOPIC_DEFAULTS: dict[str, str] = {s.topic_name: s.name for s in SETTINGS.values() if s.topic_name}


class ConfigError(ValueError):
    pass


class BrokerConfig:
    """Effective broker settings: defaults, then the properties file, then overrides."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {name: s.default for name, s in SETTINGS.items()}
        self.explicit: set[str] = set()
        # Set at run time by AlterConfigs (broker.dynamic_configs): for this broker, and
        # the cluster-wide default; both win over the properties file.
        self.dynamic: dict[str, Any] = {}
        self.dynamic_default: dict[str, Any] = {}
        for k, v in (values or {}).items():
            self.set(k, v)

    def set(self, key: str, raw: Any) -> None:
        setting = SETTINGS.get(key)
        if setting is None:
            raise ConfigError(f"unknown setting {key!r}")
        try:
            self._values[key] = setting.parse(raw)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value for {key}: {raw!r} ({e})") from e
        self.explicit.add(key)
        if key == "broker.id":
            self._values["node.id"] = self._values[key]

    def __getitem__(self, key: str) -> Any:
        if key in self.dynamic:
            return self.dynamic[key]
        if key in self.dynamic_default:
            return self.dynamic_default[key]
        return self._values[key]

    def items(self):
        return ((key, self[key]) for key in self._values)

    def source(self, key: str) -> str:
        """Where a setting's value comes from, as DescribeConfigs names it."""
        if key in self.dynamic:
            return "dynamic"
        if key in self.dynamic_default:
            return "dynamic_default"
        return "static" if key in self.explicit else "default"

    def static_value(self, key: str) -> Any:
        """The value from the properties file, overrides or default, ignoring AlterConfigs."""
        return self._values[key]

    def parse(self, key: str, raw: Any) -> Any:
        """The typed value of a setting, or ConfigError."""
        setting = SETTINGS.get(key)
        if setting is None:
            raise ConfigError(f"unknown setting {key!r}")
        try:
            return setting.parse(raw)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value for {key}: {raw!r} ({e})") from e

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> "BrokerConfig":
        config = cls()
        if path is not None:
            for key, value in parse_properties(Path(path).read_text()).items():
                config.set(key, value)
        for item in overrides or []:
            if "=" not in item:
                raise ConfigError(f"--override wants key=value, got {item!r}")
            key, value = item.split("=", 1)
            config.set(key.strip(), value.strip())
        return config

    def topic_default(self, topic_key: str) -> Any:
        return self[TOPIC_DEFAULTS[topic_key]]


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties, the subset Kafka's config files use: key=value or key: value."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for sep_i, ch in enumerate(line):
            if ch in "=:":
                out[line[:sep_i].strip()] = line[sep_i + 1 :].strip()
                break
        else:
            out[line] = ""
    return out


# Settings from environment variables, for containers: a Kafka setting name in capitals
# with dots as underscores, after EOSBROKER_ (or KAFKA_, as Kafka's own images take it):
# EOSBROKER_LOG_RETENTION_MS=60000 sets log.retention.ms. Variables that name no
# setting are left alone (images carry unrelated KAFKA_* variables).
ENV_PREFIXES = ("KAFKA_", "EOSBROKER_")  # the later prefix wins when both name a setting


def env_name(setting: str, prefix: str = "EOSBROKER_") -> str:
    return prefix + setting.upper().replace(".", "_")


def environment_overrides(environ: dict[str, str]) -> list[str]:
    """``key=value`` items for every setting named by a variable in ``environ``."""
    out = []
    for prefix in ENV_PREFIXES:
        for name in SETTINGS:
            value = environ.get(env_name(name, prefix))
            if value is not None:
                out.append(f"{name}={value}")
    return out
