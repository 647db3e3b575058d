"""Drives a coordinator state machine over its compacted topic's partitions, sans-IO.

Every change to a coordinator's state enters here, as one of four events, and takes
the same path: the state machine returns a ``Result``, its records are appended to the
partition as one batch (per producer), and the very records appended are replayed,
through the code that rebuilds the state at load. Then the effects are handed to the
broker. The events:

- ``run``: a request handler (JoinGroup, EndTxn, InitProducerId, ...);
- a timer firing: the runtime keeps the state machine's ``Timer``s (transaction
  timeouts, transactional-id expiration, group session/rebalance deadlines) and says
  when the next one is due; each due timer gives one ``TimerEvent`` per write, run
  as a request is (``run``), whose writes the broker waits for as a request's;
- ``write_marker``: a COMMIT/ABORT marker reaching a coordinator partition (the group
  coordinator's transactional offsets complete with it);
- ``load`` / ``unload``: the partition moving here (replay the log, with the
  coordinator epoch of the move) or away.

Records a producer's transaction owns (``TransactionalRecord``: the group
coordinator's transactional offset commits) go in a transactional batch of that
producer, so the partition's producer state opens the transaction and its marker
closes it. ``replay`` gets the batch's producer id for them, whether the record was
appended just now or read back at load.

The runtime takes ``now`` as an argument and does no I/O of its own: the log is a
``CoordinatorLog`` (the broker's partitions, or a list in memory for unit tests),
effects go to the ``perform`` callback the broker gives it, and the broker sleeps on
its clock until ``next_timer_deadline`` (broker/coordinators/coordinator_topic.py).

The contract every state machine follows: a handler looks at the current state and
returns a ``Result``: the records to append to the coordinator's partition, the
response to give once they are durable, and the effects the broker should carry out
after that (send markers, ...). Handlers never mutate state; appends to one coordinator
partition are serialized, so a handler always sees the state that all earlier appends
produced. Timers are asked for the same way: a machine names its ``Timer``s and each
due timer's ``TimerEvent``s run as requests do. A log codec that cannot read a record
raises ``LogCodecError``.
"""

from __future__ import annotations

import itertools
import logging
from operator import itemgetter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from protocol.records import (
    CONTROL_TYPE_COMMIT,
    InvalidBatch,
    RecordBatch,
    build_batch,
    build_control_batch,
    decode_records,
    keyed_records_in,
    read_control_record,
)

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1

# -- the state machines' contract -------------------------------------------------------

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


# -- the runtime ----------------------------------------------------------------------


class AppendRefused(Exception):
    """The log refused an append: the partition no longer has this coordinator's leader
    epoch (the coordinator epoch it loaded at), so another coordinator may own it."""


class AppendUnavailable(Exception):
    """The log cannot take an append now (too few replicas in sync): nothing is applied
    and the request is answered ``error``, a retriable one."""

    def __init__(self, error, message: str) -> None:
        super().__init__(message)
        self.error = error


class CoordinatorRefused(Exception):
    """The runtime refuses an event on a partition it does not serve (Kafka 4.4's
    CoordinatorRuntime ``withActiveContextOrThrow``): ``error`` is NOT_COORDINATOR when
    the partition is not held here, COORDINATOR_LOAD_IN_PROGRESS while it loads. Each
    service maps it once to its API's answer; nothing ran and nothing was written."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name.upper())
        self.error = error


class CoordinatorLog(Protocol):
    """A coordinator topic's partitions, as the runtime reads and writes them."""

    def append(self, partition: int, batch: RecordBatch, now_ms: int) -> int:
        """Appends a batch; returns its base offset. Raises AppendRefused when this
        coordinator's view of the partition is stale."""

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, now_ms: int) -> None:
        """Appends a COMMIT/ABORT marker; raises if the partition refuses it (fenced)."""

    def batches(self, partition: int) -> Iterable[RecordBatch]:
        """Every batch of the partition, in offset order."""

    def chunks(self, partition: int) -> Iterable[tuple[bytes, int, int]]:
        """The same batches as (buffer, start, end) spans of whole batches."""


class PartitionLoads:
    """Which partitions of its topic a coordinator holds, and whether each is loaded yet
    (Kafka's CoordinatorRuntime keeps this per partition context: LOADING, then ACTIVE).
    The runtime moves partitions through it and refuses events on partitions not served
    (the machines' writes assume a served partition); the state machines' describe/list
    reads and the KIP-890 verification, asked outside the runtime, check it per key; the
    broker reads it to list what it serves."""

    def __init__(self) -> None:
        self._loaded: dict[int, bool] = {}  # held partitions: loaded (True) or loading
        self._failed: set[int] = set()  # their load raised: refused NOT_COORDINATOR, as not held

    def refusal(self, partition: int) -> ErrorCode | None:
        """The error a request for ``partition`` gets: NOT_COORDINATOR when it is not
        held, COORDINATOR_LOAD_IN_PROGRESS while it loads, None once it is served."""
        loaded = self._loaded.get(partition)
        if loaded is None:
            return ErrorCode.not_coordinator
        return None if loaded else ErrorCode.coordinator_load_in_progress

    def is_loading(self, partition: int) -> bool:
        return self._loaded.get(partition) is False

    def loaded(self) -> frozenset[int]:
        """The partitions served."""
        return frozenset(p for p, loaded in self._loaded.items() if loaded)

    def loading(self) -> frozenset[int]:
        return frozenset(p for p, loaded in self._loaded.items() if not loaded)

    def held(self) -> frozenset[int]:
        """Loaded or loading."""
        return frozenset(self._loaded)

    def failed(self) -> frozenset[int]:
        """The partitions whose load failed (Kafka's FAILED state), until they move again."""
        return frozenset(self._failed)

    def mark_loading(self, partition: int) -> None:  # the runtime moves partitions
        self._failed.discard(partition)
        self._loaded[partition] = False

    def mark_loaded(self, partition: int) -> None:
        self._loaded[partition] = True

    def mark_failed(self, partition: int) -> None:
        self._loaded.pop(partition, None)
        self._failed.add(partition)

    def drop(self, partition: int) -> None:
        self._loaded.pop(partition, None)
        self._failed.discard(partition)


class StateMachine(Protocol):
    """What the runtime needs of a coordinator; both coordinators implement it."""

    # The load state of its partitions, which the runtime that drives it keeps.
    loads: PartitionLoads

    # True when each record holds its key's whole state, so that load may replay only
    # the newest record of each key (the state is the same, the work is not).
    replays_latest_record_per_key: bool

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Become coordinator of ``partition`` (it is loading): replay comes next."""

    def finish_loading(self, partition: int, now_ms: int) -> list[Result]:
        """The partition is served now; the results carry effects (roll-forwards, replies) and
        records for what the load itself decides (transactions timed out meanwhile)."""

    def unload_partition(self, partition: int) -> list[Result]:
        """Forget the partition (it moved away); the results carry only effects."""

    def replay(self, record: CoordinatorRecord, offset: int, timestamp_ms: int,
               producer_id: int = NO_PRODUCER_ID) -> None:
        """Applies one record of the log; ``producer_id``: of its transactional batch."""

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """Applies a COMMIT/ABORT marker of ``producer_id`` on ``partition``."""


class CoordinatorRuntime:
    def __init__(self, machine: StateMachine, log: CoordinatorLog, perform: Callable[[Any], None],
                 resign: Callable[[int], None] | None = None, timers: tuple[Timer, ...] = ()) -> None:
        self.machine = machine
        self.log = log
        self.loads = machine.loads = PartitionLoads()
        self.timers = timers
        self._periodic_due: dict[str, int] = {}  # a periodic timer's next firing, once started
        self._perform = perform
        # What a refused append does to the partition: unload it (the broker's also
        # stops the work it runs for it).
        self._resign = resign if resign is not None else self.unload
        # The offset of the last record the latest event appended, -1 when it wrote none.
        self.last_offset = -1
        self.written_at_load = 0  # records the latest load appended (what expired meanwhile)
        # Told of each run of records appended and replayed (partition, records, their
        # producer id): what the broker's event history hears of a write; None: nobody.
        self.written: Callable[[int, Sequence[CoordinatorRecord], int], None] | None = None

    # -- partitions moving here and away -------------------------------------------------

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        """Takes ownership of ``partition``; requests for it get COORDINATOR_LOAD_IN_PROGRESS
        until ``load`` has replayed it."""
        self.loads.mark_loading(partition)
        self.machine.load_partition(partition, coordinator_epoch)

    def load(self, partition: int, now_ms: int) -> int | None:
        """Replays the partition's log and starts serving it; returns the records read.

        A load that raises leaves the partition failed, as Kafka's runtime does: its
        state is dropped, the error logged, and requests for it are refused
        NOT_COORDINATOR (not COORDINATOR_LOAD_IN_PROGRESS forever) until it moves again.
        Returns None then."""
        self.written_at_load = 0
        try:
            if self.machine.replays_latest_record_per_key:
                count = self._replay_latest_per_key(self.log.chunks(partition))
            else:
                count = sum(self._replay_batch(partition, batch) for batch in self.log.batches(partition))
            self.loads.mark_loaded(partition)
            for result in self.machine.finish_loading(partition, now_ms):
                self.apply(partition, result, now_ms)
                self.written_at_load += len(result.records)
        except AppendRefused:
            self._resign(partition)
        except Exception:
            log.exception("failed to load coordinator partition %d; it is refused NOT_COORDINATOR until it "
                          "moves again", partition)
            self.unload(partition)
            self.loads.mark_failed(partition)
            return None
        return count

    def unload(self, partition: int) -> None:
        """The partition moved away: its state is dropped, parked requests answered."""
        self.loads.drop(partition)
        self._perform_all(self.machine.unload_partition(partition))

    def _replay_latest_per_key(self, chunks: Iterable[tuple[bytes, int, int]]) -> int:
        latest = {}
        count = 0
        for buf, start, end in chunks:  # read in place: no RecordBatch per (one-record) batch
            records = keyed_records_in(buf, start, end)  # (key, value, offset, timestamp)
            count += len(records)
            for record in records:
                latest[record[0]] = record
        # the newest record of each key, replayed in log order
        for key, value, offset, timestamp in sorted(latest.values(), key=itemgetter(2)):
            self.machine.replay(CoordinatorRecord(key, value), offset, timestamp)
        return count

    def _replay_batch(self, partition: int, batch: RecordBatch) -> int:
        if batch.is_control:
            try:
                control_type, _epoch = read_control_record(batch)
            except InvalidBatch as e:
                log.warning("skipping control batch at offset %d: %s", batch.base_offset, e)
                return 0
            self.machine.replay_marker(partition, batch.producer_id, control_type == CONTROL_TYPE_COMMIT)
            return 0
        producer_id = batch.producer_id if batch.is_transactional else NO_PRODUCER_ID
        records = decode_records(batch)
        for record in records:
            self.machine.replay(CoordinatorRecord(record.key, record.value), record.offset, record.timestamp,
                                producer_id)
        return len(records)

    # -- events --------------------------------------------------------------------------

    def run(self, partition: int, handler: Callable[[], Result], now_ms: int) -> Any:
        """A request: runs ``handler`` on the current state, commits its records, hands
        the effects to the broker and returns the response.

        Raises ``CoordinatorRefused`` without running the handler when the partition is
        not served here (not held, or still loading). When the log refuses the records
        (another coordinator leads the partition now), nothing of the result takes
        effect: the partition is resigned and the event refused NOT_COORDINATOR."""
        refusal = self.loads.refusal(partition)
        if refusal is not None:
            raise CoordinatorRefused(refusal)
        result = handler()
        try:
            return self.apply(partition, result, now_ms)
        except AppendRefused:
            self._resign(partition)
        except AppendUnavailable as e:
            return with_error(result.response, e.error)
        raise CoordinatorRefused(ErrorCode.not_coordinator)

    # -- timers ------------------------------------------------------------------------------

    def start_timers(self, now_ms: int) -> None:
        """Periodic timers count their first interval from ``now_ms``."""
        for timer in self.timers:
            if timer.every_ms > 0:
                self._periodic_due.setdefault(timer.name, now_ms + timer.every_ms)

    def next_timer_deadline(self) -> int | None:
        """When the next timer is due (the broker's clock, in ms), None when none is."""
        due = [self._due(timer) for timer in self.timers]
        return min((d for d in due if d is not None), default=None)

    def _due(self, timer: Timer) -> int | None:
        if timer.every_ms > 0:
            return self._periodic_due.get(timer.name)
        return timer.deadline()

    def due_timer_events(self, now_ms: int) -> list[TimerEvent]:
        """The events of every timer due at ``now_ms``, on every partition served, in
        partition order; periodic timers are due again an interval later. The caller
        runs each through ``run`` (and waits for its writes as for a request's)."""
        events = []
        partitions = sorted(self.loads.loaded())
        for timer in self.timers:
            due = self._due(timer)
            if due is None or due > now_ms:
                continue
            if timer.every_ms > 0:
                self._periodic_due[timer.name] = now_ms + timer.every_ms
            for partition in partitions:
                events += timer.events(partition, now_ms)
        return events

    def fire_timers(self, now_ms: int) -> list[tuple[TimerEvent, Any]]:
        """Runs every due timer's events now, each through ``run`` (unit tests drive
        time this way); returns each event with its answer (the refusal's error for an
        event on a partition an earlier event resigned)."""
        answers = []
        for event in self.due_timer_events(now_ms):
            try:
                answers.append((event, self.run(event.partition, event.operation, now_ms)))
            except CoordinatorRefused as refused:
                answers.append((event, refused.error))
        return answers

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, now_ms: int) -> None:
        """A marker for this coordinator's partition: appended, then replayed as at load.
        Raises what the log raises when the marker is refused (nothing changes then)."""
        self.log.write_marker(partition, producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        self.machine.replay_marker(partition, producer_id, commit)

    def apply(self, partition: int, result: Result, now_ms: int) -> Any:
        """Commits a result: append its records, replay them, perform its effects."""
        self.last_offset = -1
        if result.records:
            self._append(partition, result.records, now_ms)
        for effect in result.effects:
            self._perform(effect)
        return result.response

    def _append(self, partition: int, records: tuple[CoordinatorRecord, ...], now_ms: int) -> None:
        """One batch per run of records of the same producer (or of none), each replayed
        right after its batch is in the log."""
        if len(records) == 1:  # most events write one record: no grouping to do
            runs = ((_producer_of(records[0]), records),)
        else:
            runs = ((producer, list(run)) for producer, run in itertools.groupby(records, _producer_of))
        for producer, run in runs:
            base_offset = self.log.append(partition, RecordBatch(_build(run, producer, now_ms), 0), now_ms)
            producer_id = NO_PRODUCER_ID if producer is None else producer[0]
            self.last_offset = base_offset + len(run) - 1
            for i, record in enumerate(run):
                self.machine.replay(record, base_offset + i, now_ms, producer_id)
            if self.written is not None:
                self.written(partition, run, producer_id)

    def _perform_all(self, results: Iterable[Result]) -> None:
        for result in results:
            for effect in result.effects:
                self._perform(effect)


def with_error(response: Any, error: Any) -> Any:
    """A response of the same type carrying only ``error`` (the coordinators' responses
    take the error first, every other field defaulted); a write nobody is answered for
    (a timer's) is answered ``error`` itself."""
    return error if response is None else type(response)(error)


def _producer_of(record: CoordinatorRecord) -> tuple[int, int] | None:
    if isinstance(record, TransactionalRecord):
        return record.producer_id, record.producer_epoch
    return None


def _build(records: list[CoordinatorRecord], producer: tuple[int, int] | None, now_ms: int) -> bytearray:
    rows = [(r.key, r.value, (), now_ms) for r in records]
    if producer is None:
        return build_batch(rows)
    # Sequence 0, as Kafka's coordinators write it: the partition leader checks no
    # sequences for its own appends, only the producer epoch.
    return build_batch(rows, producer_id=producer[0], producer_epoch=producer[1], base_sequence=0,
                       transactional=True)


class InMemoryLog:
    """A ``CoordinatorLog`` kept in a list per partition: what unit tests drive the
    runtime over. Markers are control batches, as on disk."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[RecordBatch]] = {}
        # Partitions whose appends are refused: another coordinator leads them now.
        self.refused: set[int] = set()

    def append(self, partition: int, batch: RecordBatch, now_ms: int) -> int:
        if partition in self.refused:
            raise AppendRefused(f"partition {partition} has a newer leader")
        batches = self.partitions.setdefault(partition, [])
        base_offset = batches[-1].last_offset + 1 if batches else 0
        batch.set_base_offset(base_offset)
        batches.append(batch)
        return base_offset

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, now_ms: int) -> None:
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        self.append(partition, RecordBatch(batch, 0), now_ms)

    def batches(self, partition: int) -> list[RecordBatch]:
        return list(self.partitions.get(partition, []))

    def chunks(self, partition: int) -> list[tuple[bytes, int, int]]:
        return [(b.buf, b.pos, b.pos + b.size) for b in self.batches(partition)]

    def records(self, partition: int) -> list[CoordinatorRecord]:
        """The non-control records of a partition, as a load would read them."""
        return [CoordinatorRecord(r.key, r.value) for b in self.batches(partition) if not b.is_control
                for r in decode_records(b)]
