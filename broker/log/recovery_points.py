"""``recovery-point-offset-checkpoint``: per partition, the offset below which its log was
flushed, checked and covered by a producer-state snapshot, so a crash recovery validates
only what lies beyond it (Kafka's file of the same name and format: a version line, a
count line, then ``topic partition offset`` lines).

An unreadable file is logged and ignored: recovery then validates whole active segments,
as it does without one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.log.files import replace_atomically

log = logging.getLogger(__name__)

FILE_NAME = "recovery-point-offset-checkpoint"
_VERSION = 0


def read_recovery_points(path: Path) -> dict[tuple[str, int], int]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}
    try:
        # One split of the whole text (a topic name holds no blank): 20,000 lines are
        # parsed by a few calls, not a loop turn each.
        fields = text.split()
        if int(fields[0]) != _VERSION:
            raise ValueError(f"version {fields[0]!r}")
        count = int(fields[1])
        if 3 * count != len(fields) - 2:
            raise ValueError(f"{(len(fields) - 2) / 3:g} entries, the header says {count}")
        offsets = list(map(int, fields[4::3]))
        if offsets and min(offsets) < 0:
            raise ValueError(f"negative offset {min(offsets)}")
        return dict(zip(zip(fields[2::3], map(int, fields[3::3])), offsets))
    except (ValueError, IndexError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}


def write_recovery_points(path: Path, points: dict[tuple[str, int], int]) -> None:
    lines = [str(_VERSION), str(len(points))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(points.items())]
    replace_atomically(path, ("\n".join(lines) + "\n").encode())
