"""The share coordinator (coordinator/share/coordinator.py) through the real runtime:
snapshots written, fenced by state and leader epochs, read back after the partition is
loaded again from its log; and a share-partition restored from its snapshot."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from coordinator.runtime import CoordinatorRefused, CoordinatorRuntime
from coordinator.share.coordinator import (
    NEGATIVE_LEADER_EPOCH, NEGATIVE_PARTITION, NULL_TOPIC_ID, READ_UNINITIALIZED, WRITE_UNINITIALIZED, ShareCoordinator,
    StateAnswer,
)
from coordinator.share.persister_policy import leader_error, retry_after_ms
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


def read(machine, runtime, leader_epoch=0):
    return runtime.run(0, lambda: machine.read_state(KEY, leader_epoch, 0), 0)


def test_a_share_partition_is_initialized_before_it_is_read_or_written():
    machine, runtime, _ = coordinator()
    assert read(machine, runtime) == StateAnswer(E.invalid_request, READ_UNINITIALIZED)
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(5), 0), 0) == StateAnswer(
        E.invalid_request, WRITE_UNINITIALIZED)
    assert machine.read_summary(KEY) == StateAnswer(E.none)  # answered with start offset -1
    assert runtime.run(0, lambda: machine.initialize_state(KEY, 1, -1, 50), 50) == StateAnswer(E.none)
    assert read(machine, runtime).snapshot.start_offset == -1


def test_writes_are_read_back_and_replayed_at_load():
    machine, runtime, log = coordinator()
    runtime.run(0, lambda: machine.initialize_state(KEY, 0, -1, 100), 100)
    batches = (StateBatch(5, 6, AVAILABLE, 2), StateBatch(7, 7, ARCHIVED, 1))
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(5, batches=batches), 150), 150).error is E.none
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(6, batches=batches[1:]), 200), 200).error \
        is E.none
    state = read(machine, runtime).snapshot
    assert (state.start_offset, state.snapshot_epoch, state.state_batches) == (6, 2, batches[1:])
    assert (state.create_timestamp_ms, state.write_timestamp_ms) == (100, 200)
    again, again_runtime, _ = coordinator(type(log)(log.partitions))
    assert read(again, again_runtime).snapshot == state
    assert decode_snapshot(log.appended[-1].value) == state


def test_older_state_and_leader_epochs_are_fenced():
    machine, runtime, _ = coordinator()
    runtime.run(0, lambda: machine.initialize_state(KEY, 1, 0, 0), 0)
    runtime.run(0, lambda: machine.write_state(KEY, snapshot(0, state_epoch=1, leader_epoch=4), 0), 0)
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(9, state_epoch=0, leader_epoch=4), 0), 0) \
        .error is E.fenced_state_epoch
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(9, state_epoch=1, leader_epoch=3), 0), 0) \
        .error is E.fenced_leader_epoch
    assert read(machine, runtime, leader_epoch=3).error is E.fenced_leader_epoch
    assert runtime.run(0, lambda: machine.initialize_state(KEY, 0, 7, 0), 0).error is E.fenced_state_epoch
    assert read(machine, runtime, leader_epoch=5).snapshot.start_offset == 0  # the new leader's epoch recorded
    assert runtime.run(0, lambda: machine.write_state(KEY, snapshot(9, state_epoch=1, leader_epoch=4), 0), 0) \
        .error is E.fenced_leader_epoch
    assert runtime.run(0, lambda: machine.delete_state(KEY), 0).error is E.none
    assert read(machine, runtime).error is E.invalid_request


def test_a_failed_state_call_is_retried_as_kafka_retries_it_and_mapped_for_the_client():
    assert [retry_after_ms(E.network_exception, n) for n in range(1, 6)] == [1000, 2000, 4000, 8000, None]
    assert retry_after_ms(E.request_timed_out, 1) == 1000 and retry_after_ms(E.not_coordinator, 2) == 2000
    assert retry_after_ms(E.fenced_state_epoch, 1) is None and retry_after_ms(E.invalid_request, 1) is None
    assert [leader_error(e) for e in (E.network_exception, E.request_timed_out, E.coordinator_load_in_progress,
                                      E.fenced_leader_epoch, E.fenced_state_epoch)] == [
        E.unknown_server_error, E.unknown_server_error, E.coordinator_not_available, E.not_leader_or_follower,
        E.fenced_state_epoch]


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


def test_a_negative_leader_epoch_is_checked_after_the_runtime_refuses():
    """As Kafka 4.4: ReadShareGroupState's negative leader epoch is the share coordinator
    shard's check, so it runs only once the runtime serves the key's partition; a node
    that does not serve it answers NOT_COORDINATOR, one still loading it
    COORDINATOR_LOAD_IN_PROGRESS."""
    machine = ShareCoordinator(partitions=1)
    runtime = CoordinatorRuntime(machine, RecordingLog(), lambda effect: None)

    def refusal():
        try:
            read(machine, runtime, leader_epoch=-1)
        except CoordinatorRefused as refused:
            return refused.error
        return None

    assert refusal() is E.not_coordinator
    runtime.begin_load(0, 0)
    assert refusal() is E.coordinator_load_in_progress
    runtime.load(0, 0)
    assert read(machine, runtime, leader_epoch=-1) == StateAnswer(E.invalid_request, NEGATIVE_LEADER_EPOCH)


def test_a_key_with_no_topic_id_or_a_negative_partition_is_checked_after_the_runtime_refuses():
    """As Kafka 4.4's share coordinator shard: a read or write of a key no state can have
    (no topic id, a negative partition) is INVALID_REQUEST only where the runtime serves
    the key's partition; a node that does not serve it answers NOT_COORDINATOR."""
    machine = ShareCoordinator(partitions=3)
    runtime = CoordinatorRuntime(machine, RecordingLog(), lambda effect: None)
    bad_keys = {StateKey("g", None, 0): NULL_TOPIC_ID, StateKey("g", uuid.UUID(int=7), -1): NEGATIVE_PARTITION}
    requests = {"read": lambda key: lambda: machine.read_state(key, 0, 0),
                "write": lambda key: lambda: machine.write_state(key, snapshot(5), 0)}
    for key, message in bad_keys.items():
        partition = machine.partition_for(key)
        for name, request in requests.items():
            try:
                runtime.run(partition, request(key), 0)
            except CoordinatorRefused as refused:
                assert refused.error is E.not_coordinator, (key, name)
            else:
                raise AssertionError(f"a {name} of {key} on a node not serving its partition was answered")
        runtime.begin_load(partition, 0)
        runtime.load(partition, 0)
        for name, request in requests.items():
            assert runtime.run(partition, request(key), 0) == StateAnswer(E.invalid_request, message), (key, name)
