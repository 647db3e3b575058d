"""One share-partition: the records of a topic partition a share group has in flight,
as Kafka's SharePartition keeps them (sans-IO: the caller passes the clock and the
log's batches).

Offsets below the share-partition start offset (SPSO, ``start_offset``) are done;
offsets from ``end_offset`` on were never acquired. Every offset in between has a
state: AVAILABLE (to be delivered again), ACQUIRED (by one member, under a lock until
``deadline_ms``), ACKNOWLEDGED, or ARCHIVED (rejected, a gap, a control record, an
aborted transaction's record, or delivered ``group.share.delivery.count.limit`` times).
The SPSO moves past leading ACKNOWLEDGED/ARCHIVED offsets. New records are acquired
only while the window holds fewer than ``share.partition.max.record.locks`` offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

# Record states by the ids Kafka persists (RecordState).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# Acknowledge types (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_DONE = (ACKNOWLEDGED, ARCHIVED)


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What acquisition needs of one stored batch."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: bool = False


@dataclass(frozen=True, slots=True)
class AbortedRange:
    """An aborted transaction: its producer's records from ``first_offset`` to its
    ABORT marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]  # one for the whole range, or one per offset


class AcknowledgeError(Exception):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


@dataclass(slots=True)
class InFlight:
    state: int
    delivery_count: int = 0
    member_id: str | None = None
    deadline_ms: int = 0


class SharePartition:
    def __init__(self, start_offset: int) -> None:
        self.state_epoch = 0  # moves on when the group's offsets are altered or deleted
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, InFlight] = {}

    # -- durable state ----------------------------------------------------------------------

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """(first offset, last offset, state, delivery count) runs of the records in flight,
        as the share coordinator keeps them; an acquired record is kept as available (its
        lock does not outlive the leader)."""
        out: list[list[int]] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self.records.get(offset)
            if record is None:
                continue
            state = AVAILABLE if record.state == ACQUIRED else record.state
            if out and out[-1][1] == offset - 1 and out[-1][2:] == [state, record.delivery_count]:
                out[-1][1] = offset
            else:
                out.append([offset, offset, state, record.delivery_count])
        return [tuple(b) for b in out]

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[tuple[int, int, int, int]]) -> "SharePartition":
        """The share-partition a snapshot describes (what lies between its batches was
        never acquired)."""
        share = cls(start_offset)
        for first, last, state, count in sorted(batches):
            for offset in range(max(first, start_offset), last + 1):
                for gap in range(share.end_offset, offset):
                    share.records[gap] = InFlight(AVAILABLE)
                share.records[offset] = InFlight(AVAILABLE if state == ACQUIRED else state, count)
                share.end_offset = offset + 1
        share._advance_start()
        return share

    # -- reading -------------------------------------------------------------------------

    def fetch_offset(self) -> int:
        """Where a read for acquisition starts: the first AVAILABLE offset, else the end."""
        available = [o for o, r in self.records.items() if r.state == AVAILABLE]
        return min(available) if available else self.end_offset

    def can_acquire(self, upper_bound: int, max_in_flight: int) -> bool:
        """Whether a fetch could acquire something now (``upper_bound``: the high watermark,
        or the LSO for read_committed)."""
        if any(r.state == AVAILABLE for r in self.records.values()):
            return True
        return self.end_offset < upper_bound and self.end_offset - self.start_offset < max_in_flight

    def counts(self) -> dict[str, int]:
        out = {"available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}
        names = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}
        for r in self.records.values():
            out[names[r.state]] += 1
        return out

    def next_deadline(self) -> int | None:
        return min((r.deadline_ms for r in self.records.values() if r.state == ACQUIRED), default=None)

    # -- acquisition -----------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Iterable[LogBatch], now_ms: int, lock_ms: int, max_records: int,
                max_in_flight: int, aborted: Sequence[AbortedRange] = ()) -> list[Acquired]:
        """Acquires for ``member_id`` what ``batches`` (read from ``fetch_offset()``, up to
        the isolation level's bound) hold that is available: records to be delivered
        again, then new ones. Whole batches, until ``max_records`` are acquired. Control
        records and the records of ``aborted`` transactions are archived, never handed out."""
        deadline = now_ms + lock_ms
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        for batch in batches:
            if len(acquired) >= max_records:
                break
            if batch.last_offset < self.start_offset:
                continue
            skip = batch.control or (batch.transactional and _is_aborted(batch, aborted))
            for offset in range(max(batch.base_offset, self.start_offset), batch.last_offset + 1):
                record = self.records.get(offset)
                if record is None:
                    if offset < self.end_offset:
                        continue  # done already (below the start, or gone since)
                    if offset - self.start_offset >= max_in_flight:
                        return _ranges(acquired)
                    for gap in range(self.end_offset, offset):  # offsets the log no longer holds
                        self.records[gap] = InFlight(ARCHIVED)
                    self.end_offset = offset + 1
                    if skip:
                        self.records[offset] = InFlight(ARCHIVED)
                        continue
                    record = self.records[offset] = InFlight(AVAILABLE)
                elif record.state != AVAILABLE:
                    continue
                elif skip:
                    record.state = ARCHIVED
                    continue
                record.state, record.member_id, record.deadline_ms = ACQUIRED, member_id, deadline
                record.delivery_count += 1
                acquired.append((offset, record.delivery_count))
        self._advance_start()
        return _ranges(acquired)

    # -- acknowledgement and release ---------------------------------------------------------

    def acknowledge(self, member_id: str, acknowledgements: Sequence[Acknowledgement], now_ms: int,
                    delivery_limit: int, lock_ms: int) -> list[tuple[int, InFlight]]:
        """Applies a member's acknowledgements all or nothing; raises AcknowledgeError
        (INVALID_REQUEST for malformed ranges, INVALID_RECORD_STATE for a record this
        member does not hold, unless the whole range is below the start offset). Returns
        what ``rollback`` needs to undo them."""
        changes: list[tuple[int, int]] = []
        for ack in acknowledgements:
            if ack.first_offset > ack.last_offset or ack.first_offset < 0:
                raise AcknowledgeError("INVALID_REQUEST", f"Invalid acknowledgement range "
                                       f"{ack.first_offset}-{ack.last_offset}.")
            size = ack.last_offset - ack.first_offset + 1
            if len(ack.types) not in (1, size) or any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW)
                                                       for t in ack.types):
                raise AcknowledgeError("INVALID_REQUEST", "Invalid acknowledge types.")
            if ack.last_offset < self.start_offset:
                # All done already (a late acknowledgement of records redelivered and
                # acknowledged since): passed over without an error, as Kafka 4.4 does.
                continue
            for i, offset in enumerate(range(ack.first_offset, ack.last_offset + 1)):
                record = self.records.get(offset)
                if record is None or record.state != ACQUIRED or record.member_id != member_id:
                    raise AcknowledgeError("INVALID_RECORD_STATE", f"The record at offset {offset} is not "
                                           "acquired by this member.")
                changes.append((offset, ack.types[0] if len(ack.types) == 1 else ack.types[i]))
        undo = [(offset, replace(self.records[offset])) for offset, _kind in changes]
        for offset, kind in changes:
            record = self.records[offset]
            if kind == ACCEPT:
                self._finish(record, ACKNOWLEDGED)
            elif kind in (REJECT, GAP):
                self._finish(record, ARCHIVED)
            elif kind == RELEASE:
                self._release(record, delivery_limit)
            else:
                record.deadline_ms = now_ms + lock_ms
        self._advance_start()
        return undo

    def rollback(self, undo: Sequence[tuple[int, InFlight]]) -> None:
        """Undoes acknowledgements whose state could not be written, as Kafka's
        SharePartition rolls them back: the records are acquired by the member again (a
        lock that ended meanwhile releases them at the next expiry). Records changed since
        by something else are left as they are."""
        for offset, before in undo:
            if offset < self.start_offset:  # passed over as done: the window opens again there
                for done in range(offset, self.start_offset):
                    self.records[done] = InFlight(ACKNOWLEDGED)
                self.start_offset = offset
            record = self.records.get(offset)
            if record is not None and record.state != ACQUIRED and record.member_id is None:
                self.records[offset] = replace(before)

    def release_member(self, member_id: str, delivery_limit: int) -> int:
        """A member's session ended or it left: what it holds becomes available again
        (archived at the delivery limit). Returns how many records it held."""
        held = [r for r in self.records.values() if r.state == ACQUIRED and r.member_id == member_id]
        for record in held:
            self._release(record, delivery_limit)
        self._advance_start()
        return len(held)

    def expire_locks(self, now_ms: int, delivery_limit: int) -> int:
        """Acquisition locks that ran out release their records; returns how many."""
        expired = [r for r in self.records.values() if r.state == ACQUIRED and r.deadline_ms <= now_ms]
        for record in expired:
            self._release(record, delivery_limit)
        self._advance_start()
        return len(expired)

    def move_start_to(self, offset: int) -> None:
        """The log no longer holds what lies below ``offset`` (retention, DeleteRecords)."""
        if offset <= self.start_offset:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)

    @staticmethod
    def _finish(record: InFlight, state: int) -> None:
        record.state, record.member_id, record.deadline_ms = state, None, 0

    def _release(self, record: InFlight, delivery_limit: int) -> None:
        self._finish(record, ARCHIVED if record.delivery_count >= delivery_limit else AVAILABLE)

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset:
            record = self.records.get(self.start_offset)
            if record is not None and record.state not in _DONE:
                return
            self.records.pop(self.start_offset, None)
            self.start_offset += 1


def _is_aborted(batch: LogBatch, aborted: Sequence[AbortedRange]) -> bool:
    return any(a.producer_id == batch.producer_id and a.first_offset <= batch.base_offset <= a.last_offset
               for a in aborted)


def _ranges(acquired: list[tuple[int, int]]) -> list[Acquired]:
    out: list[Acquired] = []
    for offset, count in acquired:
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = Acquired(out[-1].first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out
