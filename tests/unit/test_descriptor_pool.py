"""The descriptor pool: logs with more files than the pool holds append, read, roll,
recover and close as before, with never more than ``capacity`` storage files open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log import descriptors
from broker.log.descriptors import MIN_CAPACITY, POOL, PooledFile, capacity_for
from protocol.records import iter_batches

from .test_log import make_batch, open_log, view


@pytest.fixture
def small_pool():
    before = POOL.capacity
    POOL.resize(MIN_CAPACITY)
    yield POOL
    POOL.resize(before)


def _open_files_under(directory: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory))
    return count


def test_many_logs_through_a_small_pool(tmp_path: Path, small_pool) -> None:
    logs = [open_log(tmp_path / f"t-{i}", segment_bytes=300, index_interval_bytes=0) for i in range(40)]
    for round_ in range(6):
        for log in logs:
            log.append(view(make_batch(1, 1000 + round_)), now_ms=0)
            assert len(small_pool) <= MIN_CAPACITY
    assert _open_files_under(tmp_path) <= MIN_CAPACITY
    for log in logs:
        assert log.log_end_offset == 6
        assert len(log.segment_base_offsets) > 1  # rolled: more files than the pool holds
        data = log.read(0, 10**6)
        assert [b.base_offset for b in iter_batches(data)] == list(range(6))
        assert log.find_offset_by_timestamp(1003).base_offset == 3
    for log in logs:
        log.close()
    assert len(small_pool) == 0
    # the files are whole: a fresh open (full recovery) finds every batch
    for i in range(40):
        again = open_log(tmp_path / f"t-{i}", segment_bytes=300, index_interval_bytes=0)
        assert again.log_end_offset == 6
        again.close()


def test_a_partition_being_written_keeps_its_active_segment_open(tmp_path: Path, small_pool) -> None:
    """Appends ask nothing of the pool, yet a log written between every other file's
    open is passed over when the pool makes room: it is never reopened."""
    written = open_log(tmp_path / "written", index_interval_bytes=10**9)
    written.append(view(make_batch(1, 1000)), now_ms=0)
    opens = small_pool.opens
    others = [PooledFile(tmp_path / f"other-{i}") for i in range(3 * MIN_CAPACITY)]
    for i, other in enumerate(others):
        os.write(other.fd, b"x")
        written.append(view(make_batch(1, 1001 + i)), now_ms=0)
        assert len(small_pool) <= MIN_CAPACITY
    assert small_pool.opens - opens == len(others)  # the written log's file: not once more
    assert written.log_end_offset == 1 + len(others)
    for other in others:
        other.close()
    written.close()


def test_a_closed_file_is_not_reopened(tmp_path: Path) -> None:
    f = PooledFile(tmp_path / "x.log")
    os.write(f.fd, b"abc")
    f.close()
    with pytest.raises(OSError):
        f.fd
    (tmp_path / "x.log").unlink()
    assert not (tmp_path / "x.log").exists()


def test_running_out_gives_descriptors_back_and_says_what_to_raise(tmp_path: Path, caplog, monkeypatch) -> None:
    pool = descriptors.DescriptorPool(100)
    monkeypatch.setattr(descriptors, "POOL", pool)
    files = [PooledFile(tmp_path / f"{i}.log") for i in range(40)]
    for f in files:
        f.fd
    real_open = os.open

    def exhausted(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "open", exhausted)
    with pytest.raises(OSError) as failed:
        PooledFile(tmp_path / "more.log").fd
    monkeypatch.setattr(os, "open", real_open)
    assert failed.value.errno == 24
    assert "raise the limit" in str(failed.value) and "log.open.files.max" in caplog.text
    assert len(pool) == pool.capacity == 30  # a quarter given back, and kept to that
    assert not files[0].is_open and files[-1].is_open  # the least recently used went
    for f in files:
        f.close()


def test_the_cap_follows_the_limit_unless_set() -> None:
    assert capacity_for(-1, 1024) == 512
    assert capacity_for(-1, 20) == MIN_CAPACITY
    assert capacity_for(300, 1024) == 300
