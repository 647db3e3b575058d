"""Every topic config Kafka 4.4 knows (LogConfig), with its type, default and bounds.

A name not in this table is refused as Kafka refuses it ("Unknown topic config name").
The names the log acts on are those of ``broker.log.partition_log.LogConfig``; the others
(replication throttles, remote storage, compaction lags, ...) are accepted, validated,
stored and reported by DescribeConfigs, and have no effect on a single-copy local log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_THROTTLED = r"^\s*(\*|\d+:\d+(\s*,\s*\d+:\d+)*)?\s*$"  # compiled (and cached) by re on first use


class InvalidTopicConfig(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config as Kafka's ConfigDef declares it: type, default and valid values."""

    name: str
    kind: str  # Kafka's ConfigDef type: BOOLEAN, STRING, INT, LONG, DOUBLE, LIST
    default: object
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def parse(self, raw: str) -> object:
        """The typed value of ``raw``, or InvalidTopicConfig saying why not."""
        text = str(raw).strip()
        try:
            if self.kind == "BOOLEAN":
                if text.lower() not in ("true", "false"):
                    raise ValueError("Expected value to be either true or false")
                value: object = text.lower() == "true"
            elif self.kind in ("INT", "LONG"):
                value = _number(int, text, self.kind)
                limit = INT_MAX if self.kind == "INT" else LONG_MAX
                if not -limit - 1 <= value <= limit:
                    raise ValueError(f"Not a number of type {self.kind}")
            elif self.kind == "DOUBLE":
                value = _number(float, text, self.kind)
            elif self.kind == "LIST":
                value = [item.strip() for item in text.split(",")] if text else []
                if not self.choices:
                    value = [item for item in value if item]
            else:
                value = text
        except ValueError as e:
            raise InvalidTopicConfig(f"Invalid value {raw} for configuration {self.name}: {e}") from None
        self._check(raw, value)
        return value

    def _check(self, raw: str, value: object) -> None:
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            bound = (f"Value must be at least {_num(self.low)}" if self.high is None
                     else f"Value must be no more than {_num(self.high)}" if self.low is None
                     else f"Value must be between {_num(self.low)} and {_num(self.high)}")
            raise InvalidTopicConfig(f"Invalid value {raw} for configuration {self.name}: {bound}")
        if self.choices:
            items = value if isinstance(value, list) else [value]
            # Kafka 4.2+: an empty list is allowed (cleanup.policy: no deletion, no compaction), an empty item is not
            if self.kind == "LIST" and "" in items:
                raise InvalidTopicConfig(empty_item_message(self.name))
            for item in items:
                if item not in self.choices:
                    raise InvalidTopicConfig(f"Invalid value {item} for configuration {self.name}: "
                                             f"String must be one of: {', '.join(self.choices)}")
        if self.name == "compression.gzip.level" and value == 0:
            raise InvalidTopicConfig(f"Invalid value {raw} for configuration {self.name}: "
                                     "Value must be between 1 and 9, or -1")
        if self.name.endswith("replication.throttled.replicas") and not re.match(_THROTTLED, str(raw)):
            raise InvalidTopicConfig(f"Invalid value {raw} for configuration {self.name}: must be the "
                                     "wildcard '*' or a list of partitionId:brokerId pairs")

    def render(self, value: object) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, list):
            return ",".join(value)
        return str(value)


def _number(parse, text: str, kind: str):
    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"Not a number of type {kind}") from None


def empty_item_message(name: str) -> str:
    return f"Configuration '{name}' values must not be empty."


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_DEFS = [
    ConfigDef("cleanup.policy", "LIST", ["delete"], choices=("compact", "delete")),
    ConfigDef("compression.gzip.level", "INT", -1, -1, 9),
    ConfigDef("compression.lz4.level", "INT", 9, 1, 17),
    ConfigDef("compression.type", "STRING", "producer", choices=COMPRESSION_TYPES),
    ConfigDef("compression.zstd.level", "INT", 3, -131072, 22),
    ConfigDef("delete.retention.ms", "LONG", 86400000, 0),
    ConfigDef("errors.deadletterqueue.group.enable", "BOOLEAN", False),
    ConfigDef("file.delete.delay.ms", "LONG", 60000, 0),
    ConfigDef("flush.messages", "LONG", LONG_MAX, 1),
    ConfigDef("flush.ms", "LONG", LONG_MAX, 0),
    ConfigDef("follower.replication.throttled.replicas", "LIST", []),
    ConfigDef("index.interval.bytes", "INT", 4096, 0),
    ConfigDef("leader.replication.throttled.replicas", "LIST", []),
    ConfigDef("local.retention.bytes", "LONG", -2, -2),
    ConfigDef("local.retention.ms", "LONG", -2, -2),
    ConfigDef("max.compaction.lag.ms", "LONG", LONG_MAX, 1),
    ConfigDef("max.decompressed.message.bytes", "INT", 2147483639, 0),
    ConfigDef("max.message.bytes", "INT", 1048588, 0),
    ConfigDef("message.timestamp.after.max.ms", "LONG", 3600000, 0),
    ConfigDef("message.timestamp.before.max.ms", "LONG", LONG_MAX, 0),
    ConfigDef("message.timestamp.type", "STRING", "CreateTime", choices=("CreateTime", "LogAppendTime")),
    ConfigDef("min.cleanable.dirty.ratio", "DOUBLE", 0.5, 0, 1),
    ConfigDef("min.compaction.lag.ms", "LONG", 0, 0),
    ConfigDef("min.insync.replicas", "INT", 1, 1),
    ConfigDef("preallocate", "BOOLEAN", False),
    ConfigDef("remote.copy.lag.bytes", "LONG", -1, -1),
    ConfigDef("remote.copy.lag.ms", "LONG", 0, -1),
    ConfigDef("remote.log.copy.disable", "BOOLEAN", False),
    ConfigDef("remote.log.delete.on.disable", "BOOLEAN", False),
    ConfigDef("remote.storage.enable", "BOOLEAN", False),
    ConfigDef("retention.bytes", "LONG", -1),
    ConfigDef("retention.ms", "LONG", 604800000, -1),
    # Kafka 4 wants at least 1 MiB here (tests use internal.segment.bytes); the emulator
    # keeps the old floor of 14 bytes so that small segments stay easy to test.
    ConfigDef("segment.bytes", "INT", 1073741824, 14),
    ConfigDef("segment.index.bytes", "INT", 10485760, 4),
    ConfigDef("segment.jitter.ms", "LONG", 0, 0),
    ConfigDef("segment.ms", "LONG", 604800000, 1),
    ConfigDef("unclean.leader.election.enable", "BOOLEAN", False),
]
TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _DEFS}
# Kafka accepts this internal name too (LogConfig.configNames includes internal configs).
TOPIC_CONFIGS["internal.segment.bytes"] = ConfigDef("internal.segment.bytes", "INT", None, 14)
# Shown by DescribeConfigs (Kafka hides internal configs).
PUBLIC_TOPIC_CONFIGS = tuple(n for n in sorted(TOPIC_CONFIGS) if n != "internal.segment.bytes")


def validate_values(values: dict[str, object]) -> None:
    """Checks across configs (LogConfig.validateValues)."""
    low = values.get("min.compaction.lag.ms", 0)
    high = values.get("max.compaction.lag.ms", LONG_MAX)
    if low > high:
        raise InvalidTopicConfig(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                                 f"max.compaction.lag.ms ({high})")
