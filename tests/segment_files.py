"""Segment files on disk, for tests that wait for retention or compaction to shrink a log."""

from __future__ import annotations

from pathlib import Path


def log_bytes(directory: Path, pattern: str) -> int:
    """The bytes of the segment files under ``directory`` matching ``pattern``; a segment
    the broker deletes between the listing and its stat counts as gone."""
    total = 0
    for path in directory.glob(pattern):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total
