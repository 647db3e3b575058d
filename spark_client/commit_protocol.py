"""The driver's half of the sink's two-phase commit (shared/reference/spark-exactly-once.md).

Tasks leave their transactions open and send a ``TaskCommit``. For a batch the driver:
1. finishes a batch that was decided but not finished (a COMMITTING record without
   its COMMITTED) by re-sending EndTxn(commit): a commit that already completed
   answers NONE;
2. aborts every transaction of a replayed batch (batch id <= the last committed one);
3. refuses to decide when a transaction is older than transaction.timeout.ms: the
   broker aborts such transactions, so the batch fails loudly and Spark redoes it;
4. writes COMMITTING(batch, winners) to the control topic: the decision;
5. sends EndTxn(commit) for every winner, then writes COMMITTED(batch);
6. resolves every other attempt of the query still open: failed or killed tasks,
   losing speculative copies, what a crashed driver left (``resolve_open``).
A task that wrote nothing opened no transaction and sends none: a batch whose tasks
all wrote nothing commits with no transaction and advances. At step 5 a transaction
that never began (0 records, Empty at the epoch its task reported: what an earlier
version of the task reported for no rows) has nothing to commit; any other that EndTxn
does not commit is a ``TransactionLostError`` naming the state and epoch the broker
shows: never a silent loss.

Liveness: every attempt's transactional id starts with ``prefix-scope-`` (scope: the
query id or write id), so the driver finds them all with ListTransactions. When a
query starts, at every commit and at every abort, it resolves them: the decided batch
(COMMITTING recorded) is committed, anything else open is fenced and aborted
(InitProducerId on the id does both). Nothing of a crashed run holds the last stable
offset until transaction.timeout.ms.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from spark_client.control import COMMITTED, COMMITTING, ControlLog, Decision, TxnRef
from spark_client.open_transactions import EMPTY, ongoing_transactional_ids
from spark_client.options import SinkOptions
from spark_client.wire import Client, TxnDescription, describe_transactions, end_txns, fence

try:
    from pyspark.sql.datasource import WriterCommitMessage
except ImportError:  # the protocol itself does not need Spark
    WriterCommitMessage = object

log = logging.getLogger("eosbroker.spark")

_ABORT_IS_DONE = frozenset({
    ErrorCode.none, ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state,
    ErrorCode.invalid_producer_id_mapping,
})


@dataclass(frozen=True)
class TaskCommit(WriterCommitMessage):
    """What a task tells the driver: its transaction (if it wrote anything) and where it came from."""

    scope: str  # the streaming query id, or the batch write's id
    batch_id: int
    run_id: str
    partition: int
    attempt: int
    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    count: int
    started_ms: int

    @property
    def txn(self) -> TxnRef | None:
        if self.transactional_id is None:
            return None
        return TxnRef(self.transactional_id, self.producer_id, self.producer_epoch, self.partition, self.attempt,
                      self.count, self.started_ms)


class TransactionTimedOutError(RuntimeError):
    """A transaction is, or may be, past transaction.timeout.ms: the batch cannot be committed safely."""


class TransactionLostError(RuntimeError):
    """The broker did not commit a transaction of a batch the driver had decided to commit.

    ``lost`` holds the transactional ids; the message says what the broker answered."""

    def __init__(self, message: str, batch_id: int | None = None, scope: str | None = None,
                 lost: tuple[str, ...] = ()) -> None:
        super().__init__(message)  # args == (message,): pickling rebuilds from it and restores the rest
        self.batch_id = batch_id
        self.scope = scope
        self.lost = tuple(lost)


def transactional_id(prefix: str, scope: str, batch_id: int, partition: int, attempt: int, run_id: str) -> str:
    """Unique per attempt (attempts never fence each other) and per run of the query: a
    replayed batch after a driver restart must not re-initialise, and so abort, the
    transactions the previous run decided to commit."""
    return f"{prefix}-{scope}-{batch_id}-{partition}-{attempt}-{run_id}"


_ATTEMPT_SUFFIX = re.compile(r"\d+-\d+-\d+-[0-9a-z]+")


def in_scope(txn_id: str, prefix: str, scope: str) -> bool:
    """Whether ``txn_id`` is an attempt of (prefix, scope): scope "w" must not claim "w-2"'s ids."""
    head = f"{prefix}-{scope}-"
    return txn_id.startswith(head) and _ATTEMPT_SUFFIX.fullmatch(txn_id[len(head):]) is not None


def control_key(opts: SinkOptions, scope: str) -> str:
    return f"{opts.transactional_id_prefix}/{scope}"


def safety_margin_ms(timeout_ms: int) -> int:
    return min(5000, timeout_ms // 10)


class Committer:
    """Runs commit/abort for one batch on the driver."""

    def __init__(self, opts: SinkOptions, scope: str) -> None:
        self.opts = opts
        self.scope = scope
        self.cluster = Client(opts.bootstrap, client_id="eosbroker-spark-driver", security=opts.security)
        self.control = ControlLog(self.cluster, opts.bootstrap, opts.control_topic, control_key(opts, scope))
        self.deadline = time.monotonic() + opts.commit_timeout_ms / 1000

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> "Committer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- commit -----------------------------------------------------------------------

    def commit(self, batch_id: int, messages: list[TaskCommit | None]) -> None:
        winners = tuple(m.txn for m in messages if m is not None and m.txn is not None)
        self.control.ensure_topic()
        last = self.recover()
        if last is not None and batch_id <= last:
            log.warning("batch %d of %s was already committed (last committed %d): aborting its %d replayed "
                        "transactions", batch_id, self.scope, last, len(winners))
            self.abort_txns(winners)
            self.resolve_open()
            return
        self.check_fresh(batch_id, winners)
        self._kill_hook("before-decision", batch_id)
        decision = Decision(batch_id, COMMITTING, winners)
        self.control.append(decision)
        self.finish(decision)
        self._kill_hook("after-committed", batch_id)
        self.resolve_open(keep={t.transactional_id for t in winners})

    def start(self) -> None:
        """A query (or a batch write rerun under its write id) starts: before any of its
        tasks runs, finish the decided batch and abort every other attempt left open."""
        self.control.ensure_topic()
        self.recover()
        self.resolve_open()

    def resolve_open(self, keep: set[str] = frozenset()) -> None:
        """Fences and aborts every open transaction of this query except ``keep``: they
        belong to attempts that failed, lost, or were written by a driver that crashed
        before deciding (a decided batch was finished by ``recover`` first)."""
        prefix = self.opts.transactional_id_prefix
        try:
            found = ongoing_transactional_ids(self.cluster, f"{prefix}-{self.scope}-", self.deadline)
        except Exception as e:  # liveness only: never fail a commit over it
            log.warning("could not list the open transactions of %s: %s", self.scope, e)
            return
        for txn_id in sorted(t for t in found if t not in keep and in_scope(t, prefix, self.scope)):
            try:
                fence(self.cluster, txn_id, self.deadline)
                log.info("aborted %s, left open by an earlier attempt of %s", txn_id, self.scope)
            except Exception as e:  # the next commit tries again
                log.warning("could not abort %s: %s", txn_id, e)

    def recover(self) -> int | None:
        """Finishes a decided but unfinished batch; returns the last committed batch id (None: none)."""
        latest = self.control.latest()
        if latest is None:
            return None
        if latest.state == COMMITTING:
            log.warning("finishing batch %d of %s, decided by an earlier driver", latest.batch_id, self.scope)
            self.finish(latest)
        return latest.batch_id

    def finish(self, decision: Decision) -> None:
        handles = [t.handle for t in decision.txns]
        results = {}
        if self._kill_armed("during-commit", decision.batch_id) and len(handles) > 1:
            results = end_txns(self.cluster, handles[:1], True, self.deadline)
            self._kill_hook("during-commit", decision.batch_id)
        results.update(end_txns(self.cluster, handles[len(results):], True, self.deadline))
        failed = [t for t in decision.txns if results[t.transactional_id] != ErrorCode.none]
        if failed:
            states, unknown = self._describe(failed)
            lost = [t for t in failed if not _never_began(t, results[t.transactional_id],
                                                          states.get(t.transactional_id))]
            if lost:
                raise TransactionLostError(self._lost_message(decision.batch_id, lost, results, states, unknown),
                                           decision.batch_id, self.scope, tuple(t.transactional_id for t in lost))
            log.info("batch %d of %s: %d of its transactions never began (0 records): nothing to commit",
                     decision.batch_id, self.scope, len(failed))
        self.control.append(Decision(decision.batch_id, COMMITTED, decision.txns))

    def check_fresh(self, batch_id: int, txns: tuple[TxnRef, ...]) -> None:
        timeout = self.opts.transaction_timeout_ms
        limit = timeout - safety_margin_ms(timeout)
        now = int(time.time() * 1000)
        stale = [t for t in txns if now - t.started_ms >= limit]
        if not stale:
            return
        self.abort_txns(txns)
        oldest = max(now - t.started_ms for t in stale)
        raise TransactionTimedOutError(
            f"eosbroker sink: batch {batch_id} of {self.scope} NOT committed: {len(stale)} of its transactions "
            f"(e.g. {stale[0].transactional_id}, partition {stale[0].partition}) have been open {oldest} ms, "
            f"at or past transaction.timeout.ms={timeout} less a {safety_margin_ms(timeout)} ms margin. The "
            f"broker aborts a transaction older than transaction.timeout.ms, so committing could lose records; "
            f"the batch's transactions were aborted and nothing of it is visible. Raise transaction.timeout.ms "
            f"above batch time + commit time + driver restart time (the broker's transaction.max.timeout.ms "
            f"caps it).")

    def _describe(self, txns: list[TxnRef]) -> tuple[dict[str, TxnDescription], str]:
        """What the broker shows for ``txns``, and why it is not known if it is not."""
        try:
            return describe_transactions(self.cluster, [t.transactional_id for t in txns], self.deadline), ""
        except Exception as e:  # a diagnosis only
            log.warning("could not describe the transactions EndTxn did not commit: %s", e)
            return {}, f"DescribeTransactions failed: {e}"

    def _lost_message(self, batch_id: int, lost: list[TxnRef], results: dict[str, ErrorCode],
                      states: dict[str, TxnDescription], unknown: str) -> str:
        lines = []
        for t in lost:
            d = states.get(t.transactional_id)
            if d is None:
                now = f"state not known ({unknown or 'not described'})"
            elif d.error != ErrorCode.none:
                now = f"DescribeTransactions answered {d.error.name.upper()}"
            else:
                now = f"now {d.state} with producer id {d.producer_id}, producer epoch {d.producer_epoch}"
            lines.append(f"  {t.transactional_id} (producer id {t.producer_id}, reported epoch {t.producer_epoch}, "
                         f"partition {t.partition}, {t.count} records): EndTxn(commit) answered "
                         f"{results[t.transactional_id].name.upper()}, {now}")
        return (
            f"eosbroker sink: batch {batch_id} of {self.scope} was decided (COMMITTING is in the control topic) "
            f"but the broker did not commit {len(lost)} of its transactions: they are no longer open at the "
            f"producer id and epoch their tasks reported. Their records are LOST while the batch's other "
            f"transactions are committed:\n" + "\n".join(lines) +
            f"\nA broker aborts an open transaction that outlives its transaction.timeout.ms (this sink asks for "
            f"transaction.timeout.ms={self.opts.transaction_timeout_ms}) and one whose transactional id another "
            f"producer initialises. The query keeps failing on this batch until an operator decides (restart "
            f"with a new checkpoint or transactional.id.prefix after restoring the lost records).")

    # -- abort ------------------------------------------------------------------------

    def abort(self, batch_id: int, messages: list[TaskCommit | None]) -> None:
        """Spark gave up on the batch: roll a decided batch forward, abort anything else."""
        self.control.ensure_topic()
        latest = self.control.latest()
        if latest is not None and latest.state == COMMITTING and latest.batch_id == batch_id:
            log.warning("abort of batch %d of %s after its decision: rolling forward", batch_id, self.scope)
            self.finish(latest)
        else:
            self.abort_txns(tuple(m.txn for m in messages if m is not None and m.txn is not None))
        self.resolve_open()

    def abort_txns(self, txns: tuple[TxnRef, ...]) -> None:
        if not txns:
            return
        results = end_txns(self.cluster, [t.handle for t in txns], False, self.deadline)
        for txn_id, error in results.items():
            if error not in _ABORT_IS_DONE:
                log.warning("EndTxn(abort) for %s answered %s", txn_id, error.name.upper())

    def _kill_armed(self, point: str, batch_id: int) -> bool:
        hook = self.opts.hook_kill_driver
        return hook is not None and hook[:2] == (point, batch_id) and _descends_from(hook[2])

    def _kill_hook(self, point: str, batch_id: int) -> None:
        """Test hook: SIGKILL the whole driver at ``point`` of this batch's commit."""
        if self._kill_armed(point, batch_id):
            # The driver's process group (Python driver, JVM), then the group of the Python
            # daemon this worker belongs to (pyspark's daemon has its own).
            os.killpg(self.opts.hook_kill_driver[2], signal.SIGKILL)
            os.killpg(os.getpgrp(), signal.SIGKILL)


def _never_began(t: TxnRef, error: ErrorCode, now: TxnDescription | None) -> bool:
    """Whether EndTxn(commit) failed only because ``t`` never began: its task wrote 0
    records and the id is still Empty at the producer id and epoch the task reported (an
    abort or a fence would have moved it on). There is nothing to commit."""
    return (t.count == 0 and error == ErrorCode.invalid_txn_state and now is not None
            and now.error == ErrorCode.none and now.state == EMPTY
            and (now.producer_id, now.producer_epoch) == (t.producer_id, t.producer_epoch))


def _descends_from(pid: int) -> bool:
    """Whether ``pid`` is an ancestor of this process (Linux /proc), so the hook never kills a stranger."""
    current = os.getpid()
    while current > 1:
        if current == pid:
            return True
        try:
            with open(f"/proc/{current}/stat") as f:
                current = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False
