"""The aborted-transaction index, one .txnindex per segment (Kafka's TransactionIndex):
lookups across segments, persistence, torn tails, and that it goes with its segment
(retention, truncation, cleaning), comes back by recovery, and that the per-partition
file of older versions is moved into the segments."""

from __future__ import annotations

import logging
import struct

from broker.log.cleaner import clean
from broker.log.partition import Partition
from broker.log.partition_log import LEGACY_TXN_INDEX_FILE, LogConfig, PartitionLog
from broker.log.segment import TXN_ENTRY, TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex, segment_path
from protocol import crc
from tests.unit.test_producer_state import NOW, data_batch

PID, OTHER = 1000, 2000


def _open(directory, **config) -> Partition:
    return Partition.open("t", 0, directory, LogConfig(**config), NOW)


def _abort(p: Partition, pid: int, seq: int = 0, count: int = 1) -> tuple[int, int]:
    """A transaction of one batch, aborted: (first offset, marker offset)."""
    first = p.append_from_client(data_batch(pid=pid, seq=seq, count=count, transactional=True), NOW).base_offset
    p.write_marker(pid, 0, False, 0, NOW)
    return first, p.log.log_end_offset - 1


def _txn_files(directory) -> dict[int, list[tuple]]:
    return {int(path.name.split(".")[0]): list(TXN_ENTRY.iter_unpack(path.read_bytes()))
            for path in sorted(directory.glob("*" + TXN_INDEX_SUFFIX))}


def test_collect_finds_transactions_with_records_in_the_range(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    for pid, first, last, lso in ((1, 0, 5, 3), (2, 3, 9, 10), (3, 20, 25, 26)):
        index.add(AbortedTxn(last, first, pid, lso))

    def collect(start, end):
        found = []
        return found, index.collect(start, end, found)

    assert collect(6, 10) == ([AbortedTxn(9, 3, 2, 10)], True)
    assert collect(0, 4)[0] == [AbortedTxn(5, 0, 1, 3), AbortedTxn(9, 3, 2, 10)]
    assert collect(10, 20)[0] == []  # 3 starts at 20: nothing of it below 20
    assert collect(10, 21) == ([AbortedTxn(25, 20, 3, 26)], True)
    assert collect(26, 100) == ([], False)  # later segments may hold what began below 100


def test_entries_survive_reopen_duplicates_are_ignored_and_a_torn_tail_is_cut(tmp_path, caplog):
    path = tmp_path / "00000000000000000010.txnindex"
    index = TransactionIndex(path, 10)
    assert not path.exists()  # made at the first abort
    assert index.add(AbortedTxn(12, 10, 7, 13))
    assert index.add(AbortedTxn(15, 14, 8, 16))
    index.close()
    assert path.read_bytes()[:TXN_ENTRY.size] == struct.pack(">hqqqq", 0, 7, 10, 12, 13)
    with open(path, "ab") as f:
        f.write(b"\x00" * 7)  # a torn third entry
    with caplog.at_level(logging.WARNING):
        again = TransactionIndex.load(path, 10)
    assert "dropping 7 bytes" in caplog.text
    assert not again.add(AbortedTxn(12, 10, 7, 13))  # the same marker replayed at start-up
    assert again.entries() == [AbortedTxn(12, 10, 7, 13), AbortedTxn(15, 14, 8, 16)]
    assert path.stat().st_size == 2 * TXN_ENTRY.size
    again.truncate_to(13)
    assert TransactionIndex.load(path, 10).entries() == [AbortedTxn(12, 10, 7, 13)]
    again.truncate_to(0)
    assert not path.exists()


def test_each_abort_is_indexed_in_the_segment_holding_its_marker(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory)
    first, marker = _abort(p, PID)  # 0, 1
    p.append_from_client(data_batch(pid=OTHER, seq=0, transactional=True), NOW)  # 2, open across the roll
    p.log.roll()  # segment 3
    _, other_marker = 2, p.log.log_end_offset
    p.write_marker(OTHER, 0, False, 0, NOW)  # 3
    assert _txn_files(directory) == {0: [(0, PID, 0, 1, 2)], 3: [(0, OTHER, 2, 3, 4)]}
    # a read of the first segment finds OTHER's abort in the next one
    assert p.aborted_overlapping(2, 3) == [AbortedTxn(3, 2, OTHER, 4)]
    assert [t.producer_id for t in p.aborted_overlapping(0, 4)] == [PID, OTHER]
    assert p.aborted_overlapping(4, 10) == []
    assert p.log.aborted_count() == 2
    p.log.delete_records_before(2)  # the log start passes PID's marker; its segment stays
    assert p.log.aborted_count() == 1
    p.close()
    assert [t.producer_id for t in _open(directory).aborted_overlapping(0, 4)] == [PID, OTHER]


def test_retention_deletes_a_segments_index_with_it(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory, retention_bytes=0)
    _abort(p, PID)
    p.log.roll()
    p.append_from_client(data_batch(pid=OTHER, seq=0), NOW)
    assert p.log.enforce_retention(NOW, p.high_watermark) >= 1
    assert not segment_path(directory, 0, TXN_INDEX_SUFFIX).exists()
    assert not p.log.any_aborted_ending_at_or_after(0)


def test_truncation_drops_entries_past_the_new_end(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory)
    _abort(p, PID)  # 0, 1
    _abort(p, OTHER)  # 2, 3
    p.log.roll()
    _abort(p, PID, seq=1)  # 4, 5: a segment of its own
    p.truncate_to(3)  # OTHER's marker at 3 goes, and segment 4 with its index
    assert _txn_files(directory) == {0: [(0, PID, 0, 1, 2)]}
    assert [t.producer_id for t in p.aborted_overlapping(0, 10)] == [PID]


def test_recovery_indexes_again_the_aborts_after_the_snapshot(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory)
    p.append_from_client(data_batch(pid=OTHER, seq=0), NOW)
    p.log.roll()  # a producer snapshot at 1
    _abort(p, PID)  # 1, 2
    p.log.flush()
    # a kill -9 that lost the index file: the log is all that is left
    segment_path(directory, 1, TXN_INDEX_SUFFIX).unlink()
    again = Partition.open("t", 0, directory, LogConfig(), NOW, clean_shutdown=False)
    assert again.aborted_overlapping(0, 3) == [AbortedTxn(2, 1, PID, 3)]
    assert _txn_files(directory) == {1: [(0, PID, 1, 2, 3)]}


def test_cleaning_keeps_the_entries_of_markers_it_keeps(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory, cleanup_policy="compact")
    key_batch = data_batch(pid=PID, seq=0, transactional=True)
    p.append_from_client(key_batch, NOW)  # 0
    p.write_marker(PID, 0, False, 0, NOW)  # 1
    p.log.roll()
    p.append_from_client(data_batch(pid=OTHER, seq=0, transactional=True), NOW)  # 2
    p.write_marker(OTHER, 0, False, 0, NOW)  # 3
    p.log.roll()
    p.append_from_client(data_batch(pid=OTHER, seq=1), NOW)  # 4, active
    clean(p.log, NOW)
    assert p.log.segment_base_offsets == [0, 4]  # two segments merged into one
    assert _txn_files(directory) == {0: [(0, PID, 0, 1, 2), (0, OTHER, 2, 3, 4)]}
    assert [t.producer_id for t in p.aborted_overlapping(0, 4)] == [PID, OTHER]


def _legacy_entry(pid: int, first: int, last: int) -> bytes:
    fields = struct.pack(">qqq", pid, first, last)
    return fields + struct.pack(">I", crc.crc32c(fields))


def test_the_per_partition_file_of_older_versions_is_moved_into_the_segments(tmp_path, caplog):
    directory = tmp_path / "t-0"
    p = _open(directory)
    _abort(p, PID)  # 0, 1
    p.log.roll()
    _abort(p, OTHER)  # 2, 3
    p.close()
    for path in directory.glob("*" + TXN_INDEX_SUFFIX):
        path.unlink()  # as an older version left it: no .txnindex files ...
    legacy = directory / LEGACY_TXN_INDEX_FILE  # ... but this one
    legacy.write_bytes(_legacy_entry(PID, 0, 1) + _legacy_entry(OTHER, 2, 3) + _legacy_entry(9, 50, 60)
                       + _legacy_entry(5, 0, 0)[:10])
    with caplog.at_level(logging.INFO, logger="broker.log.partition_log"):
        again = Partition.open("t", 0, directory, LogConfig(), NOW, clean_shutdown=True)
    assert not legacy.exists()
    assert f"moved 2 aborted transactions from {LEGACY_TXN_INDEX_FILE}" in caplog.text
    assert "(1 outside the log dropped)" in caplog.text
    assert _txn_files(directory) == {0: [(0, PID, 0, 1, -1)], 2: [(0, OTHER, 2, 3, -1)]}
    assert [t.producer_id for t in again.aborted_overlapping(0, 4)] == [PID, OTHER]
    assert again.aborted_transactions(0, again.log.read(0, 1 << 20)) == [
        {"producer_id": PID, "first_offset": 0}, {"producer_id": OTHER, "first_offset": 2}]


def _two_aborts_to_merge(directory) -> Partition:
    p = _open(directory, cleanup_policy="compact")
    for pid in (PID, OTHER):
        p.append_from_client(data_batch(pid=pid, seq=0, transactional=True), NOW)
        p.write_marker(pid, 0, False, 0, NOW)
        p.log.roll()
    p.append_from_client(data_batch(pid=OTHER, seq=1), NOW)  # the active segment
    return p


def test_a_crash_at_any_file_operation_of_a_clean_keeps_the_aborts_indexed(tmp_path, monkeypatch):
    from tests.unit.test_cleaner import Crash, count_file_ops

    expected = [AbortedTxn(1, 0, PID, 2), AbortedTxn(3, 2, OTHER, 4)]
    calls = count_file_ops(monkeypatch, None)
    clean(_two_aborts_to_merge(tmp_path / "ref").log, NOW)
    monkeypatch.undo()
    assert any(c.startswith("replace 00000000000000000000.txnindex") for c in calls)
    for crash_at in range(len(calls)):
        directory = tmp_path / f"crash-{crash_at}"
        log_ = _two_aborts_to_merge(directory).log
        count_file_ops(monkeypatch, crash_at)
        try:
            clean(log_, NOW)
        except Crash:
            pass
        monkeypatch.undo()
        # reopened from the files alone: no replay of producer state here
        reopened = PartitionLog.open(directory, LogConfig(cleanup_policy="compact"), NOW)
        assert reopened.aborted_overlapping(0, 5) == expected, f"crash at {crash_at} ({calls[crash_at]})"
        reopened.close()


def test_an_abort_marker_that_rolls_the_log_has_the_new_segments_index_opened_before_it(tmp_path):
    p = _open(tmp_path / "t-0", segment_bytes=150)
    p.append_from_client(data_batch(pid=PID, seq=0, count=3, transactional=True), NOW)
    rolled_to: list[int] = []
    p.log.roll_listeners.append(rolled_to.append)
    opened_at_roll: list[bool] = []
    p.log.roll_listeners.append(lambda base: opened_at_roll.append(p.log._active.txn_index._file.is_open))
    p.write_marker(PID, 0, False, 0, NOW)
    assert rolled_to == [p.log.log_end_offset - 1] and opened_at_roll == [True]
    # the old segment's file was made by the readying, empty
    assert _txn_files(tmp_path / "t-0") == {0: [], rolled_to[0]: [(0, PID, 0, rolled_to[0], rolled_to[0] + 1)]}
