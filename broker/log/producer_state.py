"""Per-partition producer state: idempotent deduplication, sequence and epoch checks,
open transactions and the first unstable offset.

Sans-IO: time is passed in as ``now_ms``; snapshot files are broker/log/producer_snapshots.py's.
A producer's last activity is the max timestamp of its last batch (or marker), as in
Kafka, so a producer writing old CreateTime timestamps expires at the next check.

Use on the produce path::

    check = state.check(batch, log_start_offset)   # pure, before append
    if check.error: answer check.error
    elif check.duplicate_of: answer NONE with check.duplicate_of.first_offset
    else: append (assigns offsets), then state.update(batch)

Markers: ``check_marker`` before appending a COMMIT/ABORT batch, then
``complete_transaction`` with the offset it got (one check, before the append).

Transactional batches that start a transaction on the partition first call
``start_verification`` (KIP-890 part 1, as Kafka's VerificationStateEntry): until the
producer's next transactional append or marker, a batch whose first sequence is above
the lowest sequence seen while verifying is OUT_OF_ORDER_SEQUENCE_NUMBER. Kafka keeps
this in memory only, and so does this.

A duplicate whose stored batch belongs to a transaction that has since ended (a marker
follows it) is flagged ``stale``: the client reused a sequence after an abort, and
answering "duplicate" silently drops the new record (README "Differences from Apache
Kafka", sequence reuse after abort).

Profiles: the default follows Kafka >= 2.5 (KIP-360: state outlives log truncation,
an unknown producer may start at any sequence). ``emulate_older_than_2_5`` follows
Kafka 2.0-2.4: a producer whose batches all lie below the log start offset is
forgotten, and an unknown producer must start at sequence 0 or get
UNKNOWN_PRODUCER_ID (seed 002).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from protocol.records import (
    CONTROL_TYPE_COMMIT,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    InvalidBatch,
    RecordBatch,
    increment_sequence,
    read_control_record,
)

log = logging.getLogger(__name__)

BATCHES_TO_RETAIN = 5
INT32_MAX = 0x7FFFFFFF
INT16_MAX = 0x7FFF
NO_PRODUCER_EPOCH = -1
NO_COORDINATOR_EPOCH = -1


class BatchMetadata(NamedTuple):
    """One of a producer's last batches. This and ProducerStateEntry are NamedTuples, not
    frozen dataclasses: one of each is built per produced batch, and a frozen dataclass's
    __init__ sets each field through object.__setattr__ (about twice the cost)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateEntry(NamedTuple):
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()  # most recent last, at most 5
    current_txn_first_offset: int | None = None
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def with_epoch(self, epoch: int) -> ProducerStateEntry:
        """A new epoch starts a new sequence space: the batch cache is cleared."""
        if epoch == self.producer_epoch:
            return self
        return self._replace(producer_epoch=epoch, batches=())


@dataclass(frozen=True, slots=True)
class Check:
    """Outcome of ``check``: accepted (no error, no duplicate), a duplicate of a
    stored batch (answer NONE with its original offsets, append nothing), or a
    Kafka error name."""

    error: str | None = None
    message: str = ""
    duplicate_of: BatchMetadata | None = None
    # the duplicate lies in a transaction a marker has already ended
    stale: bool = False

    @property
    def accepted(self) -> bool:
        return self.error is None and self.duplicate_of is None


ACCEPT = Check()


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (one per marker write: a NamedTuple, as BatchMetadata)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class OpenTxn:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class ProducerDescription:
    """One row of DescribeProducers."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when no transaction is open


@dataclass(slots=True)
class Verification:
    """A transaction's first batch on this partition being verified (Kafka's
    VerificationStateEntry): the lowest sequence seen blocks higher ones until the
    producer appends transactionally or a marker ends its transaction."""

    lowest_seq: int
    epoch: int
    created_ms: int
    # transaction version 2: the previous transaction's marker carries this epoch and
    # does not end this verification (Kafka keeps the guard then too)
    supports_epoch_bump: bool = False

    def saw(self, seq: int, epoch: int) -> None:
        if epoch == self.epoch and seq < self.lowest_seq:
            self.lowest_seq = seq
        if epoch > self.epoch:
            self.epoch, self.lowest_seq = epoch, seq


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _error(name: str, message: str) -> Check:
    return Check(error=name, message=message)


class ProducerStateManager:
    def __init__(self, emulate_older_than_2_5: bool = False) -> None:
        self.emulate_older_than_2_5 = emulate_older_than_2_5
        self._producers: dict[int, ProducerStateEntry] = {}
        self._verifications: dict[int, Verification] = {}
        # Next log offset not yet reflected in this state (snapshot/rebuild bookkeeping).
        self.map_end_offset = 0

    # queries -------------------------------------------------------------
    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def entries(self) -> dict[int, ProducerStateEntry]:
        return dict(self._producers)

    def forget(self, producer_id: int) -> bool:
        """Drops a producer's state (a data-loss fault); False if there was none."""
        self._verifications.pop(producer_id, None)
        return self._producers.pop(producer_id, None) is not None

    def has_open_transaction(self, producer_id: int) -> bool:
        e = self._producers.get(producer_id)
        return e is not None and e.current_txn_first_offset is not None

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        e = self._producers.get(producer_id)
        return e is not None and e.current_txn_first_offset is not None and e.producer_epoch == producer_epoch

    def start_verification(self, producer_id: int, first_seq: int, epoch: int, now_ms: int,
                           supports_epoch_bump: bool = False) -> Verification | None:
        """Called for each transactional batch before it is appended
        (UnifiedLog.maybeStartTransactionVerification): None when the producer has an
        ongoing transaction here at this epoch, else the verification the coordinator's
        answer is for. The batch may be appended only while it is still the producer's
        (``verification``): a marker or another transactional append in between ends it."""
        if self.has_ongoing_transaction(producer_id, epoch):
            return None
        entry = self._verifications.get(producer_id)
        if entry is None:
            entry = self._verifications[producer_id] = Verification(first_seq, epoch, now_ms, supports_epoch_bump)
        else:
            entry.saw(first_seq, epoch)
        return entry

    def verification(self, producer_id: int) -> Verification | None:
        return self._verifications.get(producer_id)

    def open_transactions(self) -> list[OpenTxn]:
        txns = [
            OpenTxn(e.producer_id, e.current_txn_first_offset)
            for e in self._producers.values()
            if e.current_txn_first_offset is not None
        ]
        return sorted(txns, key=lambda t: t.first_offset)

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction; the LSO is this or the high watermark."""
        offsets = [e.current_txn_first_offset for e in self._producers.values() if e.current_txn_first_offset is not None]
        return min(offsets) if offsets else None

    def describe(self) -> list[ProducerDescription]:
        return [
            ProducerDescription(
                producer_id=e.producer_id,
                producer_epoch=e.producer_epoch,
                last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=-1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            )
            for e in sorted(self._producers.values(), key=lambda e: e.producer_id)
        ]

    # produce path --------------------------------------------------------
    def _visible_entry(self, producer_id: int, log_start_offset: int) -> ProducerStateEntry | None:
        """The entry as Kafka 2.0-2.4 saw it: they dropped batches, and then producers, that
        retention moved below the log start (KIP-360 "prolonged retention" removed this)."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.current_txn_first_offset is not None or not entry.batches:
            return entry
        kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
        if not kept:
            return None
        return entry._replace(batches=kept)

    def check(self, batch: RecordBatch, log_start_offset: int) -> Check:
        """Validates a data batch before it is appended. Pure."""
        h = batch.header  # hot path: the fields read once, not through the batch's properties
        pid = h.producer_id
        if pid < 0:
            return ACCEPT
        epoch = h.producer_epoch
        first_seq = h.base_sequence
        if self.emulate_older_than_2_5:
            entry = self._visible_entry(pid, log_start_offset)
        else:
            entry = self._producers.get(pid)
        if entry is None:
            if self.emulate_older_than_2_5 and first_seq != 0:
                return _error(
                    "UNKNOWN_PRODUCER_ID",
                    f"no state for producer {pid} (its records may have been removed by retention); sequence {first_seq} != 0",
                )
            return ACCEPT  # KIP-360: an unknown producer may resume at any sequence

        last_seq = NO_SEQUENCE if first_seq == NO_SEQUENCE else increment_sequence(first_seq, h.last_offset_delta)
        dup = entry.find_duplicate(epoch, first_seq, last_seq)
        if dup is not None:
            txn_start = entry.current_txn_first_offset
            stale = bool(h.attributes & TRANSACTIONAL_FLAG) and (txn_start is None or dup.first_offset < txn_start)
            return Check(duplicate_of=dup, stale=stale)

        if epoch < entry.producer_epoch:
            return _error(
                "INVALID_PRODUCER_EPOCH",
                f"producer {pid} epoch {epoch} is older than the current epoch {entry.producer_epoch}",
            )
        verifying = self._verifications.get(pid)
        if verifying is not None and first_seq > verifying.lowest_seq:
            return _error(
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                f"producer {pid}: sequence {first_seq} is above {verifying.lowest_seq}, the lowest sequence "
                "seen while verifying its transaction on this partition",
            )
        if epoch != entry.producer_epoch:
            # Also covers librdkafka's idempotent producer, which bumps its epoch locally
            # and restarts at sequence 0.
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                return _error(
                    "OUT_OF_ORDER_SEQUENCE_NUMBER",
                    f"producer {pid} new epoch {epoch} must start at sequence 0, got {first_seq}",
                )
        elif not in_sequence(entry.last_seq, first_seq):
            return _error(
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {entry.last_seq}",
            )

        if entry.current_txn_first_offset is not None and not h.attributes & TRANSACTIONAL_FLAG:
            return _error(
                "INVALID_TXN_STATE",
                f"non-transactional write from producer {pid} while its transaction is open",
            )
        return ACCEPT

    def update(self, batch: RecordBatch) -> None:
        """Records a data batch appended at its (now assigned) offsets. No validation:
        this is also the replay path. The batch's max timestamp is the producer's last
        activity (Kafka's lastTimestamp), whatever the broker's clock says."""
        # Hot path (every produced batch): header fields read once, the new entry built
        # with one constructor call rather than with_epoch + _replace.
        h = batch.header
        base_offset = batch.base_offset
        last_offset = base_offset + h.last_offset_delta
        if last_offset >= self.map_end_offset:
            self.map_end_offset = last_offset + 1
        pid = h.producer_id
        if pid < 0:
            return
        epoch = h.producer_epoch
        base_seq = h.base_sequence
        last_seq = NO_SEQUENCE if base_seq == NO_SEQUENCE else increment_sequence(base_seq, h.last_offset_delta)
        meta = BatchMetadata(base_seq, last_seq, base_offset, last_offset, h.max_timestamp)
        entry = self._producers.get(pid)
        if entry is None:
            batches, txn_first, coordinator_epoch = (meta,), None, NO_COORDINATOR_EPOCH
        else:
            txn_first, coordinator_epoch = entry.current_txn_first_offset, entry.coordinator_epoch
            if entry.producer_epoch != epoch:  # a new epoch starts a new sequence space
                batches = (meta,)
            else:
                batches = entry.batches + (meta,)
                if len(batches) > BATCHES_TO_RETAIN:
                    batches = batches[-BATCHES_TO_RETAIN:]
        if h.attributes & TRANSACTIONAL_FLAG:
            if self._verifications:
                self._verifications.pop(pid, None)
            if txn_first is None:
                txn_first = base_offset
        self._producers[pid] = ProducerStateEntry(pid, epoch, batches, txn_first, coordinator_epoch,
                                                  h.max_timestamp)

    # transaction markers ---------------------------------------------------
    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     transaction_version: int = 0) -> Check:
        """Validates a COMMIT/ABORT marker before it is appended. Pure.

        Transaction version 2 coordinators bump the epoch before writing markers, so a
        TV2 marker must carry a newer epoch than the partition has seen (KIP-1228); older
        versions' markers carry the transaction's own epoch. A TV2 marker resent at the
        epoch of the marker already written (no transaction open), or at the last epoch
        there is, is a retry and is written again (KAFKA-19999)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return ACCEPT
        if transaction_version >= 2 and producer_epoch == entry.producer_epoch and \
                entry.current_txn_first_offset is not None and producer_epoch != INT16_MAX:
            return _error(
                "INVALID_PRODUCER_EPOCH",
                f"TV2 marker for producer {producer_id} has epoch {producer_epoch}, not newer than "
                f"{entry.producer_epoch}",
            )
        if producer_epoch < entry.producer_epoch:
            return _error(
                "INVALID_PRODUCER_EPOCH",
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return _error(
                "TRANSACTION_COORDINATOR_FENCED",
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )
        return ACCEPT

    def complete_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_offset: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int | None = None,
    ) -> CompletedTxn | None:
        """Applies a COMMIT/ABORT marker appended at ``marker_offset`` (``check_marker``
        accepted it before the append; replay applies stored markers unchecked).

        Returns the completed transaction, or None when the producer had none open
        (an empty transaction changes neither the aborted index nor the LSO).
        ``now_ms`` refreshes the producer's activity time for expiration.
        """
        if marker_offset >= self.map_end_offset:
            self.map_end_offset = marker_offset + 1
        if self._verifications:
            verifying = self._verifications.get(producer_id)
            if verifying is not None and not (verifying.supports_epoch_bump and verifying.epoch == producer_epoch):
                del self._verifications[producer_id]
        entry = self._producers.get(producer_id)
        completed = None
        if entry is None:
            batches, last_timestamp = (), -1
        else:
            if entry.current_txn_first_offset is not None:
                completed = CompletedTxn(producer_id, entry.current_txn_first_offset, marker_offset, not commit)
            # a new epoch starts a new sequence space: the batch cache is cleared
            batches = entry.batches if entry.producer_epoch == producer_epoch else ()
            last_timestamp = entry.last_timestamp
        self._producers[producer_id] = ProducerStateEntry(
            producer_id, producer_epoch, batches, None, coordinator_epoch,
            last_timestamp if now_ms is None else now_ms)
        return completed

    # expiration ------------------------------------------------------------
    def remove_expired(self, now_ms: int, producer_id_expiration_ms: int) -> list[int]:
        """Forgets producers idle for producer.id.expiration.ms; never one with an open
        transaction. Log truncation never removes state (KIP-360)."""
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= producer_id_expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        for pid in [p for p, v in self._verifications.items() if now_ms - v.created_ms >= producer_id_expiration_ms]:
            del self._verifications[pid]
        return sorted(expired)

    # recovery --------------------------------------------------------------
    def rebuild(self, batches: Iterable[RecordBatch],
                on_completed: Callable[[CompletedTxn], None] | None = None) -> None:
        """Replays stored batches that this state does not cover yet (those ending at
        or after ``map_end_offset``), without validation: the log is the truth.

        Activity times come from the batches' timestamps, as they did when the batches
        were appended. ``on_completed`` sees every transaction a replayed marker
        completes (to rebuild the aborted index).
        """
        for batch in batches:
            if batch.last_offset < self.map_end_offset:
                continue
            if not batch.is_control:
                self.update(batch)
                continue
            self.map_end_offset = max(self.map_end_offset, batch.last_offset + 1)
            try:
                control_type, coordinator_epoch = read_control_record(batch)
            except InvalidBatch as e:
                log.warning("skipping control batch at offset %d: %s", batch.base_offset, e)
                continue
            commit = control_type == CONTROL_TYPE_COMMIT
            completed = self.complete_transaction(
                batch.producer_id, batch.producer_epoch, batch.base_offset, commit, coordinator_epoch,
                batch.max_timestamp
            )
            if completed is not None and on_completed is not None:
                on_completed(completed)

    @classmethod
    def from_entries(cls, entries: Iterable[ProducerStateEntry], map_end_offset: int,
                     emulate_older_than_2_5: bool = False) -> ProducerStateManager:
        """A state as a snapshot recorded it (the log is replayed from ``map_end_offset``)."""
        manager = cls(emulate_older_than_2_5)
        manager._producers = {e.producer_id: e for e in entries}
        manager.map_end_offset = map_end_offset
        return manager
