"""A partition's log on disk: a directory of segments, as Kafka lays it out.

data/<topic>-<partition>/00000000000000000000.log (.index, .timeindex, .txnindex), one
segment per base offset, plus ``log-start-offset`` (written atomically). Batches are stored as
the producer sent them, with the base offset and partition leader epoch rewritten in
place; appending never decodes records.

Synchronous file I/O, called from the event loop: an append is one os.write into the
page cache (a process crash loses nothing acknowledged); fsync follows flush.messages
and flush.ms. Opening a log recovers it: the active segment is checked batch by batch
and a torn or corrupt tail is cut off. After a clean shutdown (the caller says so) the
active segment's index files are trusted instead, as Kafka does with its
.kafka_cleanshutdown marker: only the batches after the last index entry are read.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

from broker.log.files import fsync_dir, read_small_file, replace_atomically
from protocol import crc
from protocol.records import LOG_OVERHEAD, RecordBatch

from broker.log.segment import (INDEX_SUFFIX, INT32_MAX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, AbortedTxn,
                                LogSegment, segment_path)

log = logging.getLogger(__name__)

LOG_START_OFFSET_FILE = "log-start-offset"
_LOG_START_OFFSET_VERSION = 0
LONG_MAX = 2**63 - 1
# Either, both, or neither (Kafka 4.2+: no retention, no compaction, only DeleteRecords frees space)
_CLEANUP_POLICIES = {"delete", "compact"}
_TIMESTAMP_TYPES = {"CreateTime", "LogAppendTime"}
# Compaction writes <base>.log.cleaned (+ .index, .timeindex, .txnindex .cleaned), renames
# them to .swap (the commit point is the .log.swap rename), then into place.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# what an interrupted clean leaves (broker.log.cleaner, replace_segments)
_LEFTOVER_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX)
# the order of the swap's renames: the .log last, the commit point
_SWAP_ORDER = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)
# The aborted-transaction index of older versions: one file per partition, entries of
# (producer id, first offset, last offset, CRC-32C of the three); moved into the
# segments' .txnindex files when the log opens.
LEGACY_TXN_INDEX_FILE = "aborted-transactions.index"
_LEGACY_TXN_ENTRY = struct.Struct(">qqqI")
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_INT32 = struct.Struct(">i")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # the first three header fields
_LAST_OFFSET_END = 27  # the last offset delta ends 27 bytes into a batch


class OffsetOutOfRange(Exception):
    """Kafka's OFFSET_OUT_OF_RANGE (error code 1)."""

    error_name = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-topic log settings, fields named after Kafka's topic configs (dots -> underscores)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5

    def __post_init__(self) -> None:
        # Kafka's LogConfig bounds: segment.bytes >= 14, segment.ms >= 1, index.interval.bytes >= 0.
        if self.segment_bytes < 14:
            raise ValueError(f"segment.bytes must be at least 14, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ValueError(f"segment.ms must be at least 1, got {self.segment_ms}")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must be at least 0, got {self.index_interval_bytes}")
        if self.flush_messages < 1 or self.flush_ms < 0:
            raise ValueError("flush.messages must be at least 1 and flush.ms at least 0")
        if not {p.strip() for p in self.cleanup_policy.split(",") if p.strip()} <= _CLEANUP_POLICIES:
            raise ValueError(f"cleanup.policy must be delete, compact, both or empty, got {self.cleanup_policy!r}")
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise ValueError(
                f"message.timestamp.type must be CreateTime or LogAppendTime, got {self.message_timestamp_type!r}"
            )

    @property
    def compacts(self) -> bool:
        """Whether the cleaner compacts the log (cleanup.policy contains compact)."""
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """Whether time and size retention apply (cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, Any]) -> LogConfig:
        """Builds a config from Kafka topic config names ("segment.bytes", ...); others are ignored."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = f.name.replace("_", ".")
            if name in configs:
                raw = configs[name]
                values[f.name] = {"str": lambda v: str(v).strip(), "float": float}.get(f.type, int)(raw)
        return cls(**values)


class AppendInfo(NamedTuple):
    """Where an append went; a NamedTuple, as it is built per produced batch."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


class PartitionLog:
    """The segments of one partition, oldest first; the last one is active."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment], log_start_offset: int, now_ms: int) -> None:
        self._directory = directory
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        self.leader_epoch = 0  # stamped on appended batches; the cluster sets it on leader changes
        self._log_start_offset = log_start_offset
        self._flushed_offset = self._active.next_offset
        self._last_flush_ms = now_ms
        self._dir_unflushed = False
        self._closed = False
        self.roll_listeners: list[Callable[[int], None]] = []
        self._newest_abort_marker = max(s.txn_index.newest_marker for s in segments)
        self._abort_coming = False  # between ready_for_abort and add_aborted
        self.update_config(config)

    # opening and recovery ------------------------------------------------
    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int, clean_shutdown: bool = False,
             recovery_point: int | None = None, names: Iterable[str] | None = None) -> PartitionLog:
        """Opens the log in ``directory``, recovering the active segment unless
        ``clean_shutdown`` (the broker closed every log last time and nothing has run
        since): then its index files are loaded, falling back to recovery if they or
        the batches after their last entry look wrong. A ``recovery_point`` inside the
        active segment limits recovery to the batches from it on. ``names``: the
        directory's listing (``list_partition_dir``) when the caller made one; every
        step works from that one listing."""
        if not isinstance(directory, Path):
            directory = Path(directory)
        names = list_partition_dir(directory) if names is None else set(names)
        if any(name.endswith(_LEFTOVER_SUFFIXES) for name in names):  # usually none: no scans
            _finish_interrupted_cleaning(directory, names)
        _remove_orphans(directory, names)
        bases = sorted(int(name[: -len(LOG_SUFFIX)]) for name in names
                       if name.endswith(LOG_SUFFIX) and _is_segment_name(name))
        txn_indexed = {name for name in names if name.endswith(TXN_INDEX_SUFFIX)}
        segments: list[LogSegment] = []
        try:
            for i, base in enumerate(bases[:-1]):
                seg = LogSegment(directory, base, f"{base:020d}{TXN_INDEX_SUFFIX}" in txn_indexed)
                segments.append(seg)
                why = seg.load_indexes(bases[i + 1], config.index_interval_bytes)
                if why is not None:
                    log.info("partition dir %s: rebuilt indexes of segment %d (%s)", directory, base, why)
            if bases:
                active = LogSegment(directory, bases[-1], f"{bases[-1]:020d}{TXN_INDEX_SUFFIX}" in txn_indexed)
                segments.append(active)
                if not (clean_shutdown and _load_active_after_clean_shutdown(directory, active)):
                    _recover_active(directory, active, config.index_interval_bytes, recovery_point)
                # markers lost with a torn tail; producer state's replay adds back those that are left
                active.txn_index.truncate_to(active.next_offset)
                if active.size:
                    first = active.first_max_timestamp()
                    active.roll_base_ms = first if first >= 0 else now_ms
            else:
                segments.append(LogSegment.create(directory, 0))
        except BaseException:
            for seg in segments:
                seg.close()
            raise
        log_end_offset = segments[-1].next_offset
        stored_start = _read_log_start_offset(directory) if LOG_START_OFFSET_FILE in names else None
        log_start_offset = max(stored_start if stored_start is not None else 0, segments[0].base_offset)
        self = cls(directory, config, segments, log_start_offset, now_ms)
        if LEGACY_TXN_INDEX_FILE in names:
            self._migrate_legacy_txn_index()
        if log_start_offset > log_end_offset:
            # The tail holding the log start was lost: start again empty there, as Kafka does.
            log.warning(
                "partition dir %s: log start offset %d is beyond the recovered log end offset %d; "
                "deleting all segments and starting at %d",
                directory, log_start_offset, log_end_offset, log_start_offset,
            )
            self._restart_at(log_start_offset)
        return self

    def update_config(self, config: LogConfig) -> None:
        self._config = config
        # Hot-path copies: attribute lookups on a frozen dataclass cost more than on self.
        self._segment_bytes = min(config.segment_bytes, INT32_MAX)
        self._segment_ms = config.segment_ms
        self._index_interval = config.index_interval_bytes
        self._flush_messages = config.flush_messages
        self._flush_ms = config.flush_ms
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"

    # properties ------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    # appending -----------------------------------------------------------
    def append(self, batch: RecordBatch, now_ms: int, assign_offsets: bool = True) -> AppendInfo:
        """Writes one batch (a writable view) and returns where it went.

        With ``assign_offsets`` the batch gets the next offset, the current leader epoch
        and, for LogAppendTime topics, the append time; otherwise it is stored as is
        and its base offset must not go backwards (ValueError).
        """
        active = self._active
        log_append_time = -1
        header = batch.header
        buf, pos = batch.buf, batch.pos
        if assign_offsets:
            base_offset = active.next_offset
            # base offset, length (unchanged) and partition leader epoch: one pack
            _OFFSET_LENGTH_EPOCH.pack_into(buf, pos, base_offset, header.batch_length, self.leader_epoch)
            if self._log_append_time:
                batch.set_log_append_time(now_ms)
                header = batch.header
                log_append_time = now_ms
        else:
            base_offset = batch.base_offset
            if base_offset < active.next_offset:
                raise ValueError(
                    f"batch base offset {base_offset} is below the log end offset {active.next_offset}"
                )
        size = header.batch_length + LOG_OVERHEAD
        last_offset = base_offset + header.last_offset_delta
        if (
            active.size
            and (active.size > self._segment_bytes - size or now_ms - active.roll_base_ms > self._segment_ms)
        ) or last_offset - active.base_offset > INT32_MAX:
            active = self._roll(base_offset)
        if active.roll_base_ms is None:
            active.roll_base_ms = now_ms
        data = buf if pos == 0 and len(buf) == size else memoryview(buf)[pos : pos + size]
        active.append(data, base_offset, last_offset, header.max_timestamp, self._index_interval)
        if last_offset + 1 - self._flushed_offset >= self._flush_messages or now_ms - self._last_flush_ms >= self._flush_ms:
            self.flush(now_ms)
        return AppendInfo(base_offset, last_offset, log_append_time, self._log_start_offset)

    def roll(self) -> int:
        """Starts a new segment at the log end offset (if the active one holds data)."""
        if self._active.size:
            self._roll(self._active.next_offset)
        return self._active.base_offset

    def _roll(self, base_offset: int) -> LogSegment:
        old = self._active
        old.on_become_inactive()
        new = LogSegment.create(self._directory, base_offset)
        self._segments.append(new)
        self._bases.append(base_offset)
        self._active = new
        self._dir_unflushed = True
        if self._abort_coming:  # the marker rolled the log: its index is the new segment's
            new.txn_index.ready()
            self._abort_coming = False
        for listener in self.roll_listeners:
            listener(base_offset)
        return new

    def flush(self, now_ms: int | None = None) -> None:
        """fsyncs every segment with unflushed writes, then the directory if files changed."""
        for seg in self._segments:
            seg.flush()
        if self._dir_unflushed:
            fsync_dir(self._directory)
            self._dir_unflushed = False
        self._flushed_offset = self._active.next_offset
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def unflushed_files(self) -> tuple[Path, ...]:
        """The files a recovery-point checkpoint fsyncs: segments written since their
        last flush (their indexes are checked against the log at recovery)."""
        return tuple(path for seg in self._segments
                     for path in ((seg.log_path,) if seg.unflushed else ()) +
                     ((seg.txn_index.path,) if seg.txn_index.unflushed else ()))

    # reading -------------------------------------------------------------
    def _check_offset(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self._active.next_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self._active.next_offset)

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None, min_one: bool = True) -> bytes:
        """Whole batches from the one holding ``offset``, within ``max_bytes`` and below
        ``upper_bound`` (a base offset limit: high watermark or LSO).

        The first batch comes whole even when larger than ``max_bytes`` if ``min_one``.
        """
        self._check_offset(offset)
        segments = self._segments
        i = bisect_right(self._bases, offset) - 1
        seg = segments[i]
        position = seg.offset_index.lookup(offset)
        parts: list[bytes] = []
        remaining = max_bytes
        while True:
            start = seg.find_batch(offset, position)
            if start is not None:
                data, to_end = seg.read(start, remaining, upper_bound, min_one and not parts)
                if data:
                    parts.append(data)
                    remaining -= len(data)
                if not to_end or remaining <= 0:
                    break
            i += 1
            if i == len(segments):
                break
            seg, position = segments[i], 0
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def batches(self, from_offset: int = 0) -> Iterator[RecordBatch]:
        """Stored batches from the one holding ``from_offset`` (at least the log start).

        Batches are views over freshly read bytes. Do not delete or truncate segments
        while iterating: the iterator reads through the segments' open files.
        """
        for seg, start in self._reads_from(from_offset):
            yield from seg.iter_batches(start)

    def chunks(self, from_offset: int = 0) -> Iterator[tuple[bytes, int, int]]:
        """``batches`` as (buffer, start, end) spans of whole batches, for readers that
        walk the bytes themselves."""
        for seg, start in self._reads_from(from_offset):
            yield from seg.iter_chunks(start)

    def _reads_from(self, from_offset: int) -> Iterator[tuple[LogSegment, int]]:
        """Each segment from the one holding ``from_offset`` (at least the log start), with
        the file position of its first batch to read."""
        offset = max(from_offset, self._log_start_offset)
        i = max(bisect_right(self._bases, offset) - 1, 0)
        for seg in self._segments[i:]:
            start = seg.find_batch(offset, seg.offset_index.lookup(offset))
            if start is not None:
                yield seg, start

    def find_offset_by_timestamp(self, timestamp_ms: int) -> RecordBatch | None:
        """First batch at or after the log start whose max timestamp is >= ``timestamp_ms``."""
        for seg in self._segments:
            if seg.max_timestamp >= timestamp_ms and seg.next_offset > self._log_start_offset:
                batch = seg.find_by_timestamp(timestamp_ms, self._log_start_offset)
                if batch is not None:
                    return batch
        return None

    def max_timestamp(self) -> tuple[int, RecordBatch] | None:
        """(timestamp, batch) of the first batch holding the largest timestamp, for
        ListOffsets MAX_TIMESTAMP (the caller picks the record inside the batch)."""
        best: tuple[int, LogSegment] | None = None
        for seg in self._segments:
            if seg.offset_of_max_timestamp < 0:
                continue
            if best is None or seg.max_timestamp > best[0]:
                best = (seg.max_timestamp, seg)
        if best is None:
            return None
        seg = best[1]
        offset = seg.offset_of_max_timestamp
        if offset >= self._log_start_offset:
            return best[0], seg.batch_at(seg.find_batch(offset, seg.offset_index.lookup(offset)))
        # The segment's max sits below the log start: look at what is left.
        found: tuple[int, RecordBatch] | None = None
        for batch in self.batches(self._log_start_offset):
            if found is None or batch.max_timestamp > found[0]:
                found = (batch.max_timestamp, batch)
        return found

    # deleting ------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: moves the log start offset up to ``offset`` and deletes the
        segments wholly below it. Returns the new log start offset."""
        if offset < 0 or offset > self._active.next_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self._active.next_offset)
        if offset > self._log_start_offset:
            self._set_log_start_offset(offset)
            self._delete_segments_below_log_start()
        return self._log_start_offset

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Deletes segments past retention.ms / retention.bytes (cleanup.policy with delete)
        and segments wholly below the log start. Returns how many were deleted.

        As in Kafka, only a prefix of segments goes, never past ``high_watermark``
        (default: log end offset); when every segment qualifies, the active one is
        rolled first so the log keeps an (empty) active segment.
        """
        hw = self._active.next_offset if high_watermark is None else high_watermark
        deleted = self._delete_segments_below_log_start()
        config = self._config
        if config.deletes:
            if config.retention_ms >= 0:
                deleted += self._delete_prefix(
                    lambda seg: now_ms - seg.largest_timestamp() > config.retention_ms, hw
                )
            if config.retention_bytes >= 0:
                excess = [self.size_bytes - config.retention_bytes]

                def over_size(seg: LogSegment) -> bool:
                    if excess[0] - seg.size >= 0:
                        excess[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_prefix(over_size, hw)
        return deleted

    def _delete_prefix(self, predicate: Callable[[LogSegment], bool], high_watermark: int) -> int:
        count = 0
        for seg in self._segments:
            is_active = seg is self._active
            upper = seg.next_offset if is_active else self._bases[count + 1]
            if (is_active and seg.size == 0) or high_watermark < upper or not predicate(seg):
                break
            count += 1
        if not count:
            return 0
        if count == len(self._segments):
            self._roll(self._active.next_offset)
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        for seg in doomed:
            seg.delete()
        self._dir_unflushed = True
        self._recompute_newest_abort_marker()
        if self._bases[0] > self._log_start_offset:
            self._set_log_start_offset(self._bases[0])
        return count

    def _delete_segments_below_log_start(self) -> int:
        count = 0
        while count + 1 < len(self._segments) and self._bases[count + 1] <= self._log_start_offset:
            count += 1
        if count:
            for seg in self._segments[:count]:
                seg.delete()
            del self._segments[:count]
            del self._bases[:count]
            self._dir_unflushed = True
            self._recompute_newest_abort_marker()
        return count

    def truncate_to(self, offset: int) -> None:
        """Drops every batch holding an offset >= ``offset`` (a batch is dropped whole,
        so the log end offset can end up below ``offset``)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._active.next_offset:
            return
        if offset <= self._bases[0]:
            self._restart_at(offset)
            if self._log_start_offset != offset:
                self._set_log_start_offset(offset)
            return
        i = bisect_right(self._bases, offset) - 1
        seg = self._segments[i]
        position = seg.find_batch(offset, seg.offset_index.lookup(offset))
        for doomed in self._segments[i + 1 :]:
            doomed.delete()
        del self._segments[i + 1 :]
        del self._bases[i + 1 :]
        if position is not None:
            seg.truncate_bytes(position)
        seg.rebuild_indexes(self._index_interval, validate=False, inactive=False)
        seg.txn_index.truncate_to(seg.next_offset)
        self._recompute_newest_abort_marker()
        if seg.size == 0:
            seg.roll_base_ms = None
        elif seg.roll_base_ms is None:
            first = seg.first_max_timestamp()
            seg.roll_base_ms = first if first >= 0 else seg.largest_timestamp()
        self._active = seg
        self._dir_unflushed = True
        self._flushed_offset = min(self._flushed_offset, seg.next_offset)
        if self._log_start_offset > seg.next_offset:
            self._set_log_start_offset(seg.next_offset)

    def _restart_at(self, offset: int) -> None:
        """Deletes every segment and starts an empty one at ``offset``."""
        for seg in self._segments:
            seg.delete()
        seg = LogSegment.create(self._directory, offset)
        self._segments[:] = [seg]
        self._bases[:] = [offset]
        self._active = seg
        self._flushed_offset = offset
        self._dir_unflushed = True
        self._newest_abort_marker = -1

    # the aborted-transaction index, kept per segment -------------------------------
    def add_aborted(self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> None:
        """Indexes an aborted transaction in the segment holding its marker
        (``last_offset``); an entry already there is not added again."""
        i = bisect_right(self._bases, last_offset) - 1
        if i < 0 or last_offset >= self._active.next_offset:
            raise ValueError(f"marker offset {last_offset} is outside the log")
        self._abort_coming = False
        if self._segments[i].txn_index.add(AbortedTxn(last_offset, first_offset, producer_id, last_stable_offset)):
            self._newest_abort_marker = max(self._newest_abort_marker, last_offset)

    def ready_for_abort(self) -> None:
        """Opens the active segment's aborted-transaction index now, so that indexing a
        marker about to be appended cannot fail for want of a descriptor (should the
        marker roll the log, the new segment's is opened with it)."""
        self._active.txn_index.ready()
        self._abort_coming = True

    def any_aborted_ending_at_or_after(self, offset: int) -> bool:
        """Whether some aborted transaction's marker is at or after ``offset`` (only those
        can overlap a read from there)."""
        return self._newest_abort_marker >= offset

    def aborted_overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, end), from the segment
        holding ``start`` on (a marker comes after its records), as Kafka's
        collectAbortedTransactions; stops at the segment whose entries show that every
        transaction begun below ``end`` has ended."""
        found: list[AbortedTxn] = []
        if self._newest_abort_marker < start:
            return found
        for seg in self._segments[max(bisect_right(self._bases, start) - 1, 0):]:
            if seg.txn_index.collect(start, end, found):
                break
        return found

    def aborted_count(self) -> int:
        """The aborted transactions indexed whose marker is at or past the log start."""
        return len(self.aborted_overlapping(self._log_start_offset, LONG_MAX))

    def _recompute_newest_abort_marker(self) -> None:
        self._newest_abort_marker = max(seg.txn_index.newest_marker for seg in self._segments)

    def _migrate_legacy_txn_index(self) -> None:
        """Moves the entries of an older version's per-partition file into the segments
        holding their markers, then removes it. Entries whose marker is outside the log
        are dropped: retention or truncation took their records."""
        path = self._directory / LEGACY_TXN_INDEX_FILE
        data = path.read_bytes()
        moved = dropped = 0
        for pos in range(0, len(data) - _LEGACY_TXN_ENTRY.size + 1, _LEGACY_TXN_ENTRY.size):
            pid, first, last, stored_crc = _LEGACY_TXN_ENTRY.unpack_from(data, pos)
            if crc.crc32c(data[pos: pos + _LEGACY_TXN_ENTRY.size - 4]) != stored_crc:
                break  # a torn tail: what it held comes back with the replay of the log
            if self._bases[0] <= last < self._active.next_offset and first <= last:
                self.add_aborted(pid, first, last, -1)  # the LSO of the time is not known
                moved += 1
            else:
                dropped += 1
        for seg in self._segments:
            seg.txn_index.flush()
        path.unlink()
        fsync_dir(self._directory)
        log.info("partition dir %s: moved %d aborted transactions from %s into the segments' %s files "
                 "(%d outside the log dropped); removed it", self._directory, moved, LEGACY_TXN_INDEX_FILE,
                 TXN_INDEX_SUFFIX, dropped)

    def _set_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        replace_atomically(self._directory / LOG_START_OFFSET_FILE,
                           f"{_LOG_START_OFFSET_VERSION}\n{offset}\n".encode(), sync_dir=True)

    # compaction: what the cleaner (broker.log.cleaner) reads and its atomic swap ----
    def inactive_segments(self) -> list[LogSegment]:
        """The segments below the active one, oldest first (a new list)."""
        return self._segments[:-1]

    def replace_segments(self, old: Sequence[LogSegment]) -> bool:
        """Swaps ``old`` (consecutive inactive segments) for the cleaned segment the
        cleaner wrote, fsynced, as <old[0] base>.log.cleaned, .index.cleaned,
        .timeindex.cleaned and .txnindex.cleaned.

        Returns False, deleting the cleaned files, when ``old`` is no longer a run of
        inactive segments of this open log (retention, truncation or close got there
        first). A crash at any point leaves a log that open() completes or rolls back.
        """
        directory = self._directory
        base = old[0].base_offset
        i = next((j for j, seg in enumerate(self._segments) if seg is old[0]), None)
        end = -1 if i is None else i + len(old)
        if (
            self._closed
            or i is None
            or end >= len(self._segments)
            or any(a is not b for a, b in zip(self._segments[i:end], old))
        ):
            for suffix in _SEGMENT_SUFFIXES:
                segment_path(directory, base, suffix + CLEANED_SUFFIX).unlink(missing_ok=True)
            return False
        next_base = self._bases[end]
        for suffix in _SWAP_ORDER:
            os.replace(
                segment_path(directory, base, suffix + CLEANED_SUFFIX),
                segment_path(directory, base, suffix + SWAP_SUFFIX),
            )
        fsync_dir(directory)
        for seg in old:
            seg.close()
        for seg in old[1:]:
            seg.delete()
        for suffix in _SWAP_ORDER:
            os.replace(segment_path(directory, base, suffix + SWAP_SUFFIX), segment_path(directory, base, suffix))
        fsync_dir(directory)
        new = LogSegment(directory, base)
        why = new.load_indexes(next_base, self._index_interval)
        if why is not None:
            log.warning("partition dir %s: rebuilt indexes of cleaned segment %d (%s)", directory, base, why)
        self._segments[i:end] = [new]
        self._bases[i:end] = [base]
        self._recompute_newest_abort_marker()
        return True

    def close(self, sync: bool = True) -> list[Path]:
        """Closes the files, flushed; with ``sync`` False, not fsynced here but named in
        the list returned (segments written since their last flush, with their indexes,
        and the directory if files came or went): the caller fsyncs them in one pass."""
        if self._closed:
            return []
        unsynced: list[Path] = []
        if sync:
            self.flush()
        else:
            for seg in self._segments:
                unsynced += seg.unflushed_paths()
            if self._dir_unflushed:
                unsynced.append(self._directory)
                self._dir_unflushed = False
            self._flushed_offset = self._active.next_offset
        for seg in self._segments:
            seg.close()
        self._closed = True
        return unsynced


def list_partition_dir(directory: Path) -> set[str]:
    """The names in a partition directory, which is made (empty) when missing."""
    try:
        return set(os.listdir(directory))
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        return set()


def _is_segment_name(name: str) -> bool:
    stem = name.split(".", 1)[0]
    return len(stem) == 20 and stem.isdigit()


def _segment_names(names: set[str], suffix: str) -> list[str]:
    """The segment-named entries of ``names`` ending with ``suffix``, in order (a copy:
    the caller may change ``names`` as it goes)."""
    return sorted(name for name in names if name.endswith(suffix) and _is_segment_name(name))


def _unlink(directory: Path, name: str, names: set[str], missing_ok: bool = False) -> None:
    (directory / name).unlink(missing_ok=missing_ok)
    names.discard(name)


def _finish_interrupted_cleaning(directory: Path, names: set[str]) -> None:
    """Undoes a clean that had not committed (.cleaned files) and completes one that had
    (a .log.swap exists): the swap replaces its segment and every segment whose base
    offset falls within it. Index files of a swapped segment are rebuilt at open: after
    a crash, which of them were renamed in is unknown. ``names``, the directory's
    listing, is kept up to date."""
    changed = False
    for name in _segment_names(names, LOG_SUFFIX + SWAP_SUFFIX):
        stem = name.split(".", 1)[0]
        base = int(stem)
        last = _last_offset_in(directory / name)
        for other in _segment_names(names, LOG_SUFFIX):
            if base < int(other[: -len(LOG_SUFFIX)]) <= last:
                for suffix in _SEGMENT_SUFFIXES:
                    _unlink(directory, other[: -len(LOG_SUFFIX)] + suffix, names, missing_ok=True)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _unlink(directory, stem + suffix, names, missing_ok=True)
            _unlink(directory, stem + suffix + SWAP_SUFFIX, names, missing_ok=True)
        # The cleaned .txnindex is renamed before the .log: still a .swap, or in place.
        txn_swap = stem + TXN_INDEX_SUFFIX + SWAP_SUFFIX
        if txn_swap in names:
            _rename(directory, txn_swap, stem + TXN_INDEX_SUFFIX, names)
        _rename(directory, name, stem + LOG_SUFFIX, names)
        changed = True
        log.warning("partition dir %s: completed the interrupted swap of cleaned segment %d", directory, base)
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for name in _segment_names(names, suffix):
            _unlink(directory, name, names)
            changed = True
    if changed:
        fsync_dir(directory)


def _rename(directory: Path, name: str, new_name: str, names: set[str]) -> None:
    os.replace(directory / name, directory / new_name)
    names.discard(name)
    names.add(new_name)


def _last_offset_in(path: Path) -> int:
    """Last offset of the batches in a (fsynced, whole) segment file; -1 if empty."""
    last = -1
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + _LAST_OFFSET_END <= size:
            head = os.pread(f.fileno(), _LAST_OFFSET_END, position)
            base_offset, length = _BATCH_HEAD.unpack_from(head)
            last = base_offset + _INT32.unpack_from(head, _LAST_OFFSET_END - 4)[0]
            position += length + LOG_OVERHEAD
    return last


def _remove_orphans(directory: Path, names: set[str]) -> None:
    """Half-written files (*.tmp) and index files without a .log, in one pass over
    ``names``, the directory's listing, which is kept up to date."""
    doomed = [name for name in names
              if name.endswith(".tmp") and (_is_segment_name(name) or name == LOG_START_OFFSET_FILE + ".tmp")
              # an index's .log: its name with the last suffix replaced
              or name.endswith(_INDEX_SUFFIXES) and _is_segment_name(name)
              and name[: name.rindex(".")] + LOG_SUFFIX not in names]
    for name in doomed:
        _unlink(directory, name, names)


def _load_active_after_clean_shutdown(directory: Path, seg: LogSegment) -> bool:
    """Whether the active segment's index files could be trusted (else it needs recovery)."""
    why = seg.load_active_indexes()
    if why is not None:
        log.warning("partition dir %s: cannot trust the indexes of active segment %d after a clean shutdown "
                    "(%s); recovering it", directory, seg.base_offset, why)
    return why is None


def _recover_active(directory: Path, seg: LogSegment, index_interval_bytes: int,
                    recovery_point: int | None = None) -> None:
    recovered = None
    if recovery_point is not None and recovery_point > seg.base_offset:
        recovered = seg.recover_beyond(recovery_point, index_interval_bytes)
    if recovered is None:
        recovered = seg.rebuild_indexes(index_interval_bytes, validate=True, inactive=False)
    valid, problem = recovered
    if problem is not None:
        dropped = seg.size - valid
        log.warning(
            "partition dir %s: segment %s: truncating at position %d, dropping %d bytes (%s)",
            directory, seg.log_path.name, valid, dropped, problem,
        )
        seg.truncate_bytes(valid)


def _read_log_start_offset(directory: Path) -> int | None:
    path = directory / LOG_START_OFFSET_FILE
    try:
        text = read_small_file(path).decode()
    except FileNotFoundError:
        return None
    lines = text.split()
    if len(lines) != 2 or lines[0] != str(_LOG_START_OFFSET_VERSION):
        raise ValueError(f"{path}: unreadable log start offset file {text!r}")
    return int(lines[1])
