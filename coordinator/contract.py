"""The sans-IO contract every coordinator state machine follows.

A handler looks at the current state and returns a ``Result``: the records to append
to the coordinator's partition, the response to give once they are durable, and the
effects the broker should carry out after that (send markers, ...). Handlers never
mutate state. The runtime appends the records and only then calls ``replay`` for each
one: the very code that rebuilds the state from the log at start-up. Appends to one
coordinator partition are serialized, so a handler always sees the state that all
earlier appends produced. Timers are asked for the same way: a machine names its
``Timer``s, the runtime says when one is due, and each due timer's ``TimerEvent``s
run as requests do. A log codec that cannot read a record raises ``LogCodecError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

R = TypeVar("R")


# Not frozen (a frozen init costs one object.__setattr__ per field, and every
# coordinator event builds records); nothing changes a record once built, and records
# hash by value as before.
@dataclass(slots=True, unsafe_hash=True)
class CoordinatorRecord:
    """One key/value record of a compacted coordinator topic; value None is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(slots=True, unsafe_hash=True)
class TransactionalRecord(CoordinatorRecord):
    """A record that belongs to a producer's transaction: the runtime appends it in a
    transactional batch of ``producer_id``/``producer_epoch``, so the partition's log
    checks the epoch and the producer's COMMIT/ABORT marker decides it."""

    producer_id: int
    producer_epoch: int


class Result(NamedTuple, Generic[R]):
    """A NamedTuple, not a frozen dataclass: every request builds one, and a tuple is
    built in one step where a frozen dataclass sets each field through object.__setattr__."""

    records: tuple[CoordinatorRecord, ...] = ()
    response: R | None = None
    effects: tuple[Any, ...] = ()


def combined(results: Iterable[Result]) -> Result:
    """One write of several results: their records, in order, and their effects."""
    records: list[CoordinatorRecord] = []
    effects: list[Any] = []
    for result in results:
        records += result.records
        effects += result.effects
    return Result(tuple(records), None, tuple(effects))


class TimerEvent(NamedTuple):
    """One write a due timer makes on a served partition: ``operation`` runs on the
    state as it is when the event runs, as a request handler does. ``key``: the
    transactional id or group it is about (None: several)."""

    timer: str
    partition: int
    operation: Callable[[], Result]
    key: str | None = None


class Timer(NamedTuple):
    """A timer a state machine asks the runtime to keep. ``events(partition, now_ms)``:
    what it writes on a served partition when it fires. It fires every ``every_ms``
    (Kafka's periodic coordinator tasks), or, with ``every_ms`` 0, at ``deadline()``,
    the machine's earliest deadline (None: nothing to time)."""

    name: str
    events: Callable[[int, int], list[TimerEvent]]
    every_ms: int = 0
    deadline: Callable[[], int | None] | None = None


class LogCodecError(ValueError):
    """Bytes that are not a well-formed record of the layout they claim."""


class UnknownKeyVersion(LogCodecError):
    """A key of a record type this coordinator does not keep (another coordinator's, or a
    group type it does not serve): the loader skips it."""

    def __init__(self, topic: str, version: int) -> None:
        super().__init__(f"unknown {topic} key version {version}")
        self.version = version


class UnknownValueVersion(LogCodecError):
    def __init__(self, topic: str, version: int) -> None:
        super().__init__(f"unknown {topic} value version {version}")
        self.version = version
