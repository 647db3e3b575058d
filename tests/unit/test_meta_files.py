"""The metadata files (meta/*.json, the recovery points) are read and written as before
with json loaded on first use, and a fresh broker writes none it would read back empty:
no file and an empty one mean the same state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.cluster.replication import ReplicaState
from broker.log.files import read_json, write_json

VALUES = [{}, [], {"b": [1, 2, {"c": None}], "a": "é"}, [{"name": "t", "id": "x", "partitions": 3, "configs": {}}]]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("options", [{}, {"indent": 1}, {"indent": 1, "sort_keys": True}, {"separators": (",", ":")}])
def test_write_json_writes_the_bytes_json_dumps_makes_and_read_json_reads_them_back(tmp_path, value, options):
    path = tmp_path / "m.json"
    write_json(path, value, **options)
    assert path.read_bytes() == json.dumps(value, **options).encode()
    assert read_json(path) == value
    assert not path.with_name("m.json.tmp").exists()


def test_read_json_of_no_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "none.json")


def test_replica_state_writes_no_empty_file_and_keeps_what_it_assigned(tmp_path):
    path = tmp_path / "partitions.json"
    fresh = ReplicaState(path, [0, 1, 2])
    fresh.save()
    assert not path.exists()  # nothing to keep: a restart reads the same empty state
    assert ReplicaState(path, [0, 1, 2]).partitions == {}

    fresh.assign("t", 0, 3)
    fresh.assign("t", 1, 2)
    fresh.save()
    reopened = ReplicaState(path, [0, 1, 2])
    for index in (0, 1):
        assert reopened.assign("t", index, 3) == fresh.partitions[("t", index)]

    reopened.forget("t", 0)
    reopened.forget("t", 1)
    reopened.save()
    assert ReplicaState(path, [0, 1, 2])._journal.load() == {}  # the forgotten ones are recorded gone
    assert ReplicaState(path, [0, 1, 2]).assign("t", 0, 1).leader_epoch == 0


def test_json_and_random_load_when_first_used(tmp_path):
    """Their users import them lazily; each still works in a process that has not loaded
    them yet (a fresh interpreter, so this test's own imports do not count)."""
    script = textwrap.dedent("""
        import sys
        sys.modules["hypothesis"] = None  # as a broker keeps it out (kio would load it)
        from pathlib import Path
        from broker.faults.requests import FaultRules
        from broker.cluster.network import LinkFaults
        from broker.cluster.replication import ReplicaState
        from broker.log.files import read_json, write_json
        assert "json" not in sys.modules and "random" not in sys.modules, sorted(sys.modules)
        path = Path(sys.argv[1]) / "m.json"
        write_json(path, {"a": 1})
        assert read_json(path) == {"a": 1}
        assert LinkFaults(loss=0.5, seed=7).seed == 7 and LinkFaults().seed is not None
        rule = FaultRules().add("error", error=7, probability=0.5)
        assert rule.seed is not None
        state = ReplicaState(path.with_name("p.json"), [0, 1])
        state.assign("t", 0, 2)
        assert state.shuffle() == [("t", 0)]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})  # this checkout's broker
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_declared_leaderships_are_what_a_start_would_have_assigned(tmp_path):
    """A start declares each topic's leaderships and assigns them when one is first asked
    for; a change of the nodes assigns every declared one first, so each gets what it
    would have got at start: the same leaders, epochs and recorded file."""
    import shutil

    stored = tmp_path / "stored"
    stored.mkdir()
    before = ReplicaState(stored / "partitions.json", [0, 1, 2])
    for i in range(4):
        before.assign("t", i, 2)
    before.set_leader("t", 1, before.partitions[("t", 1)].replicas[1], "a failover before the stop")
    before.save()

    def started(name: str, lazy: bool) -> ReplicaState:
        shutil.copytree(stored, tmp_path / name)
        state = ReplicaState(tmp_path / name / "partitions.json", [0, 1, 2])
        if lazy:
            state.declare("t", 4, 2)
        else:
            for i in range(4):
                state.assign("t", i, 2)
        return state

    eager, lazy = started("eager", False), started("lazy", True)
    assert lazy.partitions == {} and lazy.get("u", 0) is None
    assert lazy.get("t", 1) == eager.partitions[("t", 1)]  # the failover's leader back on its first replica
    assert set(lazy.partitions) == {("t", i) for i in range(4)}

    eager, lazy = started("eager-2", False), started("lazy-2", True)
    assert eager.node_down(0) == lazy.node_down(0)
    assert eager.partitions == lazy.partitions
    assert eager._journal.load() == lazy._journal.load()
