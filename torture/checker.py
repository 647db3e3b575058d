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

From the partitions' logs and ``__transaction_state`` as they are on disk (``LogScan``),
and the coordinators' view before and after a restart:

- shared_producer_epoch: two producer instances wrote with the same (producer id,
  epoch), or the transaction log handed a transactional id an epoch of its producer id
  lower than one it had already handed out (a deposed coordinator's writes), or two
  InitProducerId answers the run received gave one transactional id the same (producer
  id, epoch), or one gave a (producer id, epoch) the transaction log never recorded for
  it (a coordinator that answered without its write standing);
- outcome_mismatch: one transaction decided both ways in ``__transaction_state`` (a
  PREPARE_COMMIT and a PREPARE_ABORT of the same partitions with no new transaction
  between), a marker that says otherwise than the decision of the transaction it ends,
  a completed transaction whose partition holds no marker for it, or a coordinator that
  describes a transaction otherwise after a restart than before it.

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
    "shared_producer_epoch",
    "outcome_mismatch",
)


@dataclass(frozen=True, slots=True)
class Observed:
    """One record as a consumer returned it; ``value`` is the decoded writer fields."""

    topic: str
    partition: int
    offset: int
    value: dict


@dataclass(frozen=True, slots=True)
class LoggedBatch:
    """A batch of a torture partition's log: data (``writers``: the (client, producer
    instance) of its records) or a COMMIT/ABORT marker (``marker``)."""

    topic: str
    partition: int
    offset: int
    producer_id: int
    producer_epoch: int
    marker: str | None = None  # "COMMIT" | "ABORT" for a control batch
    coordinator_epoch: int = -1
    writers: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TxnLogRecord:
    """A ``__transaction_state`` record (None state: a tombstone)."""

    partition: int
    offset: int
    transactional_id: str
    producer_id: int = -1
    producer_epoch: int = -1
    state: str | None = None  # Kafka's names: Empty, Ongoing, PrepareCommit, CompleteAbort, ...
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass
class LogScan:
    batches: list[LoggedBatch]  # each partition's in offset order
    transaction_log: list[TxnLogRecord]  # each __transaction_state partition's in offset order
    compacted: set[int] = field(default_factory=set)  # __transaction_state partitions with records cleaned away
    topics: frozenset[str] = frozenset()  # the topics ``batches`` covers (empty: every topic decisions name)


@dataclass
class ReadBack:
    committed: list[Observed]  # read_committed, every partition from the start
    uncommitted: list[Observed]  # read_uncommitted, the same partitions
    ends: dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (high watermark, LSO)
    ctp_source_topic: str | None = None
    ctp_committed: dict[int, int] = field(default_factory=dict)  # source partition -> group offset
    # the logs on disk: after the run, and again after a restart
    logs: list[LogScan] = field(default_factory=list)
    # transactional id -> (state, producer id, epoch) as the coordinators describe it,
    # before the restart and after it
    coordinators_before: dict[str, tuple] | None = None
    coordinators_after: dict[str, tuple] | None = None
    # (transactional id, producer id, epoch) of every successful InitProducerId answer the
    # run's own raw requests received (the clients' are inside librdkafka)
    init_answers: list[tuple[str, int, int]] = field(default_factory=list)


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
    found: dict[str, tuple[str, str]] = {}  # each anomaly once, however many scans show it
    for n, scan in enumerate(read.logs):
        for cls, detail in check_log(scan):
            found.setdefault(detail, (cls, " (in the logs after the restart)" if n else ""))
    if read.logs:
        for cls, detail in check_init_answers(read.init_answers, read.logs[-1]):
            found.setdefault(detail, (cls, ""))
    if read.coordinators_before is not None and read.coordinators_after is not None:
        for cls, detail in check_restart(read.coordinators_before, read.coordinators_after):
            found.setdefault(detail, (cls, ""))
    for detail, (cls, when) in found.items():
        report.flag(cls, detail + when)
    return report


# -- the logs on disk ------------------------------------------------------------------

_DECISIONS = {"PrepareCommit": "COMMIT", "PrepareAbort": "ABORT"}


def check_log(scan: LogScan) -> list[tuple[str, str]]:
    """(anomaly class, detail) for each producer-identity or outcome anomaly in the logs."""
    return [*_shared_epochs(scan), *_double_decisions(scan), *_markers_against_decisions(scan)]


def _shared_epochs(scan: LogScan) -> list[tuple[str, str]]:
    out = []
    holders: dict[tuple[int, int], set] = defaultdict(set)
    for b in scan.batches:
        if b.marker is None:
            holders[(b.producer_id, b.producer_epoch)].update(b.writers)
    for (pid, epoch), writers in sorted(holders.items()):
        if len(writers) > 1:
            out.append(("shared_producer_epoch",
                        f"producer id {pid} epoch {epoch} written by {len(writers)} producers: {sorted(writers)}"))
    highest: dict[tuple[str, int], tuple[int, int]] = {}  # (transactional id, pid) -> (epoch, offset)
    for r in scan.transaction_log:
        if r.state is None or r.producer_id < 0:
            continue
        key = (r.transactional_id, r.producer_id)
        seen = highest.get(key)
        if seen is not None and r.producer_epoch < seen[0]:
            out.append(("shared_producer_epoch",
                        f"{r.transactional_id}: __transaction_state-{r.partition}@{r.offset} gives producer id "
                        f"{r.producer_id} epoch {r.producer_epoch} after epoch {seen[0]} (offset {seen[1]})"))
        elif seen is None or r.producer_epoch > seen[0]:
            highest[key] = (r.producer_epoch, r.offset)
    return out


def check_init_answers(answers: list[tuple[str, int, int]], scan: LogScan) -> list[tuple[str, str]]:
    """No (producer id, epoch) is handed to two InitProducerId callers of one
    transactional id, and each one handed out is in the transaction log (a coordinator
    writes it before it answers), unless that id's partition was compacted."""
    out = []
    compacted_ids = {r.transactional_id for r in scan.transaction_log if r.partition in scan.compacted}
    logged = {(r.transactional_id, r.producer_id, r.producer_epoch) for r in scan.transaction_log
              if r.state is not None}
    for (tid, pid, epoch), count in sorted(Counter(answers).items()):
        if count > 1:
            out.append(("shared_producer_epoch",
                        f"{tid}: InitProducerId gave producer id {pid} epoch {epoch} to {count} callers"))
        if (tid, pid, epoch) not in logged and tid not in compacted_ids:
            out.append(("shared_producer_epoch",
                        f"{tid}: InitProducerId gave producer id {pid} epoch {epoch}, which "
                        "__transaction_state does not hold"))
    return out


def _decisions(scan: LogScan):
    """Each transaction's decisions, per transactional id in log order: yields
    (record, decision) for every PrepareCommit/PrepareAbort with partitions, and
    (record, None) where a new transaction starts (Ongoing after a decision, Empty)."""
    for r in scan.transaction_log:
        if r.state in _DECISIONS and r.partitions:
            yield r, _DECISIONS[r.state]
        elif r.state in ("Ongoing", "Empty", None):
            yield r, None


def _double_decisions(scan: LogScan) -> list[tuple[str, str]]:
    out = []
    decided: dict[str, TxnLogRecord] = {}  # transactional id -> this transaction's decision
    for r, decision in _decisions(scan):
        if decision is None:  # a new transaction: a decision is only ever made on an Ongoing one
            decided.pop(r.transactional_id, None)
            continue
        first = decided.get(r.transactional_id)
        if first is None:
            decided[r.transactional_id] = r
        elif _DECISIONS[first.state] != decision and set(first.partitions) & set(r.partitions):
            out.append(("outcome_mismatch",
                        f"{r.transactional_id}: one transaction decided {_DECISIONS[first.state]} at "
                        f"__transaction_state-{first.partition}@{first.offset} (epoch {first.producer_epoch}) and "
                        f"{decision} at @{r.offset} (epoch {r.producer_epoch})"))
    return out


def _markers_against_decisions(scan: LogScan) -> list[tuple[str, str]]:
    """Per partition and producer id, the markers in log order must be the decisions of
    the transaction log that name the partition, in its order (same epoch, same kind);
    a marker written again (no data between, same epoch and kind) is a retry."""
    out = []
    compacted_ids = {r.transactional_id for r in scan.transaction_log if r.partition in scan.compacted}
    # (topic, partition, producer id) -> [decision record, kind, completed]
    expected: dict[tuple[str, int, int], list[list]] = defaultdict(list)
    owner: dict[int, str] = {}
    last: dict[str, TxnLogRecord] = {}  # transactional id -> its transaction's decision
    pending: dict[str, list[list]] = defaultdict(list)  # decided, not yet completed
    for r in scan.transaction_log:
        tid = r.transactional_id
        if r.state in ("CompleteCommit", "CompleteAbort"):
            for entry in pending.pop(tid, []):
                entry[2] = True
        elif r.state in _DECISIONS and r.partitions:
            prev = last.get(tid)
            if prev is not None and (prev.state, prev.producer_epoch, prev.partitions) == \
                    (r.state, r.producer_epoch, r.partitions):
                continue  # the same decision written again
            last[tid] = r
            owner[r.producer_id] = tid
            for topic, partition in r.partitions:
                if scan.topics and topic not in scan.topics:
                    continue  # a partition whose log was not read (__consumer_offsets)
                entry = [r, _DECISIONS[r.state], False]
                expected[(topic, partition, r.producer_id)].append(entry)
                pending[tid].append(entry)
        elif r.state in ("Ongoing", "Empty", None):
            last.pop(tid, None)
    markers: dict[tuple[str, int, int], list[tuple[LoggedBatch, bool]]] = defaultdict(list)
    data_since: dict[tuple[str, int, int], bool] = defaultdict(bool)
    for b in scan.batches:
        key = (b.topic, b.partition, b.producer_id)
        if b.marker is None:
            data_since[key] = True
        else:
            markers[key].append((b, data_since[key]))
            data_since[key] = False
    for key in sorted(set(markers) | set(expected)):
        topic, partition, pid = key
        if owner.get(pid) in compacted_ids or (pid not in owner and compacted_ids):
            continue  # its decisions may have been cleaned away
        out += _align(topic, partition, pid, markers.get(key, []), expected.get(key, []))
    return out


def _align(topic: str, partition: int, pid: int, got: list[tuple[LoggedBatch, bool]],
           wanted: list[list]) -> list[tuple[str, str]]:
    """Matches one partition's markers of one producer with the transaction log's
    decisions naming the partition. The markers that end data drive it: each must be the
    next decision of its epoch. A marker with no data before it is a transaction that
    wrote nothing here (the next decision, when it differs from the marker before it), or
    a marker written again (a retry whose answer was lost), which only accounts for
    decisions passed over."""
    out = []
    j = 0
    # markers with no data before them that may stand for a transaction which wrote
    # nothing here (or be retries): they account for decisions passed over, later too,
    # as a run of same decisions may have been matched one place off
    dataless: list[tuple[int, str]] = []

    def passed_over(upto: int) -> None:
        for r, decision, completed in wanted[j:upto]:
            if (r.producer_epoch, decision) in dataless:
                dataless.remove((r.producer_epoch, decision))
            elif completed:
                out.append(("outcome_mismatch",
                            f"{topic}-{partition}: no {decision} marker of producer {pid} epoch "
                            f"{r.producer_epoch} for the completed transaction of "
                            f"__transaction_state-{r.partition}@{r.offset}"))

    previous = None
    for b, had_data in got:
        said = (b.producer_epoch, b.marker)
        if not had_data:
            if said != previous and j < len(wanted) and (wanted[j][0].producer_epoch, wanted[j][1]) == said:
                j += 1  # not a retry of the marker before it: a transaction that wrote nothing here
            else:
                dataless.append(said)
            previous = said
            continue
        previous = said
        k = next((k for k in range(j, len(wanted)) if wanted[k][0].producer_epoch == b.producer_epoch), None)
        if k is not None and wanted[k][1] != b.marker:
            # the next decision of this epoch: k may be a transaction that wrote nothing
            # here, if a later one of this epoch says the same as the marker
            k2 = next((k2 for k2 in range(k, len(wanted)) if wanted[k2][0].producer_epoch == b.producer_epoch
                       and wanted[k2][1] == b.marker and (wanted[k][0].producer_epoch, wanted[k][1]) in dataless),
                      None)
            k = k if k2 is None else k2
        if k is None or wanted[k][1] != b.marker:
            out.append(("outcome_mismatch",
                        f"{topic}-{partition}@{b.offset}: {b.marker} marker of producer {pid} epoch "
                        f"{b.producer_epoch}, where the transaction log says " + (
                            "no decision" if k is None else
                            f"{wanted[k][1]} (__transaction_state-{wanted[k][0].partition}@{wanted[k][0].offset})")))
            if k is None:
                continue  # ends no transaction the log knows of
        passed_over(k)
        j = k + 1  # the transaction it ended (the right way or not)
    passed_over(len(wanted))
    return out


def check_restart(before: dict[str, tuple], after: dict[str, tuple]) -> list[tuple[str, str]]:
    """A transaction the coordinators described before a restart (no client running) must
    be described the same after it."""
    return [("outcome_mismatch", f"{tid}: {before[tid]} before the restart, {after.get(tid)} after it")
            for tid in sorted(before) if after.get(tid) != before[tid]]


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
