"""When a partition writes producer-state snapshots, and that a snapshot never outlives
the records it describes."""

from __future__ import annotations

from broker.log.partition import Partition
from broker.log.partition_log import LogConfig
from broker.log.producer_snapshots import list_snapshots
from tests.unit.test_producer_state import NOW, PID, data_batch

OTHER_PID = PID + 1


def _open(directory) -> Partition:
    return Partition.open("t", 0, directory, LogConfig(), NOW)


def test_close_snapshots_only_what_was_appended_since_the_newest_snapshot(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory)
    p.close()
    assert list_snapshots(directory) == []  # an empty log has no producer state to keep

    p = _open(directory)
    p.append_from_client(data_batch(seq=0), NOW)
    p.close()
    [(offset, path)] = list_snapshots(directory)
    assert offset == 1
    written = path.stat().st_mtime_ns, path.stat().st_ino

    p = _open(directory)  # reopened and closed with no append: the snapshot stays as it is
    p.close()
    assert list_snapshots(directory) == [(1, path)]
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == written
    assert _open(directory).producer_state.entry(PID).last_seq == 0


def test_truncation_drops_snapshots_past_the_new_end(tmp_path):
    directory = tmp_path / "t-0"
    p = _open(directory)
    for seq in range(3):
        p.append_from_client(data_batch(seq=seq), NOW)
    p.close()
    assert [o for o, _ in list_snapshots(directory)] == [3]

    p = _open(directory)
    p.truncate_to(1)
    assert list_snapshots(directory) == []
    # the log grows back to offset 3 with another producer's batches
    p.append_from_client(data_batch(pid=OTHER_PID, seq=0), NOW)
    p.append_from_client(data_batch(pid=OTHER_PID, seq=1), NOW)
    p.close()

    reopened = _open(directory)
    assert reopened.producer_state.entry(PID).last_seq == 0
    assert reopened.producer_state.entry(OTHER_PID).last_seq == 1
    reopened.close()
