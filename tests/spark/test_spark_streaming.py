"""Streaming exactly once across a driver crash: the driver (JVM and Python workers) is
SIGKILLed right after batch 2's commit decision is written, before any EndTxn; the
query restarts from its checkpoint, finishes batch 2's decided transactions, aborts
Spark's replay of batch 2 and carries on. No record is lost or duplicated."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.spark.helpers import consume, create_topic, transaction_states

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
FILES, PER_FILE = 5, 40


def _run(args: list[str], log: Path) -> subprocess.CompletedProcess:
    with open(log, "ab") as out:
        return subprocess.run([sys.executable, "-m", "tests.spark.streaming_job", *args], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True, timeout=240)


def test_driver_killed_after_the_decision_restarts_without_loss_or_duplicates(broker, tmp_path):
    topic, prefix = f"stream-{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 3)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(FILES):
        rows = [{"id": f * PER_FILE + i, "payload": f"row-{f * PER_FILE + i}"} for i in range(PER_FILE)]
        (inputs / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in rows))
    args = [broker.bootstrap, str(inputs), str(tmp_path / "checkpoint"), topic, prefix]
    log = tmp_path / "job.log"

    killed = _run(args + ["2"], log)
    assert killed.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    decided = {t: s for t, s in transaction_states(broker.bootstrap, prefix).items() if "-2-" in t}
    assert decided and set(decided.values()) == {"Ongoing"}  # decided, not yet committed
    assert len(consume(broker.bootstrap, topic, 3, settle=0.5)) == 2 * PER_FILE  # batches 0 and 1

    restarted = _run(args, log)
    assert restarted.returncode == 0, log.read_text()[-3000:]
    values = [m.value() for m in consume(broker.bootstrap, topic, 3)]
    assert len(values) == FILES * PER_FILE
    assert set(values) == {f"row-{i}".encode() for i in range(FILES * PER_FILE)}
    states = transaction_states(broker.bootstrap, prefix)
    batch_2 = {t: s for t, s in states.items() if f"-2-" in t}
    assert {batch_2[t] for t in decided} == {"CompleteCommit"}  # finished by the restarted driver
    replayed = [s for t, s in batch_2.items() if t not in decided]
    assert replayed and set(replayed) == {"CompleteAbort"}  # Spark's replay of batch 2
