"""Topic names, ids and per-topic configs; persisted as one small JSON file.

Partition data lives in ``<data-dir>/<topic>-<partition>/`` as in Kafka; the topic
registry (id, partition count, config overrides) lives in ``<data-dir>/meta/topics.json``
and its journal (``JsonJournal``): a change appends a line, the file is rewritten now and then.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from broker.config import TOPIC_DEFAULTS, BrokerConfig
from broker.log.files import JsonJournal
from protocol.names import INTERNAL_TOPICS
from broker.cluster.topic_configs import PUBLIC_TOPIC_CONFIGS, TOPIC_CONFIGS, InvalidTopicConfig, validate_values

# a pattern, not a compiled regex: re compiles (and caches) it with the first topic name checked,
# not at every start-up; fullmatch, so a trailing newline is refused as Kafka refuses it
LEGAL_TOPIC = r"[a-zA-Z0-9._-]+"
MAX_TOPIC_LENGTH = 249

# Python types of the topic configs, for callers that only need a value's kind.
TOPIC_CONFIG_TYPES: dict[str, type] = {
    name: {"BOOLEAN": bool, "INT": int, "LONG": int, "DOUBLE": float}.get(d.kind, str)
    for name, d in TOPIC_CONFIGS.items()
}


class TopicError(ValueError):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_LENGTH:
        raise TopicError("INVALID_TOPIC_EXCEPTION", f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if not re.fullmatch(LEGAL_TOPIC, name):
        raise TopicError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Checks names and values as Kafka's LogConfig does; returns the configs to store
    (values normalised, a null value meaning "the default" dropped)."""
    out: dict[str, str] = {}
    typed: dict[str, object] = {}
    for key, value in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise TopicError("INVALID_CONFIG", f"Unknown topic config name: {key}")
        if value is None:
            continue
        try:
            typed[key] = definition.parse(value)
        except InvalidTopicConfig as e:
            raise TopicError("INVALID_CONFIG", str(e)) from None
        out[key] = definition.render(typed[key])
    try:
        validate_values(typed)
    except InvalidTopicConfig as e:
        raise TopicError("INVALID_CONFIG", str(e)) from None
    return out


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the registry keeps it: name, id, partition count and config overrides."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def effective_topic_config(topic: TopicInfo, broker: BrokerConfig) -> dict[str, str]:
    """Every (public) topic config with its value as Kafka renders it: the topic's
    override, else the broker default it follows, else Kafka's default."""
    out: dict[str, str] = {}
    for key in PUBLIC_TOPIC_CONFIGS:
        definition = TOPIC_CONFIGS[key]
        if key in topic.configs:
            out[key] = topic.configs[key]
        elif key in TOPIC_DEFAULTS:
            out[key] = definition.render(broker.topic_default(key))
        else:
            out[key] = definition.render(definition.default)
    if "internal.segment.bytes" in topic.configs:  # Kafka's test-only override of segment.bytes
        out["segment.bytes"] = topic.configs["internal.segment.bytes"]
    return out


def _entry(topic: "TopicInfo") -> dict:
    return {"name": topic.name, "id": str(topic.topic_id), "partitions": topic.partitions, "configs": topic.configs}


def _topics_journal(data_dir: Path) -> JsonJournal:
    # topics.json stays a list of entries sorted by name; its journal is keyed by name
    return JsonJournal(data_dir / "meta" / "topics.json",
                       to_file=lambda by_name: [by_name[n] for n in sorted(by_name)],
                       from_file=lambda entries: {e["name"]: e for e in entries}, indent=1)


def read_topic_entries(data_dir: Path) -> list[dict]:
    """The registry's entries (name, id, partitions, configs) as stored, for tools;
    FileNotFoundError when there is no registry."""
    return list(_topics_journal(data_dir).load().values())


class TopicRegistry:
    def __init__(self, data_dir: Path) -> None:
        self._journal = _topics_journal(data_dir)
        self._journal.path.parent.mkdir(parents=True, exist_ok=True)
        self.by_name: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}
        self._entries: dict[str, dict] = {}
        try:
            self._entries = self._journal.load()
        except FileNotFoundError:
            pass
        for entry in self._entries.values():
            self._index(TopicInfo(entry["name"], uuid.UUID(entry["id"]), entry["partitions"], entry.get("configs", {})))

    def _index(self, topic: TopicInfo) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    def _save(self, topic: TopicInfo | None = None, removed: str | None = None) -> None:
        """Records one topic's new entry, or its removal (one journal line)."""
        whole = dict(self._entries)
        if topic is not None:
            whole[topic.name] = _entry(topic)
        if removed is not None:
            whole.pop(removed, None)
        self._journal.change(whole, {} if topic is None else {topic.name: whole[topic.name]},
                             () if removed is None else (removed,))
        self._entries = whole

    def compact(self) -> None:
        """At a clean stop: the journal folded into the file, for a quick next start."""
        self._journal.compact(self._entries)

    def add(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        topic = TopicInfo(name, uuid.uuid4(), partitions, dict(configs))
        self._index(topic)
        try:
            self._save(topic)
        except BaseException:  # not on disk: not known either
            del self.by_name[name], self.by_id[topic.topic_id]
            raise
        return topic

    def remove(self, name: str) -> TopicInfo:
        topic = self.by_name.pop(name)
        del self.by_id[topic.topic_id]
        self._save(removed=name)
        return topic

    def set_partitions(self, name: str, partitions: int) -> TopicInfo:
        before = self.by_name[name]
        topic = replace(before, partitions=partitions)
        self._index(topic)
        try:
            self._save(topic)
        except BaseException:
            self._index(before)
            raise
        return topic

    def set_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        topic = replace(self.by_name[name], configs=dict(configs))
        self._index(topic)
        self._save(topic)
        return topic
