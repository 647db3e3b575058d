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

from broker.log.descriptors import PooledFile
from broker.log.files import replace_atomically

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1


class CorruptIndex(Exception):
    """An index file that fails its sanity check; the segment rebuilds it from the log."""


def _read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _rewrite(path: Path, data: bytes) -> None:
    """Replaces the file with ``data`` atomically (a crash must not leave a valid-looking
    prefix of entries)."""
    if data:
        replace_atomically(path, data, fsync=False)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644))


class _SparseIndex:
    """Entries of two int columns (``_keys`` strictly increasing), kept in memory and
    appended to the file one entry at a time (opened through the descriptor pool only
    to append or fsync). Subclasses name the columns."""

    __slots__ = ("path", "base_offset", "_file", "_keys", "_values")
    ENTRY: struct.Struct
    KEY_TYPE: str
    VALUE_TYPE: str

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._file = PooledFile(path)
        self._keys = array(self.KEY_TYPE)
        self._values = array(self.VALUE_TYPE)

    @classmethod
    def _read(cls, path: Path, base_offset: int, check) -> _SparseIndex:
        """Reads an existing file, ``check(previous entry, entry)`` raising CorruptIndex
        for a bad entry; raises FileNotFoundError or CorruptIndex."""
        data = _read_file(path)
        if len(data) % cls.ENTRY.size:
            raise CorruptIndex(f"{path}: size {len(data)} is not a multiple of {cls.ENTRY.size}")
        index = cls(path, base_offset)
        previous = None
        for entry in cls.ENTRY.iter_unpack(data):
            check(previous, entry)
            index._keys.append(entry[0])
            index._values.append(entry[1])
            previous = entry
        return index

    @classmethod
    def _write(cls, path: Path, base_offset: int, keys, values) -> _SparseIndex:
        """Writes a fresh file holding the given entries (replacing any old one)."""
        index = cls(path, base_offset)
        index._keys.extend(keys)
        index._values.extend(values)
        _rewrite(path, b"".join(map(cls.ENTRY.pack, index._keys, index._values)))
        return index

    def __len__(self) -> int:
        return len(self._keys)

    def holds(self, keys: array, values: array) -> bool:
        """Whether the entries are exactly these (relative) columns."""
        return self._keys == keys and self._values == values

    def ready(self) -> None:
        """Opens the file for appending now, so that an append that follows cannot fail
        for want of a descriptor."""
        self._file.fd

    def _append(self, key: int, value: int) -> None:
        os.write(self._file.fd, self.ENTRY.pack(key, value))
        self._keys.append(key)
        self._values.append(value)

    def flush(self) -> None:
        os.fsync(self._file.fd)

    def close(self) -> None:
        self._file.close()


class OffsetIndex(_SparseIndex):
    """Maps an offset to the file position of a batch at or before it.

    Keys: offsets relative to the segment's base offset; values: file positions (both
    strictly increasing)."""

    __slots__ = ()
    ENTRY, KEY_TYPE, VALUE_TYPE = OFFSET_ENTRY, "i", "i"

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int, max_relative_offset: int) -> OffsetIndex:
        """Reads an existing file; raises FileNotFoundError or CorruptIndex."""
        def check(previous, entry) -> None:
            rel, position = entry
            if previous is not None and (rel <= previous[0] or position <= previous[1]):
                raise CorruptIndex(f"{path}: entries not increasing at relative offset {rel}")
            if position >= log_size or rel > max_relative_offset:
                raise CorruptIndex(f"{path}: entry ({rel}, {position}) points past the log")

        return cls._read(path, base_offset, check)

    @classmethod
    def create(cls, path: Path, base_offset: int, offsets=(), positions=()) -> OffsetIndex:
        """Writes a fresh file holding the given entries (replacing any old one)."""
        return cls._write(path, base_offset, offsets, positions)

    def entries(self) -> list[tuple[int, int]]:
        """(absolute offset, position) pairs, for tests and dump tools."""
        return [(self.base_offset + o, p) for o, p in zip(self._keys, self._values)]

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the newest entry, None if there is none."""
        if not self._keys:
            return None
        return self.base_offset + self._keys[-1], self._values[-1]

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch whose base offset is <= ``offset`` (0 if none)."""
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        return self._values[i] if i >= 0 else 0

    def floor_position(self, max_position: int, offset_limit: int | None) -> int:
        """Position of the last indexed batch starting at or before ``max_position``
        whose base offset is below ``offset_limit`` (0 if none)."""
        i = bisect_right(self._values, max_position)
        if offset_limit is not None:
            i = min(i, bisect_left(self._keys, offset_limit - self.base_offset))
        return self._values[i - 1] if i > 0 else 0


class TimeIndex(_SparseIndex):
    """Maps a timestamp to an offset at or before the first batch reaching it.

    An entry (T, O) says: the largest timestamp in the segment up to this point is T,
    first reached by the batch at offset O. Entries are added only when T grows.
    Keys: timestamps (strictly increasing); values: relative offsets (non-decreasing).
    """

    __slots__ = ()
    ENTRY, KEY_TYPE, VALUE_TYPE = TIME_ENTRY, "q", "i"

    @classmethod
    def load(cls, path: Path, base_offset: int, max_relative_offset: int) -> TimeIndex:
        def check(previous, entry) -> None:
            ts, rel = entry
            last_ts, last_offset = previous if previous is not None else (NO_TIMESTAMP, 0)
            if ts <= last_ts or rel < last_offset or rel > max_relative_offset:
                raise CorruptIndex(f"{path}: bad entry ({ts}, {rel})")

        return cls._read(path, base_offset, check)

    @classmethod
    def create(cls, path: Path, base_offset: int, timestamps=(), offsets=()) -> TimeIndex:
        return cls._write(path, base_offset, timestamps, offsets)

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + o) for t, o in zip(self._keys, self._values)]

    @property
    def last_timestamp(self) -> int:
        return self._keys[-1] if self._keys else NO_TIMESTAMP

    def last_entry(self) -> tuple[int, int] | None:
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp > self.last_timestamp:
            self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is <= ``timestamp`` (base offset if none)."""
        i = bisect_right(self._keys, timestamp) - 1
        return self.base_offset + (self._values[i] if i >= 0 else 0)
