"""Transaction states, with the ids persisted in __transaction_state and the names Kafka prints."""

from __future__ import annotations

import enum


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
