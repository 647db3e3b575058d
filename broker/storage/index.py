"""The two sparse indexes of a log segment, in Kafka's file formats.

``.index``: entries of (offset - base offset: int32, file position: int32), big endian.
``.timeindex``: entries of (timestamp: int64, offset - base offset: int32).

Kafka preallocates these files and maps them; here the entries live in memory (two
arrays per index) and each new entry is appended to its file with one write, which
gives the same bytes on disk without a resize step at roll. Both indexes are sparse
(one entry per ``index.interval.bytes`` of log), so they stay small.

Lookups are floor searches with bisect: the entry at or below the target, from which
the segment scans forward a short way.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from broker.storage.files import replace_atomically

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class CorruptIndex(Exception):
    """An index file that fails its sanity check; the segment rebuilds it from the log."""


def _read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _open_rewritten(path: Path, data: bytes) -> int:
    """Replaces the file with ``data`` atomically (a crash must not leave a valid-looking
    prefix of entries) and opens it for appending."""
    if data:
        replace_atomically(path, data, fsync=False)
        return os.open(path, _OPEN_FLAGS, 0o644)
    return os.open(path, _OPEN_FLAGS | os.O_TRUNC, 0o644)


class OffsetIndex:
    """Maps an offset to the file position of a batch at or before it."""

    __slots__ = ("path", "base_offset", "_fd", "_offsets", "_positions")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd = -1
        self._offsets = array("i")  # relative offsets, strictly increasing
        self._positions = array("i")  # file positions, strictly increasing

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int, max_relative_offset: int) -> OffsetIndex:
        """Reads an existing file; raises FileNotFoundError or CorruptIndex."""
        data = _read_file(path)
        if len(data) % OFFSET_ENTRY.size:
            raise CorruptIndex(f"{path}: size {len(data)} is not a multiple of {OFFSET_ENTRY.size}")
        index = cls(path, base_offset)
        last_offset = last_position = -1
        for rel, position in OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_offset or position <= last_position:
                raise CorruptIndex(f"{path}: entries not increasing at relative offset {rel}")
            if position >= log_size or rel > max_relative_offset:
                raise CorruptIndex(f"{path}: entry ({rel}, {position}) points past the log")
            index._offsets.append(rel)
            index._positions.append(position)
            last_offset, last_position = rel, position
        index._fd = os.open(path, _OPEN_FLAGS, 0o644)
        return index

    @classmethod
    def create(cls, path: Path, base_offset: int, offsets=(), positions=()) -> OffsetIndex:
        """Writes a fresh file holding the given entries (replacing any old one)."""
        index = cls(path, base_offset)
        index._offsets.extend(offsets)
        index._positions.extend(positions)
        index._fd = _open_rewritten(path, b"".join(map(OFFSET_ENTRY.pack, index._offsets, index._positions)))
        return index

    def __len__(self) -> int:
        return len(self._offsets)

    def entries(self) -> list[tuple[int, int]]:
        """(absolute offset, position) pairs, for tests and dump tools."""
        return [(self.base_offset + o, p) for o, p in zip(self._offsets, self._positions)]

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the newest entry, None if there is none."""
        if not self._offsets:
            return None
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        self._offsets.append(rel)
        self._positions.append(position)
        os.write(self._fd, OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch whose base offset is <= ``offset`` (0 if none)."""
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        return self._positions[i] if i >= 0 else 0

    def floor_position(self, max_position: int, offset_limit: int | None) -> int:
        """Position of the last indexed batch starting at or before ``max_position``
        whose base offset is below ``offset_limit`` (0 if none)."""
        i = bisect_right(self._positions, max_position)
        if offset_limit is not None:
            i = min(i, bisect_left(self._offsets, offset_limit - self.base_offset))
        return self._positions[i - 1] if i > 0 else 0

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class TimeIndex:
    """Maps a timestamp to an offset at or before the first batch reaching it.

    An entry (T, O) says: the largest timestamp in the segment up to this point is T,
    first reached by the batch at offset O. Entries are added only when T grows.
    """

    __slots__ = ("path", "base_offset", "_fd", "_timestamps", "_offsets")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd = -1
        self._timestamps = array("q")  # strictly increasing
        self._offsets = array("i")  # relative, non-decreasing

    @classmethod
    def load(cls, path: Path, base_offset: int, max_relative_offset: int) -> TimeIndex:
        data = _read_file(path)
        if len(data) % TIME_ENTRY.size:
            raise CorruptIndex(f"{path}: size {len(data)} is not a multiple of {TIME_ENTRY.size}")
        index = cls(path, base_offset)
        last_ts, last_offset = NO_TIMESTAMP, 0
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            if ts <= last_ts or rel < last_offset or rel > max_relative_offset:
                raise CorruptIndex(f"{path}: bad entry ({ts}, {rel})")
            index._timestamps.append(ts)
            index._offsets.append(rel)
            last_ts, last_offset = ts, rel
        index._fd = os.open(path, _OPEN_FLAGS, 0o644)
        return index

    @classmethod
    def create(cls, path: Path, base_offset: int, timestamps=(), offsets=()) -> TimeIndex:
        index = cls(path, base_offset)
        index._timestamps.extend(timestamps)
        index._offsets.extend(offsets)
        index._fd = _open_rewritten(path, b"".join(map(TIME_ENTRY.pack, index._timestamps, index._offsets)))
        return index

    def __len__(self) -> int:
        return len(self._timestamps)

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + o) for t, o in zip(self._timestamps, self._offsets)]

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else NO_TIMESTAMP

    def last_entry(self) -> tuple[int, int] | None:
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp > self.last_timestamp:
            rel = offset - self.base_offset
            self._timestamps.append(timestamp)
            self._offsets.append(rel)
            os.write(self._fd, TIME_ENTRY.pack(timestamp, rel))

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is <= ``timestamp`` (base offset if none)."""
        i = bisect_right(self._timestamps, timestamp) - 1
        return self.base_offset + (self._offsets[i] if i >= 0 else 0)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
