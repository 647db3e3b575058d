"""One log segment: a .log file of whole v2 batches plus its indexes: two sparse ones
and the aborted-transaction index.

Files are named by the segment's base offset, 20 digits (00000000000000000000.log,
.index, .timeindex, .txnindex), as Kafka names them. The segment appends bytes, keeps the index
bookkeeping Kafka's LogSegment keeps (bytes since the last index entry, the largest
timestamp and the offset that first reached it), and reads by position with os.pread.
It never decodes records; batch headers are read with struct.

The two sparse indexes, in Kafka's file formats, are written by the segment they index:
``.index``: entries of (offset - base offset: int32, file position: int32), big endian.
``.timeindex``: entries of (timestamp: int64, offset - base offset: int32).

Kafka preallocates these files and maps them; here the entries live in memory (two
arrays per index) and each new entry is appended to its file with one write, which
gives the same bytes on disk without a resize step at roll. Both indexes are sparse
(one entry per ``index.interval.bytes`` of log), so they stay small.

Lookups are floor searches with bisect: the entry at or below the target, from which
the segment scans forward a short way.

``.txnindex`` (Kafka's TransactionIndex): one entry per aborted transaction whose ABORT
marker lies in this segment: (version: int16 = 0, producer id: int64, first offset:
int64, last offset (the marker): int64, last stable offset after it: int64). The file
is made at the first abort; it goes with the segment (retention, truncation, cleaning).
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.records import LOG_OVERHEAD, MAGIC_V2, RECORD_BATCH_OVERHEAD, RecordBatch

from broker.log.descriptors import PooledFile
from broker.log.files import read_small_file, replace_atomically

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INT32_MAX = 0x7FFFFFFF
OFFSET_ENTRY = struct.Struct(">ii")  # an .index entry
TIME_ENTRY = struct.Struct(">qi")  # a .timeindex entry
TXN_ENTRY = struct.Struct(">hqqqq")  # a .txnindex entry
TXN_ENTRY_VERSION = 0
NO_TIMESTAMP = -1

_HEAD = struct.Struct(">qi")  # base offset, batch length
_INT32 = struct.Struct(">i")
_LAST_OFFSET_DELTA = 23
_SCAN_CHUNK = 16 * 1024
_ITER_CHUNK = 1024 * 1024

log = logging.getLogger(__name__)


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:020d}{suffix}"


class LogSegment:
    __slots__ = (
        "directory",
        "base_offset",
        "log_path",
        "_file",
        "size",
        "next_offset",
        "offset_index",
        "time_index",
        "max_timestamp",
        "offset_of_max_timestamp",
        "bytes_since_last_index_entry",
        "roll_base_ms",
        "unflushed",
        "txn_index",
    )

    def __init__(self, directory: Path, base_offset: int, txn_index_on_disk: bool = True) -> None:
        """``txn_index_on_disk``: whether a .txnindex may exist (the caller listed the
        directory); False spares a look for it."""
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX)
        self._file = PooledFile(self.log_path)
        try:  # an existing segment is not opened until it is read or written
            self.size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            self.size = os.fstat(self._file.fd).st_size  # created
        self.next_offset = base_offset  # one past the last batch; exact for the active segment
        self.offset_index: OffsetIndex | None = None
        self.time_index: TimeIndex | None = None
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.roll_base_ms: int | None = None  # segment.ms counts from here
        self.unflushed = False
        txn_path = segment_path(directory, base_offset, TXN_INDEX_SUFFIX)
        self.txn_index = TransactionIndex.load(txn_path, base_offset) if txn_index_on_disk else \
            TransactionIndex(txn_path, base_offset)

    @property
    def fd(self) -> int:
        """The .log file's descriptor, reopened if the pool closed it (OSError once the
        segment is closed)."""
        return self._file.fd

    @property
    def closed(self) -> bool:
        return self._file.closed

    # creation and loading ------------------------------------------------
    @classmethod
    def create(cls, directory: Path, base_offset: int) -> LogSegment:
        """A new empty segment (any leftover files of the same name are emptied)."""
        seg = cls(directory, base_offset, txn_index_on_disk=False)
        seg.txn_index.path.unlink(missing_ok=True)  # a leftover of the same name
        if seg.size:
            os.ftruncate(seg.fd, 0)
            seg.size = 0
        seg.offset_index = OffsetIndex.create(seg.index_path, base_offset)
        seg.time_index = TimeIndex.create(seg.time_index_path, base_offset)
        seg.unflushed = True
        return seg

    @property
    def index_path(self) -> Path:
        return segment_path(self.directory, self.base_offset, INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX)

    def load_indexes(self, next_base_offset: int, index_interval_bytes: int) -> str | None:
        """Loads the indexes of an inactive segment; rebuilds them when missing or corrupt.

        Returns why they were rebuilt, or None when the files were good.
        """
        self.next_offset = next_base_offset
        max_rel = max(next_base_offset - self.base_offset - 1, 0)
        try:
            offset_index = OffsetIndex.load(self.index_path, self.base_offset, self.size, max_rel)
            try:
                time_index = TimeIndex.load(self.time_index_path, self.base_offset, max_rel)
            except BaseException:
                offset_index.close()
                raise
        except (FileNotFoundError, CorruptIndex) as e:
            self.rebuild_indexes(index_interval_bytes, validate=False, inactive=True)
            return str(e) if isinstance(e, CorruptIndex) else f"{e.filename} missing"
        last = time_index.last_entry()
        if last is None and self.size:
            # The final entry made at roll is missing (or no batch has a timestamp).
            offset_index.close()
            time_index.close()
            self.rebuild_indexes(index_interval_bytes, validate=False, inactive=True)
            return None
        self.offset_index, self.time_index = offset_index, time_index
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        return None

    def load_active_indexes(self) -> str | None:
        """After a clean shutdown: loads the active segment's index files and reads only
        the batch headers from the last offset index entry to the end of the file, to
        find the next offset and the state a full scan would have derived (largest
        timestamp and its offset, bytes since the last index entry). No CRC checks.

        Returns why the files cannot be trusted (the caller then runs the recovery
        scan), or None when the indexes are in place.
        """
        try:
            offset_index = OffsetIndex.load(self.index_path, self.base_offset, self.size, INT32_MAX)
            try:
                time_index = TimeIndex.load(self.time_index_path, self.base_offset, INT32_MAX)
            except BaseException:
                offset_index.close()
                raise
        except FileNotFoundError as e:
            return f"{e.filename} missing"
        except CorruptIndex as e:
            return str(e)
        problem = self._read_tail(offset_index, time_index)
        if problem is not None:
            offset_index.close()
            time_index.close()
            return problem
        self.offset_index, self.time_index = offset_index, time_index
        return None

    def _read_tail(self, offset_index: OffsetIndex, time_index: TimeIndex) -> str | None:
        """Sets next_offset, the max timestamp state and bytes_since_last_index_entry
        from the index files plus the batches after the last offset index entry."""
        indexed = offset_index.last_entry()
        start, expected = (indexed[1], indexed[0]) if indexed is not None else (0, self.base_offset)
        # A time index entry is written together with an offset index entry and holds
        # the largest timestamp up to that batch, so the tail scan continues from it.
        max_ts, offset_of_max = time_index.last_entry() or (NO_TIMESTAMP, -1)
        if offset_of_max > (indexed[0] if indexed is not None else -1):
            return f"time index entry at offset {offset_of_max} is past the last offset index entry"
        fd, size, position = self.fd, self.size, start
        while position < size:
            chunk = os.pread(fd, min(_SCAN_CHUNK, size - position), position)
            i, n = 0, len(chunk)
            while n - i >= RECORD_BATCH_OVERHEAD:
                batch = RecordBatch(chunk, i)
                batch_base, batch_size = _HEAD.unpack_from(chunk, i)
                batch_size += LOG_OVERHEAD
                if batch_size < RECORD_BATCH_OVERHEAD:
                    return f"batch length {batch_size - LOG_OVERHEAD} at position {position + i} is below the header size"
                if position + i + batch_size > size:
                    return f"batch of {batch_size} bytes at position {position + i} runs past the end of the file"
                if batch.magic != MAGIC_V2:
                    return f"magic {batch.magic} at position {position + i}"
                if indexed is not None and position + i == start and batch_base != expected:
                    return f"the last offset index entry ({expected}, {start}) points at a batch with offset {batch_base}"
                last_offset = batch_base + batch.last_offset_delta
                if batch_base < expected or last_offset < batch_base or last_offset - self.base_offset > INT32_MAX:
                    return f"batch offsets {batch_base}..{last_offset} at position {position + i} are out of order"
                ts = batch.max_timestamp
                if ts > max_ts:
                    max_ts, offset_of_max = ts, batch_base
                expected = last_offset + 1
                i += batch_size
            if i == 0:
                return f"{size - position} trailing bytes, less than a batch header"
            position += i
        self.next_offset = expected
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, offset_of_max
        self.bytes_since_last_index_entry = size - start
        return None

    def rebuild_indexes(self, index_interval_bytes: int, validate: bool, inactive: bool) -> tuple[int, str | None]:
        """Scans the log from the start, rewriting both index files.

        With ``validate`` each batch's magic, CRC and offsets are checked and the scan
        stops at the first bad one. Returns (bytes of valid batches, problem or None);
        the caller decides whether to truncate. ``inactive`` adds the final time index
        entry a segment gets when it is rolled.
        """
        for index in (self.offset_index, self.time_index):
            if index is not None:
                index.close()
        return self._scan(0, self.base_offset, array("i"), array("i"), array("q"), array("i"), NO_TIMESTAMP, -1,
                          index_interval_bytes, validate, inactive)

    def recover_beyond(self, recovery_point: int, index_interval_bytes: int) -> tuple[int, str | None] | None:
        """Crash recovery of the active segment from a recovery point (Kafka's
        recovery-point-offset-checkpoint: what lies below it was flushed and checked).

        The index entries at or below the recovery point are kept; from the batch of
        the last of them on, every batch is validated (CRC included) and indexed again,
        stopping at the first bad one, as ``rebuild_indexes`` does from the start.
        Returns (bytes of valid batches, problem or None), or None when the index
        files cannot be used (the caller then validates the whole segment).
        """
        try:
            offset_index = OffsetIndex.load(self.index_path, self.base_offset, self.size, INT32_MAX)
            time_index = TimeIndex.load(self.time_index_path, self.base_offset, INT32_MAX)
        except (FileNotFoundError, CorruptIndex):
            return None
        kept = [(o, p) for o, p in offset_index.entries() if o <= recovery_point]
        offsets, positions = array("i", (o - self.base_offset for o, _ in kept)), array("i", (p for _, p in kept))
        start, expected = (kept[-1][1], kept[-1][0]) if kept else (0, self.base_offset)
        last_kept = kept[-1][0] if kept else -1
        times = [(t, o) for t, o in time_index.entries() if o <= last_kept]
        ts_values, ts_offsets = array("q", (t for t, _ in times)), array("i", (o - self.base_offset for _, o in times))
        max_ts, offset_of_max = times[-1] if times else (NO_TIMESTAMP, -1)
        return self._scan(start, expected, offsets, positions, ts_values, ts_offsets, max_ts, offset_of_max,
                          index_interval_bytes, True, False, reuse=(offset_index, time_index))

    def _scan(self, pos: int, expected: int, offsets: array, positions: array, ts_values: array, ts_offsets: array,
              max_ts: int, offset_of_max: int, index_interval_bytes: int, validate: bool,
              inactive: bool, reuse: tuple[OffsetIndex, TimeIndex] | None = None) -> tuple[int, str | None]:
        """Indexes (and with ``validate`` checks) the batches from ``pos``, whose first
        has offset ``expected``, after the given index entries and timestamp state;
        writes both index files, unless the open ``reuse`` ones already hold exactly
        those entries (the usual case after a crash: an index entry is written right
        after its batch)."""
        base = self.base_offset
        since = 0
        problem = None
        fd, size = self.fd, self.size
        while pos < size and problem is None:
            remaining = size - pos
            if remaining < RECORD_BATCH_OVERHEAD:
                problem = f"{remaining} trailing bytes, less than a batch header"
                break
            chunk = os.pread(fd, min(_ITER_CHUNK, remaining), pos)
            i, n = 0, len(chunk)
            while n - i >= RECORD_BATCH_OVERHEAD:
                batch_base, length = _HEAD.unpack_from(chunk, i)
                batch_size = length + LOG_OVERHEAD
                if batch_size < RECORD_BATCH_OVERHEAD:
                    problem = f"batch length {length} is below the header size"
                    break
                if pos + i + batch_size > size:
                    problem = f"batch of {batch_size} bytes runs past the end of the file"
                    break
                if i + batch_size > n:
                    if i:
                        break  # read again from this batch
                    chunk = os.pread(fd, batch_size, pos)
                    n = len(chunk)
                batch = RecordBatch(chunk, i)
                last_offset = batch_base + batch.last_offset_delta
                if validate:
                    problem = _batch_problem(batch, batch_base, last_offset, expected, base)
                    if problem is not None:
                        break
                ts = batch.max_timestamp
                if ts > max_ts:
                    max_ts, offset_of_max = ts, batch_base
                if since > index_interval_bytes:
                    offsets.append(batch_base - base)
                    positions.append(pos + i)
                    if max_ts > (ts_values[-1] if ts_values else NO_TIMESTAMP):
                        ts_values.append(max_ts)
                        ts_offsets.append(offset_of_max - base)
                    since = 0
                since += batch_size
                expected = last_offset + 1
                i += batch_size
            pos += i
        valid = min(pos, size)
        if inactive and max_ts > (ts_values[-1] if ts_values else NO_TIMESTAMP):
            ts_values.append(max_ts)
            ts_offsets.append(offset_of_max - base)
        if reuse is not None and reuse[0].holds(offsets, positions) and reuse[1].holds(ts_values, ts_offsets):
            self.offset_index, self.time_index = reuse
        else:
            if reuse is not None:
                reuse[0].close()
                reuse[1].close()
            self.offset_index = OffsetIndex.create(self.index_path, base, offsets, positions)
            self.time_index = TimeIndex.create(self.time_index_path, base, ts_values, ts_offsets)
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, offset_of_max
        self.bytes_since_last_index_entry = since
        if not inactive:
            self.next_offset = expected
        return valid, problem

    def truncate_bytes(self, position: int) -> None:
        """Cuts the log file at ``position`` (indexes must be rebuilt by the caller)."""
        os.ftruncate(self.fd, position)
        self.size = position
        self.unflushed = True

    # appending -----------------------------------------------------------
    def append(self, data, base_offset: int, last_offset: int, max_timestamp: int, index_interval_bytes: int) -> None:
        position = self.size
        index_due = self.bytes_since_last_index_entry > index_interval_bytes
        file = self._file
        fd = file.descriptor  # written through as it is: the pool is not asked
        file.written = True
        if fd < 0 or index_due and not (self.offset_index.open_now and self.time_index.open_now):
            # The pool closed a file this append writes: every one it needs opened (and
            # made the most recently used) before the log is written, so none can fail after.
            if index_due:
                self.offset_index.ready()
                self.time_index.ready()
            fd = file.fd
        written = os.write(fd, data)
        if written != len(data):
            # A short write (disk full) would leave a torn batch: take it back.
            os.ftruncate(fd, position)
            raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if index_due:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += written
        self.size = position + written
        self.next_offset = last_offset + 1
        self.unflushed = True

    def on_become_inactive(self) -> None:
        """At roll: record the segment's largest timestamp for later opens and lookups."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # reading -------------------------------------------------------------
    def find_batch(self, offset: int, position: int = 0) -> int | None:
        """Position of the first batch at or after ``position`` whose last offset is >= ``offset``."""
        fd, size = self.fd, self.size
        while position < size:
            chunk = os.pread(fd, min(_SCAN_CHUNK, size - position), position)
            i, n = 0, len(chunk)
            while n - i >= _LAST_OFFSET_DELTA + 4:
                batch_base, length = _HEAD.unpack_from(chunk, i)
                if batch_base + _INT32.unpack_from(chunk, i + _LAST_OFFSET_DELTA)[0] >= offset:
                    return position + i
                i += length + LOG_OVERHEAD
            if i == 0:
                return None  # a partial header at the end: nothing more to find
            position += i
        return None

    def read(self, position: int, max_bytes: int, upper_bound: int | None, min_one: bool) -> tuple[bytes, bool]:
        """Whole batches from ``position``: at most ``max_bytes`` (the first batch whole if
        ``min_one``), none whose base offset is >= ``upper_bound``.

        Returns (bytes, whether the read went up to the end of the segment). The cut
        is found by walking batch headers from the last index entry before it, then
        the bytes are read with one pread.
        """
        limit = position + max(min(max_bytes, self.size - position), 0)
        cut, bounded = self._walk(max(self.offset_index.floor_position(limit, upper_bound), position), limit, upper_bound)
        if cut == position:
            if not min_one or bounded or position >= self.size:
                return b"", False
            batch_base, length = _HEAD.unpack(os.pread(self.fd, LOG_OVERHEAD, position))
            if upper_bound is not None and batch_base >= upper_bound:
                return b"", False
            cut = position + length + LOG_OVERHEAD
        return os.pread(self.fd, cut - position, position), cut >= self.size

    def _walk(self, position: int, limit: int, upper_bound: int | None) -> tuple[int, bool]:
        """End of the last whole batch from ``position`` within ``limit`` and below
        ``upper_bound``; and whether the upper bound is what stopped it."""
        fd = self.fd
        while position < limit:
            chunk = os.pread(fd, min(_SCAN_CHUNK, limit - position), position)
            i, n = 0, len(chunk)
            while n - i >= LOG_OVERHEAD:
                batch_base, length = _HEAD.unpack_from(chunk, i)
                if upper_bound is not None and batch_base >= upper_bound:
                    return position + i, True
                end = i + length + LOG_OVERHEAD
                if position + end > limit:
                    return position + i, False
                i = end
            if i == 0:
                return position, False
            position += i
        return position, False

    def first_max_timestamp(self) -> int:
        """The max timestamp of the first batch (of a segment holding one): segment.ms
        counts from it. Its header alone is read."""
        return RecordBatch(os.pread(self.fd, RECORD_BATCH_OVERHEAD, 0), 0).max_timestamp

    def batch_at(self, position: int) -> RecordBatch:
        head = os.pread(self.fd, LOG_OVERHEAD, position)
        length = _INT32.unpack_from(head, 8)[0]
        return RecordBatch(os.pread(self.fd, length + LOG_OVERHEAD, position), 0)

    def iter_chunks(self, position: int = 0) -> Iterator[tuple[bytes, int, int]]:
        """The batches from ``position`` to the end as (buffer, start, end): whole batches
        in buffer[start:end], read in large chunks."""
        while position < self.size:
            # the descriptor asked for at each step: between yields the pool may close it
            chunk = os.pread(self.fd, min(_ITER_CHUNK, self.size - position), position)
            i, n = 0, len(chunk)
            while n - i >= RECORD_BATCH_OVERHEAD:
                batch_size = _INT32.unpack_from(chunk, i + 8)[0] + LOG_OVERHEAD
                if i + batch_size > n:
                    break
                i += batch_size
            if i == 0:
                if n < RECORD_BATCH_OVERHEAD:
                    return
                big = self.batch_at(position).buf  # a batch bigger than the chunk
                yield big, 0, len(big)
                i = _INT32.unpack_from(chunk, 8)[0] + LOG_OVERHEAD
            else:
                yield chunk, 0, i
            position += i

    def iter_batches(self, position: int = 0) -> Iterator[RecordBatch]:
        """Batches from ``position`` to the end, read in large chunks."""
        for chunk, i, end in self.iter_chunks(position):
            while i < end:
                batch = RecordBatch(chunk, i)
                yield batch
                i += batch.size

    def find_by_timestamp(self, timestamp: int, start_offset: int) -> RecordBatch | None:
        """First batch with max timestamp >= ``timestamp`` and last offset >= ``start_offset``."""
        offset = max(self.time_index.lookup(timestamp), start_offset)
        for batch in self.iter_batches(self.offset_index.lookup(offset)):
            if batch.max_timestamp >= timestamp and batch.last_offset >= start_offset:
                return batch
        return None

    def largest_timestamp(self) -> int:
        """Kafka's LogSegment.largestTimestamp: the max timestamp, else the file's mtime."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    # lifecycle -------------------------------------------------------------
    def flush(self) -> None:
        if self.unflushed:
            os.fsync(self.fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.unflushed = False
        self.txn_index.flush()

    def unflushed_paths(self) -> list[Path]:
        """The segment's files written since their last fsync."""
        paths = [self.log_path, self.index_path, self.time_index_path] if self.unflushed else []
        if self.txn_index.unflushed:
            paths.append(self.txn_index.path)
            self.txn_index.unflushed = False
        self.unflushed = False
        return paths

    def close(self) -> None:
        for index in (self.offset_index, self.time_index):
            if index is not None:
                index.close()
        self.txn_index.close()
        self._file.close()

    def delete(self) -> None:
        self.close()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            try:
                os.unlink(segment_path(self.directory, self.base_offset, suffix))
            except FileNotFoundError:
                pass


def _batch_problem(batch: RecordBatch, base_offset: int, last_offset: int, expected: int, segment_base: int) -> str | None:
    if batch.magic != MAGIC_V2:
        return f"magic {batch.magic} at offset {base_offset}"
    if base_offset < expected:
        return f"base offset {base_offset} is below the expected {expected}"
    if last_offset < base_offset or last_offset - segment_base > INT32_MAX:
        return f"last offset {last_offset} is out of range for base offset {base_offset}"
    if not batch.crc_valid():
        return f"CRC mismatch in the batch at offset {base_offset}"
    return None


# -- the sparse indexes ------------------------------------------------------------------



class CorruptIndex(Exception):
    """An index file that fails its sanity check; the segment rebuilds it from the log."""


def _rewrite(path: Path, data: bytes) -> None:
    """Replaces the file with ``data`` atomically (a crash must not leave a valid-looking
    prefix of entries)."""
    if data:
        replace_atomically(path, data, fsync=False)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644))


def _append_to(file: PooledFile, data: bytes) -> None:
    """Writes ``data`` at the end of an index file: through the descriptor it holds, the
    pool not asked (the file marked ``written`` instead), or reopened if the pool closed it."""
    fd = file.descriptor
    file.written = True
    os.write(fd if fd >= 0 else file.fd, data)


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
        data = read_small_file(path)
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

    @property
    def open_now(self) -> bool:
        return self._file.descriptor >= 0

    def _append(self, key: int, value: int) -> None:
        _append_to(self._file, self.ENTRY.pack(key, value))
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


# -- the aborted-transaction index ----------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """An aborted transaction: ordered by its marker's offset."""

    last_offset: int
    first_offset: int
    producer_id: int
    # the LSO once it ended: every transaction that began below it had ended by then
    # (-1: unknown, for entries carried over from the per-partition file)
    last_stable_offset: int = -1


def _encode_txn(e: AbortedTxn) -> bytes:
    return TXN_ENTRY.pack(TXN_ENTRY_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)


class TransactionIndex:
    """The aborted transactions whose ABORT marker is in one segment, sorted by marker
    offset, in memory; each new one appended to the file (opened through the descriptor
    pool only to append or fsync)."""

    __slots__ = ("path", "base_offset", "_file", "_entries", "_known", "unflushed")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._file = PooledFile(path)  # the file is made by the first add
        self._entries: list[AbortedTxn] = []
        self._known: set[tuple[int, int]] | None = None  # (producer id, marker offset); most segments have none
        self.unflushed = False

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TransactionIndex:
        """Reads the file if there is one; a torn or nonsensical tail is cut off with a
        warning (what it held comes back when producer state replays the log after its
        snapshot, as the entry's marker is there)."""
        index = cls(path, base_offset)
        try:
            data = read_small_file(path)
        except FileNotFoundError:
            return index
        good = 0
        for pos in range(0, len(data) - TXN_ENTRY.size + 1, TXN_ENTRY.size):
            version, pid, first, last, lso = TXN_ENTRY.unpack_from(data, pos)
            if version != TXN_ENTRY_VERSION or last < base_offset or first > last:
                break
            index._insert(AbortedTxn(last, first, pid, lso))
            good = pos + TXN_ENTRY.size
        if good != len(data):
            log.warning("%s: dropping %d bytes of a torn or corrupt tail", path, len(data) - good)
            with open(path, "r+b") as f:
                f.truncate(good)
        return index

    def _insert(self, entry: AbortedTxn) -> None:
        if self._known is None:
            self._known = set()
        self._known.add((entry.producer_id, entry.last_offset))
        if not self._entries or entry > self._entries[-1]:
            self._entries.append(entry)
        else:
            insort(self._entries, entry)

    def add(self, entry: AbortedTxn) -> bool:
        """Appends an entry unless it is already here (a replay finds it again); returns
        whether it was new."""
        if self._known is not None and (entry.producer_id, entry.last_offset) in self._known:
            return False
        _append_to(self._file, _encode_txn(entry))  # opened by ``ready`` before the marker was appended
        self._insert(entry)
        self.unflushed = True
        return True

    def ready(self) -> None:
        """Opens the file now, so that an ``add`` that follows cannot fail for want of a
        descriptor (open already, the pool is not asked: only opening it closes files)."""
        if self._file.descriptor < 0:
            self._file.fd

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    @property
    def newest_marker(self) -> int:
        """The offset of the newest marker indexed here, -1 if none."""
        return self._entries[-1].last_offset if self._entries else -1

    def collect(self, start: int, end: int, into: list[AbortedTxn]) -> bool:
        """Adds to ``into`` the transactions with records in [start, end) (marker at or
        after ``start``, first offset below ``end``); returns whether the search is
        complete: an entry's LSO reached ``end``, so every transaction that began
        below ``end`` has its marker here or before (Kafka's TxnIndexSearchResult)."""
        entries = self._entries
        complete = False
        for i in range(bisect_left(entries, AbortedTxn(start, -1, -1, -1)), len(entries)):
            e = entries[i]
            if e.first_offset < end:
                into.append(e)
            if e.last_stable_offset >= end:
                complete = True
        return complete

    def truncate_to(self, offset: int) -> None:
        """Forgets the transactions whose marker is at or past ``offset``."""
        if self._entries and self._entries[-1].last_offset >= offset:
            self.rewrite([e for e in self._entries if e.last_offset < offset])

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        self._file.close()
        if entries:
            replace_atomically(self.path, b"".join(map(_encode_txn, entries)), fsync=False)
        else:
            self.path.unlink(missing_ok=True)
        self._entries = sorted(entries)
        self._known = {(e.producer_id, e.last_offset) for e in entries} or None
        self._file = PooledFile(self.path)
        self.unflushed = bool(entries)

    @staticmethod
    def write_file(path: Path, entries: Iterable[AbortedTxn]) -> None:
        """Writes and fsyncs a file holding ``entries`` (the cleaner's cleaned copy)."""
        replace_atomically(path, b"".join(map(_encode_txn, sorted(entries))), fsync=True)

    def flush(self) -> None:
        if self.unflushed:
            os.fsync(self._file.fd)
            self.unflushed = False

    def close(self) -> None:
        self._file.close()

    def __len__(self) -> int:
        return len(self._entries)
