"""Reads a torture run's histories and what the broker returned, and counts anomalies.

The classes follow Elle's vocabulary for transactional histories:

- lost_write: a committed transaction none of whose records is readable, an acknowledged
  idempotent record that is missing, or a source record below the consume-transform-
  produce group's committed offset that has no copy;
- aborted_read: a record of an aborted transaction visible to read_committed;
- torn_transaction: a committed transaction only part of which is visible, or a
  consume-transform-produce copy visible although its source offset was never
  committed (output and offsets are one transaction);
- duplicate_transactional / duplicate_idempotent / duplicate_ctp: the same record (or the
  same source record's copy) more than once;
- order_violation: one producer's records out of order within a partition;
- lso_stuck: a partition whose last stable offset stays below its high watermark after
  every client has finished;
- unknown_partial: a transaction whose outcome the client could not know, visible in part.

Pure functions over plain data: the unit tests feed synthetic histories.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from torture.history import ABORTED, ACKED, COMMITTED, UNKNOWN

ANOMALY_CLASSES = (
    "lost_write",
    "aborted_read",
    "torn_transaction",
    "duplicate_transactional",
    "duplicate_idempotent",
    "duplicate_ctp",
    "order_violation",
    "lso_stuck",
    "unknown_partial",
)


@dataclass(frozen=True, slots=True)
class Observed:
    """One record as a consumer returned it; ``value`` is the decoded writer fields."""

    topic: str
    partition: int
    offset: int
    value: dict


@dataclass
class ReadBack:
    committed: list[Observed]  # read_committed, every partition from the start
    uncommitted: list[Observed]  # read_uncommitted, the same partitions
    ends: dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (high watermark, LSO)
    ctp_source_topic: str | None = None
    ctp_committed: dict[int, int] = field(default_factory=dict)  # source partition -> group offset


@dataclass
class Report:
    anomalies: Counter = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)
    transactions: Counter = field(default_factory=Counter)  # outcome -> count
    idempotent: Counter = field(default_factory=Counter)
    records_committed: int = 0
    records_uncommitted: int = 0

    def flag(self, cls: str, detail: str, count: int = 1) -> None:
        self.anomalies[cls] += count
        if len(self.details) < 50:
            self.details.append(f"{cls}: {detail}")

    @property
    def ok(self) -> bool:
        return not any(self.anomalies[c] for c in ANOMALY_CLASSES)

    def summary(self, prefix: str = "torture") -> str:
        tx = self.transactions
        parts = [
            prefix,
            f"transactions={sum(tx.values())} (committed={tx[COMMITTED]} aborted={tx[ABORTED]} unknown={tx[UNKNOWN]})",
            f"idempotent={self.idempotent[ACKED]} acked/{sum(self.idempotent.values())} sent",
            f"records read_committed={self.records_committed} read_uncommitted={self.records_uncommitted}",
        ]
        parts += [f"{c}={self.anomalies[c]}" for c in ANOMALY_CLASSES]
        parts.append("OK" if self.ok else "ANOMALIES")
        return " ".join(parts)


def _is_copy(v: dict) -> bool:
    return "sp" in v and "so" in v


def check(events: list[dict], read: ReadBack) -> Report:
    report = Report()
    report.records_committed = len(read.committed)
    report.records_uncommitted = len(read.uncommitted)
    _check_transactions(events, read, report)
    _check_idempotent(events, read, report)
    _check_order(read, report)
    _check_ctp(read, report)
    for (topic, partition), (hw, lso) in sorted(read.ends.items()):
        if lso < hw:
            report.flag("lso_stuck", f"{topic}-{partition}: LSO {lso} < high watermark {hw}")
    return report


def _check_transactions(events: list[dict], read: ReadBack, report: Report) -> None:
    outcomes: dict[tuple[str, int], tuple[str, int]] = {}
    for e in events:
        if e.get("kind") == "txn":
            key = (e["p"], e["x"])
            if key in outcomes:  # one outcome per transaction: the first one logged stands
                continue
            outcomes[key] = (e["outcome"], e["n"])
    visible: dict[tuple[str, int], Counter] = defaultdict(Counter)
    sizes: dict[tuple[str, int], int] = {}
    for r in read.committed:
        v = r.value
        if "x" not in v:
            continue
        key = (v["p"], v["x"])
        visible[key][v["i"]] += 1
        sizes.setdefault(key, v["n"])
    for key, (outcome, _n) in outcomes.items():
        report.transactions[outcome] += 1
    for key, copies in visible.items():
        extra = sum(c - 1 for c in copies.values() if c > 1)
        if extra:
            report.flag("duplicate_transactional", f"{key}: {extra} extra copies", extra)
    for key in set(outcomes) | set(visible):
        outcome, n = outcomes.get(key, (UNKNOWN, sizes.get(key, 0)))
        if key not in outcomes:  # written but never logged: the client did not learn the outcome
            report.transactions[UNKNOWN] += 1
        seen = len(visible.get(key, ()))
        if outcome == COMMITTED:
            if seen == 0 and n > 0:
                report.flag("lost_write", f"committed transaction {key} of {n} records: none visible")
            elif seen < n:
                missing = sorted(set(range(n)) - set(visible[key]))
                report.flag("torn_transaction", f"committed transaction {key}: records {missing} of {n} missing")
        elif outcome == ABORTED:
            if seen:
                report.flag("aborted_read", f"aborted transaction {key}: {seen} of {n} records visible")
        elif 0 < seen < n:
            report.flag("unknown_partial", f"transaction {key} of unknown outcome: {seen} of {n} records visible")


def _check_idempotent(events: list[dict], read: ReadBack, report: Report) -> None:
    acked: dict[tuple[str, int], dict] = {}
    for e in events:
        if e.get("kind") == "idem":
            report.idempotent[e["outcome"]] += 1
            if e["outcome"] == ACKED:
                acked[(e["p"], e["s"])] = e
    seen: Counter = Counter()
    for r in read.uncommitted:
        v = r.value
        if "s" in v and "x" not in v:
            seen[(v["p"], v["s"])] += 1
    for key, count in seen.items():
        if count > 1:
            report.flag("duplicate_idempotent", f"idempotent record {key} appears {count} times", count - 1)
    for key, e in acked.items():
        if not seen[key]:
            report.flag("lost_write", f"acknowledged idempotent record {key} (offset {e.get('offset')}) missing")


def _check_order(read: ReadBack, report: Report) -> None:
    """Per partition and producer, offsets must follow the order the producer wrote in."""
    last: dict[tuple[str, int, str], tuple] = {}
    transactional = [r for r in read.committed if "x" in r.value]
    idempotent = [r for r in read.uncommitted if "s" in r.value and "x" not in r.value]
    for records in (transactional, idempotent):
        last.clear()
        for r in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
            v = r.value
            position = (v["x"], v["i"]) if "x" in v else (v["s"],) if "s" in v else None
            if position is None:
                continue
            key = (r.topic, r.partition, v["p"])
            previous = last.get(key)
            if previous is not None and position < previous[0]:
                report.flag("order_violation",
                            f"{r.topic}-{r.partition} offset {r.offset}: {v['p']} {position} after {previous[0]} "
                            f"(offset {previous[1]})")
            last[key] = (position, r.offset)


def _check_ctp(read: ReadBack, report: Report) -> None:
    if read.ctp_source_topic is None:
        return
    copies: Counter = Counter()
    for r in read.committed:
        if _is_copy(r.value):
            copies[(r.value["sp"], r.value["so"])] += 1
    for (sp, so), count in copies.items():
        if count > 1:
            report.flag("duplicate_ctp", f"source {read.ctp_source_topic}-{sp}@{so} copied {count} times", count - 1)
        if so >= read.ctp_committed.get(sp, 0):
            report.flag("torn_transaction",
                        f"copy of {read.ctp_source_topic}-{sp}@{so} visible but the group's offset is "
                        f"{read.ctp_committed.get(sp, 0)}")
    sources = {(r.partition, r.offset) for r in read.uncommitted if r.topic == read.ctp_source_topic}
    for sp, committed in read.ctp_committed.items():
        for so in range(committed):
            if (sp, so) in sources and not copies[(sp, so)]:
                report.flag("lost_write", f"source {read.ctp_source_topic}-{sp}@{so} consumed and committed, no copy")
