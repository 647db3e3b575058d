"""broker.log.cleaner: log compaction (latest record per key, tombstones, transactions,
atomic segment swap and its crash recovery, bounded steps)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from broker.log.cleaner import (
    CHECKPOINT_FILE,
    Fsync,
    LogCleaner,
    clean,
    clean_in_steps,
    dirty_ratio,
    needs_cleaning,
    read_checkpoint,
    write_checkpoint,
)
from broker.log.partition_log import LogConfig, PartitionLog
from broker.log.producer_state import ProducerStateManager
from protocol.records import (
    COMPRESSION_GZIP,
    RecordBatch,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)

T = 1_000_000  # record timestamps
HOUR = 3_600_000


def open_log(directory: Path, **config) -> PartitionLog:
    config.setdefault("cleanup_policy", "compact")
    config.setdefault("delete_retention_ms", HOUR)
    return PartitionLog.open(directory, LogConfig(**config), T)


def put(log: PartitionLog, *pairs: tuple[bytes | None, bytes | None], ts: int = T, **producer) -> int:
    """Appends one batch of (key, value) records; returns its base offset."""
    data = build_batch([(k, v, (), ts) for k, v in pairs], **producer)
    return log.append(RecordBatch(data), T).base_offset


def marker(log: PartitionLog, producer_id: int, commit: bool, ts: int = T, epoch: int = 0) -> int:
    return log.append(RecordBatch(build_control_batch(producer_id, epoch, commit, 0, ts)), T).base_offset


def records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in log.batches() if not b.is_control for r in decode_records(b)]


def markers(log: PartitionLog) -> list[int]:
    return [b.base_offset for b in log.batches() if b.is_control]


def latest(log: PartitionLog) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _offset, key, value in records(log):
        out[key] = value
    return out


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


# keys ------------------------------------------------------------------------

def test_latest_value_per_key_wins_at_original_offsets(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"), (b"b", b"1"))  # 0, 1
    put(log, (b"a", b"2"))  # 2
    log.roll()
    put(log, (b"c", b"1"), (b"b", b"2"), (b"a", b"3"))  # 3, 4, 5
    log.roll()
    put(log, (b"d", b"1"))  # 6, active
    stats = clean(log, T)
    assert records(log) == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3"), (6, b"d", b"1")]
    assert stats.records_removed == 3
    assert stats.checkpoint == 6
    assert (stats.segments_before, stats.segments_after) == (2, 1)  # grouped: they fit segment.bytes
    assert stats.bytes_after < stats.bytes_before
    # Reads at original offsets: a removed offset reads the next surviving batch.
    first = next(iter_batches(log.read(0, 1 << 20)))
    assert first.base_offset == 3
    assert [r.offset for r in decode_records(next(iter_batches(log.read(5, 1 << 20))))] == [3, 4, 5]
    assert log.log_end_offset == 7
    log.close()
    reopened = open_log(pdir)
    assert records(reopened) == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3"), (6, b"d", b"1")]


def test_partially_kept_batch_keeps_offsets_timestamps_and_producer_fields(pdir: Path) -> None:
    log = open_log(pdir)
    data = build_batch(
        [(b"a", b"1", (("h", b"x"),), T), (b"b", b"1", (), T + 5), (b"c", b"1", (), T + 9)],
        producer_id=42, producer_epoch=3, base_sequence=10, compression=COMPRESSION_GZIP,
    )
    log.append(RecordBatch(data), T)  # offsets 0..2
    put(log, (b"b", b"2"), ts=T + 20)  # 3
    log.roll()
    clean(log, T)
    batch = next(log.batches())
    h = batch.header
    assert (batch.base_offset, h.last_offset_delta, h.records_count) == (0, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 10)
    assert batch.compression == COMPRESSION_GZIP and batch.crc_valid()
    assert h.max_timestamp == T + 9
    kept = decode_records(batch)
    assert [(r.offset, r.timestamp, r.key, r.headers) for r in kept] == [
        (0, T, b"a", (("h", b"x"),)), (2, T + 9, b"c", ())
    ]
    # An independent reader (kafka-python's) agrees.
    theirs = DefaultRecordBatch(bytes(batch.bytes()))
    assert theirs.validate_crc() and theirs.next_offset == 3
    assert [(r.offset, r.timestamp, r.key) for r in theirs] == [(0, T, b"a"), (2, T + 9, b"c")]


def test_records_without_a_key_are_dropped(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (None, b"x"), (b"a", b"1"), (None, b"y"))
    log.roll()
    stats = clean(log, T)
    assert records(log) == [(1, b"a", b"1")]
    assert stats.records_removed == 2


def test_the_active_segment_is_never_touched(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"))
    put(log, (b"a", b"2"))
    log.roll()
    put(log, (b"a", b"3"))  # active: a newer copy of a
    put(log, (b"a", b"4"))
    active = pdir / f"{log.segment_base_offsets[-1]:020d}.log"
    before = active.read_bytes()
    clean(log, T)
    assert active.read_bytes() == before
    # Kafka's map stops at the active segment: the latest copy below it stays until the roll.
    assert records(log) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4")]
    log.roll()
    clean(log, T, checkpoint=2)
    assert records(log) == [(3, b"a", b"4")]


def test_a_log_with_only_an_active_segment_is_left_alone(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"))
    put(log, (b"a", b"2"))
    stats = clean(log, T)
    assert (stats.segments_before, stats.records_removed, stats.checkpoint) == (0, 0, 0)
    assert records(log) == [(0, b"a", b"1"), (1, b"a", b"2")]


def test_batches_below_the_log_start_are_dropped(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"))
    put(log, (b"b", b"1"))
    put(log, (b"c", b"1"))
    log.roll()
    log.delete_records_before(2)
    clean(log, T)
    assert [b.base_offset for b in log.batches()] == [2]
    assert next(log.inactive_segments()[0].iter_batches()).base_offset == 2


def test_many_updates_to_few_keys_shrink_to_one_record_per_key(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=64 * 1024)
    for i in range(1000):  # 10,000 records on 10 keys, 10 per batch
        put(log, *[(b"key-%d" % k, b"value-%d-%d" % (i, k)) for k in range(10)])
    log.roll()
    put(log, (b"key-0", b"newest"))
    size_before = log.size_bytes
    segments_before = len(log.segment_base_offsets)
    stats = clean(log, T)
    left = records(log)
    assert len(left) == 11  # 10 keys below the active segment + the active one's record
    assert {key: value for _o, key, value in left[:10]} == {b"key-%d" % k: b"value-999-%d" % k for k in range(10)}
    assert stats.records_removed == 9990
    assert log.size_bytes < size_before // 100
    print(f"\n10,000 records on 10 keys: {size_before} -> {log.size_bytes} bytes, "
          f"{stats.records_removed} records removed, {segments_before} segments")
    # Segments are grouped by their size before cleaning (as Kafka does): full ones are
    # rewritten one by one, and the next clean merges what is left of them.
    assert len(log.segment_base_offsets) == segments_before
    clean(log, T, checkpoint=stats.checkpoint)
    assert len(log.segment_base_offsets) == 2
    assert records(log) == left


def test_cleaning_again_changes_nothing(pdir: Path) -> None:
    log = open_log(pdir)
    for i in range(20):
        put(log, (b"k%d" % (i % 3), b"%d" % i))
        if i % 5 == 4:
            log.roll()
    first = clean(log, T)
    snapshot = files(pdir)
    second = clean(log, T, checkpoint=first.checkpoint)
    third = clean(log, T)  # from the log start: a full pass still finds nothing to do
    assert second.records_removed == third.records_removed == 0
    assert files(pdir) == snapshot
    assert second.segments_after == second.segments_before


def test_small_segments_are_merged_up_to_segment_bytes(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=1000)
    for i in range(30):
        put(log, (b"k%d" % i, b"v" * 40))  # ~115 bytes a batch
        if i % 2 == 1:
            log.roll()  # segments of ~230 bytes: four fit in segment.bytes
    before = records(log)
    stats = clean(log, T)
    assert stats.records_removed == 0
    assert (stats.segments_before, stats.segments_after) == (15, 4)
    assert log.segment_base_offsets == [0, 8, 16, 24, 30]
    assert records(log) == before
    assert all(seg.size <= 1000 for seg in log.inactive_segments())
    assert clean(log, T).segments_after == 4  # merged segments stay as they are


# tombstones ------------------------------------------------------------------

def test_tombstones_stay_for_delete_retention_ms_then_go(pdir: Path) -> None:
    log = open_log(pdir, delete_retention_ms=1000)
    put(log, (b"a", b"1"), (b"b", b"1"))
    put(log, (b"a", None))  # tombstone at 2
    log.roll()
    stats = clean(log, T + 999)
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None)]
    assert stats.next_deletion_ms == T + 1000
    stats = clean(log, T + 1000, checkpoint=stats.checkpoint)
    assert records(log) == [(1, b"b", b"1")]
    assert stats.next_deletion_ms is None


def test_a_tombstone_removes_older_values_at_once(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"))
    log.roll()
    put(log, (b"a", None))
    log.roll()
    clean(log, T)
    assert records(log) == [(1, b"a", None)]


# transactions ----------------------------------------------------------------

def test_aborted_records_go_committed_stay_abort_markers_stay(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"base"))  # 0
    put(log, (b"a", b"aborted"), (b"x", b"aborted"), producer_id=7, producer_epoch=0, base_sequence=0,
        transactional=True)  # 1-2
    abort_at = marker(log, 7, commit=False)  # 3
    put(log, (b"b", b"committed"), producer_id=7, producer_epoch=0, base_sequence=2, transactional=True)  # 4
    commit_at = marker(log, 7, commit=True)  # 5
    log.roll()
    clean(log, T)
    assert records(log) == [(0, b"a", b"base"), (4, b"b", b"committed")]
    assert markers(log) == [abort_at, commit_at]


def test_aborted_records_do_not_supersede_older_values(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"old"))
    put(log, (b"a", b"aborted"), producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    marker(log, 7, commit=False)
    put(log, (b"z", b"later"), producer_id=7, producer_epoch=0, base_sequence=1, transactional=True)
    marker(log, 7, commit=True)
    log.roll()
    clean(log, T)
    assert latest(log) == {b"a": b"old", b"z": b"later"}


def test_committed_records_supersede_and_the_commit_marker_goes_once_its_data_is_gone(pdir: Path) -> None:
    log = open_log(pdir, delete_retention_ms=1000)
    put(log, (b"a", b"txn"), producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)  # 0
    first_commit = marker(log, 8, commit=True)  # 1
    put(log, (b"c", b"txn"), producer_id=8, producer_epoch=0, base_sequence=1, transactional=True)  # 2
    last_commit = marker(log, 8, commit=True)  # 3
    put(log, (b"a", b"newer"))  # 4
    log.roll()
    stats = clean(log, T)  # within delete.retention.ms: the marker without data waits
    assert records(log) == [(2, b"c", b"txn"), (4, b"a", b"newer")]
    assert markers(log) == [first_commit, last_commit]
    assert stats.next_deletion_ms == T + 1000
    clean(log, T + 1000)
    # The first COMMIT has no data left; the last one ends data that stays (and is the producer's last batch).
    assert markers(log) == [last_commit]


def test_an_open_transaction_is_kept_and_left_out_of_the_map_until_decided(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"committed-before"))  # 0
    put(log, (b"a", b"open"), producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)  # 1
    put(log, (b"b", b"1"))  # 2
    log.roll()
    stats = clean(log, T)
    assert records(log) == [(0, b"a", b"committed-before"), (1, b"a", b"open"), (2, b"b", b"1")]
    assert stats.checkpoint == 1  # the next clean looks at the open transaction again
    marker(log, 9, commit=True)
    log.roll()
    stats = clean(log, T, checkpoint=stats.checkpoint)
    assert records(log) == [(1, b"a", b"open"), (2, b"b", b"1")]
    assert stats.checkpoint == log.segment_base_offsets[-1]


def test_an_open_transaction_that_aborts_later_is_dropped(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"committed-before"))
    put(log, (b"a", b"open"), producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    log.roll()
    checkpoint = clean(log, T).checkpoint
    marker(log, 9, commit=False)
    log.roll()
    clean(log, T, checkpoint=checkpoint)
    assert latest(log) == {b"a": b"committed-before"}


def test_a_producers_last_batch_stays_as_an_empty_header(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"), (b"b", b"1"), producer_id=5, producer_epoch=2, base_sequence=0)  # 0-1
    put(log, (b"a", b"2"), (b"b", b"2"), producer_id=5, producer_epoch=2, base_sequence=2)  # 2-3
    put(log, (b"a", b"3"), (b"b", b"3"))  # 4-5, no producer id
    log.roll()
    clean(log, T)
    batches = list(log.batches())
    assert [b.base_offset for b in batches] == [2, 4]
    empty = batches[0].header
    assert (empty.records_count, empty.last_offset_delta, empty.base_sequence, empty.producer_epoch) == (0, 1, 2, 2)
    assert batches[0].crc_valid() and decode_records(batches[0]) == []
    theirs = DefaultRecordBatch(bytes(batches[0].bytes()))
    assert theirs.validate_crc() and list(theirs) == [] and theirs.next_offset == 4
    # Producer state rebuilt from the compacted log still knows the last sequence.
    state = ProducerStateManager()
    state.rebuild(log.batches())
    assert state.entry(5).last_seq == 3


def test_an_expired_producers_last_batch_goes(pdir: Path) -> None:
    log = open_log(pdir)
    put(log, (b"a", b"1"), producer_id=5, producer_epoch=0, base_sequence=0)  # timestamp T
    put(log, (b"a", b"2"))
    log.roll()
    clean(log, T + 999, producer_expiration_ms=1000)
    assert [(b.base_offset, b.records_count) for b in log.batches()] == [(0, 0), (1, 1)]
    clean(log, T + 1000, producer_expiration_ms=1000)
    assert [(b.base_offset, b.records_count) for b in log.batches()] == [(1, 1)]


def test_an_aborted_transaction_that_is_a_producers_last_data_keeps_its_header_and_marker(pdir: Path) -> None:
    log = open_log(pdir, delete_retention_ms=0)
    put(log, (b"a", b"aborted"), producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    abort_at = marker(log, 7, commit=False)
    log.roll()
    clean(log, T)
    batches = list(log.batches())
    assert [(b.base_offset, b.records_count, b.is_control) for b in batches] == [(0, 0, False), (abort_at, 1, True)]
    state = ProducerStateManager()
    state.rebuild(log.batches())
    assert state.first_unstable_offset() is None


# the swap and crashes ----------------------------------------------------------

CRASH_CONFIG = dict(segment_bytes=1000, index_interval_bytes=100)


def build_crash_log(directory: Path) -> PartitionLog:
    """Segments of three ~75-byte batches: the cleaner merges four per group."""
    log = open_log(directory, **CRASH_CONFIG)
    for i in range(22):
        put(log, (b"k%d" % (i % 4), b"value-%d" % i))
        if i % 3 == 2:
            log.roll()
    put(log, (b"k0", None))
    log.roll()
    put(log, (b"tail", b"t"))
    return log


class Crash(Exception):
    pass


def count_file_ops(monkeypatch: pytest.MonkeyPatch, crash_at: int | None) -> list[str]:
    """Makes os.replace and os.unlink raise Crash at call number ``crash_at`` (the
    process dying there); returns the list the calls are recorded in. fsync is a
    no-op meanwhile: a process crash loses nothing that reached the page cache."""
    calls: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    for name in ("replace", "unlink"):
        real = getattr(os, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            if crash_at is not None and len(calls) == crash_at:
                raise Crash(_name)
            calls.append(f"{_name} {os.path.basename(str(args[-1] if _name == 'replace' else args[0]))}")
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, wrapper)
    return calls


def test_a_crash_at_any_file_operation_of_a_clean_leaves_a_valid_complete_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = build_crash_log(tmp_path / "ref")
    original = records(reference)
    calls = count_file_ops(monkeypatch, None)
    clean(reference, T)
    monkeypatch.undo()
    cleaned = records(reference)
    assert len(cleaned) < len(original)
    assert any(c.endswith(".log.swap") for c in calls)
    assert len(calls) >= 30  # two groups of four segments: renames and deletions
    outcomes = set()
    for crash_at in range(len(calls)):
        directory = tmp_path / f"crash-{crash_at}"
        log = build_crash_log(directory)
        count_file_ops(monkeypatch, crash_at)
        with pytest.raises(Crash):
            clean(log, T)
        monkeypatch.undo()
        # The process died: reopen from what is on disk, without closing the old log.
        reopened = open_log(directory, **CRASH_CONFIG)
        got = records(reopened)
        # Groups swapped before the crash are cleaned, the others not yet: every record
        # the finished clean keeps is there, nothing that was not in the log, and every
        # key reads its latest value.
        where = f"crash at {crash_at} ({calls[crash_at]})"
        assert set(cleaned) <= set(got) <= set(original), where
        assert got == sorted(got) and latest(reopened) == latest(reference), where
        outcomes.add("cleaned" if got == cleaned else "original" if got == original else "partly")
        assert all(b.crc_valid() for b in reopened.batches())
        assert not [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".tmp"))]
        # Reads by offset work across the swapped segments (their indexes are right).
        for offset, _key, _value in got:
            assert any(r.offset == offset for b in iter_batches(reopened.read(offset, 1)) for r in decode_records(b))
        clean(reopened, T)
        assert records(reopened) == cleaned
        reopened.close()
    assert outcomes == {"original", "partly", "cleaned"}


def drive(steps):
    """Runs a clean_in_steps generator to its end; returns its CleanStats."""
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            return done.value
        if isinstance(step, Fsync):
            os.fsync(step.fd)


def test_recovery_completes_a_swap_whose_old_segments_were_partly_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = build_crash_log(tmp_path / "ref")
    clean(reference, T)
    pdir = tmp_path / "crashed"
    log = build_crash_log(pdir)
    original, original_latest = records(log), latest(log)
    group: list = []

    def die_instead_of_swapping(old) -> bool:
        group.extend(old)
        raise Crash("swap")

    monkeypatch.setattr(log, "replace_segments", die_instead_of_swapping)
    with pytest.raises(Crash):
        drive(clean_in_steps(log, T))
    assert len(group) > 1
    # Act out a crash in the middle of the swap: committed (.log.swap), one index
    # already renamed in, one old segment already deleted, the others not.
    name = f"{group[0].base_offset:020d}"
    for suffix in (".index", ".timeindex", ".log"):
        os.replace(pdir / f"{name}{suffix}.cleaned", pdir / f"{name}{suffix}.swap")
    os.replace(pdir / f"{name}.index.swap", pdir / f"{name}.index")
    (pdir / f"{group[1].base_offset:020d}.log").unlink()
    reopened = open_log(pdir, **CRASH_CONFIG)
    assert reopened.segment_base_offsets[0] == group[0].base_offset
    assert group[1].base_offset not in reopened.segment_base_offsets
    assert latest(reopened) == original_latest
    got = records(reopened)
    assert got == sorted(got) and set(got) <= set(original)
    assert all(b.crc_valid() for b in reopened.batches())
    assert not [p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    for offset, _key, _value in records(reopened):
        assert any(r.offset == offset for b in iter_batches(reopened.read(offset, 1)) for r in decode_records(b))
    clean(reopened, T)
    assert records(reopened) == records(reference)


def test_a_log_changed_under_the_cleaner_stops_it_and_leaves_no_files(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=400, cleanup_policy="compact,delete")
    for i in range(40):
        put(log, (b"k%d" % (i % 4), b"value-%d" % i))
    log.roll()
    steps = clean_in_steps(log, T, step_bytes=200)
    next(steps)  # a first step of the scan
    log.delete_records_before(log.segment_base_offsets[2])  # deletes the two oldest segments
    stats = drive(steps)
    assert stats.interrupted and stats.records_removed == 0
    assert not [p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert not clean(log, T).interrupted  # the next clean works on the log as it is now
    assert latest(log) == {b"k%d" % k: b"value-%d" % (36 + k) for k in range(4)}


def test_a_log_changed_between_writing_and_swapping_is_not_swapped(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=400)
    for i in range(40):
        put(log, (b"k%d" % (i % 4), b"value-%d" % i))
    log.roll()
    before = records(log)
    steps = clean_in_steps(log, T)
    while not isinstance(next(steps), Fsync):
        pass
    log.truncate_to(5)  # the cleaned group's segments are gone now
    stats = drive(steps)
    assert stats.interrupted
    assert records(log) == before[:5]
    assert not [p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def test_interrupted_stats_when_the_log_is_closed_mid_clean(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=400)
    for i in range(40):
        put(log, (b"k%d" % (i % 4), b"value-%d" % i))
    log.roll()
    steps = clean_in_steps(log, T, step_bytes=200)
    next(steps)
    log.close()
    stats = drive(steps)
    assert stats.interrupted and stats.checkpoint == 0
    assert not [p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


# bounded steps -------------------------------------------------------------------

def test_work_per_step_is_bounded(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=256 * 1024)
    for i in range(4000):
        put(log, *[(b"key-%d" % (k % 50), b"x" * 100) for k in range(i, i + 5)])
    log.roll()
    size = log.size_bytes
    step_bytes = 32 * 1024
    steps = clean_in_steps(log, T, step_bytes=step_bytes)
    count = 0
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            stats = done.value
            break
        count += 1
        if isinstance(step, Fsync):
            os.fsync(step.fd)
    assert stats.records_removed == 20000 - 50
    # The work is cut into steps of about step_bytes: the scan alone reads every byte once.
    assert count >= size // step_bytes


async def test_run_once_lets_other_tasks_run_between_steps(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=64 * 1024)
    for i in range(500):
        put(log, *[(b"key-%d" % (k % 20), b"x" * 100) for k in range(i, i + 5)])
    log.roll()
    size = log.size_bytes
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    cleaner = LogCleaner(step_bytes=16 * 1024)
    results = await cleaner.run_once([("topic-0", log)], T)
    stop = True
    await task
    assert results["topic-0"].records_removed == 2500 - 20
    assert ticks >= size // (16 * 1024)  # the other task ran at least once per step of the scan


# the background cleaner ------------------------------------------------------------

async def test_run_once_cleans_compacted_logs_above_the_ratio_and_checkpoints(tmp_path: Path) -> None:
    compacted = open_log(tmp_path / "c-0", delete_retention_ms=1000)
    deleting = open_log(tmp_path / "d-0", cleanup_policy="delete")
    for log in (compacted, deleting):
        for i in range(10):
            put(log, (b"a", b"%d" % i))
        put(log, (b"b", None))
        log.roll()
    cleaner = LogCleaner()
    results = await cleaner.run_once([("c-0", compacted), ("d-0", deleting)], T)
    assert list(results) == ["c-0"]
    assert len(records(deleting)) == 11
    assert records(compacted) == [(9, b"a", b"9"), (10, b"b", None)]
    end = compacted.segment_base_offsets[-1]
    assert read_checkpoint(compacted.directory) == (end, T + 1000)
    # Nothing dirty, tombstone not due: nothing to do.
    assert await cleaner.run_once([("c-0", compacted)], T + 999) == {}
    # The tombstone is due: cleaned although the dirty ratio is 0.
    results = await cleaner.run_once([("c-0", compacted)], T + 1000)
    assert results["c-0"].records_removed == 1
    assert records(compacted) == [(9, b"a", b"9")]
    assert read_checkpoint(compacted.directory) == (end, None)


async def test_a_second_run_once_while_one_runs_returns_at_once(pdir: Path) -> None:
    log = open_log(pdir)
    for i in range(50):
        put(log, (b"a", b"%d" % i))
    log.roll()
    cleaner = LogCleaner(step_bytes=100)
    first = asyncio.create_task(cleaner.run_once([("p", log)], T))
    await asyncio.sleep(0)
    assert await cleaner.run_once([("p", log)], T) == {}
    assert (await first)["p"].records_removed == 49


async def test_a_failing_log_is_logged_and_the_others_are_cleaned(tmp_path: Path, caplog) -> None:
    bad = open_log(tmp_path / "bad-0")
    good = open_log(tmp_path / "good-0")
    for log in (bad, good):
        put(log, (b"a", b"1"))
        put(log, (b"a", b"2"))
        log.roll()
    # Corrupt a record inside the bad log's inactive segment (the CRC is not checked
    # by the cleaner, the record decoding fails).
    with open(bad.inactive_segments()[0].log_path, "r+b") as f:
        f.seek(61)  # the first record's length: now negative
        f.write(b"\x7f")
    cleaner = LogCleaner()
    results = await cleaner.run_once([("bad-0", bad), ("good-0", good)], T)
    assert list(results) == ["good-0"]
    assert "cleaning bad-0 failed" in caplog.text
    assert not (bad.directory / CHECKPOINT_FILE).exists()


def test_dirty_ratio_and_needs_cleaning(pdir: Path) -> None:
    log = open_log(pdir)
    assert dirty_ratio(log, None) == 0.0 and not needs_cleaning(log, None, 0.5)
    put(log, (b"a", b"1"))
    log.roll()
    first_end = log.segment_base_offsets[-1]
    put(log, (b"a", b"2"))
    log.roll()
    put(log, (b"a", b"3"))
    log.roll()
    assert dirty_ratio(log, None) == 1.0
    assert dirty_ratio(log, first_end) == pytest.approx(2 / 3)
    assert needs_cleaning(log, first_end, 0.5) and not needs_cleaning(log, first_end, 2 / 3)
    assert dirty_ratio(log, log.segment_base_offsets[-1]) == 0.0
    assert dirty_ratio(log, 10_000) == 1.0  # a checkpoint past the log: start over


def test_checkpoint_file_round_trip_and_unreadable_files(pdir: Path) -> None:
    pdir.mkdir(parents=True)
    assert read_checkpoint(pdir) == (None, None)
    write_checkpoint(pdir, 1234, None)
    assert read_checkpoint(pdir) == (1234, None)
    write_checkpoint(pdir, 99, 5000)
    assert read_checkpoint(pdir) == (99, 5000)
    assert (pdir / CHECKPOINT_FILE).read_text() == "0\n99 5000\n"
    for garbage in ("", "1\n5 -1\n", "0\nx -1\n"):
        (pdir / CHECKPOINT_FILE).write_text(garbage)
        assert read_checkpoint(pdir) == (None, None)
