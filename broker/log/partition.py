"""One partition as the leader sees it: its log, its producer state, and the waiters
of long-polling fetches.

The nodes share one copy of the log (followers are emulated: broker/cluster/replication.py), so
the high watermark is the log end offset once an append has reached the page cache. Producer state is snapshotted when a segment rolls and at
clean shutdown, and rebuilt at start-up from the newest snapshot plus the log after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from broker.log.leader_epochs import FILE_NAME as LEADER_EPOCH_FILE, LeaderEpochCache
from broker.log.partition_log import AppendInfo, LogConfig, PartitionLog, list_partition_dir
from broker.log.producer_snapshots import (delete_snapshots_after, encode_snapshot, list_snapshots,
                                              load_latest_snapshot, snapshot_path, write_snapshot,
                                              write_snapshot_bytes)
from broker.log.producer_state import CompletedTxn, ProducerStateManager
from broker.log.segment import AbortedTxn
from protocol.records import RecordBatch, build_control_batch, iter_batches

log = logging.getLogger(__name__)


class ProduceRejected(Exception):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


class Appended(NamedTuple):
    """A Produce partition's answer; a NamedTuple, as it is built per produced batch."""

    base_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True)
class RecoveryCheckpoint:
    partition: "Partition"
    end: int
    snapshot: bytes
    files: tuple[Path, ...]

    def write(self) -> list[Path]:
        """Writes the producer snapshot taken at ``end``, not fsynced; returns what must
        be fsynced for the log up to ``end`` and that snapshot to be durable (the
        caller's ``fsync_all`` pass, with every other checkpoint's). Any thread: segment
        files only grow meanwhile and are opened by path there (the event loop's
        descriptor pool may close its own meanwhile); a segment deleted meanwhile raises
        OSError and the recovery point stays where it was."""
        directory = self.partition.log.directory
        written = write_snapshot_bytes(self.snapshot, directory, self.end, fsync=False)
        return [*self.files, written, directory]


class Partition:
    def __init__(self, topic: str, index: int, log_: PartitionLog, producer_state: ProducerStateManager,
                 leader_epochs_on_disk: bool = True) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.producer_state = producer_state
        self._waiters: list[asyncio.Future] = []
        # Duplicates that matched a batch of an already-ended transaction (a client
        # reused a sequence after an abort): a metric, and a WARN each time.
        self.sequence_reuse_after_marker = 0
        # below it the log was flushed and checked (recovery-point-offset-checkpoint)
        self.recovery_point: int | None = None
        self.leader_epochs = LeaderEpochCache(log_.directory, leader_epochs_on_disk)
        log_.roll_listeners.append(self._snapshot_at_roll)
        # Told when the high watermark or the LSO may have moved (the event history's
        # ``offsets_moved``; None when nothing listens): with the appended batch, or
        # None for a marker, a truncation or a log start move.
        self.on_offsets_moved: Callable[[Partition, RecordBatch | None], None] | None = None

    def set_leader_epoch(self, epoch: int) -> None:
        """A new leader epoch: appends from now on carry it, and it starts at the log end
        (the first epoch a partition knows covers its whole log)."""
        self.log.leader_epoch = epoch
        first = not self.leader_epochs.entries
        self.leader_epochs.assign(epoch, self.log.log_start_offset if first else self.log.log_end_offset)

    def truncate_to(self, offset: int) -> int:
        """Drops the records from ``offset`` on (whole batches), as an unclean leader
        election loses them (the segments' aborted-transaction indexes with them): the
        producer state is rebuilt for the log that is left, as Kafka's truncateAndReload
        does. Returns the new log end offset."""
        self.log.truncate_to(offset)
        end = self.log.log_end_offset
        self.producer_state, _ = _load_producer_state(self.log, self.producer_state.emulate_older_than_2_5)
        if self.recovery_point is not None and self.recovery_point > end:
            self.recovery_point = end
        # epochs that began past the new end never had records here
        self.leader_epochs.entries = [(e, o) for i, (e, o) in enumerate(self.leader_epochs.entries)
                                      if i == 0 or o < end]
        self.wake_fetchers()
        if self.on_offsets_moved is not None:
            self.on_offsets_moved(self, None)
        return end

    @classmethod
    def open(cls, topic: str, index: int, directory: Path, config: LogConfig, now_ms: int,
             emulate_older_than_2_5: bool = False, clean_shutdown: bool = False,
             recovery_point: int | None = None) -> "Partition":
        # One listing of the directory serves every step: opening the log leaves the
        # snapshots and the leader-epoch file as they were.
        names = list_partition_dir(directory)
        log_ = PartitionLog.open(directory, config, now_ms, clean_shutdown, recovery_point, names)
        try:
            state, start = _load_producer_state(log_, emulate_older_than_2_5, names)
        except BaseException:
            log_.close()
            raise
        part = cls(topic, index, log_, state, LEADER_EPOCH_FILE in names)
        if clean_shutdown or start == log_.log_end_offset:
            part.recovery_point = log_.log_end_offset  # flushed at close, a snapshot there
        elif recovery_point is not None and recovery_point <= log_.log_end_offset:
            part.recovery_point = recovery_point  # still true: what lies below it is unchanged
        return part

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark.

        When DeleteRecords or retention has moved the log start past that offset, Kafka
        (updateFirstUnstableOffset) re-reads the offset metadata at the log start: the
        LSO becomes the base offset of the batch holding the log start offset."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        start = self.log_start_offset
        if first_unstable < start:
            first_unstable = next((b.base_offset for b in self.log.batches(start)), start)
        return min(first_unstable, self.high_watermark)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def aborted_transactions(self, fetch_offset: int, data: bytes) -> list[dict]:
        """The aborted transactions whose records fall in the batches just read."""
        if not self.log.any_aborted_ending_at_or_after(fetch_offset):
            return []  # the usual case: no need to walk the batches for their end
        end = fetch_offset
        for batch in iter_batches(data):
            end = batch.next_offset
        if end == fetch_offset:
            return []
        return [{"producer_id": t.producer_id, "first_offset": t.first_offset}
                for t in self.aborted_overlapping(fetch_offset, end)]

    def aborted_overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, end)."""
        return self.log.aborted_overlapping(start, end)

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                     now_ms: int, transaction_version: int = 0) -> None:
        """Appends a COMMIT/ABORT marker and ends the producer's transaction here.

        Raises ProduceRejected when the marker is fenced (older producer or
        coordinator epoch): nothing is appended then.
        """
        check = self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch, transaction_version)
        if check.error is not None:
            raise ProduceRejected(check.error, check.message)
        batch = RecordBatch(build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms), 0)
        if not commit:
            self.log.ready_for_abort()  # a failure for want of a descriptor comes before the marker
        info = self.log.append(batch, now_ms)
        completed = self.producer_state.complete_transaction(
            producer_id, producer_epoch, info.base_offset, commit, coordinator_epoch, now_ms)
        if completed is not None and completed.is_aborted:
            _index_abort(self.log, self.producer_state, completed)
        self.wake_fetchers()
        if self.on_offsets_moved is not None:
            self.on_offsets_moved(self, None)

    def log_start_moved(self) -> None:
        # the aborted-transaction index goes with the segments; reads start past the rest
        if self.on_offsets_moved is not None:  # an LSO below the new start moves up
            self.on_offsets_moved(self, None)

    def append_from_client(self, batch: RecordBatch, now_ms: int, refuse_sequence_reuse: bool = False) -> Appended:
        """Validates the batch against producer state, then appends it.

        A retried batch already in the log is answered with its original offset and
        not appended again, as Kafka does. When that "retry" matches a batch of a
        transaction that has already ended, the client has reused a sequence number
        after an abort and its new record is not written: logged and counted, and
        refused with OUT_OF_ORDER_SEQUENCE_NUMBER when ``refuse_sequence_reuse``.
        Raises ProduceRejected with the Kafka error name.
        """
        check = self.producer_state.check(batch, self.log.log_start_offset)
        if check.duplicate_of is not None:
            dup = check.duplicate_of
            if check.stale:
                self.sequence_reuse_after_marker += 1
                message = (f"producer {batch.producer_id} epoch {batch.producer_epoch} reused sequences "
                           f"{batch.base_sequence}..{batch.last_sequence} on {self.topic}-{self.index} for a "
                           f"transactional batch: they match the batch at offset {dup.first_offset}, whose "
                           "transaction has already ended")
                if refuse_sequence_reuse:
                    log.warning("%s; refused (transaction.refuse.sequence.reuse=true)", message)
                    raise ProduceRejected("OUT_OF_ORDER_SEQUENCE_NUMBER", message)
                log.warning("%s; answered as a duplicate, as Kafka does: the new records are NOT written", message)
            return Appended(dup.first_offset, -1, self.log.log_start_offset, duplicate=True)
        if check.error is not None:
            raise ProduceRejected(check.error, check.message)
        info = self.append(batch, now_ms)
        return Appended(info.base_offset, info.log_append_time, info.log_start_offset)

    def append(self, batch: RecordBatch, now_ms: int, leader_epoch: int | None = None) -> AppendInfo:
        """Appends a batch. ``leader_epoch``: the epoch the writer leads at; a stale one
        (a deposed leader's write) is refused with NOT_LEADER_OR_FOLLOWER."""
        if leader_epoch is not None and leader_epoch != self.log.leader_epoch:
            raise ProduceRejected("NOT_LEADER_OR_FOLLOWER",
                                  f"{self.topic}-{self.index} is at leader epoch {self.log.leader_epoch}; "
                                  f"the write was made at {leader_epoch}")
        info = self.log.append(batch, now_ms)
        self.producer_state.update(batch)
        self.wake_fetchers()
        if self.on_offsets_moved is not None:
            self.on_offsets_moved(self, batch)
        return info

    def checkpoint(self) -> RecoveryCheckpoint | None:
        """What makes the log end offset the next recovery point: the producer state
        encoded now and the segment files to fsync (``RecoveryCheckpoint.write``, off the
        event loop); None when nothing was appended since the last one."""
        end = self.log.log_end_offset
        if end == self.recovery_point:
            return None
        return RecoveryCheckpoint(self, end, encode_snapshot(self.producer_state), self.log.unflushed_files())

    def _snapshot_at_roll(self, new_segment_base: int) -> None:
        write_snapshot(self.producer_state, self.log.directory, new_segment_base)

    def close(self, sync: bool = True) -> list[Path]:
        """Closes the files, flushed, with a producer snapshot at the log end; with
        ``sync`` False nothing is fsynced here: the files and directories to fsync are
        returned, for one pass over every partition (``fsync_all``)."""
        self.wake_fetchers()
        unsynced: list[Path] = []
        try:
            # As Kafka's takeSnapshot, only when appends came after the newest snapshot
            # (snapshots past the log end are deleted at load): a clean shutdown of many
            # idle partitions would otherwise fsync a file for each.
            end = self.log.log_end_offset
            if end > 0 and not snapshot_path(self.log.directory, end).exists():
                unsynced += (write_snapshot_bytes(encode_snapshot(self.producer_state), self.log.directory, end,
                                                  fsync=sync), self.log.directory)
        except OSError:
            log.exception("could not write the producer state snapshot of %s-%d", self.topic, self.index)
        unsynced += self.log.close(sync)
        return [] if sync else unsynced

    def discard(self) -> None:
        """Closes files without a snapshot or an fsync: the partition is being deleted."""
        self.wake_fetchers()
        self.log.close(sync=False)

    # long-poll fetch support -------------------------------------------------
    def waiter(self) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def wake_fetchers(self) -> None:
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def forget_waiter(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass


def _index_abort(log_: PartitionLog, state: ProducerStateManager, completed: CompletedTxn) -> None:
    """Indexes an aborted transaction with the LSO once it ended (Kafka's
    ProducerStateManager.lastStableOffset(completedTxn)): the oldest transaction still
    open, else the offset after the marker."""
    first_unstable = state.first_unstable_offset()
    lso = completed.last_offset + 1 if first_unstable is None else first_unstable
    log_.add_aborted(completed.producer_id, completed.first_offset, completed.last_offset, lso)


def _load_producer_state(log_: PartitionLog, emulate_older_than_2_5: bool,
                         names: Iterable[str] | None = None) -> tuple[ProducerStateManager, int]:
    """The producer state of the log as it is: the newest snapshot not past its end,
    then the batches after it replayed (aborted transactions found again indexed);
    and the offset the replay started from. ``names``: the directory's listing, when
    the caller has one."""
    snapshots = list_snapshots(log_.directory, names)
    loaded = load_latest_snapshot(log_.directory, emulate_older_than_2_5, log_.log_end_offset, snapshots)
    delete_snapshots_after(log_.directory, log_.log_end_offset, snapshots)
    if loaded is None:
        state, start = ProducerStateManager(emulate_older_than_2_5), log_.log_start_offset
    else:
        state, start = loaded[0], max(loaded[1], log_.log_start_offset)
    if start < log_.log_end_offset:
        def on_completed(txn: CompletedTxn) -> None:
            if txn.is_aborted:
                _index_abort(log_, state, txn)

        state.rebuild(log_.batches(start), on_completed)
    return state, start
