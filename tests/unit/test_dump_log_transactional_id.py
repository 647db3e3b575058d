"""eosbroker dump-log --transactional-id: the right __transaction_state partition found
from a data directory, only that id's records printed, progress on request."""

from __future__ import annotations

import json

from click.testing import CliRunner

from broker.commands import main
from coordinator.partitioning import partition_for
from coordinator.transaction.log_codec import TransactionLogValue, encode_key, encode_value
from coordinator.transaction.metadata import TransactionState
from protocol.records import build_batch

T0 = 1_700_000_000_000
PARTITIONS = 4


def dump(*args):
    return CliRunner().invoke(main, ["dump-log", *map(str, args)])


def _value(epoch: int, state: TransactionState) -> bytes:
    return encode_value(TransactionLogValue(producer_id=7, producer_epoch=epoch, transaction_timeout_ms=60000,
                                            transaction_status=state.id, transaction_partitions=(("t", (0,)),),
                                            transaction_last_update_timestamp_ms=T0 + epoch,
                                            transaction_start_timestamp_ms=T0), 0)


def _ids_on(partition: int, count: int) -> list[str]:
    return [f"app-{i}" for i in range(200) if partition_for(f"app-{i}", PARTITIONS) == partition][:count]


def _data_dir(tmp_path, registry: bool = True):
    """A data directory with __transaction_state-0..3; two ids share one partition."""
    data = tmp_path / "data"
    target = partition_for("app-0", PARTITIONS)
    mine, neighbour = _ids_on(target, 2)
    for p in range(PARTITIONS):
        (data / f"__transaction_state-{p}").mkdir(parents=True)
    d = data / f"__transaction_state-{target}"
    (d / "00000000000000000000.log").write_bytes(
        build_batch([(encode_key(mine), _value(0, TransactionState.ONGOING), [], T0)], base_offset=0)
        + build_batch([(encode_key(neighbour), _value(0, TransactionState.ONGOING), [], T0)], base_offset=1))
    (d / "00000000000000000002.log").write_bytes(
        build_batch([(encode_key(mine), _value(1, TransactionState.COMPLETE_COMMIT), [], T0)], base_offset=2))
    if registry:
        (data / "meta").mkdir()
        (data / "meta" / "topics.json").write_text(json.dumps(
            [{"name": "__transaction_state", "id": "00000000-0000-0000-0000-000000000001",
              "partitions": PARTITIONS, "configs": {}}]))
    return data, target, mine, neighbour


def test_finds_the_partition_and_prints_only_that_id(tmp_path):
    data, target, mine, neighbour = _data_dir(tmp_path)
    result = dump("--transactional-id", mine, "--data-dir", data)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (f"Transactional id '{mine}' is in __transaction_state-{target} "
                        f"(partition {target} of {PARTITIONS}): {data / f'__transaction_state-{target}'}")
    records = [line for line in lines if line.startswith("|")]
    assert len(records) == 2 and all(f"transactionalId: {mine} " in r for r in records)
    assert "state: Ongoing" in records[0] and "state: CompleteCommit" in records[1]
    assert neighbour not in result.stdout and "baseOffset:" not in result.stdout


def test_without_a_registry_the_partition_directories_give_the_count(tmp_path):
    data, target, mine, _ = _data_dir(tmp_path, registry=False)
    result = dump("--transactional-id", mine, "--data-dir", data)
    assert result.exit_code == 0, result.output
    assert f"(partition {target} of {PARTITIONS})" in result.stdout


def test_an_unknown_id_says_so(tmp_path):
    data, target, _, _ = _data_dir(tmp_path)
    stranger = next(i for i in (f"x-{n}" for n in range(200)) if partition_for(i, PARTITIONS) == target)
    result = dump("--transactional-id", stranger, "--data-dir", data)
    assert result.exit_code == 0
    assert f"No records of transactional id '{stranger}'" in result.stdout


def test_bad_input(tmp_path):
    data, _, mine, _ = _data_dir(tmp_path)
    both = dump("--transactional-id", mine, "--data-dir", data, data / "x.log")
    assert both.exit_code == 2 and "either PATHS or --transactional-id" in both.output
    neither = dump()
    assert neither.exit_code == 2 and "give the files to dump, or --transactional-id" in neither.output
    missing = dump("--transactional-id", mine, "--data-dir", tmp_path / "nowhere")
    assert missing.exit_code == 1 and "no data directory" in missing.output
    empty = tmp_path / "empty"
    empty.mkdir()
    none = dump("--transactional-id", mine, "--data-dir", empty)
    assert none.exit_code == 1 and "holds no __transaction_state partitions" in none.output
    (data / "meta" / "topics.json").write_text("{not json")
    broken = dump("--transactional-id", mine, "--data-dir", data)
    assert broken.exit_code == 1 and "cannot read the topic registry" in broken.output


def test_progress_on_stderr(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(build_batch([(b"k", b"v" * 100, [], T0)], base_offset=i) for i in range(50)))
    result = CliRunner().invoke(main, ["dump-log", str(path), "--progress"])
    assert result.exit_code == 0, result.output
    steps = result.stderr.splitlines()
    size = path.stat().st_size
    assert steps[-1] == f"{path}: read {size} of {size} bytes (100%)"
    assert 5 <= len(steps) <= 11  # about one line per tenth
    quiet = CliRunner().invoke(main, ["dump-log", str(path)])
    assert quiet.stderr == ""  # small files, and not a terminal
