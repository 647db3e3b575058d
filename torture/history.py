"""What the torture clients write: record values that say who wrote them, and outcome logs.

Every record value is a small JSON object naming its writer, so the checker can tell
from the log alone which transaction (or which idempotent send) a record belongs to:

- transactional: ``{"p": producer, "x": transaction, "i": index, "n": size, "g": instance}``
  (``g``: which producer instance of the client wrote it, 1 for its first; a client
  replaces its producer after a fatal error, with the same transactional id)
- idempotent:    ``{"p": producer, "s": sequence}``
- consume-transform-produce copies add the source: ``"sp": partition, "so": offset``

Each client appends one JSON line per outcome as it saw it to its own history file:
``{"kind": "txn", "p", "x", "n", "outcome": committed|aborted|unknown}`` or
``{"kind": "idem", "p", "s", "outcome": acked|unknown, "partition", "offset"}``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterable

COMMITTED = "committed"
ABORTED = "aborted"
UNKNOWN = "unknown"
ACKED = "acked"


def encode_value(**fields: Any) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def decode_value(raw: bytes | None) -> dict | None:
    """The writer's fields, or None for a value no torture client wrote."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) and "p" in value else None


class HistoryLog:
    """One client's outcome log: a JSON line per outcome, flushed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, **event: Any) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_histories(paths: Iterable[Path]) -> list[dict]:
    events: list[dict] = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    events.append(json.loads(line))
    return events
