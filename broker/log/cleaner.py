"""Log compaction for cleanup.policy=compact: keep the latest record of every key.

As Kafka's LogCleaner does: the "dirty" section runs from the cleaner checkpoint to the
active segment's base offset. An offset map (key -> latest offset) is built over it,
then every inactive segment is rewritten keeping a record only if no later record of
its key is in the map. Offsets never change: rewritten batches keep their base offset,
last offset delta, producer id, epoch and base sequence, so gaps appear.

What goes besides superseded records:
- records without a key (a compacted topic cannot hold them);
- tombstones (null value) once their segment's largest timestamp + delete.retention.ms
  has passed (Kafka's rule before KIP-534's per-batch delete horizon);
- records of aborted transactions;
- COMMIT markers once no batch of their transaction is left and delete.retention.ms has
  passed. ABORT markers stay: the partition's aborted-transaction index still lists
  them, and a read_committed consumer that meets an index entry needs the marker to
  end it.

What stays: the last data batch of every producer id, emptied to its header if none
of its records survive (as Kafka's RETAIN_EMPTY), and a producer's final marker, so
producer state rebuilt from the log keeps its last sequence and epoch; once the
producer would have expired (producer.id.expiration.ms after that batch's timestamp,
when given) they follow the rules above like any other batch. Records of a
transaction whose marker is not in the cleaned range yet (still open, or its marker is
in the active segment) are kept and left out of the map, and the next checkpoint stops
at the first of them, so they are judged once their outcome is known.

The work is a generator of small steps (about ``step_bytes`` of batches read each), so
``LogCleaner.run_once`` runs on the event loop thread and yields between steps; the
swap itself (PartitionLog.replace_segments) is one synchronous step, so a request
never sees a half-swapped log. fsync of a cleaned file runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from bisect import bisect_right
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from pathlib import Path

from broker.log.files import replace_atomically
from protocol.records import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    CONTROL_TYPE_ABORT,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    assemble_batch,
    compress,
    decode_records,
    encode_record,
    read_control_record,
)

from broker.log.partition_log import CLEANED_SUFFIX, PartitionLog
from broker.log.segment import (
    INDEX_SUFFIX, INT32_MAX, LOG_SUFFIX, NO_TIMESTAMP, TIME_INDEX_SUFFIX, LogSegment, OffsetIndex, TimeIndex, segment_path,
)

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CHECKPOINT_VERSION = 0
DEFAULT_STEP_BYTES = 64 * 1024
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class CleanStats:
    bytes_before: int  # of the segments cleaned
    bytes_after: int
    records_removed: int
    segments_before: int
    segments_after: int
    checkpoint: int  # the next clean's first dirty offset
    next_deletion_ms: int | None  # when a kept tombstone or COMMIT marker may go; None if none waits
    interrupted: bool = False  # the log changed under the cleaner (retention, truncation, close)


@dataclass(frozen=True, slots=True)
class Fsync:
    """A step asking its driver to fsync ``fd`` (run in a thread by LogCleaner)."""

    fd: int


# ---------------------------------------------------------------------------
# the public entry points


def clean(log_: PartitionLog, now_ms: int, *, checkpoint: int | None = None,
          producer_expiration_ms: int | None = None, step_bytes: int = DEFAULT_STEP_BYTES) -> CleanStats:
    """Compacts ``log_`` synchronously (tests, tools). See ``clean_in_steps``."""
    steps = clean_in_steps(log_, now_ms, checkpoint=checkpoint, producer_expiration_ms=producer_expiration_ms,
                           step_bytes=step_bytes)
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            return done.value
        if isinstance(step, Fsync):
            os.fsync(step.fd)


def first_dirty_offset(log_: PartitionLog, checkpoint: int | None) -> int:
    """The checkpoint, or the log start when there is none or it is out of range
    (the log was truncated or its start moved past it): everything is dirty then."""
    start = log_.log_start_offset
    active_base = log_.segment_base_offsets[-1]
    if checkpoint is None or checkpoint < start or checkpoint > active_base:
        return start
    return checkpoint


def dirty_ratio(log_: PartitionLog, checkpoint: int | None) -> float:
    """Dirty bytes over cleanable bytes (Kafka's cleanableRatio); segments holding the
    first dirty offset count as dirty."""
    first_dirty = first_dirty_offset(log_, checkpoint)
    segments = log_.inactive_segments()
    clean_bytes = dirty_bytes = 0
    for seg, next_base in zip(segments, [s.base_offset for s in segments[1:]] + [log_.segment_base_offsets[-1]]):
        if next_base <= log_.log_start_offset:
            continue
        if next_base <= first_dirty:
            clean_bytes += seg.size
        else:
            dirty_bytes += seg.size
    total = clean_bytes + dirty_bytes
    return dirty_bytes / total if total else 0.0


def needs_cleaning(log_: PartitionLog, checkpoint: int | None, min_cleanable_ratio: float) -> bool:
    """Whether the dirty ratio is above min.cleanable.dirty.ratio (strictly, as Kafka)."""
    return dirty_ratio(log_, checkpoint) > min_cleanable_ratio


def read_checkpoint(directory: Path) -> tuple[int | None, int | None]:
    """(first dirty offset, next deletion ms) from the partition's checkpoint file;
    (None, None) when there is none or it is unreadable (the next clean starts over)."""
    path = Path(directory) / CHECKPOINT_FILE
    try:
        fields = path.read_text().split()
    except FileNotFoundError:
        return None, None
    if len(fields) != 3 or fields[0] != str(_CHECKPOINT_VERSION):
        log.warning("%s: unreadable cleaner checkpoint %r, cleaning from the log start", path, fields)
        return None, None
    try:
        offset, due = int(fields[1]), int(fields[2])
    except ValueError:
        log.warning("%s: unreadable cleaner checkpoint %r, cleaning from the log start", path, fields)
        return None, None
    return offset, (due if due >= 0 else None)


def write_checkpoint(directory: Path, offset: int, next_deletion_ms: int | None) -> None:
    """Replaces the checkpoint file atomically (write, fsync, rename)."""
    deletion = -1 if next_deletion_ms is None else next_deletion_ms
    replace_atomically(Path(directory) / CHECKPOINT_FILE, f"{_CHECKPOINT_VERSION}\n{offset} {deletion}\n".encode())


class LogCleaner:
    """The background cleaner: call ``run_once`` every log.cleaner.backoff.ms.

    Checkpoints live in each partition directory (``cleaner-offset-checkpoint``), so the
    cleaner itself holds no per-partition state and a deleted partition leaves none. A log
    is cleaned when its dirty ratio exceeds its own min.cleanable.dirty.ratio.
    """

    def __init__(self, producer_expiration_ms: int | None = None, step_bytes: int = DEFAULT_STEP_BYTES) -> None:
        self.producer_expiration_ms = producer_expiration_ms
        self.step_bytes = step_bytes
        self._running = False

    async def run_once(self, partitions: Iterable[tuple[str, PartitionLog]], now_ms: int) -> dict[str, CleanStats]:
        """Cleans, filthiest first and one at a time, every compacted log whose dirty ratio
        is above the minimum or whose kept tombstones or markers have become deletable.

        Yields to the event loop between steps. A call while another is running returns
        at once. A failure is logged and leaves that log as it was (it is retried next time).
        """
        if self._running:
            return {}
        self._running = True
        try:
            chosen = []
            for name, log_ in list(partitions):
                if "compact" not in log_.config.cleanup_policy or not log_.inactive_segments():
                    continue
                checkpoint, due = read_checkpoint(log_.directory)
                ratio = dirty_ratio(log_, checkpoint)
                if ratio > log_.config.min_cleanable_dirty_ratio or (due is not None and due <= now_ms):
                    chosen.append((ratio, name, log_, checkpoint))
            chosen.sort(key=lambda c: -c[0])
            results: dict[str, CleanStats] = {}
            for _ratio, name, log_, checkpoint in chosen:
                try:
                    stats = await self._clean(log_, now_ms, checkpoint)
                    if not stats.interrupted:
                        write_checkpoint(log_.directory, stats.checkpoint, stats.next_deletion_ms)
                except Exception:
                    log.exception("cleaning %s failed", name)
                    continue
                results[name] = stats
                if stats.records_removed:
                    log.info(
                        "cleaned %s: %d -> %d bytes, %d records removed, %d -> %d segments",
                        name, stats.bytes_before, stats.bytes_after, stats.records_removed,
                        stats.segments_before, stats.segments_after,
                    )
                await asyncio.sleep(0)
            return results
        finally:
            self._running = False

    async def _clean(self, log_: PartitionLog, now_ms: int, checkpoint: int | None) -> CleanStats:
        steps = clean_in_steps(log_, now_ms, checkpoint=checkpoint,
                               producer_expiration_ms=self.producer_expiration_ms, step_bytes=self.step_bytes)
        while True:
            try:
                step = next(steps)
            except StopIteration as done:
                return done.value
            if isinstance(step, Fsync):
                await asyncio.to_thread(os.fsync, step.fd)
            else:
                await asyncio.sleep(0)


# ---------------------------------------------------------------------------
# the cleaning itself


@dataclass(slots=True)
class _Txn:
    first_offset: int
    marker_offset: int  # -1 while undecided
    aborted: bool
    kept: bool = False  # a batch of it was written by this clean


class _Plan:
    """What the scan learns about the cleaned range, and the clean's settings."""

    def __init__(self, log_start: int, now_ms: int, producer_expiration_ms: int | None) -> None:
        self.log_start = log_start
        self.now_ms = now_ms
        self.producer_expiration_ms = producer_expiration_ms
        self.offset_map: dict[bytes, int] = {}
        self.txns: dict[int, list[_Txn]] = {}  # producer id -> its transactions, in offset order
        self.txn_firsts: dict[int, list[int]] = {}  # producer id -> their first offsets
        self.markers: dict[int, _Txn | None] = {}  # marker offset -> the transaction it ends
        self.aborted_markers: set[int] = set()
        self.last_data_batch: dict[int, int] = {}  # producer id -> base offset of its last data batch
        self.last_batch: dict[int, tuple[int, bool]] = {}  # producer id -> (base offset, is control)
        self.first_undecided: int | None = None

    def txn_of(self, producer_id: int, offset: int) -> _Txn | None:
        firsts = self.txn_firsts.get(producer_id)
        if not firsts:
            return None
        i = bisect_right(firsts, offset) - 1
        if i < 0:
            return None
        txn = self.txns[producer_id][i]
        return txn if txn.marker_offset < 0 or offset < txn.marker_offset else None

    def keeps_for_producer_state(self, batch: RecordBatch) -> bool:
        """Whether ``batch`` is its producer's last data batch, or its last batch and a
        marker, of a producer that has not expired."""
        pid = batch.producer_id
        if pid < 0:
            return False
        if batch.is_control:
            last = self.last_batch.get(pid) == (batch.base_offset, True)
        else:
            last = self.last_data_batch.get(pid) == batch.base_offset
        expiration = self.producer_expiration_ms
        return last and (expiration is None or self.now_ms - batch.max_timestamp < expiration)


def clean_in_steps(log_: PartitionLog, now_ms: int, *, checkpoint: int | None = None,
                   producer_expiration_ms: int | None = None,
                   step_bytes: int = DEFAULT_STEP_BYTES) -> Generator[Fsync | None, None, CleanStats]:
    """Compacts the inactive segments of ``log_`` in steps of about ``step_bytes`` of
    batches read; yields None between steps and Fsync(fd) when a file must reach disk.
    Returns the CleanStats. Stops (interrupted) if the log changes under it.

    ``checkpoint`` is the previous clean's CleanStats.checkpoint (None: clean it all);
    ``producer_expiration_ms`` is producer.id.expiration.ms (None: producers never expire).
    """
    config = log_.config
    first_dirty = first_dirty_offset(log_, checkpoint)
    start = log_.log_start_offset
    segments = log_.inactive_segments()
    ends = [s.base_offset for s in segments[1:]] + [log_.segment_base_offsets[-1]]
    keep_from = next((i for i, end in enumerate(ends) if end > start), len(segments))
    segments, ends = segments[keep_from:], ends[keep_from:]
    dirty_end = ends[-1] if ends else first_dirty
    if not segments:
        return CleanStats(0, 0, 0, 0, 0, first_dirty, None)
    # With nothing dirty the pass still runs: tombstones and markers may have expired.
    bytes_before = sum(s.size for s in segments)
    alive = set(map(id, segments))

    def changed_under_us() -> bool:
        current = {id(s) for s in log_.inactive_segments() if not s.closed}
        return not alive <= current

    if changed_under_us():
        return _interrupted(first_dirty)

    # 1. scan: the offset map over the dirty section, transactions and producers over all
    plan = _Plan(start, now_ms, producer_expiration_ms)
    open_txns: dict[int, _Txn] = {}
    pending_keys: dict[int, list[tuple[bytes, int]]] = {}
    budget = step_bytes
    for seg, end in zip(segments, ends):
        dirty = end > first_dirty
        for batch in seg.iter_batches():
            if batch.last_offset < start:
                continue
            pid = batch.producer_id
            if batch.is_control:
                control_type, _epoch = read_control_record(batch)
                txn = open_txns.pop(pid, None)
                plan.markers[batch.base_offset] = txn
                if control_type == CONTROL_TYPE_ABORT:
                    plan.aborted_markers.add(batch.base_offset)
                if txn is not None:
                    txn.marker_offset = batch.base_offset
                    txn.aborted = control_type == CONTROL_TYPE_ABORT
                keys = pending_keys.pop(pid, ())
                if control_type != CONTROL_TYPE_ABORT:
                    for key, offset in keys:
                        if offset > plan.offset_map.get(key, -1):
                            plan.offset_map[key] = offset
            else:
                if pid >= 0:
                    plan.last_data_batch[pid] = batch.base_offset
                if batch.is_transactional and pid not in open_txns:
                    txn = open_txns[pid] = _Txn(batch.base_offset, -1, False)
                    plan.txns.setdefault(pid, []).append(txn)
                    plan.txn_firsts.setdefault(pid, []).append(batch.base_offset)
                if dirty:
                    if batch.is_transactional:
                        pending = pending_keys.setdefault(pid, [])
                        pending.extend((r.key, r.offset) for r in decode_records(batch) if r.key is not None)
                    else:
                        for record in decode_records(batch):
                            if record.key is not None:
                                plan.offset_map[record.key] = record.offset
            if pid >= 0:
                plan.last_batch[pid] = (batch.base_offset, batch.is_control)
            budget -= batch.size
            if budget <= 0:
                yield None
                budget = step_bytes
                if changed_under_us():
                    return _interrupted(first_dirty)
    if open_txns:
        plan.first_undecided = min(t.first_offset for t in open_txns.values())

    # 2. rewrite, a group of segments at a time, each swapped in as soon as it is written
    retain_deletes_until = {id(s): s.largest_timestamp() + config.delete_retention_ms for s in segments}
    totals = _Totals()
    segments_after = 0
    max_group_bytes = min(config.segment_bytes, INT32_MAX)
    for group in _groups(segments, ends, max_group_bytes):
        if changed_under_us():
            return _interrupted(first_dirty)
        writer = _CleanedSegment(log_.directory, group[0].base_offset, config.index_interval_bytes)
        writer.changed = len(group) > 1  # merging segments is a change worth a swap
        try:
            for seg in group:
                deletes_until = retain_deletes_until[id(seg)]
                for batch in seg.iter_batches():
                    out = _clean_batch(batch, plan, deletes_until, totals)
                    if out is None:
                        writer.changed = True
                    else:
                        writer.write(out, batch)
                    budget -= batch.size
                    if budget <= 0:
                        yield None
                        budget = step_bytes
                        if changed_under_us():
                            writer.discard()
                            return _interrupted(first_dirty)
            if not writer.changed:
                writer.discard()
                segments_after += len(group)
                totals.bytes_after += sum(s.size for s in group)
                continue
            writer.write_indexes()
            yield Fsync(writer.fd)
            writer.close()
        except BaseException:
            writer.discard()
            raise
        size_after = writer.size
        # The map came from every segment scanned: if any went (truncation, retention),
        # a record it says is superseded may be the latest now.
        if changed_under_us() or not log_.replace_segments(group):
            writer.discard()
            return _interrupted(first_dirty)
        alive.difference_update(map(id, group))
        segments_after += 1
        totals.bytes_after += size_after
        yield None

    checkpoint_out = dirty_end if plan.first_undecided is None else min(dirty_end, plan.first_undecided)
    return CleanStats(
        bytes_before=bytes_before,
        bytes_after=totals.bytes_after,
        records_removed=totals.records_removed,
        segments_before=len(segments),
        segments_after=segments_after,
        checkpoint=checkpoint_out,
        next_deletion_ms=totals.next_deletion_ms,
    )


def _interrupted(first_dirty: int) -> CleanStats:
    return CleanStats(0, 0, 0, 0, 0, first_dirty, None, interrupted=True)


def _groups(segments: list[LogSegment], ends: list[int], max_bytes: int):
    """Consecutive segments whose sizes add up to at most ``max_bytes`` and whose offsets
    fit one segment (relative offsets are int32)."""
    i = 0
    while i < len(segments):
        j, size = i + 1, segments[i].size
        while (
            j < len(segments)
            and size + segments[j].size <= max_bytes
            and ends[j] - 1 - segments[i].base_offset <= INT32_MAX
        ):
            size += segments[j].size
            j += 1
        yield segments[i:j]
        i = j


@dataclass(slots=True)
class _Totals:
    records_removed: int = 0
    bytes_after: int = 0
    next_deletion_ms: int | None = None

    def deletable_at(self, ms: int) -> None:
        if self.next_deletion_ms is None or ms < self.next_deletion_ms:
            self.next_deletion_ms = ms


def _clean_batch(batch: RecordBatch, plan: _Plan, deletes_until: int, totals: _Totals) -> RecordBatch | bytes | None:
    """The batch as it is to be written: itself (untouched), new bytes, or None (dropped)."""
    if batch.last_offset < plan.log_start:
        totals.records_removed += batch.records_count
        return None
    pid = batch.producer_id
    deletes_expired = deletes_until <= plan.now_ms
    if batch.is_control:
        txn = plan.markers.get(batch.base_offset)
        if (
            batch.base_offset in plan.aborted_markers
            or (txn is not None and txn.kept)
            or plan.keeps_for_producer_state(batch)
        ):
            return batch
        if not deletes_expired:
            totals.deletable_at(deletes_until)
            return batch
        totals.records_removed += batch.records_count
        return None

    txn = plan.txn_of(pid, batch.base_offset) if batch.is_transactional else None
    if txn is not None and txn.aborted:
        kept: list[Record] = []
    else:
        undecided = txn is not None and txn.marker_offset < 0
        kept = []
        waiting_tombstone = False
        offset_map = plan.offset_map
        for record in decode_records(batch):
            key = record.key
            if key is None or record.offset < offset_map.get(key, -1):
                continue
            if record.value is None and not undecided:
                if deletes_expired:
                    continue
                waiting_tombstone = True
            kept.append(record)
        if waiting_tombstone:
            totals.deletable_at(deletes_until)
    totals.records_removed += batch.records_count - len(kept)
    if not kept and not plan.keeps_for_producer_state(batch):
        return None
    if txn is not None:
        txn.kept = True
    if len(kept) == batch.records_count:
        return batch
    return _rebuilt(batch, kept)


def _rebuilt(batch: RecordBatch, kept: list[Record]) -> bytes:
    """``batch`` holding only ``kept``, with its original offsets, producer fields and
    base timestamp (each record keeps its offset and timestamp deltas). With no records
    left it becomes Kafka's empty batch header: offsets and sequence range kept."""
    h = batch.header
    if not kept:
        return bytes(assemble_batch(
            b"",
            base_offset=batch.base_offset,
            partition_leader_epoch=batch.partition_leader_epoch,
            attributes=h.attributes & ~COMPRESSION_MASK,
            last_offset_delta=h.last_offset_delta,
            base_timestamp=h.max_timestamp,
            max_timestamp=h.max_timestamp,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            records_count=0,
        ))
    body = bytearray()
    base_offset, base_timestamp = batch.base_offset, h.base_timestamp
    for r in kept:
        encode_record(body, r.offset - base_offset, r.timestamp - base_timestamp, r.key, r.value, r.headers)
    codec = batch.compression
    payload = bytes(body) if codec == COMPRESSION_NONE else compress(codec, bytes(body))
    if batch.timestamp_type == LOG_APPEND_TIME:
        max_timestamp = h.max_timestamp
    else:
        max_timestamp = max(r.timestamp for r in kept)
    return bytes(assemble_batch(
        payload,
        base_offset=base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=h.attributes,
        last_offset_delta=h.last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        records_count=len(kept),
    ))


class _CleanedSegment:
    """<base>.log.cleaned being written, with the sparse index entries a segment
    rebuilt from it would get (LogSegment.rebuild_indexes' rule)."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval = index_interval_bytes
        self.fd = os.open(self._path(LOG_SUFFIX), _WRITE_FLAGS, 0o644)
        self.size = 0
        self.changed = False
        self._since = 0
        self._offsets: list[int] = []
        self._positions: list[int] = []
        self._ts_values: list[int] = []
        self._ts_offsets: list[int] = []
        self._max_ts, self._offset_of_max = NO_TIMESTAMP, -1
        self._indexes: list[OffsetIndex | TimeIndex] = []

    def _path(self, suffix: str) -> Path:
        return segment_path(self.directory, self.base_offset, suffix + CLEANED_SUFFIX)

    def write(self, out: RecordBatch | bytes, original: RecordBatch) -> None:
        if isinstance(out, RecordBatch):
            data, max_ts = out.bytes(), out.max_timestamp
        else:
            data, max_ts = out, RecordBatch(out).max_timestamp
            self.changed = True
        base = original.base_offset
        if max_ts > self._max_ts:
            self._max_ts, self._offset_of_max = max_ts, base
        if self._since > self.index_interval:
            self._offsets.append(base - self.base_offset)
            self._positions.append(self.size)
            if self._max_ts > (self._ts_values[-1] if self._ts_values else NO_TIMESTAMP):
                self._ts_values.append(self._max_ts)
                self._ts_offsets.append(self._offset_of_max - self.base_offset)
            self._since = 0
        written = os.write(self.fd, data)
        if written != len(data):
            raise OSError(f"short write to {self._path(LOG_SUFFIX)}: {written} of {len(data)} bytes")
        self._since += written
        self.size += written

    def write_indexes(self) -> None:
        """Writes and fsyncs both index files (small), with the final time index entry
        of an inactive segment."""
        if self._max_ts > (self._ts_values[-1] if self._ts_values else NO_TIMESTAMP):
            self._ts_values.append(self._max_ts)
            self._ts_offsets.append(self._offset_of_max - self.base_offset)
        self._indexes = [
            OffsetIndex.create(self._path(INDEX_SUFFIX), self.base_offset, self._offsets, self._positions),
            TimeIndex.create(self._path(TIME_INDEX_SUFFIX), self.base_offset, self._ts_values, self._ts_offsets),
        ]
        for index in self._indexes:
            index.flush()

    def close(self) -> None:
        for index in self._indexes:
            index.close()
        self._indexes = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def discard(self) -> None:
        self.close()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            self._path(suffix).unlink(missing_ok=True)
