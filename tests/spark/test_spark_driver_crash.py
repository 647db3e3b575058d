"""Exactly once and live across driver crashes. The driver (JVM and Python workers) is
SIGKILLed at each point of a batch's commit: before the decision, between the EndTxn
calls, after COMMITTED (before Spark's own commit log); each time it restarts from its
checkpoint (streaming) or reruns under the same write.id (batch). Afterwards a
read_committed reader sees every row exactly once and the last stable offset equals the
high watermark on every partition: the restarted driver committed what was decided and
aborted what the crashed run left open, instead of leaving it to transaction.timeout.ms
(15 minutes here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spark_client.sink import query_id_from_checkpoint
from tests.broker_process import wait_until
from tests.spark.helpers import consume, create_topic, last_stable_offsets, nothing_open, transaction_states

# Seven Spark drivers in all, each a fresh JVM: generous bounds for a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3


def _run(args: list[str], log: Path, kill_at: str | None = None) -> None:
    """One driver run in a process group of its own (killed whole if it overruns)."""
    with open(log, "ab") as out:
        job = subprocess.Popen([sys.executable, "-m", "tests.spark.driver_job", *args, *([kill_at] if kill_at else [])],
                               cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = job.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            raise
    expected = -signal.SIGKILL if kill_at else 0
    assert returncode == expected, f"{kill_at}: exit {returncode}\n" + log.read_text()[-4000:]


def _by_batch(states: dict[str, str], head: str) -> dict[int, dict[str, str]]:
    """Transaction states of one query by batch: ids are head + batch-partition-attempt-run."""
    out: dict[int, dict[str, str]] = {}
    for txn_id, state in states.items():
        if txn_id.startswith(head):
            out.setdefault(int(txn_id[len(head):].split("-")[0]), {})[txn_id] = state
    return out


def _assert_exactly_once_and_live(bootstrap: str, topic: str, prefix: str, expected: set[bytes]) -> None:
    wait_until(lambda: nothing_open(bootstrap, topic, PARTITIONS), timeout=10,
               message=f"LSO == high watermark on every partition: {last_stable_offsets(bootstrap, topic, PARTITIONS)}")
    values = [m.value() for m in consume(bootstrap, topic, PARTITIONS)]
    assert len(values) == len(expected) and set(values) == expected
    assert "Ongoing" not in transaction_states(bootstrap, prefix).values()


@pytest.mark.long  # minutes: one driver kill per commit point; make test keeps the batch rerun below
def test_streaming_query_killed_at_each_commit_point_restarts_exactly_once_and_live(broker, tmp_path):
    files, per_file = 6, 40
    topic, prefix = f"stream-{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(files):
        rows = [{"id": f * per_file + i, "payload": f"row-{f * per_file + i}"} for i in range(per_file)]
        (inputs / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in rows))
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "job.log"
    args = ["stream", broker.bootstrap, topic, prefix, str(inputs), str(checkpoint)]

    _run(args, log, "before-decision:1")
    head = f"{prefix}-{query_id_from_checkpoint(str(checkpoint))}-"
    batches = _by_batch(transaction_states(broker.bootstrap, prefix), head)
    crashed_1 = batches[1]
    assert len(crashed_1) == 2 and set(crashed_1.values()) == {"Ongoing"}  # written, never decided
    assert not nothing_open(broker.bootstrap, topic, PARTITIONS)
    assert len(consume(broker.bootstrap, topic, PARTITIONS, settle=0.5)) == per_file  # batch 0

    _run(args, log, "during-commit:3")
    batches = _by_batch(transaction_states(broker.bootstrap, prefix), head)
    assert {batches[1][t] for t in crashed_1} == {"Empty"}  # fenced and aborted by the restarted driver
    assert sorted(batches[3].values()) == ["CompleteCommit", "Ongoing"]  # one of two EndTxn(commit) sent
    decided_3 = batches[3]

    _run(args, log, "after-committed:4")
    batches = _by_batch(transaction_states(broker.bootstrap, prefix), head)
    assert {batches[3][t] for t in decided_3} == {"CompleteCommit"}  # finished by the next driver
    committed_4 = batches[4]
    assert set(committed_4.values()) == {"CompleteCommit"}

    _run(args, log)
    batches = _by_batch(transaction_states(broker.bootstrap, prefix), head)
    replayed_4 = {t: s for t, s in batches[4].items() if t not in committed_4}
    assert replayed_4 and set(replayed_4.values()) == {"CompleteAbort"}  # Spark's replay of batch 4
    _assert_exactly_once_and_live(broker.bootstrap, topic, prefix,
                                  {f"row-{i}".encode() for i in range(files * per_file)})


def test_batch_write_rerun_under_its_write_id_after_driver_crashes(broker, tmp_path):
    rows = 300
    topic, prefix = f"batch-{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    log, head = tmp_path / "job.log", f"{prefix}-w1-0-"
    args = ["batch", broker.bootstrap, topic, prefix, str(rows), "w1"]

    _run(args, log, "before-decision:0")
    crashed = transaction_states(broker.bootstrap, head)
    assert len(crashed) == 3 and set(crashed.values()) == {"Ongoing"}
    assert not nothing_open(broker.bootstrap, topic, PARTITIONS)

    _run(args, log, "during-commit:0")
    states = transaction_states(broker.bootstrap, head)
    assert {states[t] for t in crashed} == {"Empty"}  # the rerun aborted the first run's transactions
    decided = {t: s for t, s in states.items() if t not in crashed}
    assert sorted(decided.values()) == ["CompleteCommit", "Ongoing", "Ongoing"]

    _run(args, log)
    states = transaction_states(broker.bootstrap, head)
    assert {states[t] for t in decided} == {"CompleteCommit"}  # the third run finished the second's commit
    replayed = {t: s for t, s in states.items() if t not in crashed and t not in decided}
    assert len(replayed) == 3 and set(replayed.values()) == {"CompleteAbort"}  # and wrote nothing itself
    _assert_exactly_once_and_live(broker.bootstrap, topic, prefix, {f"row-{i}".encode() for i in range(rows)})
