"""The data source's options, parsed once on the driver into frozen values that are
pickled to the executors with the writer or reader.

Names follow Spark's Kafka connector where they mean the same thing.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from spark_client import formats
from spark_client.security import SECURITY_OPTIONS, ClientSecurity

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
DEFAULT_CONTROL_TOPIC = "eosbroker-spark-commits"
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's default transaction.max.timeout.ms

# Test hooks: read by the writer, never set in production (accepted, not listed).
HOOK_PREFIX = "eosbroker.test."
HOOK_FAIL_PARTITION_ATTEMPT = "eosbroker.test.fail.partition.attempt"  # "P:A": raise after flushing
HOOK_SLEEP_BEFORE_COMMIT_MS = "eosbroker.test.sleep.before.commit.ms"
# "POINT:BATCH:PGID": SIGKILL the driver (process group PGID) at POINT of that batch's commit.
HOOK_KILL_DRIVER = "eosbroker.test.kill.driver"
KILL_POINTS = ("before-decision", "during-commit", "after-committed")

SINK_OPTIONS = (
    "kafka.bootstrap.servers", "topic", "transactional.id.prefix", "transaction.timeout.ms", "delivery.guarantee",
    "write.id", "value.format", "key.format", "protobuf.descriptor.file", "protobuf.message.name",
    "control.topic", "batch.size", "commit.timeout.ms",
    "key.column", "value.column", "headers.column", "partition.column", "topic.column",
    "checkpointLocation",  # Spark passes a streaming query's own option through
    *SECURITY_OPTIONS,
)
SOURCE_OPTIONS = (
    "kafka.bootstrap.servers", "subscribe", "startingOffsets", "endingOffsets", "kafka.isolation.level",
    "maxOffsetsPerTrigger", "fetch.max.bytes", *SECURITY_OPTIONS,
)


def check_known(options: Mapping[str, str], valid: tuple[str, ...], what: str) -> None:
    """Refuses an option the data source does not know: a typo must not run with defaults."""
    known = {v.lower(): v for v in valid}
    for name in options:
        lower = name.lower()
        if lower in known or lower.startswith(HOOK_PREFIX):
            continue
        close = difflib.get_close_matches(lower, known, n=1)
        hint = f" (did you mean {known[close[0]]!r}?)" if close else ""
        raise ValueError(f"unknown option {name!r} for the eosbroker {what}{hint}; valid options: "
                         f"{', '.join(valid)}")


def _get(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    # Spark passes options case-insensitively (its keys may arrive lower-cased).
    for key, value in options.items():
        if key.lower() == name.lower():
            return value
    return default


def _required(options: Mapping[str, str], name: str) -> str:
    value = _get(options, name)
    if not value:
        raise ValueError(f"the eosbroker data source needs option {name!r}")
    return value


def _int(options: Mapping[str, str], name: str, default: int) -> int:
    value = _get(options, name)
    try:
        return default if value is None else int(value)
    except ValueError as e:
        raise ValueError(f"option {name!r} must be an integer, not {value!r}") from e


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    key_column: str
    value_column: str
    headers_column: str
    partition_column: str
    topic_column: str
    value_format: str
    key_format: str
    protobuf_descriptor_file: str | None
    protobuf_message_name: str | None
    transactional_id_prefix: str
    transaction_timeout_ms: int
    delivery_guarantee: str
    control_topic: str
    write_id: str | None
    batch_bytes: int
    commit_timeout_ms: int
    checkpoint_location: str | None
    hook_fail_partition_attempt: tuple[int, int] | None
    hook_sleep_before_commit_ms: int
    hook_kill_driver: tuple[str, int, int] | None
    security: ClientSecurity

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        check_known(options, SINK_OPTIONS, "sink")
        guarantee = (_get(options, "delivery.guarantee") or EXACTLY_ONCE).lower().replace("_", "-")
        if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise ValueError(f"delivery.guarantee must be {EXACTLY_ONCE} or {AT_LEAST_ONCE}, not {guarantee!r}")
        value_format = (_get(options, "value.format") or formats.RAW).lower()
        key_format = (_get(options, "key.format") or formats.RAW).lower()
        for name, fmt in (("value.format", value_format), ("key.format", key_format)):
            if fmt not in formats.FORMATS:
                raise ValueError(f"{name} must be one of {', '.join(formats.FORMATS)}, not {fmt!r}")
        descriptor = _get(options, "protobuf.descriptor.file")
        message = _get(options, "protobuf.message.name")
        if formats.PROTOBUF in (value_format, key_format) and not (descriptor and message):
            raise ValueError("the protobuf format needs options protobuf.descriptor.file and protobuf.message.name")
        fail = _get(options, HOOK_FAIL_PARTITION_ATTEMPT)
        kill = _get(options, HOOK_KILL_DRIVER)
        if kill is not None:
            point, batch, pgid = kill.split(":")
            if point not in KILL_POINTS:
                raise ValueError(f"{HOOK_KILL_DRIVER} point must be one of {', '.join(KILL_POINTS)}")
            kill = (point, int(batch), int(pgid))
        timeout = _int(options, "transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
        if timeout <= 0:
            raise ValueError("transaction.timeout.ms must be positive")
        return cls(
            bootstrap=_required(options, "kafka.bootstrap.servers"),
            topic=_get(options, "topic"),
            key_column=_get(options, "key.column") or "key",
            value_column=_get(options, "value.column") or "value",
            headers_column=_get(options, "headers.column") or "headers",
            partition_column=_get(options, "partition.column") or "partition",
            topic_column=_get(options, "topic.column") or "topic",
            value_format=value_format,
            key_format=key_format,
            protobuf_descriptor_file=descriptor,
            protobuf_message_name=message,
            transactional_id_prefix=_get(options, "transactional.id.prefix") or "eosbroker-spark",
            transaction_timeout_ms=timeout,
            delivery_guarantee=guarantee,
            control_topic=_get(options, "control.topic") or DEFAULT_CONTROL_TOPIC,
            write_id=_get(options, "write.id"),
            batch_bytes=_int(options, "batch.size", 512 * 1024),
            commit_timeout_ms=_int(options, "commit.timeout.ms", 120_000),
            checkpoint_location=_get(options, "checkpointLocation"),
            hook_fail_partition_attempt=tuple(int(x) for x in fail.split(":")) if fail else None,
            hook_sleep_before_commit_ms=_int(options, HOOK_SLEEP_BEFORE_COMMIT_MS, 0),
            hook_kill_driver=kill,
            security=ClientSecurity.parse(options),
        )


EARLIEST = "earliest"
LATEST = "latest"


def parse_offsets(spec: str | None, default: str) -> str | dict[str, dict[int, int]]:
    """"earliest", "latest" or Spark's JSON {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest)."""
    spec = (spec or default).strip()
    if spec.lower() in (EARLIEST, LATEST):
        return spec.lower()
    try:
        raw = json.loads(spec)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, AttributeError) as e:
        raise ValueError(f"offsets must be earliest, latest or JSON like {{\"t\":{{\"0\":5}}}}, not {spec!r}") from e


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: str
    topics: tuple[str, ...]
    starting_offsets: str | dict
    ending_offsets: str | dict
    isolation_level: str
    max_offsets_per_trigger: int | None
    fetch_max_bytes: int
    security: ClientSecurity

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> "SourceOptions":
        check_known(options, SOURCE_OPTIONS, "source")
        topics = _get(options, "subscribe")
        if not topics:
            raise ValueError("the eosbroker source needs option 'subscribe' (comma-separated topics)")
        isolation = (_get(options, "kafka.isolation.level") or "read_committed").lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"kafka.isolation.level must be read_committed or read_uncommitted, not {isolation!r}")
        ending = _get(options, "endingOffsets")
        if streaming and ending:
            raise ValueError("endingOffsets is for batch queries only")
        max_per_trigger = _get(options, "maxOffsetsPerTrigger")
        return cls(
            bootstrap=_required(options, "kafka.bootstrap.servers"),
            topics=tuple(t.strip() for t in topics.split(",") if t.strip()),
            starting_offsets=parse_offsets(_get(options, "startingOffsets"), LATEST if streaming else EARLIEST),
            ending_offsets=parse_offsets(ending, LATEST),
            isolation_level=isolation,
            max_offsets_per_trigger=int(max_per_trigger) if max_per_trigger else None,
            fetch_max_bytes=_int(options, "fetch.max.bytes", 4 << 20),
            security=ClientSecurity.parse(options),
        )
