"""What the group coordinator knows of the KIP-848 consumer, KIP-932 share and KIP-1071
streams group types before a group of the type appears: their settings, the key versions
of their records in __consumer_offsets, and the refusal their checks raise.

A type's own code (its groups, heartbeat and log codec) is imported when a record or a
request of the type first needs it (``key_type``, ``type_code``): loading a partition
that holds only offsets and classic groups, or starting a broker that has none, never
imports it.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from types import ModuleType

from kio.schema.errors import ErrorCode

CONSUMER, SHARE, STREAMS = "consumer", "share", "streams"

CONSUMER_KEY_VERSIONS = frozenset({3, 4, 5, 6, 7, 8})
SHARE_KEY_VERSIONS = frozenset({10, 11, 12, 13, 14, 15})
STREAMS_KEY_VERSIONS = frozenset({17, 18, 19, 20, 21, 22, 23})
_KEY_TYPES = {version: group_type for group_type, versions in (
    (CONSUMER, CONSUMER_KEY_VERSIONS), (SHARE, SHARE_KEY_VERSIONS), (STREAMS, STREAMS_KEY_VERSIONS))
    for version in versions}

# Each type's modules: its groups and heartbeat, its records' codec.
_CODE = {CONSUMER: "coordinator.group.consumer_group", SHARE: "coordinator.group.share_group",
         STREAMS: "coordinator.group.streams_group"}
_CODECS = {CONSUMER: "coordinator.group.consumer_log_codec", SHARE: "coordinator.group.share_log_codec",
           STREAMS: "coordinator.group.streams_log_codec"}


def key_type(version: int) -> str | None:
    """The group type whose records have keys of this version (None: no modern type's)."""
    return _KEY_TYPES.get(version)


def type_code(group_type: str) -> ModuleType:
    """The module of a group type's groups and heartbeat (imported on first use)."""
    return importlib.import_module(_CODE[group_type])


def type_codec(group_type: str) -> ModuleType:
    """The module of a group type's log codec (imported on first use)."""
    return importlib.import_module(_CODECS[group_type])


class Refused(Exception):
    """A modern group request refused: the error and message it is answered."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; first is the default
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "downgrade")


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The broker's group.share.* settings (group configs override the timeouts)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size
    # group.share.initialize.retry.interval.ms: share-partitions still initializing this
    # long after they were asked (the node asking died, say) are asked again
    initialize_retry_interval_ms: int = 30_000
    assignment_interval_ms: int = 1_000  # group.share.assignment.interval.ms (group config overrides)


@dataclass(frozen=True, slots=True)
class StreamsGroupConfig:
    """The broker's group.streams.* settings."""

    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.streams.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.streams.max.size
    task_offset_interval_ms: int = 60_000  # streams.task.offset.interval.ms
    acceptable_recovery_lag: int = 10_000  # streams.acceptable.recovery.lag
    initial_rebalance_delay_ms: int = 3_000  # group.streams.initial.rebalance.delay.ms
    assignment_interval_ms: int = 1_000  # group.streams.assignment.interval.ms
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    # group.streams.rack.aware.assignment.tags: the client tags each member must send. The
    # sticky assignor of Kafka 4.4 does not place standbys by them; the heartbeat (v1+)
    # reports members missing one, as Kafka does.
    rack_aware_assignment_tags: tuple[str, ...] = ()


def tag_list(value: str) -> tuple[str, ...]:
    """A rack.aware.assignment.tags value's tag keys (comma separated, as Kafka splits it)."""
    value = value.strip()
    return tuple(re.split(r"\s*,\s*", value)) if value else ()
