"""Producer state (idempotence and transactions at the partition), after Kafka's
ProducerStateManagerTest where a case corresponds."""

from __future__ import annotations

import logging
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log.producer_state import (
    BatchMetadata,
    CompletedTxn,
    OpenTxn,
    ProducerDescription,
    ProducerStateManager,
)
from broker.log.producer_snapshots import list_snapshots, load_latest_snapshot, snapshot_path, write_snapshot
from protocol.records import CONTROL_FLAG, RecordBatch, build_control_batch

INT32_MAX = 0x7FFFFFFF
PID = 1000
NOW = 1_700_000_000_000


def data_batch(pid=PID, epoch=0, seq=0, count=1, transactional=False, ts=NOW, offset=0) -> RecordBatch:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, ts + i, None, b"value-%d" % i, headers=[])
    batch = RecordBatch(builder.build())
    batch.set_base_offset(offset)
    return batch


def marker_batch(pid=PID, epoch=0, commit=True, coordinator_epoch=0, offset=0) -> RecordBatch:
    batch = RecordBatch(build_control_batch(pid, epoch, commit, coordinator_epoch, NOW, base_offset=offset))
    assert batch.is_control and batch.crc_valid()
    return batch


def leader_change_batch(offset=0) -> RecordBatch:
    """A control batch that is not a transaction marker (control type 2)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )
    builder.append(0, NOW, struct.pack(">hh", 0, 2), b"\x00\x00", headers=[])
    buf = builder.build()
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | CONTROL_FLAG)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    batch = RecordBatch(buf)
    batch.set_base_offset(offset)
    return batch


class Partition:
    """A minimal in-memory log driving the manager the way the produce path will."""

    def __init__(self, state: ProducerStateManager | None = None) -> None:
        self.state = state or ProducerStateManager()
        self.batches: list[RecordBatch] = []
        self.log_end = 0
        self.log_start = 0

    def produce(self, batch: RecordBatch):
        check = self.state.check(batch, self.log_start)
        if check.error or check.duplicate_of:
            return check
        batch.set_base_offset(self.log_end)
        self.log_end = batch.next_offset
        self.batches.append(batch)
        self.state.update(batch)
        return check

    def marker(self, pid=PID, epoch=0, commit=True, coordinator_epoch=0, now_ms=NOW):
        batch = marker_batch(pid, epoch, commit, coordinator_epoch, offset=self.log_end)
        check = self.state.check_marker(pid, epoch, coordinator_epoch)
        if check.error:
            return check
        self.log_end += 1
        self.batches.append(batch)
        return self.state.complete_transaction(pid, epoch, batch.base_offset, commit, coordinator_epoch, now_ms)


def assert_error(check, name):
    assert check.error == name, check
    assert check.duplicate_of is None


# idempotence ------------------------------------------------------------------

def test_basic_id_mapping():
    p = Partition()
    assert p.produce(data_batch(seq=0)).accepted
    assert p.produce(data_batch(seq=1)).accepted
    entry = p.state.entry(PID)
    assert entry.producer_epoch == 0 and entry.last_seq == 1
    assert [b.first_offset for b in entry.batches] == [0, 1]
    # gap
    assert_error(p.produce(data_batch(seq=3)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    # stale epoch after a bump
    assert p.produce(data_batch(epoch=1, seq=0)).accepted
    assert_error(p.produce(data_batch(epoch=0, seq=2)), "INVALID_PRODUCER_EPOCH")


def test_non_idempotent_batches_are_always_accepted():
    p = Partition()
    assert p.produce(data_batch(pid=-1, epoch=-1, seq=-1)).accepted
    assert p.produce(data_batch(pid=-1, epoch=-1, seq=-1)).accepted
    assert p.state.entries() == {}
    assert p.log_end == 2


def test_duplicate_returns_original_offsets():
    p = Partition()
    p.produce(data_batch(pid=7, seq=0, count=2))  # offsets 0-1 for another producer
    p.produce(data_batch(seq=0, count=3))  # 2-4
    p.produce(data_batch(seq=3, count=2))  # 5-6
    retry = p.produce(data_batch(seq=0, count=3))
    assert retry.error is None and not retry.accepted
    assert retry.duplicate_of == BatchMetadata(0, 2, 2, 4, NOW + 2)
    retry = p.produce(data_batch(seq=3, count=2))
    assert (retry.duplicate_of.first_offset, retry.duplicate_of.last_offset) == (5, 6)
    assert p.log_end == 7  # nothing appended for the retries


def test_duplicate_needs_same_epoch_and_sequence_range():
    p = Partition()
    p.produce(data_batch(seq=0, count=3))
    # same first sequence, different length: not a duplicate, and out of order
    assert_error(p.produce(data_batch(seq=0, count=2)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    p.produce(data_batch(epoch=1, seq=0))
    # the epoch-0 batch is gone from the cache with the epoch change
    assert_error(p.produce(data_batch(epoch=0, seq=0, count=3)), "INVALID_PRODUCER_EPOCH")


def test_sixth_oldest_batch_resent_is_out_of_order():
    p = Partition()
    for seq in range(6):
        assert p.produce(data_batch(seq=seq)).accepted
    assert len(p.state.entry(PID).batches) == 5
    for seq in range(1, 6):  # the 5 cached batches are duplicates
        assert p.produce(data_batch(seq=seq)).duplicate_of.first_offset == seq
    assert_error(p.produce(data_batch(seq=0)), "OUT_OF_ORDER_SEQUENCE_NUMBER")


def test_sequence_gap_is_out_of_order():
    p = Partition()
    p.produce(data_batch(seq=0, count=5))
    check = p.produce(data_batch(seq=6))
    assert_error(check, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert "does not follow 4" in check.message
    assert p.produce(data_batch(seq=5)).accepted


def test_stale_epoch_is_invalid_producer_epoch():
    p = Partition()
    p.produce(data_batch(epoch=3, seq=0))
    assert_error(p.produce(data_batch(epoch=2, seq=1)), "INVALID_PRODUCER_EPOCH")
    assert_error(p.produce(data_batch(epoch=2, seq=0)), "INVALID_PRODUCER_EPOCH")


def test_new_epoch_with_sequence_zero_is_accepted():
    # librdkafka's idempotent producer bumps its epoch locally and restarts at 0.
    p = Partition()
    p.produce(data_batch(epoch=0, seq=0, count=10))
    assert p.produce(data_batch(epoch=1, seq=0)).accepted
    entry = p.state.entry(PID)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1 and entry.last_seq == 0


def test_reject_non_zero_sequence_for_direct_epoch_bump():
    p = Partition()
    p.produce(data_batch(epoch=0, seq=0, count=10))
    assert_error(p.produce(data_batch(epoch=1, seq=10)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert p.state.entry(PID).producer_epoch == 0


def test_producer_sequence_wrap_around():
    p = Partition()
    p.produce(data_batch(seq=INT32_MAX - 1, count=2))
    assert p.state.entry(PID).last_seq == INT32_MAX
    assert p.produce(data_batch(seq=0)).accepted


def test_producer_sequence_with_wrap_around_batch_record():
    p = Partition()
    p.produce(data_batch(seq=INT32_MAX - 9, count=20))
    assert p.state.entry(PID).last_seq == 9
    assert p.produce(data_batch(seq=INT32_MAX - 9, count=20)).duplicate_of.first_offset == 0
    assert p.produce(data_batch(seq=10)).accepted


def test_producer_sequence_invalid_wrap_around():
    p = Partition()
    p.produce(data_batch(seq=INT32_MAX - 1))
    assert_error(p.produce(data_batch(seq=0)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    p2 = Partition()
    p2.produce(data_batch(seq=INT32_MAX))
    assert_error(p2.produce(data_batch(seq=1)), "OUT_OF_ORDER_SEQUENCE_NUMBER")


def test_allow_non_zero_sequence_with_empty_state():
    # KIP-360 (Kafka >= 2.5): a producer without state may resume at any sequence.
    p = Partition()
    assert p.produce(data_batch(epoch=4, seq=1234)).accepted
    assert p.produce(data_batch(epoch=4, seq=1235)).accepted


def test_unknown_producer_id_with_empty_state_before_2_5():
    p = Partition(ProducerStateManager(emulate_older_than_2_5=True))
    check = p.produce(data_batch(seq=1234))
    assert_error(check, "UNKNOWN_PRODUCER_ID")
    assert p.log_end == 0
    assert p.produce(data_batch(seq=0)).accepted


def test_state_outlives_log_start_truncation():
    # KIP-360 prolonged retention: moving the log start forgets nothing.
    p = Partition()
    p.produce(data_batch(seq=0, count=3))
    p.log_start = p.log_end + 100
    assert p.produce(data_batch(seq=0, count=3)).duplicate_of.first_offset == 0
    assert_error(p.produce(data_batch(seq=7)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert p.produce(data_batch(seq=3)).accepted


def test_retention_forgets_producer_before_2_5():
    # Seed 002: with its records below the log start, the producer is unknown.
    p = Partition(ProducerStateManager(emulate_older_than_2_5=True))
    p.produce(data_batch(seq=0, count=3))
    assert p.produce(data_batch(seq=3)).accepted
    p.log_start = p.log_end
    assert_error(p.produce(data_batch(seq=4)), "UNKNOWN_PRODUCER_ID")
    assert p.produce(data_batch(seq=0)).accepted
    assert p.produce(data_batch(seq=1)).accepted


def test_partial_retention_before_2_5_keeps_producer():
    p = Partition(ProducerStateManager(emulate_older_than_2_5=True))
    p.produce(data_batch(seq=0, count=3))  # 0-2
    p.produce(data_batch(seq=3, count=3))  # 3-5
    p.log_start = 4
    # the evicted batch no longer deduplicates; the kept one does
    assert_error(p.produce(data_batch(seq=0, count=3)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert p.produce(data_batch(seq=3, count=3)).duplicate_of.first_offset == 3
    assert p.produce(data_batch(seq=6)).accepted


def test_prepare_update_does_not_mutate():
    state = ProducerStateManager()
    state.update(data_batch(seq=0))
    before = state.entries()
    for batch in (data_batch(seq=1), data_batch(seq=5), data_batch(epoch=1, seq=0), data_batch(seq=0)):
        state.check(batch, 0)
    assert state.entries() == before


# transactions at the partition -------------------------------------------------

def test_txn_first_offset_and_first_unstable_offset():
    p = Partition()
    p.produce(data_batch(pid=1, seq=0, count=2))  # 0-1 plain
    assert p.state.first_unstable_offset() is None
    p.produce(data_batch(pid=2, seq=0, transactional=True))  # 2
    p.produce(data_batch(pid=3, seq=0, transactional=True))  # 3
    p.produce(data_batch(pid=2, seq=1, transactional=True))  # 4
    assert p.state.has_open_transaction(2) and p.state.has_open_transaction(3)
    assert not p.state.has_open_transaction(1) and not p.state.has_open_transaction(99)
    assert p.state.entry(2).current_txn_first_offset == 2
    assert p.state.first_unstable_offset() == 2
    assert p.state.open_transactions() == [OpenTxn(2, 2), OpenTxn(3, 3)]
    assert p.marker(pid=2, commit=True) == CompletedTxn(2, 2, 5, is_aborted=False)
    assert p.state.first_unstable_offset() == 3
    assert p.marker(pid=3, commit=False) == CompletedTxn(3, 3, 6, is_aborted=True)
    assert p.state.first_unstable_offset() is None
    assert p.state.open_transactions() == []


def test_skip_empty_transactions():
    p = Partition()
    p.produce(data_batch(seq=0, transactional=True))
    assert p.marker(commit=True) is not None
    # a second marker for the same (now closed) transaction completes nothing
    assert p.marker(commit=True) is None
    assert p.state.first_unstable_offset() is None


def test_append_txn_marker_with_no_producer_state():
    state = ProducerStateManager()
    assert state.complete_transaction(PID, 2, 17, commit=True, coordinator_epoch=27, now_ms=NOW) is None
    entry = state.entry(PID)
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.batches) == (2, 27, ())
    assert entry.current_txn_first_offset is None and entry.last_timestamp == NOW
    assert state.map_end_offset == 18


def test_non_transactional_append_with_ongoing_transaction():
    p = Partition()
    p.produce(data_batch(seq=0, transactional=True))
    check = p.produce(data_batch(seq=1, transactional=False))
    assert_error(check, "INVALID_TXN_STATE")
    assert p.produce(data_batch(seq=1, transactional=True)).accepted


def test_control_record_bumps_producer_epoch():
    p = Partition()
    p.produce(data_batch(epoch=0, seq=0, transactional=True))
    completed = p.marker(epoch=3, commit=False)
    assert completed == CompletedTxn(PID, 0, 1, is_aborted=True)
    entry = p.state.entry(PID)
    assert entry.producer_epoch == 3 and entry.batches == () and entry.last_seq == -1
    assert_error(p.produce(data_batch(epoch=0, seq=1, transactional=True)), "INVALID_PRODUCER_EPOCH")
    assert p.produce(data_batch(epoch=3, seq=0, transactional=True)).accepted


def test_out_of_sequence_after_control_record_epoch_bump():
    p = Partition()
    p.produce(data_batch(epoch=0, seq=0, count=3, transactional=True))
    p.marker(epoch=1, commit=True)
    assert_error(p.produce(data_batch(epoch=1, seq=3, transactional=True)), "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert p.produce(data_batch(epoch=1, seq=0, transactional=True)).accepted


def test_producer_state_after_fencing_abort_marker():
    p = Partition()
    p.produce(data_batch(epoch=0, seq=0, transactional=True))
    # the coordinator fences the producer: abort marker with a bumped epoch
    p.marker(epoch=1, commit=False)
    assert not p.state.has_open_transaction(PID)
    assert p.state.entry(PID).producer_epoch == 1
    assert_error(p.produce(data_batch(epoch=0, seq=1, transactional=True)), "INVALID_PRODUCER_EPOCH")


@pytest.mark.parametrize("commit", [True, False])
def test_old_epoch_for_control_record(commit):
    p = Partition()
    p.produce(data_batch(epoch=5, seq=0, transactional=True))
    check = p.marker(epoch=4, commit=commit)
    assert_error(check, "INVALID_PRODUCER_EPOCH")
    assert p.state.has_open_transaction(PID)


@pytest.mark.parametrize("commit", [True, False])
def test_coordinator_fencing(commit):
    p = Partition()
    p.produce(data_batch(seq=0, transactional=True))
    p.marker(commit=True, coordinator_epoch=3)
    p.produce(data_batch(seq=1, transactional=True))
    assert_error(p.marker(commit=commit, coordinator_epoch=2), "TRANSACTION_COORDINATOR_FENCED")
    assert p.state.has_open_transaction(PID)
    # the same or a newer coordinator epoch completes it
    assert p.marker(commit=commit, coordinator_epoch=3) is not None
    assert p.state.entry(PID).coordinator_epoch == 3


def test_describe_producers():
    p = Partition()
    p.produce(data_batch(pid=1, epoch=2, seq=0, count=4, ts=NOW))
    p.produce(data_batch(pid=2, epoch=0, seq=0, transactional=True, ts=NOW + 5))
    p.marker(pid=2, commit=True, coordinator_epoch=9, now_ms=NOW + 6)
    p.produce(data_batch(pid=2, epoch=0, seq=1, transactional=True, ts=NOW + 7))
    assert p.state.describe() == [
        ProducerDescription(1, 2, 3, NOW + 3, -1, -1),  # the batch's max timestamp
        ProducerDescription(2, 0, 1, NOW + 7, 9, 6),
    ]


# expiration --------------------------------------------------------------------

def test_pid_expiration_timeout():
    p = Partition()
    p.produce(data_batch(pid=1, seq=0, ts=NOW))
    p.produce(data_batch(pid=2, seq=0, ts=NOW + 500))
    assert p.state.remove_expired(NOW + 999, 1000) == []
    assert p.state.remove_expired(NOW + 1000, 1000) == [1]
    assert p.state.entry(1) is None and p.state.entry(2) is not None
    # an expired producer is unknown: KIP-360 lets it resume at any sequence
    assert p.produce(data_batch(pid=1, seq=1)).accepted


def test_expiration_uses_the_batch_max_timestamp_not_the_clock():
    # Kafka's lastTimestamp is the batch's max timestamp: a producer writing day-old
    # CreateTime timestamps is expired at the next check, however recently it wrote.
    p = Partition()
    day = 86_400_000
    p.produce(data_batch(pid=1, seq=0, ts=NOW - day))
    p.produce(data_batch(pid=2, seq=0, count=3, ts=NOW - day))  # max timestamp NOW - day + 2
    assert p.state.entry(1).last_timestamp == NOW - day
    assert p.state.remove_expired(NOW, day) == [1]
    assert p.state.remove_expired(NOW + 2, day) == [2]


def test_rebuild_takes_activity_times_from_the_batches():
    p = Partition()
    p.produce(data_batch(pid=1, seq=0, ts=NOW - 50))
    p.produce(data_batch(pid=2, seq=0, transactional=True, ts=NOW - 40))
    p.batches.append(marker_batch(pid=2, offset=p.log_end))  # marker at NOW
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(p.batches)
    assert rebuilt.entry(1).last_timestamp == NOW - 50
    assert rebuilt.entry(2).last_timestamp == NOW


def test_producers_with_ongoing_transactions_dont_expire():
    p = Partition()
    p.produce(data_batch(seq=0, transactional=True, ts=NOW))
    assert p.state.remove_expired(NOW + 10_000_000, 1000) == []
    assert p.state.has_open_transaction(PID)
    p.marker(commit=False, now_ms=NOW + 10_000_000)
    assert p.state.remove_expired(NOW + 10_000_999, 1000) == []
    assert p.state.remove_expired(NOW + 10_001_000, 1000) == [PID]


# snapshots and rebuild -----------------------------------------------------------

def busy_partition() -> Partition:
    p = Partition()
    p.produce(data_batch(pid=1, seq=0, count=3))
    for seq in range(3, 10):
        p.produce(data_batch(pid=1, seq=seq))
    p.produce(data_batch(pid=2, epoch=1, seq=0, transactional=True))
    p.produce(data_batch(pid=3, epoch=0, seq=0, transactional=True))
    p.marker(pid=3, epoch=0, commit=True, coordinator_epoch=4)
    p.produce(data_batch(pid=2, epoch=1, seq=1, count=2, transactional=True))
    p.produce(data_batch(pid=4, epoch=0, seq=0, transactional=True))
    p.marker(pid=4, epoch=2, commit=False, coordinator_epoch=5)
    p.produce(data_batch(pid=5, epoch=7, seq=INT32_MAX - 1, count=4))
    return p


def test_read_write_snapshot(tmp_path):
    p = busy_partition()
    path = write_snapshot(p.state, tmp_path, p.log_end)
    assert path == snapshot_path(tmp_path, p.log_end) and path.name == f"{p.log_end:020d}.snapshot"
    loaded, offset = load_latest_snapshot(tmp_path)
    assert offset == p.log_end and loaded.map_end_offset == p.log_end
    assert loaded.entries() == p.state.entries()
    assert loaded.first_unstable_offset() == p.state.first_unstable_offset()
    assert not list(tmp_path.glob("*.tmp"))


def test_recover_from_snapshot_unfinished_transaction(tmp_path):
    p = Partition()
    p.produce(data_batch(seq=0, transactional=True))
    write_snapshot(p.state, tmp_path, p.log_end)
    loaded, _ = load_latest_snapshot(tmp_path)
    assert loaded.first_unstable_offset() == 0 and loaded.has_open_transaction(PID)
    # the transaction's retry is still recognised, and it can still be completed
    assert loaded.check(data_batch(seq=0, transactional=True), 0).duplicate_of.first_offset == 0
    assert loaded.complete_transaction(PID, 0, 1, True, 0) == CompletedTxn(PID, 0, 1, False)


def test_recover_from_snapshot_finished_transaction(tmp_path):
    p = Partition()
    p.produce(data_batch(seq=0, transactional=True))
    p.marker(commit=False, coordinator_epoch=3)
    write_snapshot(p.state, tmp_path, p.log_end)
    loaded, _ = load_latest_snapshot(tmp_path)
    assert loaded.first_unstable_offset() is None
    assert loaded.entry(PID).coordinator_epoch == 3


def test_recover_from_snapshot_empty_transaction(tmp_path):
    state = ProducerStateManager()
    state.complete_transaction(PID, 1, 0, True, 2, now_ms=NOW)
    write_snapshot(state, tmp_path, 1)
    loaded, _ = load_latest_snapshot(tmp_path)
    entry = loaded.entry(PID)
    assert (entry.producer_epoch, entry.batches, entry.coordinator_epoch) == (1, (), 2)


def test_take_snapshot_keeps_newest_two(tmp_path):
    state = ProducerStateManager()
    for offset in (5, 10, 20):
        state.update(data_batch(seq=offset, offset=offset - 1))
        write_snapshot(state, tmp_path, offset)
    assert [o for o, _ in list_snapshots(tmp_path)] == [10, 20]
    loaded, offset = load_latest_snapshot(tmp_path)
    assert offset == 20 and loaded.entry(PID).last_seq == 20


def test_no_snapshot(tmp_path):
    assert load_latest_snapshot(tmp_path) is None
    assert load_latest_snapshot(tmp_path / "missing") is None


def test_load_from_empty_snapshot_file(tmp_path, caplog):
    write_snapshot(ProducerStateManager(), tmp_path, 3)
    loaded, offset = load_latest_snapshot(tmp_path)
    assert offset == 3 and loaded.entries() == {}
    snapshot_path(tmp_path, 7).write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        loaded, offset = load_latest_snapshot(tmp_path)
    assert offset == 3
    assert "00000000000000000007.snapshot" in caplog.text


def test_load_from_truncated_snapshot_file(tmp_path, caplog):
    p = busy_partition()
    write_snapshot(p.state, tmp_path, 10)
    newest = write_snapshot(p.state, tmp_path, p.log_end)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) - 7])
    with caplog.at_level(logging.WARNING):
        loaded, offset = load_latest_snapshot(tmp_path)
    assert offset == 10 and loaded.entries() == p.state.entries()
    assert "unreadable producer snapshot" in caplog.text


def test_load_from_corrupt_snapshot_file(tmp_path, caplog):
    p = busy_partition()
    write_snapshot(p.state, tmp_path, 10)
    newest = write_snapshot(p.state, tmp_path, p.log_end)
    data = bytearray(newest.read_bytes())
    data[20] ^= 0xFF
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        _, offset = load_latest_snapshot(tmp_path)
    assert offset == 10
    assert "CRC mismatch" in caplog.text
    # with both unreadable there is nothing to load
    snapshot_path(tmp_path, 10).write_bytes(b"\x00\x01\x00")
    assert load_latest_snapshot(tmp_path) is None


def test_snapshot_beyond_log_end_is_ignored(tmp_path):
    p = busy_partition()
    write_snapshot(p.state, tmp_path, 4)
    write_snapshot(p.state, tmp_path, p.log_end)
    _, offset = load_latest_snapshot(tmp_path, log_end_offset=p.log_end - 1)
    assert offset == 4


def test_rebuild_from_batches_equals_incremental_state():
    p = busy_partition()
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(p.batches)
    assert rebuilt.entries() == p.state.entries()
    assert rebuilt.map_end_offset == p.log_end
    assert rebuilt.open_transactions() == p.state.open_transactions() == [OpenTxn(2, 10)]


def test_rebuild_after_snapshot_replays_only_the_tail(tmp_path):
    p = busy_partition()
    write_snapshot(p.state, tmp_path, p.log_end)
    snapshot_end = p.log_end
    p.produce(data_batch(pid=2, epoch=1, seq=3, transactional=True))
    p.marker(pid=2, epoch=1, commit=True, coordinator_epoch=6)
    p.produce(data_batch(pid=6, epoch=0, seq=0, count=2))
    loaded, offset = load_latest_snapshot(tmp_path)
    assert offset == snapshot_end
    # all batches are given; those the snapshot covers are skipped
    loaded.rebuild(p.batches)
    assert loaded.entries() == p.state.entries()
    assert loaded.first_unstable_offset() is None


def test_no_validation_on_first_entry_when_loading_log():
    # the log is the truth: replay accepts what check() would refuse
    state = ProducerStateManager(emulate_older_than_2_5=True)
    state.rebuild([data_batch(epoch=3, seq=50, offset=0), data_batch(epoch=3, seq=70, offset=1)])
    assert state.entry(PID).last_seq == 70


def test_rebuild_skips_other_control_batches(caplog):
    state = ProducerStateManager()
    with caplog.at_level(logging.WARNING):
        state.rebuild([leader_change_batch(offset=0), data_batch(seq=0, offset=1)])
    assert list(state.entries()) == [PID] and state.map_end_offset == 2
    assert "skipping control batch at offset 0" in caplog.text


def test_rebuild_applies_marker_coordinator_epoch():
    state = ProducerStateManager()
    state.rebuild([data_batch(seq=0, transactional=True, offset=0), marker_batch(epoch=0, commit=False, coordinator_epoch=12, offset=1)])
    assert not state.has_open_transaction(PID) and state.entry(PID).coordinator_epoch == 12
    assert state.check_marker(PID, 0, 11).error == "TRANSACTION_COORDINATOR_FENCED"


def test_remove_expired_pids_on_reload(tmp_path):
    p = Partition()
    p.produce(data_batch(pid=1, seq=0, ts=NOW))
    p.produce(data_batch(pid=2, seq=0, ts=NOW + 5000))
    write_snapshot(p.state, tmp_path, p.log_end)
    loaded, _ = load_latest_snapshot(tmp_path)
    assert loaded.remove_expired(NOW + 6000, 2000) == [1]
    assert list(loaded.entries()) == [2]


def test_snapshot_keeps_profile(tmp_path):
    write_snapshot(ProducerStateManager(), tmp_path, 0)
    loaded, _ = load_latest_snapshot(tmp_path, emulate_older_than_2_5=True)
    assert_error(loaded.check(data_batch(seq=5), 0), "UNKNOWN_PRODUCER_ID")


# --- KIP-890 verification and sequence reuse after a marker ------------------------------------


def _txn_then_abort(state: ProducerStateManager) -> None:
    """seq 0 at offset 0 and seq 1 at offset 1 in a transaction, ABORT marker at 2."""
    state.update(data_batch(seq=0, transactional=True, offset=0))
    state.update(data_batch(seq=1, transactional=True, offset=1))
    state.complete_transaction(PID, 0, 2, commit=False, coordinator_epoch=0)


def test_duplicate_of_a_batch_before_the_marker_is_stale():
    state = ProducerStateManager()
    _txn_then_abort(state)
    check = state.check(data_batch(seq=1, transactional=True), 0)
    assert check.duplicate_of.first_offset == 1 and check.stale


def test_duplicate_within_the_open_transaction_is_not_stale():
    state = ProducerStateManager()
    state.update(data_batch(seq=0, transactional=True, offset=0))
    check = state.check(data_batch(seq=0, transactional=True), 0)
    assert check.duplicate_of.first_offset == 0 and not check.stale


def test_idempotent_duplicate_is_not_stale():
    state = ProducerStateManager()
    state.update(data_batch(seq=0, offset=0))
    check = state.check(data_batch(seq=0), 0)
    assert check.duplicate_of is not None and not check.stale


def test_verification_blocks_sequences_above_the_lowest_seen_until_an_append():
    state = ProducerStateManager()
    _txn_then_abort(state)
    state.start_verification(PID, 2, 0, NOW)
    state.start_verification(PID, 3, 0, NOW)  # a higher one does not raise the bar
    assert state.verification(PID).lowest_seq == 2
    assert state.check(data_batch(seq=3, transactional=True), 0).error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert state.check(data_batch(seq=2, transactional=True), 0).accepted
    state.update(data_batch(seq=2, transactional=True, offset=3))
    assert state.verification(PID) is None
    assert state.check(data_batch(seq=3, transactional=True), 0).accepted


def test_verification_follows_a_new_epoch_and_ends_with_a_marker():
    state = ProducerStateManager()
    _txn_then_abort(state)
    state.start_verification(PID, 5, 0, NOW)
    state.start_verification(PID, 7, 1, NOW)
    assert (state.verification(PID).lowest_seq, state.verification(PID).epoch) == (7, 1)
    state.complete_transaction(PID, 1, 3, commit=False, coordinator_epoch=0)
    assert state.verification(PID) is None


def test_a_transaction_version_2_marker_of_the_verified_epoch_keeps_the_verification():
    """The previous transaction's TV2 marker carries the new epoch: the next transaction's
    first batch, verified (added) meanwhile at that epoch, may still be appended. A
    marker of another epoch, or any marker under transaction version 1, ends it."""
    state = ProducerStateManager()
    _txn_then_abort(state)
    verification = state.start_verification(PID, 0, 1, NOW, supports_epoch_bump=True)
    state.complete_transaction(PID, 1, 3, commit=True, coordinator_epoch=0)
    assert state.verification(PID) is verification
    state.complete_transaction(PID, 2, 4, commit=True, coordinator_epoch=0)
    assert state.verification(PID) is None
    state.start_verification(PID, 0, 2, NOW)  # transaction version 1
    state.complete_transaction(PID, 2, 5, commit=True, coordinator_epoch=0)
    assert state.verification(PID) is None


def test_no_verification_while_the_transaction_is_ongoing():
    state = ProducerStateManager()
    state.update(data_batch(seq=0, transactional=True, offset=0))
    state.start_verification(PID, 1, 0, NOW)
    assert state.verification(PID) is None


def test_lingering_verification_expires_with_producer_ids():
    state = ProducerStateManager()
    state.start_verification(PID, 4, 0, NOW)
    state.remove_expired(NOW + 10, 100)
    assert state.verification(PID) is not None
    state.remove_expired(NOW + 100, 100)
    assert state.verification(PID) is None


def test_transaction_version_2_markers_need_a_newer_epoch():
    p = Partition()
    p.produce(data_batch(epoch=3, seq=0, transactional=True))
    assert p.state.check_marker(PID, 3, 0, transaction_version=2).error == "INVALID_PRODUCER_EPOCH"
    assert p.state.check_marker(PID, 3, 0, transaction_version=1).error is None
    assert p.state.check_marker(PID, 2, 0, transaction_version=1).error == "INVALID_PRODUCER_EPOCH"
    assert p.state.check_marker(PID, 4, 0, transaction_version=2).error is None


def test_transaction_version_2_marker_resent_after_its_transaction_ended_is_accepted():
    # KAFKA-19999: the coordinator resends a TV2 marker (its first answer was lost) at the
    # epoch the first one wrote; no transaction is open, so it is a retry, not a zombie.
    p = Partition()
    p.produce(data_batch(epoch=3, seq=0, transactional=True))
    p.state.complete_transaction(PID, 4, 1, True, 0)
    assert p.state.check_marker(PID, 4, 0, transaction_version=2).error is None
    assert p.state.check_marker(PID, 3, 0, transaction_version=2).error == "INVALID_PRODUCER_EPOCH"
    # ...but a newer coordinator's fencing still applies, and an open transaction at that
    # epoch still needs a newer one
    assert p.state.check_marker(PID, 4, -5, transaction_version=2).error == "TRANSACTION_COORDINATOR_FENCED"
    p.produce(data_batch(epoch=4, seq=0, transactional=True, offset=2))
    assert p.state.check_marker(PID, 4, 0, transaction_version=2).error == "INVALID_PRODUCER_EPOCH"


def test_transaction_version_2_marker_at_the_last_epoch_is_accepted():
    p = Partition()
    p.produce(data_batch(epoch=0x7FFF, seq=0, transactional=True))
    assert p.state.check_marker(PID, 0x7FFF, 0, transaction_version=2).error is None


def test_an_open_transaction_of_an_older_epoch_is_not_ongoing_for_the_next_epoch():
    # What the produce path asks before skipping verification (Kafka's hasOngoingTransaction):
    # the next transaction's batch (TV2 bumped the epoch) must be verified and added.
    state = ProducerStateManager()
    state.update(data_batch(epoch=3, seq=0, transactional=True, offset=0))
    assert state.has_ongoing_transaction(PID, 3)
    assert not state.has_ongoing_transaction(PID, 4)
    state.start_verification(PID, 0, 4, NOW)
    assert state.verification(PID) is not None


# The produce path builds entries with one constructor call; this is the plain
# with_epoch + _replace form it replaced, as the reference it must match.
def _reference_update(entries: dict, verifications: set, batch: RecordBatch) -> None:
    from broker.log.producer_state import BATCHES_TO_RETAIN, ProducerStateEntry

    if batch.producer_id < 0:
        return
    entry = entries.get(batch.producer_id) or ProducerStateEntry(batch.producer_id)
    entry = entry.with_epoch(batch.producer_epoch)
    meta = BatchMetadata(batch.base_sequence, batch.last_sequence, batch.base_offset, batch.last_offset,
                         batch.max_timestamp)
    txn_first = entry.current_txn_first_offset
    if batch.is_transactional:
        verifications.discard(batch.producer_id)
        if txn_first is None:
            txn_first = batch.base_offset
    entries[batch.producer_id] = entry._replace(
        batches=(entry.batches + (meta,))[-BATCHES_TO_RETAIN:], current_txn_first_offset=txn_first,
        last_timestamp=batch.max_timestamp)


def _reference_complete(entries: dict, verifications: set, pid, epoch, offset, commit, coordinator_epoch, now):
    from broker.log.producer_state import ProducerStateEntry

    verifications.discard(pid)
    entry = entries.get(pid) or ProducerStateEntry(pid)
    completed = None
    if entry.current_txn_first_offset is not None:
        completed = CompletedTxn(pid, entry.current_txn_first_offset, offset, not commit)
    entry = entry.with_epoch(epoch)
    entries[pid] = entry._replace(current_txn_first_offset=None, coordinator_epoch=coordinator_epoch,
                                  last_timestamp=entry.last_timestamp if now is None else now)
    return completed


_steps = st.lists(st.tuples(
    st.sampled_from(["data", "txn", "marker", "verify"]),
    st.sampled_from([-1, 7, 8]),  # producer id (-1: not idempotent)
    st.integers(0, 2),  # epoch
    st.integers(1, 4),  # records
    st.booleans(),  # commit
    st.one_of(st.none(), st.integers(0, 10**6)),  # marker now_ms
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_update_and_markers_match_the_replace_based_reference(steps):
    state = ProducerStateManager()
    entries: dict = {}
    verifications: set = set()
    offset, seqs = 0, {}
    for kind, pid, epoch, count, commit, now in steps:
        if kind == "verify":
            if pid >= 0:
                state.start_verification(pid, 0, epoch, NOW)
                if not state.has_ongoing_transaction(pid, epoch):
                    verifications.add(pid)
            continue
        if kind == "marker":
            if pid < 0:
                continue
            got = state.complete_transaction(pid, epoch, offset, commit, 3, now)
            assert got == _reference_complete(entries, verifications, pid, epoch, offset, commit, 3, now)
            offset += 1
        else:
            seq = seqs.get((pid, epoch), 0)
            batch = data_batch(pid=pid, epoch=epoch if pid >= 0 else -1, seq=seq if pid >= 0 else -1, count=count,
                               transactional=kind == "txn" and pid >= 0, ts=NOW + offset, offset=offset)
            seqs[(pid, epoch)] = seq + count
            state.update(batch)
            _reference_update(entries, verifications, batch)
            offset += count
        assert state.entries() == entries
        assert set(state._verifications) == verifications
        assert state.map_end_offset == offset
