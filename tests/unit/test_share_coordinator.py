"""The share coordinator (coordinator/share/coordinator.py) through the real runtime:
snapshots written, fenced by state and leader epochs, read back after the partition is
loaded again from its log; and a share-partition restored from its snapshot."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from coordinator.runtime import CoordinatorRuntime
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.partition import ACCEPT, ACKNOWLEDGED, ARCHIVED, AVAILABLE, RELEASE, REJECT, Acknowledgement, \
    Acquired, LogBatch, SharePartition
from coordinator.share.state_log_codec import ShareSnapshot, StateBatch, StateKey, decode_snapshot, java_uuid
from tests.unit.test_group_harness import RecordingLog

E = ErrorCode
KEY = StateKey("g", uuid.UUID(int=7), 3)


def coordinator(log=None):
    machine = ShareCoordinator(partitions=1)
    log = log or RecordingLog()
    runtime = CoordinatorRuntime(machine, log, lambda effect: None)
    runtime.begin_load(0, 0)
    runtime.load(0, 0)
    return machine, runtime, log


def snapshot(start, state_epoch=0, leader_epoch=0, batches=()):
    return ShareSnapshot(0, state_epoch, leader_epoch, start, 0, 0, tuple(batches))


def test_writes_are_read_back_and_replayed_at_load():
    machine, runtime, log = coordinator()
    assert machine.read_state(KEY) == (E.none, None)
    batches = (StateBatch(5, 6, AVAILABLE, 2), StateBatch(7, 7, ARCHIVED, 1))
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(5, batches=batches), 100), 100) == E.none
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(6, batches=batches[1:]), 200), 200) == E.none
    error, state = machine.read_state(KEY)
    assert (error, state.start_offset, state.snapshot_epoch, state.state_batches) == (E.none, 6, 1, batches[1:])
    assert (state.create_timestamp_ms, state.write_timestamp_ms) == (100, 200)
    again, _, _ = coordinator(type(log)(log.partitions))
    assert again.read_state(KEY)[1] == state
    assert decode_snapshot(log.appended[-1].value) == state


def test_older_state_and_leader_epochs_are_fenced():
    machine, runtime, _ = coordinator()
    runtime.run(0, lambda: machine.write_state(KEY, snapshot(0, state_epoch=1, leader_epoch=4), 0), 0)
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(9, state_epoch=0, leader_epoch=4), 0), 0) \
        is E.fenced_state_epoch
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(9, state_epoch=1, leader_epoch=3), 0), 0) \
        is E.fenced_leader_epoch
    assert machine.read_state(KEY)[1].start_offset == 0
    assert runtime.run(0, lambda: machine.delete_state(KEY), 0) is E.none
    assert machine.read_state(KEY) == (E.none, None)


def test_keys_are_placed_as_kafka_places_them():
    assert java_uuid(uuid.UUID(int=7)) == "AAAAAAAAAAAAAAAAAAAABw"
    assert KEY.coordinator_key() == "g:AAAAAAAAAAAAAAAAAAAABw:3"
    assert ShareCoordinator(partitions=50).partition_for(KEY) in range(50)


def test_a_share_partition_goes_on_from_its_snapshot():
    share = SharePartition(0)
    share.acquire("a", [LogBatch(0, 5)], 0, 1000, 500, 2000)
    share.acknowledge("a", [Acknowledgement(0, 5, (ACCEPT, RELEASE, REJECT, ACCEPT, RELEASE, RELEASE))], 0, 5, 1000)
    batches = share.state_batches()
    assert batches == [(1, 1, AVAILABLE, 1), (2, 2, ARCHIVED, 1), (3, 3, ACKNOWLEDGED, 1), (4, 5, AVAILABLE, 1)]
    restored = SharePartition.restore(share.start_offset, batches)
    assert (restored.start_offset, restored.end_offset) == (1, 6)
    assert restored.acquire("b", [LogBatch(0, 5), LogBatch(6, 6)], 0, 1000, 500, 2000) == [
        Acquired(1, 1, 2), Acquired(4, 5, 2), Acquired(6, 6, 1)]
