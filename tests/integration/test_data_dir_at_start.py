"""A data directory a broker cannot have: another broker holds it (its ``.lock``), or it
cannot be written. Either way ``serve`` says so in one line and exits with status 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.testing import BrokerProcess
from tests.integration.test_read_only_data_dir import NO_OVERRIDE

pytestmark = pytest.mark.timeout(120)


def _serve(data_dir: Path, *wrapper: str) -> subprocess.CompletedProcess:
    """A broker that should refuse to start (killed by the timeout if it serves instead)."""
    return subprocess.run([*wrapper, sys.executable, "-m", "broker.program", "serve", "--port", "0",
                           "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60)


def test_a_second_broker_on_a_served_directory_refuses_to_start_and_names_the_first(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data, nodes=3).start()  # one process, one data directory for its nodes
    try:
        topic = first.create_topic(partitions=3)
        second = _serve(data)
        assert second.returncode == 1
        assert second.stderr.strip() == f"Error: data directory '{data}' is in use by another broker (pid {first.proc.pid})"
        assert second.stdout == ""
        assert not (data / "meta" / "clean-shutdown").exists()  # the refused one wrote nothing
        first.assert_topic_holds(topic, [])  # the first serves on

        first.kill()  # kill -9 frees the lock with the process
        first.start()
        first.assert_topic_holds(topic, [])
    finally:
        if first.alive:
            first.kill()


def test_a_directory_under_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"
    result = _serve(data)
    assert result.returncode == 1
    assert result.stderr.strip() == f"Error: data directory '{data}' is not usable: Not a directory ({data})"


@pytest.mark.parametrize("existing", [False, True], ids=["new", "used-before"])
def test_an_unwritable_data_directory_is_refused_in_one_line(tmp_path, existing):
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run a broker bound by file permissions")
    data = tmp_path / "data"
    if existing:  # its .lock and meta/ from an earlier run are still there
        BrokerProcess(data).start().stop()
        assert (data / ".lock").exists()
    else:
        data.mkdir()
    data.chmod(0o555)
    try:
        result = _serve(data, *NO_OVERRIDE)
    finally:
        data.chmod(0o755)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"Error: data directory '{data}' is not ")
    assert "Traceback" not in result.stderr
