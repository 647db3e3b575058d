"""broker.log: the on-disk partition log (segments, indexes, recovery, retention)."""

from __future__ import annotations

import logging
import os
import random
import shutil
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log.segment import OFFSET_ENTRY, TIME_ENTRY
from broker.log.partition_log import LOG_START_OFFSET_FILE, AppendInfo, LogConfig, OffsetOutOfRange, PartitionLog
from protocol.records import LOG_APPEND_TIME, RecordBatch, iter_batches


def make_batch(records: int = 1, timestamp: int = 1000, value_size: int = 10) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )
    for i in range(records):
        builder.append(i, timestamp + i, b"k%d" % i, b"v" * value_size, headers=[])
    return bytes(builder.build())


def view(data: bytes) -> RecordBatch:
    return RecordBatch(bytearray(data))


def open_log(directory: Path, now_ms: int = 0, **config) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config), now_ms)


def spans(data: bytes) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in iter_batches(data)]


def fill(log: PartitionLog, count: int, records: int = 1, timestamp: int = 1000, value_size: int = 10) -> list[AppendInfo]:
    return [log.append(view(make_batch(records, timestamp, value_size)), now_ms=timestamp) for _ in range(count)]


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


BATCH_SIZE = len(make_batch())


# appending and reading ------------------------------------------------------

def test_append_assigns_offsets_and_reads_back(pdir: Path) -> None:
    log = open_log(pdir)
    sent = [make_batch(1), make_batch(3), make_batch(2)]
    infos = [log.append(view(b), now_ms=5) for b in sent]
    assert infos == [AppendInfo(0, 0, -1, 0), AppendInfo(1, 3, -1, 0), AppendInfo(4, 5, -1, 0)]
    assert log.log_end_offset == 6
    assert log.size_bytes == sum(map(len, sent))
    data = log.read(0, 1 << 20)
    assert spans(data) == [(0, 0), (1, 3), (4, 5)]
    for stored, original in zip(iter_batches(data), sent):
        assert stored.crc_valid()
        assert stored.partition_leader_epoch == 0
        assert bytes(stored.bytes())[12:] == original[12:]  # only the base offset changed
    log.close()


def test_append_sets_partition_leader_epoch_to_zero(pdir: Path) -> None:
    log = open_log(pdir)
    batch = view(make_batch())
    batch.set_partition_leader_epoch(7)
    log.append(batch, now_ms=0)
    assert next(iter_batches(log.read(0, 1 << 20))).partition_leader_epoch == 0
    log.close()


def test_read_from_inside_a_batch_returns_that_whole_batch(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 3, records=4)
    assert spans(log.read(5, 1 << 20)) == [(4, 7), (8, 11)]
    assert spans(log.read(11, 1 << 20)) == [(8, 11)]
    log.close()


def test_read_at_log_end_is_empty_and_beyond_it_is_out_of_range(pdir: Path) -> None:
    log = open_log(pdir)
    assert log.read(0, 1 << 20) == b""
    fill(log, 2)
    assert log.read(2, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(3, 1 << 20)
    assert exc.value.error_name == "OFFSET_OUT_OF_RANGE"
    assert (exc.value.log_start_offset, exc.value.log_end_offset) == (0, 2)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1 << 20)
    log.close()


def test_read_respects_max_bytes_and_returns_whole_batches(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 5)
    assert spans(log.read(0, BATCH_SIZE * 2 + BATCH_SIZE // 2)) == [(0, 0), (1, 1)]
    assert spans(log.read(1, BATCH_SIZE * 3)) == [(1, 1), (2, 2), (3, 3)]
    log.close()


def test_first_batch_comes_whole_when_larger_than_max_bytes_unless_min_one_is_false(pdir: Path) -> None:
    log = open_log(pdir)
    big = make_batch(records=3, value_size=500)
    log.append(view(big), now_ms=0)
    fill(log, 1)
    assert log.read(0, 10) == log.read(0, len(big))
    assert spans(log.read(0, 10)) == [(0, 2)]
    assert spans(log.read(0, 0)) == [(0, 2)]
    assert log.read(0, 10, min_one=False) == b""
    assert spans(log.read(3, 5)) == [(3, 3)]
    log.close()


def test_upper_bound_stops_before_batches_at_or_past_it(pdir: Path) -> None:
    log = open_log(pdir, index_interval_bytes=0)
    fill(log, 4, records=2)  # batches at 0, 2, 4, 6
    assert spans(log.read(0, 1 << 20, upper_bound=4)) == [(0, 1), (2, 3)]
    assert spans(log.read(0, 1 << 20, upper_bound=5)) == [(0, 1), (2, 3), (4, 5)]
    assert log.read(4, 1 << 20, upper_bound=4) == b""
    assert log.read(4, 1, upper_bound=4) == b""  # min_one does not cross the bound
    assert spans(log.read(0, 1, upper_bound=2)) == [(0, 1)]
    log.close()


def test_batches_iterates_from_the_batch_holding_an_offset(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=len(make_batch(2)) * 3)
    fill(log, 7, records=2)
    assert [(b.base_offset, b.last_offset) for b in log.batches()] == [(i, i + 1) for i in range(0, 14, 2)]
    assert [b.base_offset for b in log.batches(7)] == [6, 8, 10, 12]
    assert list(log.batches(14)) == []
    log.close()


# segments -----------------------------------------------------------------

def test_segments_roll_at_segment_bytes_and_reads_cross_them(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 3, index_interval_bytes=BATCH_SIZE)
    rolled: list[int] = []
    log.roll_listeners.append(rolled.append)
    fill(log, 10)
    assert log.segment_base_offsets == [0, 3, 6, 9]
    assert rolled == [3, 6, 9]
    names = sorted(p.name for p in pdir.iterdir() if p.name[0].isdigit())
    for base in (0, 3, 6, 9):
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in names
    assert os.path.getsize(pdir / f"{0:020d}.log") == BATCH_SIZE * 3
    assert os.path.getsize(pdir / f"{0:020d}.index") == OFFSET_ENTRY.size  # one sparse entry
    assert spans(log.read(0, 1 << 20)) == [(i, i) for i in range(10)]
    for offset in range(10):
        assert spans(log.read(offset, BATCH_SIZE * 4)) == [(i, i) for i in range(offset, min(offset + 4, 10))]
    log.close()


def test_a_batch_larger_than_segment_bytes_gets_a_segment_of_its_own(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2)
    fill(log, 1)
    big = make_batch(records=2, value_size=BATCH_SIZE * 3)
    log.append(view(big), now_ms=0)
    fill(log, 1)
    assert log.segment_base_offsets == [0, 1, 3]
    assert spans(log.read(1, 1)) == [(1, 2)]
    log.close()


def test_segment_rolls_after_segment_ms(pdir: Path) -> None:
    log = open_log(pdir, segment_ms=1000)
    log.append(view(make_batch()), now_ms=10_000)
    log.append(view(make_batch()), now_ms=11_000)
    assert log.segment_base_offsets == [0]
    log.append(view(make_batch()), now_ms=11_001)
    assert log.segment_base_offsets == [0, 2]
    log.close()


def test_update_config_applies_to_later_appends(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 3)
    log.update_config(LogConfig(segment_bytes=BATCH_SIZE * 3))
    assert log.config.segment_bytes == BATCH_SIZE * 3
    fill(log, 1)
    assert log.segment_base_offsets == [0, 3]
    log.close()


def test_segment_rolls_before_relative_offsets_overflow_int32(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 1)
    far = view(make_batch())
    far.set_base_offset(2**31)
    log.append(far, now_ms=0, assign_offsets=False)
    assert log.segment_base_offsets == [0, 2**31]
    assert log.log_end_offset == 2**31 + 1
    assert spans(log.read(1, 1 << 20)) == [(2**31, 2**31)]
    log.close()


# appending with offsets already set -----------------------------------------

def test_append_without_assigning_keeps_offsets_and_refuses_going_back(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 2)
    batch = view(make_batch(records=2))
    batch.set_base_offset(10)
    batch.set_partition_leader_epoch(3)
    info = log.append(batch, now_ms=0, assign_offsets=False)
    assert (info.base_offset, info.last_offset) == (10, 11)
    assert log.log_end_offset == 12
    stored = next(iter_batches(log.read(5, 1 << 20)))  # an offset in the gap finds the next batch
    assert (stored.base_offset, stored.partition_leader_epoch) == (10, 3)
    behind = view(make_batch())
    behind.set_base_offset(11)
    with pytest.raises(ValueError, match="below the log end offset 12"):
        log.append(behind, now_ms=0, assign_offsets=False)
    assert log.log_end_offset == 12
    log.close()


# reopening and recovery -------------------------------------------------------

def test_reopen_finds_everything_and_offsets_continue(pdir: Path) -> None:
    config = dict(segment_bytes=len(make_batch(2)) * 3)
    log = open_log(pdir, **config)
    fill(log, 8, records=2)
    before = log.read(0, 1 << 20)
    log.close()
    log = open_log(pdir, **config)
    assert log.log_end_offset == 16
    assert log.log_start_offset == 0
    assert log.segment_base_offsets == [0, 6, 12]
    assert log.read(0, 1 << 20) == before
    assert log.append(view(make_batch()), now_ms=0).base_offset == 16
    log.close()


def test_torn_tail_is_truncated_with_a_warning(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 3, records=2)
    log.close()
    torn = make_batch(records=2)[: BATCH_SIZE // 2]
    with open(pdir / f"{0:020d}.log", "ab") as f:
        f.write(torn)
    size = 3 * len(make_batch(records=2))
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = open_log(pdir)
    assert log.log_end_offset == 6
    assert log.size_bytes == size
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = record.getMessage()
    assert str(pdir) in message
    assert f"truncating at position {size}, dropping {len(torn)} bytes" in message
    assert log.append(view(make_batch()), now_ms=0).base_offset == 6
    assert spans(log.read(0, 1 << 20)) == [(0, 1), (2, 3), (4, 5), (6, 6)]
    log.close()


def test_tail_shorter_than_a_header_is_truncated(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 2)
    log.close()
    with open(pdir / f"{0:020d}.log", "ab") as f:
        f.write(b"\0" * 7)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = open_log(pdir)
    assert "dropping 7 bytes" in caplog.text
    assert log.log_end_offset == 2
    log.close()


def test_corrupt_crc_in_the_last_batch_is_truncated(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 3)
    log.close()
    path = pdir / f"{0:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # last byte of the last batch's last record
    path.write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = open_log(pdir)
    assert "CRC mismatch" in caplog.text
    assert log.log_end_offset == 2
    assert log.size_bytes == 2 * BATCH_SIZE
    assert os.path.getsize(path) == 2 * BATCH_SIZE
    assert log.append(view(make_batch()), now_ms=0).base_offset == 2
    log.close()


def test_batch_with_offsets_going_backwards_is_truncated(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 2)
    log.close()
    again = view(make_batch())  # offset 0 again, a valid CRC: only the offset check catches it
    with open(pdir / f"{0:020d}.log", "ab") as f:
        f.write(again.buf)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = open_log(pdir)
    assert "base offset 0 is below the expected 2" in caplog.text
    assert log.log_end_offset == 2
    log.close()


def test_bad_magic_in_the_tail_is_truncated(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 2)
    log.close()
    bad = bytearray(make_batch())
    bad[16] = 1
    with open(pdir / f"{0:020d}.log", "ab") as f:
        f.write(bad)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = open_log(pdir)
    assert "magic 1" in caplog.text
    assert log.log_end_offset == 2
    log.close()


def test_missing_index_of_an_older_segment_is_rebuilt(pdir: Path) -> None:
    config = dict(segment_bytes=BATCH_SIZE * 8, index_interval_bytes=BATCH_SIZE)
    log = open_log(pdir, **config)
    fill(log, 20)
    index_path = pdir / f"{0:020d}.index"
    time_index_path = pdir / f"{0:020d}.timeindex"
    index_bytes, time_index_bytes = index_path.read_bytes(), time_index_path.read_bytes()
    before = log.read(0, 1 << 20)
    log.close()
    index_path.unlink()
    time_index_path.write_bytes(b"\x01\x02\x03")  # not a whole entry: corrupt
    log = open_log(pdir, **config)
    assert index_path.read_bytes() == index_bytes and len(index_bytes) > 0
    assert time_index_path.read_bytes() == time_index_bytes and len(time_index_bytes) > 0
    assert log.read(0, 1 << 20) == before
    for offset in range(20):
        assert spans(log.read(offset, 1)) == [(offset, offset)]
    log.close()


def test_index_pointing_past_the_log_is_rebuilt(pdir: Path) -> None:
    config = dict(segment_bytes=BATCH_SIZE * 8, index_interval_bytes=BATCH_SIZE)
    log = open_log(pdir, **config)
    fill(log, 10)
    log.close()
    index_path = pdir / f"{0:020d}.index"
    good = index_path.read_bytes()
    index_path.write_bytes(good + OFFSET_ENTRY.pack(7, 10**6))
    log = open_log(pdir, **config)
    assert index_path.read_bytes() == good
    assert spans(log.read(7, 1)) == [(7, 7)]
    log.close()


def test_index_files_of_the_active_segment_are_rebuilt_on_open(pdir: Path) -> None:
    log = open_log(pdir, index_interval_bytes=BATCH_SIZE)
    fill(log, 6)
    log.close()
    index_path = pdir / f"{0:020d}.index"
    good = index_path.read_bytes()
    index_path.write_bytes(b"")
    log = open_log(pdir, index_interval_bytes=BATCH_SIZE)
    assert index_path.read_bytes() == good
    log.close()


def test_orphan_index_files_and_a_half_written_start_offset_file_are_removed(pdir: Path) -> None:
    log = open_log(pdir)
    log.close()
    for suffix in (".index", ".timeindex", ".txnindex"):
        (pdir / f"{50:020d}{suffix}").write_bytes(b"")
    (pdir / f"{0:020d}.txnindex").write_bytes(b"")  # its segment is there: kept
    (pdir / f"{0:020d}.timeindex.tmp").write_bytes(b"")
    (pdir / (LOG_START_OFFSET_FILE + ".tmp")).write_text("0\n9")
    log = open_log(pdir)
    assert not [p.name for p in pdir.glob(f"{50:020d}.*")]
    assert (pdir / f"{0:020d}.txnindex").exists()
    assert not (pdir / f"{0:020d}.timeindex.tmp").exists()
    assert not (pdir / (LOG_START_OFFSET_FILE + ".tmp")).exists()
    assert log.log_start_offset == 0
    log.close()


# log start offset and DeleteRecords ---------------------------------------------

def test_delete_records_moves_log_start_and_deletes_segments_below_it(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 3)
    fill(log, 9)
    assert log.segment_base_offsets == [0, 3, 6]
    assert log.delete_records_before(4) == 4
    assert log.log_start_offset == 4
    assert log.segment_base_offsets == [3, 6]
    assert not (pdir / f"{0:020d}.log").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 1 << 20)  # still on disk in segment 3, but below the log start
    assert spans(log.read(4, 1 << 20)) == [(i, i) for i in range(4, 9)]
    assert log.append(view(make_batch()), now_ms=0).log_start_offset == 4
    assert log.delete_records_before(2) == 4  # never moves back
    log.close()
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 3)
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 1 << 20)
    assert [b.base_offset for b in log.batches()] == [4, 5, 6, 7, 8, 9]
    log.close()


def test_delete_records_beyond_log_end_is_out_of_range(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 3)
    with pytest.raises(OffsetOutOfRange) as exc:
        log.delete_records_before(4)
    assert exc.value.error_name == "OFFSET_OUT_OF_RANGE"
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(-1)
    assert log.log_start_offset == 0
    assert log.delete_records_before(3) == 3
    assert log.read(3, 1 << 20) == b""
    assert log.append(view(make_batch()), now_ms=0).base_offset == 3
    log.close()


def test_log_start_offset_inside_a_batch_still_returns_that_batch(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 2, records=4)
    log.delete_records_before(2)
    assert spans(log.read(2, 1 << 20)) == [(0, 3), (4, 7)]
    assert [b.base_offset for b in log.batches()] == [0, 4]
    log.close()


def test_log_start_offset_past_the_recovered_end_restarts_the_log_there(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 4)
    log.delete_records_before(4)
    log.close()
    path = pdir / f"{0:020d}.log"
    path.write_bytes(path.read_bytes()[: BATCH_SIZE * 2])  # lose the tail holding the start
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = open_log(pdir)
    assert "log start offset 4 is beyond the recovered log end offset 2" in caplog.text
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    assert log.segment_base_offsets == [4]
    assert log.append(view(make_batch()), now_ms=0).base_offset == 4
    log.close()


def test_unreadable_log_start_offset_file_is_refused(pdir: Path) -> None:
    open_log(pdir).close()
    (pdir / LOG_START_OFFSET_FILE).write_text("garbage")
    with pytest.raises(ValueError, match="unreadable log start offset file"):
        open_log(pdir)


# retention ------------------------------------------------------------------

def test_retention_by_size_deletes_oldest_whole_segments(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 3, retention_bytes=BATCH_SIZE * 5)
    fill(log, 10)  # segments 0, 3, 6 full, 9 active with one batch
    # 5 batches too many: segment 0 goes; segment 3 would take the log below the limit.
    assert log.enforce_retention(now_ms=1000) == 1
    assert log.segment_base_offsets == [3, 6, 9]
    assert log.log_start_offset == 3
    assert log.size_bytes == BATCH_SIZE * 7
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 1)
    assert log.enforce_retention(now_ms=1000) == 0
    fill(log, 4)  # 11 batches in 3, 6, 9, 12: 6 too many
    assert log.enforce_retention(now_ms=1000) == 2
    assert (log.segment_base_offsets, log.size_bytes) == ([9, 12], BATCH_SIZE * 5)
    log.close()
    assert open_log(pdir).log_start_offset == 9


def test_retention_by_time(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2, retention_ms=1000)
    rolled: list[int] = []
    log.roll_listeners.append(rolled.append)
    fill(log, 2, timestamp=100)   # segment 0: largest timestamp 100
    fill(log, 2, timestamp=3000)  # segment 2: 3000
    fill(log, 1, timestamp=9000)  # segment 4 (active): 9000
    assert log.enforce_retention(now_ms=1100) == 0  # 1100 - 100 is not > 1000
    assert log.enforce_retention(now_ms=1101) == 1
    assert (log.segment_base_offsets, log.log_start_offset) == ([2, 4], 2)
    assert log.enforce_retention(now_ms=9000) == 1
    assert log.segment_base_offsets == [4]
    rolled.clear()
    assert log.enforce_retention(now_ms=10_001) == 1  # the active segment expired: rolled, then deleted
    assert rolled == [5]
    assert (log.segment_base_offsets, log.log_start_offset, log.log_end_offset) == ([5], 5, 5)
    assert log.enforce_retention(now_ms=99_999) == 0  # an empty active segment stays
    assert log.append(view(make_batch()), now_ms=0).base_offset == 5
    log.close()


def test_retention_never_deletes_past_the_high_watermark(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2, retention_ms=10)
    fill(log, 5, timestamp=100)
    assert log.enforce_retention(now_ms=10_000, high_watermark=3) == 1
    assert log.segment_base_offsets == [2, 4]
    log.close()


def test_retention_stops_at_the_first_segment_that_is_kept(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2, retention_ms=1000)
    fill(log, 2, timestamp=5000)
    fill(log, 2, timestamp=100)  # old, but after a segment that is kept
    fill(log, 1, timestamp=5000)
    assert log.enforce_retention(now_ms=5500) == 0
    log.close()


def test_compact_only_topics_have_no_time_or_size_retention(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2, retention_ms=10, retention_bytes=0, cleanup_policy="compact")
    fill(log, 5, timestamp=100)
    assert log.enforce_retention(now_ms=10_000) == 0
    log.update_config(LogConfig(segment_bytes=BATCH_SIZE * 2, retention_ms=10, cleanup_policy="compact,delete"))
    assert log.enforce_retention(now_ms=10_000) == 3
    log.close()


def test_an_empty_cleanup_policy_keeps_everything_but_what_delete_records_removes(pdir: Path) -> None:
    """Kafka 4.2+: no policy means no retention and no compaction; only the log start
    offset (DeleteRecords) frees segments."""
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2, retention_ms=10, retention_bytes=0, cleanup_policy="")
    fill(log, 5, timestamp=100)
    assert (log.config.deletes, log.config.compacts) == (False, False)
    assert log.enforce_retention(now_ms=10_000) == 0
    log.delete_records_before(2)
    assert log.segment_base_offsets == [2, 4]
    log.close()


def test_unlimited_retention_keeps_everything(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2, retention_ms=-1, retention_bytes=-1)
    fill(log, 5, timestamp=0)
    assert log.enforce_retention(now_ms=10**12) == 0
    log.close()


# timestamps -----------------------------------------------------------------

def test_find_offset_by_timestamp_uses_batch_max_timestamps(pdir: Path) -> None:
    config = dict(segment_bytes=len(make_batch(2)) * 3, index_interval_bytes=0)
    log = open_log(pdir, **config)
    for ts in (100, 200, 150, 300, 300, 400, 500):  # max timestamps are ts + 1 (two records)
        log.append(view(make_batch(2, timestamp=ts)), now_ms=0)

    def found(t: int) -> int | None:
        batch = log.find_offset_by_timestamp(t)
        return None if batch is None else batch.base_offset

    assert found(0) == 0
    assert found(101) == 0
    assert found(102) == 2
    assert found(152) == 2  # 151 at offset 4 comes later; 201 at offset 2 is first
    assert found(202) == 6
    assert found(301) == 6
    assert found(302) == 10
    assert found(501) == 12
    assert found(502) is None
    log.close()
    log = open_log(pdir, **config)  # time indexes of rolled segments come from disk
    assert found(202) == 6 and found(302) == 10 and found(502) is None
    log.delete_records_before(7)
    assert found(0) == 6  # the batch holding the log start
    log.delete_records_before(8)
    assert found(0) == 8
    log.close()


def test_max_timestamp_is_the_first_batch_with_the_largest(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2)
    assert log.max_timestamp() is None
    for ts in (100, 700, 300, 700, 200):
        log.append(view(make_batch(timestamp=ts)), now_ms=0)
    ts, batch = log.max_timestamp()
    assert (ts, batch.base_offset) == (700, 1)
    log.close()
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2)
    ts, batch = log.max_timestamp()
    assert (ts, batch.base_offset) == (700, 1)
    log.delete_records_before(2)  # the max now sits below the log start in a kept segment
    ts, batch = log.max_timestamp()
    assert (ts, batch.base_offset) == (700, 3)
    log.close()


def test_log_append_time_sets_timestamps_and_keeps_the_crc_valid(pdir: Path) -> None:
    log = open_log(pdir, message_timestamp_type="LogAppendTime")
    info = log.append(view(make_batch(records=3, timestamp=5)), now_ms=123_456)
    assert info == AppendInfo(0, 2, 123_456, 0)
    stored = next(iter_batches(log.read(0, 1 << 20)))
    assert stored.timestamp_type == LOG_APPEND_TIME
    assert stored.max_timestamp == 123_456
    assert stored.crc_valid()
    assert log.find_offset_by_timestamp(123_456).base_offset == 0
    log.close()


def test_time_index_entries_are_written_when_the_max_timestamp_grows(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 4, index_interval_bytes=0)
    for ts in (100, 300, 200, 400, 500):
        log.append(view(make_batch(timestamp=ts)), now_ms=0)
    log.close()
    raw = (pdir / f"{0:020d}.timeindex").read_bytes()
    # As in Kafka the first batch of a segment is never indexed; the roll after batch 3
    # finds nothing newer to add.
    assert list(TIME_ENTRY.iter_unpack(raw)) == [(300, 1), (400, 3)]


# truncation and flushing -------------------------------------------------------

def test_truncate_to_drops_whole_batches_from_the_offset(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=len(make_batch(2)) * 2, index_interval_bytes=0)
    fill(log, 6, records=2)
    assert log.segment_base_offsets == [0, 4, 8]
    log.truncate_to(5)  # inside the batch 4-5: the whole batch goes
    assert log.log_end_offset == 4
    assert log.segment_base_offsets == [0, 4]
    assert spans(log.read(0, 1 << 20)) == [(0, 1), (2, 3)]
    assert log.append(view(make_batch()), now_ms=0).base_offset == 4
    log.truncate_to(100)  # past the end: nothing to do
    assert log.log_end_offset == 5
    log.close()
    assert open_log(pdir).log_end_offset == 5


def test_truncate_to_inside_an_older_segment_makes_it_active(pdir: Path) -> None:
    config = dict(segment_bytes=len(make_batch(2)) * 2, index_interval_bytes=0)
    log = open_log(pdir, **config)
    fill(log, 6, records=2)
    log.close()
    log = open_log(pdir, **config)
    log.truncate_to(6)
    assert (log.segment_base_offsets, log.log_end_offset) == ([0, 4], 6)
    assert log.append(view(make_batch(2)), now_ms=0).base_offset == 6
    assert log.segment_base_offsets == [0, 4]
    assert log.append(view(make_batch(2)), now_ms=0).base_offset == 8
    assert log.segment_base_offsets == [0, 4, 8]  # the segment was full again
    log.close()


def test_truncate_below_the_first_segment_starts_over(pdir: Path) -> None:
    log = open_log(pdir, segment_bytes=BATCH_SIZE * 2)
    fill(log, 6)
    log.delete_records_before(4)
    log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (3, 3, [3])
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    with pytest.raises(ValueError, match="negative offset"):
        log.truncate_to(-1)
    log.close()
    log = open_log(pdir)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    log.close()


def test_truncate_lowers_a_log_start_offset_above_the_new_end(pdir: Path) -> None:
    log = open_log(pdir)
    fill(log, 6)
    log.delete_records_before(5)
    log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    log.close()
    assert open_log(pdir).log_start_offset == 3


def test_flush_messages_and_flush_ms_trigger_fsync(pdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    log = open_log(pdir, now_ms=0, flush_messages=3)

    def append_at(now_ms: int) -> None:
        log.append(view(make_batch()), now_ms=now_ms)

    append_at(0)
    append_at(0)
    assert synced == []
    append_at(0)
    assert synced  # the log, both indexes and the directory
    synced.clear()
    append_at(0)
    append_at(0)
    assert synced == []
    log.update_config(LogConfig(flush_ms=1000))
    append_at(999)
    assert synced == []
    append_at(1000)
    assert synced
    synced.clear()
    append_at(1999)
    assert synced == []
    append_at(2000)
    assert synced
    log.close()


# config -------------------------------------------------------------------

def test_log_config_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert (config.segment_bytes, config.segment_ms, config.index_interval_bytes) == (1073741824, 604800000, 4096)
    assert (config.retention_ms, config.retention_bytes) == (604800000, -1)
    assert (config.flush_messages, config.flush_ms) == (2**63 - 1, 2**63 - 1)
    assert (config.cleanup_policy, config.delete_retention_ms) == ("delete", 86400000)
    assert config.message_timestamp_type == "CreateTime"


def test_log_config_from_topic_configs() -> None:
    config = LogConfig.from_topic_configs(
        {"segment.bytes": "1024", "cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime",
         "retention.ms": 5, "min.insync.replicas": "2"}
    )
    assert (config.segment_bytes, config.cleanup_policy, config.retention_ms) == (1024, "compact", 5)
    assert config.message_timestamp_type == "LogAppendTime"
    assert not config.deletes


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("segment_bytes", 13, "segment.bytes must be at least 14"),
        ("segment_ms", 0, "segment.ms must be at least 1"),
        ("index_interval_bytes", -1, "index.interval.bytes must be at least 0"),
        ("flush_messages", 0, "flush.messages must be at least 1"),
        ("cleanup_policy", "forever", "cleanup.policy must be"),
        ("message_timestamp_type", "BrokerTime", "message.timestamp.type must be"),
    ],
)
def test_log_config_refuses_bad_values(field: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogConfig(**{field: value})


def test_an_empty_active_segment_rolls_before_relative_offsets_overflow(pdir: Path) -> None:
    log = open_log(pdir)
    far = view(make_batch())
    far.set_base_offset(2**31 + 5)
    log.append(far, now_ms=0, assign_offsets=False)
    assert log.segment_base_offsets == [0, 2**31 + 5]
    assert spans(log.read(0, 1 << 20)) == [(2**31 + 5, 2**31 + 5)]
    log.close()
    log.close()  # closing twice is harmless
    log = open_log(pdir)
    assert (log.log_end_offset, log.segment_base_offsets) == (2**31 + 6, [0, 2**31 + 5])
    assert spans(log.read(0, 1 << 20)) == [(2**31 + 5, 2**31 + 5)]
    log.close()


def test_reads_match_a_simple_model_across_segments_and_reopen(pdir: Path) -> None:
    rng = random.Random(7)
    config = dict(segment_bytes=1500, index_interval_bytes=200)
    log = open_log(pdir, **config)
    for _ in range(80):
        log.append(view(make_batch(rng.randint(1, 4), value_size=rng.choice([5, 60, 700]))), now_ms=0)
    stored = [(b.base_offset, b.last_offset, bytes(b.bytes())) for b in iter_batches(log.read(0, 1 << 30))]
    assert len(stored) == 80 and len(log.segment_base_offsets) > 5

    def model(offset: int, max_bytes: int, upper_bound: int | None, min_one: bool) -> bytes:
        out: list[bytes] = []
        total = 0
        for base, last, raw in stored:
            if last < offset:
                continue
            if upper_bound is not None and base >= upper_bound:
                break
            if total + len(raw) > max_bytes:
                if not out and min_one:
                    out.append(raw)
                break
            out.append(raw)
            total += len(raw)
        return b"".join(out)

    for reopened in (False, True):
        if reopened:
            log.close()
            log = open_log(pdir, **config)
        for _ in range(400):
            offset = rng.randrange(log.log_end_offset + 1)
            max_bytes = rng.choice([0, 50, 800, 2000, 5000, 1 << 20])
            upper_bound = rng.choice([None, rng.randrange(log.log_end_offset + 1)])
            min_one = rng.random() < 0.8
            assert log.read(offset, max_bytes, upper_bound, min_one) == model(offset, max_bytes, upper_bound, min_one)
    log.close()


def test_roll_starts_a_new_segment_only_when_the_active_one_has_data(pdir: Path) -> None:
    log = open_log(pdir)
    rolled: list[int] = []
    log.roll_listeners.append(rolled.append)
    assert log.roll() == 0
    fill(log, 2)
    assert log.roll() == 2
    assert log.roll() == 2
    assert (rolled, log.segment_base_offsets) == ([2], [0, 2])
    assert log.append(view(make_batch()), now_ms=0).base_offset == 2
    log.close()


# reopening after a clean shutdown ---------------------------------------------

def _segment_state(log: PartitionLog) -> tuple:
    seg = log._active
    return (seg.base_offset, seg.size, seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp,
            seg.bytes_since_last_index_entry, seg.roll_base_ms, seg.offset_index.entries(), seg.time_index.entries())


def _observed(log: PartitionLog, timestamps: list[int]) -> tuple:
    found = [log.find_offset_by_timestamp(t) for t in timestamps]
    best = log.max_timestamp()
    return (
        log.log_end_offset,
        log.segment_base_offsets,
        log.read(0, 1 << 30),
        [spans(log.read(o, 1)) for o in range(log.log_start_offset, log.log_end_offset)],
        [None if b is None else b.base_offset for b in found],
        None if best is None else (best[0], best[1].base_offset),
        _segment_state(log),
    )


def _index_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".index", ".timeindex")}


@pytest.mark.parametrize("index_interval_bytes", [0, 250, 10**6])
@pytest.mark.parametrize("seed", [1, 2])
def test_clean_reopen_gives_the_state_and_reads_of_a_full_recovery(tmp_path: Path, index_interval_bytes: int,
                                                                    seed: int) -> None:
    rng = random.Random(seed)
    config = dict(segment_bytes=6000, index_interval_bytes=index_interval_bytes, segment_ms=10**6)
    timestamps = [rng.choice([-1, rng.randrange(1000, 5000)]) for _ in range(90)]
    original = tmp_path / "original"
    log = open_log(original, now_ms=0, **config)
    for ts in timestamps:  # timestamps go up and down, so the tail moves the max or not
        log.append(view(make_batch(rng.randint(1, 3), ts, rng.choice([5, 60, 300]))), now_ms=100)
    assert len(log.segment_base_offsets) > 1 and log._active.size > 1000
    log.close()
    clean_dir, full_dir = tmp_path / "clean", tmp_path / "full"
    shutil.copytree(original, clean_dir)
    shutil.copytree(original, full_dir)

    clean = PartitionLog.open(clean_dir, LogConfig(**config), 200, clean_shutdown=True)
    full = PartitionLog.open(full_dir, LogConfig(**config), 200, clean_shutdown=False)
    probes = list(range(900, 5200, 97)) + [-1, 0, 4999, 5000]
    assert _observed(clean, probes) == _observed(full, probes)
    assert _index_files(clean_dir) == _index_files(full_dir)

    # Later appends, an explicit roll and a segment.ms roll behave the same way.
    for now in (300, 400, 500, 10**6 + 5000):
        for _ in range(12):
            batch = make_batch(rng.randint(1, 3), rng.randrange(1000, 6000), rng.choice([5, 60, 300]))
            assert clean.append(view(batch), now_ms=now) == full.append(view(batch), now_ms=now)
        if now == 400:
            assert clean.roll() == full.roll()
    assert _observed(clean, probes) == _observed(full, probes)
    clean.close()
    full.close()
    assert _index_files(clean_dir) == _index_files(full_dir)
    assert [p.name for p in sorted(clean_dir.iterdir())] == [p.name for p in sorted(full_dir.iterdir())]


def test_clean_reopen_of_an_empty_or_unindexed_active_segment(pdir: Path) -> None:
    log = open_log(pdir)
    log.close()
    log = PartitionLog.open(pdir, LogConfig(), 0, clean_shutdown=True)
    assert (log.log_end_offset, log._active.size, log._active.max_timestamp) == (0, 0, -1)
    fill(log, 3, timestamp=-1)  # no timestamps at all: no time index entries
    log.close()
    log = PartitionLog.open(pdir, LogConfig(), 0, clean_shutdown=True)
    assert log.log_end_offset == 3
    assert (log._active.max_timestamp, log._active.offset_of_max_timestamp) == (-1, -1)
    assert log._active.bytes_since_last_index_entry == 3 * BATCH_SIZE
    log.close()


class _CountingBatch(RecordBatch):
    made = 0

    def __init__(self, buf, pos: int = 0) -> None:
        type(self).made += 1
        super().__init__(buf, pos)


def test_clean_reopen_reads_only_the_batches_after_the_last_index_entry(
        pdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.log.segment as segment_module

    log = open_log(pdir, index_interval_bytes=4096)
    fill(log, 3000)
    expected = _segment_state(log)
    log.close()
    monkeypatch.setattr(segment_module, "RecordBatch", _CountingBatch)

    log = PartitionLog.open(pdir, LogConfig(index_interval_bytes=4096), 0, clean_shutdown=True)
    assert _segment_state(log) == expected
    log.close()
    tail_batches = 4096 // BATCH_SIZE + 2
    assert 0 < _CountingBatch.made <= tail_batches + 1  # the tail, plus the first batch for segment.ms

    _CountingBatch.made = 0
    log = PartitionLog.open(pdir, LogConfig(index_interval_bytes=4096), 0, clean_shutdown=False)
    assert _segment_state(log) == expected
    log.close()
    assert _CountingBatch.made >= 3000


def _damage_tail_torn(directory: Path) -> None:
    with open(directory / f"{0:020d}.log", "ab") as f:
        f.write(make_batch(3, value_size=100)[:100])  # a whole header, half a body


def _damage_tail_short(directory: Path) -> None:
    with open(directory / f"{0:020d}.log", "ab") as f:
        f.write(b"\0" * 7)


def _damage_tail_offsets_backwards(directory: Path) -> None:
    with open(directory / f"{0:020d}.log", "ab") as f:
        f.write(make_batch())  # base offset 0 again


def _damage_tail_bad_magic(directory: Path) -> None:
    bad = bytearray(make_batch())
    bad[16] = 1
    with open(directory / f"{0:020d}.log", "ab") as f:
        f.write(bad)


def _damage_index_missing(directory: Path) -> None:
    (directory / f"{0:020d}.index").unlink()


def _damage_time_index_missing(directory: Path) -> None:
    (directory / f"{0:020d}.timeindex").unlink()


def _damage_index_past_the_log(directory: Path) -> None:
    with open(directory / f"{0:020d}.index", "ab") as f:
        f.write(OFFSET_ENTRY.pack(1000, 10**6))


def _damage_index_wrong_offset(directory: Path) -> None:
    path = directory / f"{0:020d}.index"
    raw = bytearray(path.read_bytes())
    rel, position = OFFSET_ENTRY.unpack_from(raw, len(raw) - OFFSET_ENTRY.size)
    OFFSET_ENTRY.pack_into(raw, len(raw) - OFFSET_ENTRY.size, rel + 1, position)
    path.write_bytes(raw)


def _damage_index_mid_batch(directory: Path) -> None:
    path = directory / f"{0:020d}.index"
    raw = bytearray(path.read_bytes())
    rel, position = OFFSET_ENTRY.unpack_from(raw, len(raw) - OFFSET_ENTRY.size)
    OFFSET_ENTRY.pack_into(raw, len(raw) - OFFSET_ENTRY.size, rel, position + 5)
    path.write_bytes(raw)


def _damage_time_index_ahead(directory: Path) -> None:
    with open(directory / f"{0:020d}.timeindex", "ab") as f:
        f.write(TIME_ENTRY.pack(10**12, 49))  # the last offset index entry is at 48


@pytest.mark.parametrize("damage, reason", [
    (_damage_tail_torn, "runs past the end of the file"),
    (_damage_tail_short, "7 trailing bytes"),
    (_damage_tail_offsets_backwards, "out of order"),
    (_damage_tail_bad_magic, "magic 1"),
    (_damage_index_missing, ".index missing"),
    (_damage_time_index_missing, ".timeindex missing"),
    (_damage_index_past_the_log, "points past the log"),
    (_damage_index_wrong_offset, "points at a batch with offset"),
    (_damage_index_mid_batch, "below the header size"),
    (_damage_time_index_ahead, "past the last offset index entry"),
])
def test_clean_reopen_falls_back_to_recovery_when_something_looks_wrong(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage, reason: str) -> None:
    config = LogConfig(index_interval_bytes=BATCH_SIZE * 3)
    original = tmp_path / "original"
    log = PartitionLog.open(original, config, 0)
    fill(log, 50)
    log.close()
    damage(original)
    clean_dir, full_dir = tmp_path / "clean", tmp_path / "full"
    shutil.copytree(original, clean_dir)
    shutil.copytree(original, full_dir)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        clean = PartitionLog.open(clean_dir, config, 0, clean_shutdown=True)
    [fallback] = [r.getMessage() for r in caplog.records if "cannot trust" in r.getMessage()]
    assert reason in fallback and str(clean_dir) in fallback
    full = PartitionLog.open(full_dir, config, 0)
    assert clean.log_end_offset == 50
    assert _observed(clean, [999, 1000, 1049, 1050]) == _observed(full, [999, 1000, 1049, 1050])
    assert _index_files(clean_dir) == _index_files(full_dir)
    clean.close()
    full.close()


def test_torn_tail_without_clean_shutdown_is_truncated_even_if_the_tail_parses(
        pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir)
    fill(log, 3)
    log.close()
    path = pdir / f"{0:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # the header still parses: only the CRC check of a full recovery sees it
    path.write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = PartitionLog.open(pdir, LogConfig(), 0, clean_shutdown=False)
    assert "CRC mismatch" in caplog.text
    assert log.log_end_offset == 2
    log.close()


def test_the_clean_shutdown_marker_is_taken_at_start_so_a_later_crash_gets_full_recovery(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from broker.cluster.cluster import Cluster
    from broker.config import BrokerConfig

    def start() -> Cluster:
        cluster = Cluster(BrokerConfig(), tmp_path)
        cluster.open_all()
        return cluster

    cluster = start()
    cluster.create_topic("t", 1)
    for _ in range(5):
        cluster.partition("t", 0).append(view(make_batch()), now_ms=0)
    cluster.close()
    marker = tmp_path / "meta" / "clean-shutdown"
    assert marker.exists()

    with caplog.at_level(logging.INFO):
        cluster = start()
    assert not marker.exists()
    assert "after a clean shutdown (index files trusted)" in caplog.text
    assert cluster.partition("t", 0).log.log_end_offset == 5
    cluster.partition("t", 0).append(view(make_batch()), now_ms=0)
    # A crash: no close(), and the last write was torn (its header parses, its CRC fails).
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    raw = bytearray(segment.read_bytes())
    raw[-1] ^= 0xFF
    segment.write_bytes(raw)

    caplog.clear()
    with caplog.at_level(logging.INFO):
        cluster = start()
        assert "after an unclean shutdown (active segments validated" in caplog.text
        assert "CRC mismatch" not in caplog.text  # not opened yet
        assert cluster.partition("t", 0).log.log_end_offset == 5  # opened (and recovered) on first use
    assert "CRC mismatch" in caplog.text
    cluster.close()


# recovery from a recovery point (recovery-point-offset-checkpoint) -----------------

@pytest.mark.parametrize("index_interval_bytes", [0, 250, 10**6])
@pytest.mark.parametrize("seed", [1, 2])
def test_recovery_from_a_recovery_point_gives_the_state_of_a_full_recovery(
        tmp_path: Path, index_interval_bytes: int, seed: int) -> None:
    rng = random.Random(seed)
    config = dict(segment_bytes=10**6, index_interval_bytes=index_interval_bytes, segment_ms=10**6)
    original = tmp_path / "original"
    log = open_log(original, **config)
    for _ in range(60):
        log.append(view(make_batch(rng.randint(1, 3), rng.choice([-1, rng.randrange(1000, 5000)]), 60)), now_ms=100)
    recovery_point = log.log_end_offset
    for _ in range(30):
        log.append(view(make_batch(rng.randint(1, 3), rng.randrange(1000, 6000), 60)), now_ms=100)
    log.close()
    with open(original / f"{0:020d}.log", "ab") as f:  # a torn tail beyond the recovery point
        f.write(make_batch(records=2)[:40])
    from_point, full_dir = tmp_path / "from-point", tmp_path / "full"
    shutil.copytree(original, from_point)
    shutil.copytree(original, full_dir)

    recovered = PartitionLog.open(from_point, LogConfig(**config), 200, recovery_point=recovery_point)
    full = PartitionLog.open(full_dir, LogConfig(**config), 200)
    probes = list(range(900, 6200, 97)) + [-1, 0]
    assert _observed(recovered, probes) == _observed(full, probes)
    assert recovered.size_bytes == full.size_bytes  # the torn tail is cut in both
    assert _index_files(from_point) == _index_files(full_dir)
    batch = make_batch(2, 7000, 60)
    assert recovered.append(view(batch), now_ms=300) == full.append(view(batch), now_ms=300)
    recovered.close()
    full.close()


def test_recovery_from_a_recovery_point_checks_every_batch_beyond_it(
        pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir, index_interval_bytes=0)
    fill(log, 5)
    log.close()
    path = pdir / f"{0:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[4 * BATCH_SIZE - 1] ^= 0xFF  # batch 3 (offset 3): its header still parses
    path.write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = PartitionLog.open(pdir, LogConfig(index_interval_bytes=0), 0, recovery_point=2)
    assert "CRC mismatch in the batch at offset 3" in caplog.text
    assert log.log_end_offset == 3
    assert spans(log.read(0, 1 << 20)) == [(0, 0), (1, 1), (2, 2)]
    log.close()


def test_what_lies_below_the_recovery_point_is_trusted(pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As in Kafka: below its recovery point a log was flushed and checked, so recovery
    does not read it again (a damaged batch there is not what a crash leaves)."""
    log = open_log(pdir, index_interval_bytes=0)
    fill(log, 5)
    log.close()
    path = pdir / f"{0:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[BATCH_SIZE - 1] ^= 0xFF  # batch 0
    path.write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = PartitionLog.open(pdir, LogConfig(index_interval_bytes=0), 0, recovery_point=4)
    assert "CRC mismatch" not in caplog.text
    assert log.log_end_offset == 5
    log.close()


def test_recovery_point_with_unusable_index_files_validates_the_whole_segment(
        pdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(pdir, index_interval_bytes=0)
    fill(log, 5)
    log.close()
    (pdir / f"{0:020d}.index").write_bytes(b"\x00" * 5)  # not a whole entry
    path = pdir / f"{0:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[BATCH_SIZE - 1] ^= 0xFF
    path.write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
        log = PartitionLog.open(pdir, LogConfig(index_interval_bytes=0), 0, recovery_point=4)
    assert "CRC mismatch in the batch at offset 0" in caplog.text
    assert log.log_end_offset == 0
    log.close()
