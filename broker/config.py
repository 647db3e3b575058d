"""Broker and topic settings under Apache Kafka's names, with Kafka's defaults.

Where a default makes no sense for a local emulator it differs, and the README
says so (marked ``local`` below). Settings come from a server.properties file and
``--override key=value``. Every other name Apache Kafka's broker and controller know
(broker/kafka_settings_table.py) is accepted and type-checked as Kafka checks it; the
listener settings among them take effect (broker.wire.listeners), the rest are listed as
having no effect here. Names Kafka does not know are refused, so a typo is not
silently ignored.
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
        Setting("node.count", _long, 1, doc="Nodes in this process, with ids node.id, node.id+1, ... (also --nodes)."),
        Setting("cluster.id", _str, "eosbroker-local-cluster"),
        Setting("num.partitions", _long, 1),
        Setting("default.replication.factor", _long, 1),
        Setting("auto.create.topics.enable", _bool, True),
        Setting("delete.topic.enable", _bool, True),
        Setting("message.max.bytes", _long, 1048588, "max.message.bytes"),
        Setting("socket.request.max.bytes", _long, 104857600),
        Setting("connections.max.idle.ms", _long, 600000),
        Setting("queued.max.requests", _long, 500, doc="Requests read ahead on each connection."),
        Setting("queued.max.request.bytes", _long, -1,
                doc="Request bytes read but not yet handled, over all connections; -1 sets no limit."),
        Setting("max.connections", _long, 2147483647, doc="Beyond this many connections, new ones wait unread."),
        Setting("max.connections.per.ip", _long, 2147483647, doc="Beyond this many connections from one address, new ones are closed."),
        Setting("max.connections.per.ip.overrides", _host_counts_text, "", doc="Per-address limits, as host:count,..."),
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
        Setting("log.open.files.max", _long, -1,
                doc="How many segment and index files are kept open at once; beyond it the least recently used "
                    "is closed. -1 means half the file descriptor limit, whose soft value is raised to the hard "
                    "one at start."),
        Setting("log.flush.offset.checkpoint.interval.ms", _long, 60000,
                doc="How often the recovery points are recorded (a crash recovery validates only beyond them)."),
        Setting("min.insync.replicas", _long, 1, "min.insync.replicas"),
        Setting("replica.lag.time.max.ms", _long, 30000,
                doc="A follower that cannot fetch for this long leaves the ISR (emulated replication)."),
        Setting("compression.type", _str, "producer", "compression.type"),
        Setting("offsets.topic.num.partitions", _long, 50),
        Setting("offsets.topic.replication.factor", _long, 3, doc="Capped at the node count."),
        Setting("offsets.topic.segment.bytes", _long, 104857600),
        Setting("offsets.retention.minutes", _long, 10080),
        Setting("offsets.commit.timeout.ms", _long, 5000,
                doc="How long a group coordinator write waits for the followers in the __consumer_offsets ISR "
                    "before the request is answered COORDINATOR_NOT_AVAILABLE (the write stays, as in Kafka)."),
        Setting("group.initial.rebalance.delay.ms", _long, 100, local=True,
                doc="Kafka's default is 3000; a local emulator should not make every new group wait 3 s."),
        Setting("group.min.session.timeout.ms", _long, 6000),
        Setting("group.max.session.timeout.ms", _long, 1800000),
        Setting("group.max.size", _long, 2147483647),
        Setting("group.consumer.assignors", consumer_assignors, ("uniform", "range"),
                doc="The KIP-848 server-side assignors, the first being the default: uniform, range "
                    "(or Kafka's UniformAssignor/RangeAssignor class names)."),
        Setting("group.consumer.session.timeout.ms", _long, 45000),
        Setting("group.consumer.heartbeat.interval.ms", _long, 5000),
        Setting("group.consumer.max.size", _long, 2147483647),
        Setting("group.consumer.migration.policy", migration_policy, "bidirectional",
                doc="KIP-848 online migration: upgrade (an empty classic group becomes a consumer "
                    "group), downgrade (a consumer group whose last KIP-848 member leaves while "
                    "classic members remain becomes a classic group), bidirectional or disabled."),
        Setting("group.streams.session.timeout.ms", _long, 45000),
        Setting("group.streams.heartbeat.interval.ms", _long, 5000),
        Setting("group.streams.max.size", _long, 2147483647),
        Setting("group.streams.initial.rebalance.delay.ms", _long, 3000,
                doc="A new streams group's first tasks wait this long for more members (ASSIGNMENT_DELAYED)."),
        Setting("group.streams.assignment.interval.ms", _long, 1000,
                doc="A streams group's assignments are computed at most this often (ASSIGNMENT_DELAYED)."),
        Setting("group.streams.num.standby.replicas", _long, 0,
                doc="Standby replicas of each stateful task of a streams group (its streams.num.standby.replicas "
                    "group config overrides it)."),
        Setting("group.streams.rack.aware.assignment.tags", _str, "",
                doc="Client tags (comma separated) each streams member must send; a member missing one gets "
                    "the MISSING_CLIENT_TAGS status (heartbeat v1+). Standbys are not placed by them, as in Kafka 4.4."),
        Setting("group.share.session.timeout.ms", _long, 45000),
        Setting("group.share.heartbeat.interval.ms", _long, 5000),
        Setting("group.share.max.size", _long, 200),
        Setting("group.share.assignment.interval.ms", _long, 1000,
                doc="A share group's target assignment is computed at most this often."),
        Setting("group.share.record.lock.duration.ms", _long, 30000,
                doc="How long a share consumer holds the records it acquired (on the broker's clock)."),
        Setting("group.share.delivery.count.limit", _long, 5,
                doc="Deliveries of a record to share consumers before it is archived."),
        Setting("group.share.partition.max.record.locks", _long, 2000),
        Setting("share.coordinator.state.topic.num.partitions", _long, 50),
        Setting("share.coordinator.state.topic.replication.factor", _long, 3, doc="Capped at the node count."),
        Setting("share.coordinator.state.topic.segment.bytes", _long, 104857600),
        Setting("offset.metadata.max.bytes", _long, 4096),
        Setting("transaction.state.log.num.partitions", _long, 50),
        Setting("transaction.state.log.segment.bytes", _long, 104857600),
        Setting("transaction.state.log.replication.factor", _long, 3, doc="Capped at the node count."),
        Setting("transaction.state.log.min.isr", _long, 2,
                doc="The min.insync.replicas of __transaction_state: a coordinator write with fewer replicas in sync is "
                    "refused, or answered COORDINATOR_NOT_AVAILABLE when the ISR shrinks below it meanwhile."),
        Setting("auto.leader.rebalance.enable", _bool, True),
        Setting("leader.imbalance.check.interval.seconds", _long, 300),
        Setting("broker.session.timeout.ms", _long, 9000,
                doc="A paused node is fenced after this long (it leaves the ISRs and loses its leaderships)."),
        Setting("transaction.max.timeout.ms", _long, 900000),
        Setting("transactional.id.expiration.ms", _long, 604800000),
        Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", _long, 10000),
        Setting("transaction.remove.expired.transaction.cleanup.interval.ms", _long, 3600000),
        Setting("producer.id.expiration.ms", _long, 86400000),
        Setting("producer.id.expiration.check.interval.ms", _long, 600000),
        Setting("transaction.partition.verification.enable", _bool, True,
                doc="Verify with the coordinator that a transactional Produce's partition is in the "
                    "producer's transaction (KIP-890); false accepts it unverified, as Kafka before 3.6 did."),
        Setting("request.timeout.ms", _long, 30000,
                doc="How long a node waits for another's answer to a transaction verification "
                    "(AddPartitionsToTxn) before failing it with NETWORK_EXCEPTION."),
        Setting("add.partitions.to.txn.retry.backoff.ms", _long, 20,
                doc="Produce v12's implicit add, meeting CONCURRENT_TRANSACTIONS, is retried after this long."),
        Setting("add.partitions.to.txn.retry.backoff.max.ms", _long, 100,
                doc="Produce v12's implicit add is retried for up to this long before CONCURRENT_TRANSACTIONS is answered."),
        Setting("transaction.refuse.sequence.reuse", _bool, False,
                doc="Refuse with OUT_OF_ORDER_SEQUENCE_NUMBER a transactional batch whose sequences match a "
                    "batch of an already-ended transaction (Kafka answers it as a duplicate)."),
        Setting("authorizer.class.name", _str, "",
                doc="Any value turns the ACL authorizer on (Kafka names StandardAuthorizer here)."),
        Setting("super.users", _str, "", doc="Principals that pass every ACL check, separated by ';'."),
        Setting("scram.users", _str, "",
                doc="SCRAM users created or replaced at start, written as kafka-storage format --add-scram takes "
                    "them (SCRAM-SHA-512=[name=alice,password=alice-secret]), separated by ';'; also serve --scram."),
        Setting("allow.everyone.if.no.acl.found", _bool, False),
        Setting("emulate.fault.hold.txn.markers", _bool, False,
                doc="Fault injection: persist PREPARE_COMMIT/PREPARE_ABORT but never send the markers."),
        Setting("emulate.fault.coordinator.load.ms", _long, 0,
                doc="Fault injection: loading a coordinator partition takes at least this long "
                    "(COORDINATOR_LOAD_IN_PROGRESS meanwhile)."),
        Setting("emulate.event.history.size", _long, 5000,
                doc="How many events the event history keeps (transactions' steps, faults fired, node and clock "
                    "changes, high watermark and LSO moves, group offsets and rebalances) for the console's timeline; "
                    "the oldest go first. Kept only by a broker serving the control API (nothing else reads it); "
                    "0 keeps none. Not kept, nothing on the request paths tells it anything."),
        Setting("emulate.concurrent.transactions.hold.ms", _long, 0,
                doc="0 answers CONCURRENT_TRANSACTIONS at once, as Kafka does; above 0, a request that meets "
                    "markers in flight is held for up to this long and then run again."),
        Setting("emulate.kafka.version", _str, "4.0",
                doc="The version profile (2.4, 2.8, 3.6, 3.9, 4.0, 4.2 or 4.4): that release's API versions and features, "
                    "and below 2.5 the pre-KIP-360 producer state rules."),
        Setting("emulate.transaction.version", _long, -1,
                doc="The transaction.version feature level ApiVersions reports as finalized (as "
                    "kafka-features.sh sets it): 1 makes the Java client end transactions with EndTxn v4 "
                    "(transactions v1); -1 keeps the profile's level (2 on 4.x)."),
    ]
}

def properties_text(value: Any) -> str:
    """A setting's value as Kafka's config files write it: true/false, comma lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(map(properties_text, value))
    return str(value)


# Per-topic config names (CreateTopics configs, DescribeConfigs) -> broker default.
TOPIC_DEFAULTS: dict[str, str] = {s.topic_name: s.name for s in SETTINGS.values() if s.topic_name}


# Kafka settings that give a SETTINGS value in a coarser unit, finest first
_COARSER_UNITS = {
    "log.retention.ms": {"log.retention.minutes": 60_000, "log.retention.hours": 3_600_000},
    "log.roll.ms": {"log.roll.hours": 3_600_000},
}


def settings_in_effect() -> frozenset[str]:
    """Kafka's names outside SETTINGS that change something here."""
    return LISTENER_SETTINGS.union(TLS_SETTINGS, SASL_SETTINGS, *_COARSER_UNITS.values())


class ConfigError(ValueError):
    pass


def closest(name: str, known) -> str | None:
    """The known name a mistyped one most likely meant, for "did you mean"."""
    import difflib  # only on the way to an error message

    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return matches[0] if matches else None


# Kafka settings outside SETTINGS that take effect: they say which listeners to serve
# (read by broker.wire.listeners).
LISTENER_SETTINGS = frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
    "security.inter.broker.protocol", "controller.listener.names", "process.roles",
})


# Kafka's TLS settings eosbroker's SSL listeners read (broker.security.tls), each also
# under listener.name.<listener>.
TLS_SETTINGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.cipher.suites", "ssl.principal.mapping.rules",
})


def _unprefixed(key: str) -> str:
    """A setting's name without ``listener.name.<listener>.``."""
    if key.startswith("listener.name."):
        return key[len("listener.name."):].partition(".")[2]
    return key


# Kafka's SASL settings (also under a listener and mechanism prefix): read by
# broker.security.sasl_settings for each SASL listener
SASL_SETTINGS = frozenset({
    "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
    "connection.failed.authentication.delay.ms", "sasl.server.max.receive.size", "principal.builder.class",
    "sasl.server.callback.handler.class", "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.allow.unverified.audience", "sasl.oauthbearer.allow.unverified.issuer",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.mechanism.inter.broker.protocol",
})


def kafka_names():
    from broker.kafka_settings import KAFKA_BROKER_SETTINGS  # only when a name is not one of SETTINGS

    return KAFKA_BROKER_SETTINGS


def unknown_setting(name: str) -> str:
    """The message for a setting name that names none: the closest one suggested."""
    suggestion = closest(name, SETTINGS) or closest(name, kafka_names())
    return f"unknown setting {name!r}" + (f"; did you mean {suggestion!r}?" if suggestion else "")


def _sasl_in_effect(key: str) -> bool:
    """A SASL setting read for some listener: under its listener (and mechanism) prefix,
    or bare; a bare sasl.jaas.config is ignored, as Kafka's broker ignores it."""
    from broker.kafka_settings import kafka_setting

    name = kafka_setting_name(key)
    setting = kafka_setting(name) if name is not None else None
    return (setting is not None and setting.name in SASL_SETTINGS and key != "sasl.jaas.config"
            and not _callback_handler_ignored(key))


def _callback_handler_ignored(key: str) -> bool:
    """sasl.server.callback.handler.class outside ``listener.name.<l>.<mechanism>.``, where
    Kafka's SaslChannelBuilder does not look for it."""
    name = "sasl.server.callback.handler.class"
    return key.endswith(name) and key.count(".") != name.count(".") + 4


def kafka_setting_name(key: str) -> str | None:
    """The Kafka setting ``key`` names (itself, or through ``listener.name.<listener>.``,
    also with a SASL mechanism: ``listener.name.<l>.<mechanism>.sasl.jaas.config``), or None."""
    from broker.kafka_settings import LISTENER_PREFIX, kafka_setting

    if kafka_setting(key) is not None:
        return key
    if key.startswith(LISTENER_PREFIX):
        listener, _, rest = key[len(LISTENER_PREFIX):].partition(".")
        mechanism, _, sasl_name = rest.partition(".")
        if (listener and mechanism and (sasl_name.startswith("sasl.") or sasl_name == "connections.max.reauth.ms")
                and kafka_setting(sasl_name) is not None):
            return sasl_name
    return None


def parse_kafka_setting(key: str, raw: Any) -> str:
    """The text of a Kafka setting eosbroker does not model, type-checked as Kafka does;
    ConfigError with Kafka's message, or for a name Kafka does not know."""
    from broker.kafka_settings import KafkaSettingRefused, parse_value

    checked_as = kafka_setting_name(key)
    if checked_as is None:
        raise ConfigError(unknown_setting(key))
    text = str(raw).strip()
    try:
        parse_value(checked_as, text)
    except KafkaSettingRefused as e:
        raise ConfigError(str(e)) from None
    return text


class BrokerConfig:
    """Effective broker settings: defaults, then the properties file, then overrides."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {name: s.default for name, s in SETTINGS.items()}
        self.explicit: set[str] = set()
        # Kafka settings outside SETTINGS, as given (checked text), by name
        self.kafka_values: dict[str, str] = {}
        # Set at run time by AlterConfigs (broker.cluster.dynamic_configs): for this broker, and
        # the cluster-wide default; both win over the properties file.
        self.dynamic: dict[str, Any] = {}
        self.dynamic_default: dict[str, Any] = {}
        for k, v in (values or {}).items():
            self.set(k, v)

    def set(self, key: str, raw: Any) -> None:
        setting = SETTINGS.get(key)
        if setting is None:
            self.kafka_values[key] = parse_kafka_setting(key, raw)
            self.explicit.add(key)
            self._apply_coarser_units(key)
            return
        try:
            self._values[key] = setting.parse(raw)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value for {key}: {raw!r} ({e})") from e
        self.explicit.add(key)
        if key == "broker.id":
            self._values["node.id"] = self._values[key]

    def _apply_coarser_units(self, key: str) -> None:
        """log.retention.hours/minutes and log.roll.hours, which Kafka reads when the
        ms setting is not given (minutes before hours)."""
        for target, synonyms in _COARSER_UNITS.items():
            if key in synonyms and target not in self.explicit:
                name = next(n for n in synonyms if n in self.kafka_values)
                self._values[target] = int(self.kafka_values[name]) * synonyms[name]

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

    def without_effect(self) -> list[str]:
        """The Kafka settings given that change nothing in eosbroker."""
        in_effect = settings_in_effect() - TLS_SETTINGS
        try:  # TLS settings take effect where a listener uses TLS
            tls_names = {e.name for e in self.listener_plan().served if e.protocol in ("SSL", "SASL_SSL")}
        except ConfigError:
            tls_names = set()

        def takes_effect(key: str) -> bool:
            if _callback_handler_ignored(key):
                return False
            if key in in_effect or _unprefixed(key) not in TLS_SETTINGS:
                return key in in_effect
            if key.startswith("listener.name."):
                return key[len("listener.name."):].partition(".")[0].upper() in tls_names
            return bool(tls_names)

        return sorted(k for k in self.kafka_values if not takes_effect(k) and not _sasl_in_effect(k))

    def listener_plan(self, host: str = "127.0.0.1", port: int = 9092):
        """The listeners these settings describe (broker.wire.listeners.ListenerPlan);
        ``host``/``port``: serve's one PLAINTEXT listener when ``listeners`` is not set."""
        from broker.wire.listeners import ListenerConfigError, listener_plan

        values = {k: v for k, v in self.kafka_values.items() if k in LISTENER_SETTINGS}
        try:
            return listener_plan(values, self.explicit, host, port)
        except ListenerConfigError as e:
            raise ConfigError(str(e)) from None

    def tls_listeners(self, plan) -> dict:
        """The TLS contexts of ``plan``'s SSL listeners (broker.security.tls.TlsListener by name)."""
        if not any(e.protocol in ("SSL", "SASL_SSL") for e in plan.served):
            return {}  # no ssl module to load
        from broker.security.tls import TlsConfigError, tls_listeners

        try:
            return tls_listeners(self.kafka_values, plan)
        except TlsConfigError as e:
            raise ConfigError(str(e)) from None

    def sasl_listeners(self, plan, credentials) -> dict:
        """The SASL set-up of each SASL listener the plan serves, by listener name;
        ConfigError where Kafka would refuse it or eosbroker cannot serve it."""
        sasl = [e.name for e in plan.served if e.protocol.startswith("SASL_")]
        if not sasl and "principal.builder.class" not in self.kafka_values:
            return {}  # the SASL modules load only when some listener needs them
        from broker.security.sasl_settings import SaslConfigError, check_principal_builder, listener_sasl

        try:
            check_principal_builder(self.kafka_values)
            out = {name: listener_sasl(self.kafka_values, name, credentials) for name in sasl}
        except SaslConfigError as e:
            raise ConfigError(str(e)) from None
        inter_broker = out.get(plan.inter_broker)
        if inter_broker is not None:  # KafkaConfig's check, though the nodes here talk in process
            mechanism = self.kafka_values.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip()
            if mechanism not in inter_broker.mechanisms:
                raise ConfigError("requirement failed: sasl.mechanism.inter.broker.protocol must be included in "
                                  "sasl.enabled.mechanisms when SASL is used for inter-broker communication")
        return out

    def parse(self, key: str, raw: Any) -> Any:
        """The typed value of a setting, or ConfigError."""
        setting = SETTINGS.get(key)
        if setting is None:
            raise ConfigError(unknown_setting(key))
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
# EOSBROKER_LOG_RETENTION_MS=60000 sets log.retention.ms; as in the apache/kafka image, a
# double underscore stands for "_" and a triple one for "-". KAFKA_ variables that name no
# setting are left alone (images carry unrelated KAFKA_* variables such as
# KAFKA_HEAP_OPTS); EOSBROKER_ ones are the broker's own, so one that names nothing is a
# typo and refused. CLUSTER_ID, the apache/kafka image's, sets cluster.id.
ENV_PREFIXES = ("KAFKA_", "EOSBROKER_")  # the later prefix wins when both name a setting

# EOSBROKER_ variables that are not settings: serve's options, the tools' and the tests'.
OTHER_EOSBROKER_VARIABLES = frozenset({
    "EOSBROKER_HOST", "EOSBROKER_PORT", "EOSBROKER_DATA_DIR", "EOSBROKER_NODES", "EOSBROKER_ADMIN_PORT",
    "EOSBROKER_ADMIN_TOKEN", "EOSBROKER_ADMIN_TLS_CERT", "EOSBROKER_ADMIN_TLS_KEY",
    "EOSBROKER_ADMIN", "EOSBROKER_ADMIN_CA",  # the control API's address and CA, for `eosbroker ctl`
    "EOSBROKER_CROSS_CHECK_LAYOUTS", "EOSBROKER_FUZZ_SCALE", "EOSBROKER_REFERENCE_HEAP",  # the test suite's
})


def env_name(setting: str, prefix: str = "EOSBROKER_") -> str:
    return prefix + setting.upper().replace("-", "___").replace("_", "__").replace(".", "_")


def setting_name(variable: str, prefix: str) -> str:
    """The setting a variable names, by the apache/kafka image's rule (``_`` is ``.``,
    ``__`` is ``_``, ``___`` is ``-``); the listener name in ``listener.name.<l>.`` kept
    lower case, as Kafka's prefix is."""
    rest = variable[len(prefix):].lower()
    return rest.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")


def _known(name: str) -> bool:
    return name in SETTINGS or kafka_setting_name(name) is not None


def environment_overrides(environ: dict[str, str]) -> list[str]:
    """``key=value`` items for every setting named by a variable in ``environ``;
    ConfigError for an EOSBROKER_ variable that names nothing."""
    check_eosbroker_variables(environ)
    out = []
    if "CLUSTER_ID" in environ:
        out.append(f"cluster.id={environ['CLUSTER_ID']}")
    for prefix in ENV_PREFIXES:
        for variable in sorted(environ):
            if variable.startswith(prefix) and variable not in OTHER_EOSBROKER_VARIABLES:
                name = setting_name(variable, prefix)
                if _known(name):
                    out.append(f"{name}={environ[variable]}")
    return out


def check_eosbroker_variables(environ: dict[str, str]) -> None:
    for variable in sorted(environ):
        if (variable.startswith("EOSBROKER_") and variable not in OTHER_EOSBROKER_VARIABLES
                and not _known(setting_name(variable, "EOSBROKER_"))):
            known = {env_name(name) for name in SETTINGS} | OTHER_EOSBROKER_VARIABLES
            suggestion = closest(variable, known) or closest(variable, {env_name(n) for n in kafka_names()})
            raise ConfigError(f"unknown environment variable {variable}: it names no setting"
                              + (f"; did you mean {suggestion}?" if suggestion else ""))
