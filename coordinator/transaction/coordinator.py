"""The transaction coordinator (transaction versions 1 and 2) as a sans-IO state machine.

Handlers read the state and return ``Result(records, response, effects)``; they never
change it. The runtime appends ``records`` to the __transaction_state partition of the
transactional id, calls ``replay`` for each, answers with ``response`` and then carries
out ``effects`` (``SendMarkers``; when every marker is acknowledged it calls
``markers_written``). ``replay`` is also what rebuilds the state at load time. Because
appends to one partition are serialized, Kafka's "pending state" never exists here: a
handler always sees the outcome of every earlier append, and a failed append leaves the
state as it was (so a failed epoch fence is simply redone with the same epoch). A write
appended but not replicated to the ISR is undone with ``restore``, as Kafka clears the
pending state then.

What it hands back is defined here too: the responses, the effects (``SendMarkers``,
``ProducerIdTaken``) and ``TransactionLogRecord``, the records it appends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from coordinator.partitioning import partition_for
from coordinator.runtime import CoordinatorRecord, PartitionLoads, Result, Timer, TimerEvent, combined
from coordinator.transaction import log_codec
from coordinator.transaction.metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    InvalidTransition,
    ProducerFenced,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from protocol.names import CONSUMER_OFFSETS, TopicPartition


# -- what the coordinator hands back: responses, effects, the records it appends ----------

@dataclass(slots=True, unsafe_hash=True)  # not frozen, as CoordinatorRecord
class TransactionLogRecord(CoordinatorRecord):
    """A __transaction_state record as the coordinator produced it, with the metadata
    its value encodes (None for a tombstone).

    The metadata rides along in memory only, as Kafka's coordinator installs the
    transition it appended rather than reading it back: replay takes it as it is, and
    a load decodes the same metadata from the bytes. Only ``last_producer_epoch``
    differs then: Kafka does not persist it, so a record read back from disk has none
    (-1) and a KIP-360 retry that spans a coordinator move is fenced, exactly as on
    Kafka. The runtime must replay the objects it appended.
    """

    metadata: TransactionMetadata | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ProducerIdTaken:
    """A new producer id is in use: the broker's allocator must never hand it out again."""

    producer_id: int


class SendMarkers(NamedTuple):
    """Write COMMIT/ABORT markers to every partition, then call ``markers_written``.
    A NamedTuple: every transaction ends with one (see TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    topic_partitions: tuple[TopicPartition, ...]
    transaction_version: int = 0  # 2: the epoch was bumped for these markers (KIP-1228 check)


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitionsResponse:
    """AddPartitionsToTxn (v0-v3) and AddOffsetsToTxn: one error for the whole request."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class VerifyPartitionsResponse:
    """AddPartitionsToTxn v4+ VerifyOnly: an error per partition."""

    errors: dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    error: ErrorCode
    producer_id: int = -1  # v5 (transaction version 2): the producer's id and new epoch
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResponse:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transaction_states: tuple[ListedTransaction, ...] = field(default_factory=tuple)


# -- the coordinator ------------------------------------------------------------------

E = ErrorCode
S = TransactionState
FIRST_END_TXN_VERSION_OF_TV2 = 5  # EndTxn v5+ ends the transaction with transaction version 2
# What every transaction asks, looked up once: an enum member lookup costs more than the
# comparison it is for, and an answer without fields is the same value every time.
_CONCURRENT_TRANSACTIONS = E.concurrent_transactions
_ADDED = Result(response=AddPartitionsResponse(E.none))
_ENDED = EndTxnResponse(E.none)
_NOTHING = Result()
# The coordinator's timers (``timers``), by name.
TIMEOUT_ABORTS = "transaction timeouts"
ID_EXPIRATION = "transactional id expiration"
# A prepared transaction's markers are being written (Kafka holds the Complete state as
# pending from the prepare's append, or the load, until they are): an EndTxn v1 of its
# producer, commit or abort, is answered CONCURRENT_TRANSACTIONS and retried, never
# INVALID_TXN_STATE, which librdkafka makes fatal.
_MARKERS_PENDING = (S.PREPARE_COMMIT, S.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Kafka's settings, by their Kafka names, that the coordinator itself consults."""

    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000


@dataclass(slots=True)
class _PartitionState:
    coordinator_epoch: int
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)


def _fenced_error(api_version: int, first_version_with_producer_fenced: int) -> ErrorCode:
    """Clients older than KIP-588 know the fence only as INVALID_PRODUCER_EPOCH."""
    if api_version >= first_version_with_producer_fenced:
        return E.producer_fenced
    return E.invalid_producer_epoch


class TransactionCoordinator:
    # Each __transaction_state record holds its id's whole state, so a loader may replay
    # only the newest record per key.
    replays_latest_record_per_key = True

    def __init__(self, config: TransactionConfig) -> None:
        self.config = config
        self._log_partitions = config.transaction_state_log_num_partitions  # asked per request
        self._partitions: dict[int, _PartitionState] = {}
        # Whether each partition is loaded: the runtime that drives this coordinator keeps it.
        self.loads = PartitionLoads()

    # -- placement and inspection ------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self._log_partitions)

    def partition_of(self, record: CoordinatorRecord) -> int:
        """The __transaction_state partition a record of ours belongs to."""
        return self.partition_for(log_codec.decode_key(record.key))

    def coordinator_epoch(self, partition: int) -> int | None:
        state = self._partitions.get(partition)
        return None if state is None else state.coordinator_epoch

    def transaction_metadata(self, transactional_id: str) -> TransactionMetadata | None:
        state = self._partitions.get(self.partition_for(transactional_id))
        return None if state is None else state.transactions.get(transactional_id)

    def needs_producer_id(self, transactional_id: str) -> bool:
        """Whether an InitProducerId or EndTxn of ``transactional_id`` may hand out a new
        producer id: a new mapping, or an exhausted epoch that rotates the id. Only then
        is the broker's allocator asked for one, as Kafka's coordinator asks only then."""
        md = self.transaction_metadata(transactional_id)
        return md is None or md.is_producer_epoch_exhausted

    def transactions(self, partition: int) -> list[TransactionMetadata]:
        """Every transactional id the partition holds, whatever its state."""
        state = self._partitions.get(partition)
        return [] if state is None else list(state.transactions.values())

    def open_transactions(self, partition: int) -> list[TransactionMetadata]:
        """The partition's transactions neither Empty nor Complete* (nor Dead)."""
        state = self._partitions.get(partition)
        return [] if state is None else [md for md in state.transactions.values()
                                          if not md.state.is_idle and md.state is not S.DEAD]

    def snapshot(self) -> dict[int, tuple[int, bool, dict[str, TransactionMetadata]]]:
        """A copy of the whole state (metadata values are immutable), for comparisons."""
        return {
            p: (s.coordinator_epoch, self.loads.is_loading(p), dict(s.transactions))
            for p, s in self._partitions.items()
        }

    # -- partition ownership -----------------------------------------------------------

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Become coordinator for ``partition``: forget anything held, replay comes next."""
        self._partitions[partition] = _PartitionState(coordinator_epoch)

    def finish_loading(self, partition: int, now_ms: int = 0) -> list[Result]:
        """Serve the partition; roll forward transactions found half-completed, and fence
        and abort every Ongoing one whose timeout passed (by ``now_ms``) while nobody
        coordinated it, before the first request is served, as Kafka does at load."""
        state = self._partitions[partition]
        rolled_forward = [
            Result(effects=(self._send_markers(md, state.coordinator_epoch,
                                               md.state is S.PREPARE_COMMIT),))
            for md in state.transactions.values()
            if md.state.is_prepare
        ]
        return rolled_forward + self.abort_timed_out_transactions(now_ms, partition)

    def unload_partition(self, partition: int) -> list[Result]:
        """Forget the partition; markers already being sent still finish (their
        completion is then ignored: the partition's new coordinator rolls forward)."""
        self._partitions.pop(partition, None)
        return []

    def restore(self, transactional_id: str, written: TransactionMetadata,
                before: TransactionMetadata | None) -> bool:
        """Undoes a transition whose write did not reach the ISR, as Kafka clears the
        pending state: ``before`` comes back if ``written`` is still what is held (the
        partition was not reloaded meanwhile). Returns whether it did."""
        state = self._partitions.get(self.partition_for(transactional_id))
        if state is None or state.transactions.get(transactional_id) is not written:
            return False
        if before is None:
            del state.transactions[transactional_id]
        else:
            state.transactions[transactional_id] = before
        return True

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """__transaction_state holds no transactions of its own: never called."""

    def replay(self, record: CoordinatorRecord, offset: int, timestamp_ms: int,
               producer_id: int = NO_PRODUCER_ID) -> None:
        """Applies one record: the metadata it was written from when it was appended just
        now (a TransactionLogRecord), else what its bytes decode to (a load)."""
        md = record.metadata if record.__class__ is TransactionLogRecord else None
        if md is not None:
            state = self._partitions.get(self.partition_for(md.transactional_id))
            if state is not None:  # else the partition is no longer ours: the append raced an unload
                state.transactions[md.transactional_id] = md
            return
        try:
            transactional_id = log_codec.decode_key(record.key)
        except log_codec.UnknownKeyVersion:
            return  # another coordinator's record type: Kafka skips it too
        state = self._partitions.get(self.partition_for(transactional_id))
        if state is None:
            return  # partition no longer ours: the append raced an unload
        if record.value is None:
            state.transactions.pop(transactional_id, None)
            return
        state.transactions[transactional_id] = log_codec.metadata_from_value(
            transactional_id, log_codec.decode_value(record.value))

    # -- InitProducerId ----------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        api_version: int,
        now_ms: int,
        next_producer_id: int,
    ) -> Result[InitProducerIdResponse]:
        """``next_producer_id``: the id a new mapping or an id rotation gets. The broker
        allocates ids (reserving blocks on disk); a Result that used the id says so with
        a ``ProducerIdTaken`` effect, so an id is consumed only once its record is in."""
        if transactional_id is None:
            raise ValueError("a null transactional id is answered by the broker, not the coordinator")
        error = self.init_producer_id_request_error(transactional_id, transaction_timeout_ms, producer_id,
                                                    producer_epoch)
        if error is not None:
            return _init_error(error)
        coordinator_epoch, md = self._served(transactional_id)
        expected_given = producer_id != NO_PRODUCER_ID
        if md is None:
            # A new mapping: a fresh producer id whose first persisted epoch will be 0.
            md = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=next_producer_id,
                previous_producer_id=NO_PRODUCER_ID,
                next_producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
                last_producer_epoch=NO_PRODUCER_EPOCH,
                txn_timeout_ms=transaction_timeout_ms,
                state=S.EMPTY,
                topic_partitions=frozenset(),
                txn_start_timestamp_ms=-1,
                txn_last_update_timestamp_ms=now_ms,
            )
        # KIP-360 fencing comes before anything else, as in Kafka: a fenced producer is
        # told so even while markers are in flight.
        fenced = _fenced_error(api_version, 4)
        if expected_given and not (
            md.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == md.producer_id
            or (producer_id == md.previous_producer_id and is_epoch_exhausted(producer_epoch))
        ):
            return _init_error(fenced)
        if md.state.is_prepare:
            return _init_error(E.concurrent_transactions)
        if md.state is S.ONGOING:
            # Fence the running producer and abort its transaction; this epoch is never
            # handed out. The client retries and gets the next one (or a new producer id).
            aborting = md.prepare_fence_producer_epoch().prepare_abort_or_commit(
                S.PREPARE_ABORT, now_ms
            )
            return Result(
                records=(self._record(aborting),),
                response=InitProducerIdResponse(E.concurrent_transactions),
                effects=(self._send_markers(aborting, coordinator_epoch, commit=False),),
            )
        if md.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise AssertionError(f"{transactional_id!r} is in {md.state}, which is never stored")
        expected_epoch = producer_epoch if expected_given else None
        try:
            if md.is_producer_epoch_exhausted and expected_epoch in (None, md.producer_epoch):
                new = md.prepare_producer_id_rotation(
                    next_producer_id, transaction_timeout_ms, now_ms,
                    record_last_epoch=expected_given,
                )
            else:
                new = md.prepare_increment_producer_epoch(
                    transaction_timeout_ms, expected_epoch, now_ms
                )
        except ProducerFenced:
            return _init_error(fenced)
        except InvalidTransition:
            # Kafka's IllegalStateException ("Cannot allocate any more producer epochs"):
            # an exhausted epoch that is not the caller's own cannot be bumped.
            return _init_error(E.unknown_server_error)
        taken = (ProducerIdTaken(next_producer_id),) if new.producer_id == next_producer_id else ()
        return Result(
            records=(self._record(new),),
            response=InitProducerIdResponse(E.none, new.producer_id, new.producer_epoch),
            effects=taken,
        )

    def init_producer_id_request_error(self, transactional_id: str, transaction_timeout_ms: int,
                                       producer_id: int, producer_epoch: int) -> ErrorCode | None:
        """What an InitProducerId is answered before the id's state is looked at (Kafka
        checks these before asking whether it coordinates the id, so the service asks this
        before the runtime can refuse the request); None: nothing."""
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH) or transactional_id == "":
            return E.invalid_request
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return E.invalid_transaction_timeout
        return None

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        api_version: int,
        now_ms: int,
    ) -> Result[AddPartitionsResponse]:
        if not transactional_id:
            return Result(response=AddPartitionsResponse(E.invalid_request))
        _, md = self._served(transactional_id)
        error = self._check_producer(md, producer_id, producer_epoch, api_version, 2)
        if error is None and md.state.is_prepare:
            error = _CONCURRENT_TRANSACTIONS
        if error is not None:
            return Result(response=AddPartitionsResponse(error))
        wanted = frozenset(partitions)
        if md.state is TransactionState.ONGOING and wanted <= md.topic_partitions:
            return _ADDED  # nothing new to persist
        new = md.prepare_add_partitions(wanted, now_ms)
        return Result((self._record(new),), _ADDED.response)

    def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        api_version: int,
        now_ms: int,
    ) -> Result[AddPartitionsResponse]:
        offsets_partition = partition_for(group_id, self.config.offsets_topic_num_partitions)
        return self.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch,
            [(CONSUMER_OFFSETS, offsets_partition)], api_version, now_ms,
        )

    def verify_partitions_in_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Result[VerifyPartitionsResponse]:
        """KIP-890 verification (AddPartitionsToTxn v4+ VerifyOnly): never writes.

        A partition missing from the transaction is TRANSACTION_ABORTABLE, as Kafka 3.8+
        answers; the partition leader maps it to INVALID_TXN_STATE for older produce clients.
        """
        wanted = list(partitions)
        error, md = self._verifiable(transactional_id, producer_id, producer_epoch)
        if error is not None:
            errors = {tp: error for tp in wanted}
        else:
            errors = {
                tp: E.none if tp in md.topic_partitions else E.transaction_abortable
                for tp in wanted
            }
        return Result(response=VerifyPartitionsResponse(errors))

    def _verifiable(self, transactional_id: str, producer_id: int,
                    producer_epoch: int) -> tuple[ErrorCode | None, TransactionMetadata | None]:
        """Why a producer's ongoing transaction cannot be verified (None: it can), and its metadata."""
        if not transactional_id:
            return E.invalid_request, None
        error, md = self._lookup(transactional_id)
        if error is None:
            error = self._check_producer(md, producer_id, producer_epoch, api_version=4,
                                         first_fenced_version=2)
        if error is None and md.state.is_prepare:
            error = E.concurrent_transactions
        return error, md

    # -- EndTxn and marker completion --------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        api_version: int,
        now_ms: int,
        next_producer_id: int = NO_PRODUCER_ID,
    ) -> Result[EndTxnResponse]:
        """``next_producer_id``: the id a transaction version 2 end that exhausts the
        epoch rotates the producer to (taken with a ``ProducerIdTaken`` effect)."""
        if not transactional_id:
            return Result(response=EndTxnResponse(E.invalid_request))
        if api_version >= FIRST_END_TXN_VERSION_OF_TV2:
            return self._end_txn_v2(transactional_id, producer_id, producer_epoch, commit, now_ms,
                                    next_producer_id)
        coordinator_epoch, md = self._served(transactional_id)
        error = self._check_producer(md, producer_id, producer_epoch, api_version, 2)
        if error is not None:
            return Result(response=EndTxnResponse(error))
        if md.state is TransactionState.ONGOING:
            prepared = md.prepare_abort_or_commit(TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT, now_ms)
            return Result((self._record(prepared),), _ENDED, (self._send_markers(prepared, coordinator_epoch, commit),))
        if md.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return Result(response=EndTxnResponse(E.none))  # a retry of a finished EndTxn
        if md.state in _MARKERS_PENDING:
            return Result(response=EndTxnResponse(E.concurrent_transactions))
        return Result(response=EndTxnResponse(E.invalid_txn_state))

    def _end_txn_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int,
        next_producer_id: int,
    ) -> Result[EndTxnResponse]:
        """EndTxn v5, transaction version 2 (KIP-890 part 2), as Kafka 4.4's coordinator
        answers it. While the markers of an end are being written (PrepareCommit,
        PrepareAbort: Kafka holds the Complete state pending) every EndTxn is answered
        CONCURRENT_TRANSACTIONS, before its producer id and epoch are looked at, whichever
        epoch and result it names. Otherwise the epoch must match exactly, except for a
        retry of an end that already bumped it (the previous epoch, the transaction
        ended), which is answered with the current id and epoch. Ending bumps the epoch;
        an abort without a transaction is allowed and bumps it too. An end from the last
        epoch but one (exhausted) bumps to the last and rotates the producer id: the
        answer carries the new id at epoch 0, which the producer holds once the markers
        are written; a retry from the old id and epoch is answered with the new ones."""
        coordinator_epoch, md = self._served(transactional_id)
        if md is not None and md.state in _MARKERS_PENDING:
            return Result(response=EndTxnResponse(E.concurrent_transactions))
        ended = (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        retry_on_overflow = (md is not None and md.state in ended
                             and md.previous_producer_id == producer_id != md.producer_id
                             and producer_epoch == MAX_EPOCH - 1 and md.producer_epoch == 0)
        if (md is None or md.producer_id != producer_id) and not retry_on_overflow:
            return Result(response=EndTxnResponse(E.invalid_producer_id_mapping))
        retry = retry_on_overflow or (md.state in ended and producer_epoch == md.producer_epoch - 1)
        if producer_epoch != md.producer_epoch and not retry:
            return Result(response=EndTxnResponse(E.producer_fenced))
        current = EndTxnResponse(E.none, md.producer_id, md.producer_epoch)
        done, preparing = (
            (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT)
        )
        if md.state is done and retry:
            return Result(response=current)
        abort_without_txn = not commit and not retry and md.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        if (md.state is S.ONGOING and not retry) or abort_without_txn:
            rotating = md.is_producer_epoch_exhausted and next_producer_id != NO_PRODUCER_ID
            try:
                prepared = md.prepare_abort_or_commit(preparing, now_ms, transaction_version=2,
                                                      next_producer_id=next_producer_id if rotating else NO_PRODUCER_ID)
            except InvalidTransition:
                return Result(response=EndTxnResponse(E.unknown_server_error))
            # The answer is what the producer holds once the markers are written.
            after = prepared.prepare_complete(now_ms)
            return Result(
                records=(self._record(prepared),),
                response=EndTxnResponse(E.none, after.producer_id, after.producer_epoch),
                effects=(self._send_markers(prepared, coordinator_epoch, commit),
                         *((ProducerIdTaken(next_producer_id),) if rotating else ())),
            )
        return Result(response=EndTxnResponse(E.invalid_txn_state))

    def markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        coordinator_epoch: int | None = None,
    ) -> Result[None]:
        """Every marker is acknowledged: persist Complete*, unless the world moved on."""
        current_epoch, md = self._served(transactional_id)
        if md is None:
            return _NOTHING
        if coordinator_epoch is not None and coordinator_epoch != current_epoch:
            return _NOTHING
        if md.producer_id != producer_id or md.producer_epoch != producer_epoch:
            return _NOTHING
        if md.state is not (TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT):
            return _NOTHING
        return Result((self._record(md.prepare_complete(now_ms)),))

    # -- timers ------------------------------------------------------------------------

    def timers(self) -> tuple[Timer, ...]:
        """Kafka's two periodic tasks of the transaction coordinator: each timed-out
        transaction aborted as a write of its own (so that one write waiting for the
        ISR holds up no other), and each partition's idle ids tombstoned in one."""
        config = self.config
        return (
            Timer(TIMEOUT_ABORTS, lambda partition, now_ms: [
                TimerEvent(TIMEOUT_ABORTS, partition,
                           lambda t=transactional_id: self.abort_timed_out_transaction(t, now_ms), transactional_id)
                for transactional_id in self.timed_out_transactions(now_ms, partition)],
                every_ms=config.abort_timed_out_transaction_cleanup_interval_ms),
            Timer(ID_EXPIRATION, lambda partition, now_ms: [
                TimerEvent(ID_EXPIRATION, partition,
                           lambda: combined(self.expire_transactional_ids(now_ms, partition)))],
                every_ms=config.remove_expired_transaction_cleanup_interval_ms),
        )

    def abort_timed_out_transactions(self, now_ms: int, partition: int) -> list[Result]:
        """Fence and abort every Ongoing transaction of a served partition older than its
        own timeout."""
        state = self._partitions[partition]
        return [self._fence_and_abort(md, state.coordinator_epoch, now_ms)
                for md in state.transactions.values() if _timed_out(md, now_ms)]

    def timed_out_transactions(self, now_ms: int, partition: int) -> list[str]:
        """The ids of a served partition's Ongoing transactions older than their own timeout."""
        return [md.transactional_id for md in self._partitions[partition].transactions.values()
                if _timed_out(md, now_ms)]

    def abort_timed_out_transaction(self, transactional_id: str, now_ms: int) -> Result[ErrorCode]:
        """Fence and abort one transaction if it is (still) Ongoing past its timeout: the
        timer's event for one id, so that its write can wait for the ISR on its own."""
        coordinator_epoch, md = self._served(transactional_id)
        if md is None or not _timed_out(md, now_ms):
            return Result(response=E.invalid_txn_state)
        aborted = self._fence_and_abort(md, coordinator_epoch, now_ms)
        return Result(records=aborted.records, effects=aborted.effects, response=E.none)

    def abort_transaction(self, transactional_id: str, now_ms: int) -> Result[ErrorCode]:
        """Fence the producer and abort its ongoing transaction now, as its timeout
        would: an operator ending a transaction that hangs (the control service)."""
        coordinator_epoch, md = self._served(transactional_id)
        error = (E.transactional_id_not_found if md is None
                 else E.invalid_txn_state if md.state is not S.ONGOING else None)
        if error is not None:
            return Result(response=error)
        aborted = self._fence_and_abort(md, coordinator_epoch, now_ms)
        return Result(records=aborted.records, effects=aborted.effects, response=E.none)

    def _fence_and_abort(self, md: TransactionMetadata, coordinator_epoch: int, now_ms: int) -> Result[None]:
        aborting = md.prepare_fence_producer_epoch().prepare_abort_or_commit(S.PREPARE_ABORT, now_ms)
        return Result(records=(self._record(aborting),),
                      effects=(self._send_markers(aborting, coordinator_epoch, False),))

    def expire_transactional_ids(self, now_ms: int, partition: int) -> list[Result]:
        """Tombstone a served partition's idle ids (Empty/Complete*) untouched for
        transactional.id.expiration.ms."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        results = []
        for md in self._partitions[partition].transactions.values():
            if md.state.is_expiration_allowed and md.txn_last_update_timestamp_ms <= horizon:
                md.prepare_dead()  # asserts the transition is legal
                key = log_codec.encode_key(md.transactional_id)
                results.append(Result(records=(TransactionLogRecord(key, None),)))
        return results

    # -- admin -------------------------------------------------------------------------

    def describe_transactions(self, transactional_ids: Iterable[str]) -> tuple[DescribedTransaction, ...]:
        described = []
        for transactional_id in transactional_ids:
            if not transactional_id:
                described.append(DescribedTransaction(transactional_id, E.invalid_request))
                continue
            error, md = self._lookup(transactional_id)
            if error is None and md is None:
                error = E.transactional_id_not_found
            if error is not None:
                described.append(DescribedTransaction(transactional_id, error))
                continue
            described.append(DescribedTransaction(
                transactional_id=transactional_id,
                error=E.none,
                state=md.state.state_name,
                producer_id=md.producer_id,
                producer_epoch=md.producer_epoch,
                transaction_timeout_ms=md.txn_timeout_ms,
                transaction_start_time_ms=md.txn_start_timestamp_ms,
                topics=log_codec.partitions_by_topic(md.topic_partitions),
            ))
        return tuple(described)

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
        now_ms: int = 0,
    ) -> ListTransactionsResponse:
        if self.loads.loading():
            return ListTransactionsResponse(E.coordinator_load_in_progress)
        pattern = None
        if transactional_id_pattern:
            try:
                pattern = re.compile(transactional_id_pattern)
            except re.error:
                return ListTransactionsResponse(E.invalid_regular_expression)
        state_names = list(state_filters)
        wanted_states = {s for s in map(S.from_name, state_names) if s is not None}
        unknown = tuple(n for n in state_names if S.from_name(n) is None)
        producer_ids = set(producer_id_filters)
        listed = []
        for partition in self.loads.loaded():  # asked outside the runtime: the partitions served
            for md in self._partitions[partition].transactions.values():
                if producer_ids and md.producer_id not in producer_ids:
                    continue
                if state_names and md.state not in wanted_states:
                    continue
                if duration_filter_ms >= 0 and now_ms - md.txn_start_timestamp_ms <= duration_filter_ms:
                    continue
                if pattern is not None and pattern.fullmatch(md.transactional_id) is None:
                    continue
                listed.append(ListedTransaction(md.transactional_id, md.producer_id,
                                                md.state.state_name))
        return ListTransactionsResponse(E.none, unknown, tuple(listed))

    # -- helpers -----------------------------------------------------------------------

    def _served(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        """For the writes, which the runtime runs only on a partition it serves: the
        partition's coordinator epoch and the id's metadata (None: not mapped)."""
        state = self._partitions[self.partition_for(transactional_id)]
        return state.coordinator_epoch, state.transactions.get(transactional_id)

    def _lookup(self, transactional_id: str) -> tuple[ErrorCode | None, TransactionMetadata | None]:
        """For the reads asked outside the runtime (DescribeTransactions, the KIP-890
        verification), which Kafka checks per id: why the id's partition is not served
        here (None: it is), and the id's metadata."""
        partition = self.partition_for(transactional_id)
        refusal = self.loads.refusal(partition)
        if refusal is not None:
            return refusal, None
        return None, self._partitions[partition].transactions.get(transactional_id)

    @staticmethod
    def _check_producer(
        md: TransactionMetadata | None,
        producer_id: int,
        producer_epoch: int,
        api_version: int,
        first_fenced_version: int,
    ) -> ErrorCode | None:
        if md is None or md.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if md.producer_epoch != producer_epoch:
            return _fenced_error(api_version, first_fenced_version)
        return None

    @staticmethod
    def _record(md: TransactionMetadata) -> TransactionLogRecord:
        return TransactionLogRecord(log_codec.encode_key(md.transactional_id), log_codec.encode_metadata_value(md), md)

    @staticmethod
    def _send_markers(md: TransactionMetadata, coordinator_epoch: int, commit: bool) -> SendMarkers:
        return SendMarkers(md.transactional_id, md.producer_id, md.producer_epoch, coordinator_epoch, commit,
                           tuple(sorted(md.topic_partitions)), md.client_transaction_version)


def _timed_out(md: TransactionMetadata, now_ms: int) -> bool:
    return md.state is S.ONGOING and md.txn_start_timestamp_ms + md.txn_timeout_ms < now_ms


def _init_error(error: ErrorCode) -> Result[InitProducerIdResponse]:
    return Result(response=InitProducerIdResponse(error))
