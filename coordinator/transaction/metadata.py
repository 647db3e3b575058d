"""One transactional id's coordinator state: the states (with the ids persisted in
__transaction_state and the names Kafka prints), which moves between them are legal,
and the pure transitions.

Every ``prepare_*`` helper returns the metadata the next log record will carry, or raises:
``InvalidTransition`` for a move the state machine forbids (a coordinator bug, never a
client error) and ``ProducerFenced`` when a KIP-360 caller presents a fenced epoch.
Nothing here mutates; the coordinator persists the returned value and replay installs it.
The metadata is an immutable record (a NamedTuple): every transition builds one, and a
tuple is built in one step where a frozen dataclass sets each of its twelve fields
through ``object.__setattr__``.
Rules follow Kafka's TransactionMetadata for transaction versions 1 and 2 (KIP-890 part 2:
the end of every transaction bumps the producer epoch).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from protocol.names import TopicPartition


class TransactionState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, state_name: str) -> None:
        self.id = state_id
        self.state_name = state_name
        # Set below, once every member exists.
        self.is_prepare = False
        self.is_idle = False  # Empty or Complete*: no transaction open or completing
        self.is_expiration_allowed = False  # only idle ids may expire
        self.valid_previous_states: frozenset[TransactionState] = frozenset()

    # Members are singletons: identity hashing is right, and it is C code where Enum's
    # hash of the member name is a Python call (members key dicts and sets per request).
    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self.state_name

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        try:
            return _BY_ID[state_id]
        except KeyError:
            raise ValueError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state Kafka calls ``name`` (ListTransactions state filters), or None."""
        return _BY_NAME.get(name)


S = TransactionState
_BY_ID = {s.id: s for s in S}
_BY_NAME = {s.state_name: s for s in S}

# Kafka's rules; PrepareAbort after Empty/Complete* is transaction version 2's abort
# without a transaction (EndTxn v5 only asks for it).
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
for _state in S:
    _state.is_prepare = _state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
    _state.is_idle = _state.is_expiration_allowed = _state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    _state.valid_previous_states = _VALID_PREVIOUS[_state]
del S, _state


NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka stops handing out epochs at MAX-1 so the coordinator can always fence once more."""
    return epoch >= MAX_EPOCH - 1


_NO_PARTITIONS = frozenset()


class InvalidTransition(Exception):
    """A transition the state machine does not allow from the current state."""


class ProducerFenced(Exception):
    """The epoch a producer presented is neither the current nor the last one."""


class TransactionMetadata(NamedTuple):
    transactional_id: str
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    # Epoch handed out before the last KIP-360 bump; lets a retried InitProducerId be
    # answered again. Kafka keeps it in memory only: it is not in the log value.
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    client_transaction_version: int = 0

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state.is_prepare or self.state is TransactionState.ONGOING

    # -- transitions -------------------------------------------------------------------

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TransactionMetadata:
        """InitProducerId on an idle id: bump the epoch (KIP-360 rules when an epoch is given)."""
        if self.is_producer_epoch_exhausted:
            # Kafka checks this first: even a retry of the bump to MAX-1 is refused.
            raise InvalidTransition(
                f"cannot allocate more epochs for producer id {self.producer_id}"
            )
        known = self.producer_epoch != NO_PRODUCER_EPOCH
        if expected_epoch is not None and known and expected_epoch != self.producer_epoch:
            if expected_epoch != self.last_producer_epoch:
                raise ProducerFenced(
                    f"expected epoch {expected_epoch} is neither current epoch "
                    f"{self.producer_epoch} nor last epoch {self.last_producer_epoch}"
                )
            # A retry of a bump that succeeded: answer with the current epoch again.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        elif expected_epoch is None:
            # A new producer instance: a later retry of an older instance must be fenced.
            epoch, last_epoch = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        else:
            # The same instance recovering from an error (or a brand-new mapping).
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        return self._transit(
            TransactionState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TransactionMetadata:
        """InitProducerId when the epoch is exhausted: a fresh producer id at epoch 0."""
        if self.has_pending_transaction:
            raise InvalidTransition("cannot rotate producer ids while a transaction is pending")
        return self._transit(
            TransactionState.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms,
        )

    def prepare_fence_producer_epoch(self) -> TransactionMetadata:
        """Bump the epoch of an Ongoing transaction so its producer is fenced before the abort.

        The result is never persisted as is; ``prepare_abort_or_commit(TransactionState.PREPARE_ABORT)`` on it
        gives the PrepareAbort record carrying the bumped epoch.
        """
        # At MAX the epoch stays (Kafka 4 logs an error instead of failing): the abort
        # still goes through, and the next InitProducerId rotates the producer id.
        # The fenced epoch is kept as the last epoch: Kafka 4.x aborts with the server's
        # transaction version (2, an epoch bump that records the last epoch), so after a
        # timeout abort the producer's own KIP-360 InitProducerId(pid, fenced epoch) is
        # answered with the current epoch, not PRODUCER_FENCED. A new instance's
        # InitProducerId (no epoch given) clears it, so a real zombie stays fenced.
        return self._transit(
            TransactionState.PREPARE_EPOCH_FENCE,
            producer_epoch=min(self.producer_epoch + 1, MAX_EPOCH),
            last_producer_epoch=self.producer_epoch,
        )

    def prepare_add_partitions(
        self, partitions: frozenset[TopicPartition], now_ms: int
    ) -> TransactionMetadata:
        """AddPartitionsToTxn/AddOffsetsToTxn: the transaction starts (or grows)."""
        return self._transit(
            TransactionState.ONGOING,
            topic_partitions=self.topic_partitions | partitions,
            txn_start_timestamp_ms=now_ms if self.state.is_idle else self.txn_start_timestamp_ms,
            txn_last_update_timestamp_ms=now_ms,
            client_transaction_version=0,
        )

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int,
                                transaction_version: int = 1,
                                next_producer_id: int = NO_PRODUCER_ID) -> TransactionMetadata:
        """EndTxn. Transaction version 1: the epoch stays; only the state and time move.
        Version 2: the epoch is bumped here, so the markers (and the producer's next
        transaction) carry the new one and a zombie of the old epoch is fenced. When that
        bump reaches the last epoch, ``next_producer_id`` is the id the producer moves to
        once the markers are written (``prepare_complete``)."""
        if not new_state.is_prepare:
            raise InvalidTransition(f"{new_state} is not a prepare state")
        if transaction_version < 2:
            if self.state.is_idle:
                raise InvalidTransition(f"{new_state} cannot follow {self.state} in transaction version 1")
            return self._transit(new_state, next_producer_id=NO_PRODUCER_ID, txn_last_update_timestamp_ms=now_ms,
                                 client_transaction_version=0)
        if self.producer_epoch + 1 > MAX_EPOCH:
            raise InvalidTransition(f"cannot allocate more epochs for producer id {self.producer_id}")
        return self._transit(
            new_state,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=self.producer_epoch,
            next_producer_id=next_producer_id,
            txn_last_update_timestamp_ms=now_ms,
            client_transaction_version=transaction_version,
        )

    def prepare_complete(self, now_ms: int) -> TransactionMetadata:
        """All markers written: PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort.
        A transaction version 2 end that exhausted the epoch moves the producer to its
        next producer id at epoch 0 (the markers went out with the old id and last epoch)."""
        target = TransactionState.COMPLETE_COMMIT if self.state is TransactionState.PREPARE_COMMIT else TransactionState.COMPLETE_ABORT
        if self.client_transaction_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            return self._transit(target, producer_id=self.next_producer_id, producer_epoch=0,
                                 next_producer_id=NO_PRODUCER_ID, topic_partitions=_NO_PARTITIONS,
                                 txn_last_update_timestamp_ms=now_ms)
        return self._transit(target, next_producer_id=NO_PRODUCER_ID, topic_partitions=_NO_PARTITIONS,
                             txn_last_update_timestamp_ms=now_ms)

    def prepare_dead(self) -> TransactionMetadata:
        """Expiration of an idle id; persisted as a tombstone, never as a value."""
        return self._transit(TransactionState.DEAD, topic_partitions=frozenset())

    def _transit(self, target: TransactionState, **changes) -> TransactionMetadata:
        """The metadata in state ``target`` with the fields given changed (a field left out
        keeps its value, an unknown one is a ValueError), the producer id before the move
        kept as the previous one."""
        if self.state not in target.valid_previous_states:
            raise InvalidTransition(
                f"transactional id {self.transactional_id!r}: {target} cannot follow {self.state}"
            )
        producer_id = changes.get("producer_id", self.producer_id)
        producer_epoch = changes.get("producer_epoch", self.producer_epoch)
        if producer_id < 0:
            raise InvalidTransition(f"illegal producer id {producer_id}")
        if producer_epoch < 0 and target is not TransactionState.DEAD:
            raise InvalidTransition(f"illegal producer epoch {producer_epoch}")
        return self._replace(state=target, previous_producer_id=self.producer_id, **changes)
