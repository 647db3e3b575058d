"""The event history behind the console's timeline: a bounded, ordered record of what
explains an exactly-once incident after the fact. Each event has a sequence number, the
broker's clock (virtual when it is) and a kind:

- ``txn``: a transactional id's state as its coordinator wrote it (Ongoing with its
  partitions, PrepareCommit/PrepareAbort, CompleteCommit/CompleteAbort), its producer
  id and epoch, and, once it ends, its ``outcome``: committed, aborted, timed out or
  fenced (an abort the client did not ask for);
- ``marker``: the COMMIT/ABORT markers one node took, with their partitions;
- ``fault``: a fault rule fired on a request;
- ``node``: a node stopped, killed, paused, resumed or started;
- ``coordinator``: a coordinator partition moved to another node (its new epoch);
- ``control``: a control operation that changed the cluster (node stop/pause/start,
  coordinator move, clock advance, faults added...);
- ``partition``: a partition's high watermark or LSO moved, with the transaction
  holding the LSO (if any). The partition tells (``offsets_moved``): a move that may
  change the LSO (a transaction's first write, a marker, a truncation) is recorded at
  once; a plain append only marks the partition moved, and its offsets are recorded,
  stamped with its last move, before the next event or read. No timer, nothing done
  per partition that did not move. An LSO held from before a restart, which no move
  will ever tell, is recorded once when its partition opens (``opened``) or when the
  transaction coordinator loads the open transaction holding it; a holder first named
  by its producer id is named again once a load tells its transactional id;
- ``offsets``: a group's committed offsets written (``state`` committed, or pending
  under a transaction's producer), or a transaction's pending offsets completed by
  its marker (committed or aborted);
- ``group``: a group's generation (a consumer/share group's epoch), members or
  rebalancing changed, with the members that joined and left; ``rebalance`` says when
  a rebalance ``started`` (a classic group preparing, a consumer group's epoch ahead of
  its members) or ``ended``; ``deleted`` a group deleted, with the offsets that went
  with it. Offsets deleted alone (OffsetDelete, expiry) are ``offsets`` events of
  state ``deleted``.

Sans-IO: the broker calls ``record``; readers call ``since``. Bounded by its size
setting (emulate.event.history.size; 0 keeps nothing and listens to no partition):
the oldest events go first.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Callable

_ENDED = {"CompleteCommit": "committed", "CompleteAbort": "aborted"}
# How many of the members that joined or left a group event names (it counts them all).
_NAMES_MAX = 20


class EventHistory:
    def __init__(self, size: int, now_ms: Callable[[], int]) -> None:
        self.events: deque[dict] = deque(maxlen=max(0, size))
        self.now_ms = now_ms
        self.next_seq = 0
        # What the per-id and per-partition memories below may hold: the history's
        # size, so that ids never seen again do not pile up.
        self._ids_max = max(1, size)
        # Per transactional id: why its current transaction is being aborted, when not by
        # the client (timed out, fenced).
        self._abort_reason: dict[str, str] = {}
        self._open_state: dict[str, str] = {}
        self._offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        self._tid_by_pid: dict[int, str] = {}  # names the transaction holding an LSO
        # Partitions whose LSO holder was last told by its producer id only: producer id ->
        # those partitions, told again once a load names the producer.
        self._unnamed: dict[int, list] = {}
        # generation, rebalancing and members last told
        self._groups: dict[str, tuple[int, bool, frozenset[str]]] = {}
        # Partitions appended to since their offsets were last recorded: Partition -> the
        # time of its last move. Holds at most the partitions that moved.
        self._moved: dict = {}

    @property
    def enabled(self) -> bool:
        return bool(self.events.maxlen)

    def record(self, kind: str, at_ms: int | None = None, **fields) -> dict:
        if self._moved:  # the moves before this event come before it
            self._record_moved()
        event = {"seq": self.next_seq, "time_ms": self.now_ms() if at_ms is None else at_ms, "kind": kind} | fields
        self.next_seq += 1
        self.events.append(event)
        return event

    def since(self, seq: int = 0, limit: int | None = None) -> list[dict]:
        if self._moved:
            self._record_moved()
        first = self.events[0]["seq"] if self.events else self.next_seq  # numbers are consecutive
        out = list(islice(self.events, max(0, seq - first), None))
        return out[-limit:] if limit else out

    # -- what the broker tells -------------------------------------------------------------

    def transaction(self, transactional_id: str, state: str, producer_id: int, producer_epoch: int,
                    partitions: list[str], reason: str | None = None) -> dict | None:
        """A transactional id's state after a coordinator write; repeats of the same state
        with the same partitions are not events. ``reason``: why an abort began when the
        client did not ask (``timed out``, ``fenced``)."""
        key = f"{state}|{producer_epoch}|{','.join(partitions)}"
        if self._open_state.get(transactional_id) == key:
            return None
        _remember(self._open_state, transactional_id, key, self._ids_max)
        _remember(self._tid_by_pid, producer_id, transactional_id, self._ids_max)
        if state == "PrepareAbort" and reason is not None:
            _remember(self._abort_reason, transactional_id, reason, self._ids_max)
        fields = {"transactional_id": transactional_id, "state": state, "producer_id": producer_id,
                  "producer_epoch": producer_epoch, "partitions": partitions}
        if state in _ENDED:
            fields["outcome"] = self._abort_reason.pop(transactional_id, None) or _ENDED[state]
        elif state == "PrepareAbort" and transactional_id in self._abort_reason:
            fields["reason"] = self._abort_reason[transactional_id]
        return self.record("txn", **fields)

    def transaction_loaded(self, transactional_id: str, state: str, producer_id: int, producer_epoch: int,
                           partitions: list[str], start_time_ms: int) -> dict | None:
        """An open transaction the coordinator found at load (begun before a restart or
        on the coordinator before a move), with when it began."""
        event = self.transaction(transactional_id, state, producer_id, producer_epoch, partitions)
        if event is not None:
            event["loaded"], event["start_time_ms"] = True, start_time_ms
        return event

    def producers_named(self, named: dict[int, str]) -> None:
        """Producer id -> transactional id, as a coordinator load found them: an LSO
        holder told by its producer id alone is told again, named."""
        for producer_id, transactional_id in named.items():
            _remember(self._tid_by_pid, producer_id, transactional_id, self._ids_max)
            for part in self._unnamed.pop(producer_id, ()):
                self._record_offsets(part, None)

    def opened(self, partition) -> None:
        """A partition just opened: an LSO an open transaction holds from before (its
        first write in the log) is recorded now, as no move may ever tell it."""
        if partition.producer_state.open_transactions():
            self.offsets_now(partition)

    def offsets_now(self, partition) -> None:
        """The partition's offsets and LSO holder, recorded now if they changed."""
        self._moved.pop(partition, None)
        self._record_offsets(partition, None)

    def partition(self, topic: str, index: int, high_watermark: int, last_stable_offset: int,
                  holder: str | None, at_ms: int | None = None) -> dict | None:
        """A partition's offsets; an event only when they moved."""
        now = (high_watermark, last_stable_offset, holder)
        if self._offsets.get((topic, index)) == now:
            return None
        _remember(self._offsets, (topic, index), now, self._ids_max)
        return self.record("partition", at_ms, topic=topic, partition=index, high_watermark=high_watermark,
                           last_stable_offset=last_stable_offset, held_by=holder)

    def offsets_moved(self, partition, batch=None) -> None:
        """A Partition's ``on_offsets_moved``: on the produce path, so a plain append
        only notes the time; ``batch`` None (a marker, a truncation) or a transaction's
        first batch may move the LSO or its holder, recorded now."""
        if batch is not None:
            if not batch.is_transactional:
                self._moved[partition] = self.now_ms()
                return
            entry = partition.producer_state.entry(batch.producer_id)
            if entry is None or entry.current_txn_first_offset != batch.base_offset:
                self._moved[partition] = self.now_ms()  # within its open transaction
                return
        self.offsets_now(partition)  # what it noted is read now, at this move's time

    def _record_moved(self) -> None:
        moved, self._moved = self._moved, {}
        for partition, at_ms in sorted(moved.items(), key=lambda item: item[1]):
            self._record_offsets(partition, at_ms)

    def _record_offsets(self, p, at_ms: int | None) -> None:
        try:
            hw, lso = p.high_watermark, p.last_stable_offset
            holder = None
            if lso < hw:  # names the transaction holding it
                pid = p.producer_state.open_transactions()[0].producer_id
                holder = self._tid_by_pid.get(pid)
                if holder is None:
                    holder = f"producer {pid}"
                    named_later = self._unnamed.get(pid) or []
                    if p not in named_later:
                        _remember(self._unnamed, pid, [*named_later, p][-_NAMES_MAX:], self._ids_max)
        except (OSError, ValueError, IndexError):  # closed under us: nothing to tell
            return
        self.partition(p.topic, p.index, hw, lso, holder, at_ms)

    def offsets(self, group_id: str, offsets: dict[str, int | None], state: str,
                producer_id: int | None = None) -> dict:
        """Offsets of ``group_id`` ("topic-index" -> offset): written (``state``
        committed, or pending under ``producer_id``'s transaction), that transaction's
        pending ones completed by its marker (committed, aborted), or deleted (None)."""
        fields = {"group_id": group_id, "state": state, "offsets": offsets}
        if producer_id is not None:
            fields |= {"producer_id": producer_id, "transactional_id": self._tid_by_pid.get(producer_id)}
        return self.record("offsets", **fields)

    def groups_told(self) -> list[str]:
        return list(self._groups)

    def group_told(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_unchanged(self, group_id: str, generation: int, rebalancing: bool) -> bool:
        """True when the group's generation and rebalancing are as last told: the
        request path asks this before it gathers the members."""
        told = self._groups.get(group_id)
        return told is not None and told[:2] == (generation, rebalancing)

    def group(self, group_id: str, protocol: str, generation: int, members: frozenset[str], state: str,
              rebalancing: bool = False) -> dict | None:
        """A group's generation (a consumer or share group's epoch), members and state;
        an event when the generation, the members or ``rebalancing`` changed: who joined
        and who left, and whether a rebalance started or ended."""
        before_generation, was_rebalancing, before = self._groups.get(group_id, (None, False, frozenset()))
        if (before_generation, was_rebalancing, before) == (generation, rebalancing, members):
            return None
        _remember(self._groups, group_id, (generation, rebalancing, members), self._ids_max)
        fields = {"group_id": group_id, "protocol": protocol, "generation": generation, "state": state,
                  "members": len(members), "joined": sorted(members - before)[:_NAMES_MAX],
                  "left": sorted(before - members)[:_NAMES_MAX]}
        if rebalancing != was_rebalancing:
            fields["rebalance"] = "started" if rebalancing else "ended"
        return self.record("group", **fields)

    def group_deleted(self, group_id: str, protocol: str | None, offsets: list[str]) -> dict | None:
        """A group deleted (DeleteGroups, or emptied and expired), with the offsets
        ("topic-index") deleted with it; once, for a group told before or with offsets."""
        told = self._groups.pop(group_id, None)
        if told is None and not offsets:
            return None
        return self.record("group", group_id=group_id, protocol=protocol, generation=None if told is None else told[0],
                           state="Dead", members=0, joined=[], left=sorted(told[2])[:_NAMES_MAX] if told else [],
                           deleted=True, offsets_deleted=offsets)


def _remember(memory: dict, key, value, most: int) -> None:
    """Sets ``key`` as the newest entry, forgetting the oldest beyond ``most``."""
    memory.pop(key, None)
    memory[key] = value
    if len(memory) > most:
        del memory[next(iter(memory))]
