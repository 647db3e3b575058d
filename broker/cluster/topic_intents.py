"""The topic intent journal: a create, partition add or delete of a topic is recorded
(``<data-dir>/meta/topic-intents.json``, fsynced) before its first directory is touched
and cleared when it has finished, so a start after a kill -9 completes or rolls back only
the steps still recorded, whatever the partition count.

The topic registry is each step's commit point: a create or add counts once the registry
names its partitions (their directories were made and fsynced before), a delete once the
registry no longer names the topic (its directories go after). ``resolve`` is the sans-IO
decision for one recorded intent; ``TopicIntents`` keeps the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.log.files import replace_atomically

INTENTS_FILE = "topic-intents.json"

CREATE, ADD, DELETE = "create", "add", "delete"


@dataclass(frozen=True)
class Intent:
    """Partitions ``first`` to ``end - 1`` of ``topic`` being made (create, add) or removed
    (delete). A delete's directories are first renamed ``<topic>-<p>.<aside>-delete``
    (``aside``: the deleted topic's id), so the name is free at once and their removal
    can run beside the broker."""
    op: str
    topic: str
    first: int
    end: int
    configs: tuple[tuple[str, str], ...] = ()
    aside: str = ""

    def to_json(self) -> dict:
        entry = {"op": self.op, "topic": self.topic, "first": self.first, "end": self.end,
                 "configs": dict(self.configs)}
        if self.aside:
            entry["aside"] = self.aside
        return entry

    @classmethod
    def from_json(cls, entry: dict) -> "Intent":
        return cls(entry["op"], entry["topic"], int(entry["first"]), int(entry["end"]),
                   tuple(sorted(entry.get("configs", {}).items())), str(entry.get("aside", "")))

    def aside_name(self, partition: int) -> str:
        """The name a deleted partition's directory is renamed to before it is removed."""
        return f"{self.topic}-{partition}.{self.aside}-delete"


@dataclass(frozen=True)
class Resolution:
    """What a start does for one intent left recorded: directories to remove (rolled
    back) or to make (completed), and the log line saying so."""
    remove: range
    make: range
    message: str
    remove_aside: range = range(0)  # a delete's directories renamed aside (Intent.aside_name)


def resolve(intent: Intent, registered_partitions: int | None, registered_id: str | None = None) -> Resolution:
    """``registered_partitions``, ``registered_id``: what the registry names for the topic
    now, its partition count and id (None: not there)."""
    parts = range(intent.first, intent.end)
    span = f"{intent.first}-{intent.end - 1}" if intent.end - intent.first > 1 else str(intent.first)
    if intent.op == DELETE:
        aside = parts if intent.aside else range(0)
        if registered_partitions is None:
            return Resolution(parts, range(0), f"completed the delete of topic {intent.topic}: removed its "
                                               f"partition directories ({span})", aside)
        if intent.aside and registered_id != intent.aside:  # created again since: only the old directories go
            return Resolution(range(0), range(0), f"completed the delete of topic {intent.topic} (since created "
                                                  f"again): removed its old partition directories ({span})", aside)
        return Resolution(range(0), range(0), f"topic {intent.topic} kept: its delete stopped before the "
                                              f"registry recorded it")
    what = "topic create" if intent.op == CREATE else "partition add"
    if registered_partitions is not None and registered_partitions >= intent.end:
        return Resolution(range(0), parts, f"completed the {what} of {intent.topic}: partitions {span} "
                                           f"are in the registry")
    return Resolution(parts, range(0), f"rolled back the {what} of {intent.topic}: removed its partition "
                                       f"directories ({span}), which the registry never named")


class TopicIntents:
    """The journal file: the pending intents, rewritten whole (fsynced, renamed) at each change."""

    def __init__(self, meta_dir: Path) -> None:
        self.path = meta_dir / INTENTS_FILE
        self.pending: list[Intent] = []

    def load(self) -> bool:
        """Reads the pending intents; False when there is no journal file yet (a data
        directory of a version without one: the caller scans once)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        # a clear is not synced: a crash may leave it empty (rename before data)
        if data.strip() in (b"", b"[]"):  # nothing in progress, the usual start: no json parser loaded
            self.pending = []
            return True
        import json

        self.pending = [Intent.from_json(e) for e in json.loads(data)]
        return True

    def _write(self, pending: list[Intent], durable: bool) -> None:
        if pending:
            import json

            data = json.dumps([i.to_json() for i in pending]).encode()
        else:  # the usual write: nothing in progress, no json encoder loaded
            data = b"[]"
        replace_atomically(self.path, data, fsync=durable, sync_dir=durable)
        self.pending = pending

    def begin(self, intent: Intent) -> None:
        """Durable before it returns; raises OSError (then nothing is recorded)."""
        self._write(self.pending + [intent], durable=True)

    def clear(self, intent: Intent) -> None:
        """Not synced: a clear a crash loses brings back an intent whose step has
        finished, which resolves to what is on disk already, and the next begin's
        synced rewrite supersedes it."""
        self._write([i for i in self.pending if i != intent], durable=False)

    def clear_all(self) -> None:
        self._write([], durable=True)
