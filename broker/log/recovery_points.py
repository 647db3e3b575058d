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
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}
    try:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"{len(lines) - 2} entries, the header says {count}")
        points = {}
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            if int(offset) < 0:
                raise ValueError(f"negative offset in {line!r}")
            points[(topic, int(partition))] = int(offset)
        return points
    except (ValueError, IndexError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}


def write_recovery_points(path: Path, points: dict[tuple[str, int], int]) -> None:
    lines = [str(_VERSION), str(len(points))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(points.items())]
    replace_atomically(path, ("\n".join(lines) + "\n").encode())
