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
  holding the LSO (if any).

Sans-IO: the broker calls ``record``; readers call ``since``. Bounded by its size
setting (emulate.event.history.size): the oldest events go first.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Callable

_ENDED = {"CompleteCommit": "committed", "CompleteAbort": "aborted"}


class EventHistory:
    def __init__(self, size: int, now_ms: Callable[[], int]) -> None:
        self.events: deque[dict] = deque(maxlen=max(1, size))
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
        # The cluster's open partitions: looked at after each other event, so an LSO that
        # a marker releases and a late write holds again shows both moves.
        self.partitions: dict | None = None

    def record(self, kind: str, **fields) -> dict:
        event = {"seq": self.next_seq, "time_ms": self.now_ms(), "kind": kind} | fields
        self.next_seq += 1
        self.events.append(event)
        if kind != "partition" and self.partitions is not None:
            named = fields.get("partitions")  # a transaction's or marker's: only those
            self.sample_partitions(self.partitions, None if named is None else set(named))
        return event

    def since(self, seq: int = 0, limit: int | None = None) -> list[dict]:
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

    def partition(self, topic: str, index: int, high_watermark: int, last_stable_offset: int,
                  holder: str | None) -> dict | None:
        """A partition's offsets; an event only when they moved."""
        now = (high_watermark, last_stable_offset, holder)
        if self._offsets.get((topic, index)) == now:
            return None
        _remember(self._offsets, (topic, index), now, self._ids_max)
        return self.record("partition", topic=topic, partition=index, high_watermark=high_watermark,
                           last_stable_offset=last_stable_offset, held_by=holder)

    def sample_partitions(self, partitions, only: set[str] | None = None) -> None:
        """``partitions``: the cluster's open (topic, index) -> Partition; records the
        ones whose offsets moved (of ``only``'s "topic-index" names, when given), naming
        the transaction that holds the LSO."""
        items = (list(partitions.items()) if only is None else
                 [(k, partitions[k]) for k in ((t, int(i)) for t, _, i in (n.rpartition("-") for n in only))
                  if k in partitions])
        for (topic, index), p in items:
            try:
                hw, lso = p.high_watermark, p.last_stable_offset
                open_txns = p.producer_state.open_transactions()
            except (OSError, ValueError):  # closed under us: read again next time
                continue
            holder = None
            if open_txns and lso < hw:
                pid = open_txns[0].producer_id
                holder = self._tid_by_pid.get(pid, f"producer {pid}")
            self.partition(topic, index, hw, lso, holder)


def _remember(memory: dict, key, value, most: int) -> None:
    """Sets ``key`` as the newest entry, forgetting the oldest beyond ``most``."""
    memory.pop(key, None)
    memory[key] = value
    if len(memory) > most:
        del memory[next(iter(memory))]
