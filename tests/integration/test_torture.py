"""The bounded crash-torture run CI does: 10 kill -9 / restart cycles under transactional,
idempotent and consume-transform-produce load, then the anomaly checker over everything.
`make torture` runs the long version."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CYCLES = int(os.environ.get("TORTURE_CYCLES", "10"))


@pytest.mark.torture
@pytest.mark.timeout(900)
def test_bounded_torture_run_has_no_anomaly(tmp_path):
    args = [sys.executable, "-m", "torture", "--cycles", str(CYCLES), "--workdir", str(tmp_path / "torture")]
    if "TORTURE_SEED" in os.environ:
        args += ["--seed", os.environ["TORTURE_SEED"]]
    run = subprocess.run(args, capture_output=True, text=True, timeout=850)
    summary = [line for line in run.stdout.splitlines() if line.startswith("torture:")]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert summary and f"cycles={CYCLES} " in summary[-1] and " OK " in summary[-1], run.stdout + run.stderr[-6000:]
