"""TransactionCoordinator, transaction versions 1 and 2 (EndTxn v5, at the end).

Cases follow Kafka's TransactionCoordinatorTest and TransactionStateManagerTest (names in
snake_case). The harness drives the coordinator through the real runtime over an
in-memory log: ``h.append(result)`` commits a handler's result; dropping a Result
instead is an append that failed.
"""

import pytest
from kio.schema.errors import ErrorCode as E

from coordinator.partitioning import partition_for
from coordinator.runtime import CoordinatorRecord, CoordinatorRefused, CoordinatorRuntime, InMemoryLog, Result
from coordinator.transaction import (
    ProducerIdTaken,
    SendMarkers,
    TransactionConfig,
    TransactionCoordinator,
    TransactionLogRecord,
    TransactionMetadata,
)
from coordinator.transaction.log_codec import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    value_from_metadata,
)
from coordinator.transaction.coordinator import (
    AddPartitionsResponse,
    EndTxnResponse,
    InitProducerIdResponse,
)
from coordinator.transaction.metadata import TransactionState as S

TID = "txn-1"
PID = 10
EPOCH = 5
TIMEOUT = 1000
NOW = 1_000_000
PARTITIONS = frozenset({("topic1", 0), ("topic1", 1)})
MAX = 32767
INIT_V, TXN_V = 4, 3  # recent InitProducerId / AddPartitions-EndTxn versions


class Counter:
    """Producer ids as the broker's allocator hands them to the coordinator."""

    def __init__(self, start):
        self.next = start

    def peek(self):
        return self.next

    def taken(self, producer_id):
        assert producer_id == self.next
        self.next += 1


class Harness:
    """The coordinator under the real runtime, over an in-memory log: ``append`` commits
    a handler's Result (append, replay, effects), ``seed`` commits a record of a given
    state, ``reload`` unloads a partition and loads it back from the log."""

    def __init__(self, config=TransactionConfig(), first_pid=100, coordinator_epoch=7):
        self.pids = Counter(first_pid)
        self.coordinator = TransactionCoordinator(config)
        self.coordinator_epoch = coordinator_epoch
        self.log = InMemoryLog()
        self.effects = []
        self.runtime = CoordinatorRuntime(self.coordinator, self.log, self._perform,
                                          timers=self.coordinator.timers())
        self.appended = []  # every record committed, as the objects replay was given

    def _perform(self, effect):
        if isinstance(effect, ProducerIdTaken):
            self.pids.taken(effect.producer_id)
        self.effects.append(effect)

    def init_producer_id(self, *args):
        return self.coordinator.init_producer_id(*args, self.pids.peek())

    def own(self, *transactional_ids, epoch=None):
        for tid in transactional_ids or (TID,):
            p = self.coordinator.partition_for(tid)
            if p not in self.runtime.loads.loaded():
                self.runtime.begin_load(p, epoch or self.coordinator_epoch)
                self.runtime.load(p, NOW)
        return self

    def load_partition(self, partition, coordinator_epoch):
        """The runtime starts loading the partition (``seed`` then writes its log)."""
        self.runtime.begin_load(partition, coordinator_epoch)

    def finish_loading(self, partition, now_ms=0):
        """What the runtime's load does once the log is replayed: the partition is
        served; the coordinator's load results are returned, not committed."""
        self.runtime.loads.mark_loaded(partition)
        return self.coordinator.finish_loading(partition, now_ms)

    def unload_partition(self, partition):
        self.runtime.unload(partition)

    def reload(self, partition, coordinator_epoch):
        """The partition moves away and back: its state is rebuilt from the log."""
        self.runtime.unload(partition)
        self.runtime.begin_load(partition, coordinator_epoch)
        self.effects.clear()
        self.runtime.load(partition, NOW)
        return list(self.effects)

    def append(self, result):
        partition = self.coordinator.partition_of(result.records[0]) if result.records else 0
        self.runtime.apply(partition, result, NOW)
        self.appended.extend(result.records)
        return result

    def seed(self, md):
        record = TransactionLogRecord(encode_key(md.transactional_id), encode_value(value_from_metadata(md)), md)
        self.runtime.apply(self.coordinator.partition_for(md.transactional_id), Result(records=(record,)), NOW)
        self.appended.append(record)
        return md

    def md(self, tid=TID):
        return self.coordinator.transaction_metadata(tid)

    def abort_timed_out_transactions(self, now_ms, partition=None):
        """The timeout aborts of one partition, or of every partition the runtime serves
        (as its timer round runs them)."""
        return [r for p in self._timer_partitions(partition)
                for r in self.coordinator.abort_timed_out_transactions(now_ms, p)]

    def expire_transactional_ids(self, now_ms, partition=None):
        """The expirations of one partition, or of every partition the runtime serves."""
        return [r for p in self._timer_partitions(partition)
                for r in self.coordinator.expire_transactional_ids(now_ms, p)]

    def _timer_partitions(self, partition):
        return sorted(self.runtime.loads.loaded()) if partition is None else [partition]

    def refused(self, operation, transactional_id, *args):
        """Runs ``operation`` as the broker does, through the runtime on the id's
        partition: the error the runtime refuses it with (None: it ran)."""
        try:
            self.runtime.run(self.partition_for(transactional_id),
                             lambda: getattr(self, operation)(transactional_id, *args), NOW)
        except CoordinatorRefused as refused:
            return refused.error
        return None

    def __getattr__(self, name):
        return getattr(self.coordinator, name)


def meta(state, pid=PID, epoch=EPOCH, last_epoch=-1, partitions=None, tid=TID,
         previous=None, start=NOW, timeout=TIMEOUT, updated=NOW):
    if partitions is None:
        partitions = frozenset() if state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else PARTITIONS
    return TransactionMetadata(
        transactional_id=tid, producer_id=pid,
        previous_producer_id=pid if previous is None else previous, next_producer_id=-1,
        producer_epoch=epoch, last_producer_epoch=last_epoch, txn_timeout_ms=timeout,
        state=state, topic_partitions=frozenset(partitions),
        txn_start_timestamp_ms=-1 if state is S.EMPTY else start,
        txn_last_update_timestamp_ms=updated,
    )


def owned(*mds, **kwargs):
    h = Harness(**kwargs).own(*(m.transactional_id for m in mds) if mds else (TID,))
    for md in mds:
        h.seed(md)
    return h


def neighbour(h, tid):
    """Another transactional id that lives in the same coordinator partition."""
    return next(f"{tid}-{i}" for i in range(10_000)
                if h.partition_for(f"{tid}-{i}") == h.partition_for(tid))


def only_record(result):
    (record,) = result.records
    return decode_key(record.key), decode_value(record.value)


def pure(h, call):
    """Run a handler and check it left the state exactly as it was."""
    before = h.snapshot()
    result = call()
    assert h.snapshot() == before
    return result


# -- InitProducerId ------------------------------------------------------------------------


def test_should_return_invalid_request_when_transactional_id_is_empty():
    h = Harness().own()
    assert h.init_producer_id("", TIMEOUT, -1, -1, INIT_V, NOW).response == InitProducerIdResponse(E.invalid_request)


def test_null_transactional_id_is_left_to_the_broker():
    # shouldAcceptInitPidAndReturnNextPidWhenTransactionalIdIsNull: the broker answers it
    # from the producer id allocator; the coordinator refuses to be asked.
    with pytest.raises(ValueError):
        Harness().own().init_producer_id(None, TIMEOUT, -1, -1, INIT_V, NOW)


@pytest.mark.parametrize(("pid", "epoch"), [(5, -1), (-1, 3)])
def test_kip360_fields_must_be_given_together(pid, epoch):
    h = Harness().own()
    assert h.init_producer_id(TID, TIMEOUT, pid, epoch, INIT_V, NOW).response.error is E.invalid_request


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_validate_transaction_timeout(timeout):
    h = Harness().own()
    result = h.init_producer_id(TID, timeout, -1, -1, INIT_V, NOW)
    assert result == Result(response=InitProducerIdResponse(E.invalid_transaction_timeout))


def test_transaction_timeout_bounds_are_inclusive():
    h = Harness(TransactionConfig(transaction_max_timeout_ms=5000)).own()
    assert h.init_producer_id(TID, 5000, -1, -1, INIT_V, NOW).response.error is E.none
    assert h.init_producer_id(TID, 1, -1, -1, INIT_V, NOW).response.error is E.none
    assert h.init_producer_id(TID, 5001, -1, -1, INIT_V, NOW).response.error is E.invalid_transaction_timeout


def test_should_init_pid_with_epoch_zero_for_new_transactional_id():
    h = Harness(first_pid=100).own()
    result = pure(h, lambda: h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert result.response == InitProducerIdResponse(E.none, 100, 0)
    assert result.effects == (ProducerIdTaken(100),)  # the id is used once the record is in
    assert h.pids.next == 100  # not before
    tid, value = only_record(result)
    assert tid == TID
    assert (value.producer_id, value.producer_epoch, value.transaction_status) == (100, 0, S.EMPTY.id)
    assert value.transaction_partitions is None
    assert value.transaction_timeout_ms == TIMEOUT
    assert value.transaction_last_update_timestamp_ms == NOW
    assert value.transaction_start_timestamp_ms == -1
    h.append(result)
    assert h.md() == meta(S.EMPTY, pid=100, epoch=0, previous=100, timeout=TIMEOUT)


def test_should_generate_new_producer_id_if_no_state_and_producer_id_and_epoch_provided():
    h = Harness(first_pid=100).own()
    result = h.append(h.init_producer_id(TID, TIMEOUT, 55, 3, INIT_V, NOW))
    assert result.response == InitProducerIdResponse(E.none, 100, 0)


def test_should_generate_new_producer_id_if_epochs_exhausted():
    h = owned(meta(S.EMPTY, epoch=MAX - 1), first_pid=100)
    result = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert result.response == InitProducerIdResponse(E.none, 100, 0)
    assert h.md().previous_producer_id == PID
    assert h.md().last_producer_epoch == -1


def test_should_respond_with_not_coordinator_on_init_pid_when_not_coordinator():
    h = Harness()
    assert h.refused("init_producer_id", TID, TIMEOUT, -1, -1, INIT_V, NOW) is E.not_coordinator
    assert h.pids.next == 100  # no producer id was spent


def test_should_respond_with_coordinator_load_in_progress_on_init_pid_when_coordinator_loading():
    h = Harness()
    h.load_partition(h.partition_for(TID), 1)
    assert h.refused("init_producer_id", TID, TIMEOUT, -1, -1, INIT_V, NOW) is E.coordinator_load_in_progress


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT])
def test_should_increment_epoch_and_update_metadata_on_handle_init_pid(state):
    h = owned(meta(state, updated=NOW - 50))
    result = h.append(h.init_producer_id(TID, 10, -1, -1, INIT_V, NOW))
    assert result.response == InitProducerIdResponse(E.none, PID, EPOCH + 1)
    md = h.md()
    assert (md.producer_id, md.producer_epoch, md.txn_timeout_ms) == (PID, EPOCH + 1, 10)
    assert md.txn_last_update_timestamp_ms == NOW
    assert md.state is S.EMPTY


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_wait_for_commit_to_complete_on_handle_init_pid_in_prepare_state(state):
    h = owned(meta(state))
    result = pure(h, lambda: h.init_producer_id(TID, 10, -1, -1, INIT_V, NOW))
    assert result == Result(response=InitProducerIdResponse(E.concurrent_transactions))


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_kip_360_fencing_comes_before_concurrent_transactions(state):
    # Kafka checks the expected producer id before the Prepare* state
    h = owned(meta(state, pid=PID + 1, previous=PID))
    assert h.init_producer_id(TID, TIMEOUT, PID - 5, EPOCH, INIT_V, NOW).response.error is E.producer_fenced
    assert h.init_producer_id(TID, TIMEOUT, PID + 1, EPOCH, INIT_V, NOW).response.error is E.concurrent_transactions


def test_exhausted_epoch_is_bumped_only_by_its_own_producer():
    # rotation needs the caller's epoch to be the exhausted one; anything else hits
    # Kafka's IllegalStateException, which clients see as UNKNOWN_SERVER_ERROR
    h = owned(meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2), first_pid=500)
    assert h.init_producer_id(TID, TIMEOUT, PID, MAX - 2, INIT_V, NOW).response.error is E.unknown_server_error
    rotated = h.append(h.init_producer_id(TID, TIMEOUT, PID, MAX - 1, INIT_V, NOW))
    assert rotated.response == InitProducerIdResponse(E.none, 500, 0)


def test_timed_out_transaction_at_max_epoch_is_aborted_without_overflow():
    h = owned(meta(S.ONGOING, epoch=MAX, start=NOW - 10 * TIMEOUT))
    [result] = h.abort_timed_out_transactions(NOW)
    _, value = only_record(result)
    assert (value.producer_epoch, value.transaction_status) == (MAX, S.PREPARE_ABORT.id)


def test_should_not_bump_epoch_with_pending_transaction():
    h = owned(meta(S.PREPARE_COMMIT))
    result = h.init_producer_id(TID, TIMEOUT, PID, 10, INIT_V, NOW)
    assert result == Result(response=InitProducerIdResponse(E.concurrent_transactions))


def test_should_abort_transaction_on_handle_init_pid_when_existing_transaction_in_ongoing_state():
    h = owned(meta(S.ONGOING, last_epoch=EPOCH - 1, start=NOW - 10))
    result = pure(h, lambda: h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert result.response == InitProducerIdResponse(E.concurrent_transactions, -1, -1)
    _, value = only_record(result)
    assert value.transaction_status == S.PREPARE_ABORT.id
    assert (value.producer_id, value.producer_epoch) == (PID, EPOCH + 1)
    assert value.transaction_start_timestamp_ms == NOW - 10
    assert value.transaction_last_update_timestamp_ms == NOW
    assert result.effects == (SendMarkers(TID, PID, EPOCH + 1, 7, False, tuple(sorted(PARTITIONS))),)
    h.append(result)
    # Kafka 4.4 keeps the fenced epoch as the last epoch (tests/reference: timeout_then_kip360_resume)
    assert h.md().last_producer_epoch == EPOCH
    # the client retries while markers are written, then gets the next epoch
    assert h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW).response.error is E.concurrent_transactions
    h.append(h.markers_written(TID, PID, EPOCH + 1, False, NOW + 1))
    assert h.md().state is S.COMPLETE_ABORT
    retry = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW + 2))
    assert retry.response == InitProducerIdResponse(E.none, PID, EPOCH + 2)


def test_should_fail_to_abort_transaction_on_handle_init_pid_when_producer_epoch_is_smaller():
    # Kafka's race (the epoch moved on between the fence and the abort) cannot happen with
    # serialized appends; what remains is that the fenced producer's own EndTxn is refused.
    h = owned(meta(S.ONGOING))
    h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert h.end_txn(TID, PID, EPOCH, False, TXN_V, NOW).response.error is E.producer_fenced


def test_should_not_repeatedly_bump_epoch_due_to_init_pid_during_ongoing_txn_if_append_to_log_fails():
    h = owned(meta(S.ONGOING))
    attempts = [h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW) for _ in range(3)]  # first two "fail"
    assert len({a.records for a in attempts}) == 1
    h.append(attempts[-1])
    assert h.md().producer_epoch == EPOCH + 1
    assert h.md().state is S.PREPARE_ABORT


def test_should_use_last_epoch_to_fence_when_epochs_are_exhausted():
    h = owned(meta(S.ONGOING, epoch=MAX - 1, last_epoch=MAX - 2), first_pid=500)
    result = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert result.response.error is E.concurrent_transactions
    _, value = only_record(result)
    assert (value.producer_id, value.producer_epoch, value.previous_producer_id) == (PID, MAX, PID)
    assert value.transaction_status == S.PREPARE_ABORT.id
    assert h.md().last_producer_epoch == MAX - 1  # the fenced epoch, as Kafka 4.4 keeps it
    h.append(h.markers_written(TID, PID, MAX, False, NOW))
    # the retry after the abort rotates to a new producer id
    retry = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert retry.response == InitProducerIdResponse(E.none, 500, 0)


def test_init_producer_id_with_no_last_producer_data():
    h = owned(meta(S.EMPTY, epoch=EPOCH + 1, previous=-1))
    result = h.init_producer_id(TID, TIMEOUT, PID, EPOCH, INIT_V, NOW)
    assert result == Result(response=InitProducerIdResponse(E.producer_fenced))


def test_fence_producer_when_mapping_exists_with_different_producer_id():
    h = owned(meta(S.EMPTY, pid=PID + 1, previous=PID, last_epoch=EPOCH - 1))
    result = h.init_producer_id(TID, TIMEOUT, PID, EPOCH, INIT_V, NOW)
    assert result.response == InitProducerIdResponse(E.producer_fenced)


def test_producer_fenced_is_invalid_producer_epoch_before_init_producer_id_v4():
    h = owned(meta(S.EMPTY, pid=PID + 1, previous=PID))
    assert h.init_producer_id(TID, TIMEOUT, PID, EPOCH, 3, NOW).response.error is E.invalid_producer_epoch


def test_init_producer_id_with_current_epoch_provided():
    h = owned(meta(S.EMPTY, epoch=10, last_epoch=9))
    first = h.append(h.init_producer_id(TID, TIMEOUT, PID, 10, INIT_V, NOW))
    assert first.response == InitProducerIdResponse(E.none, PID, 11)
    # the producer retries after the bump succeeded but the response was lost
    retry = h.append(h.init_producer_id(TID, TIMEOUT, PID, 10, INIT_V, NOW))
    assert retry.response == InitProducerIdResponse(E.none, PID, 11)


def test_init_producer_id_stale_current_epoch_provided():
    h = owned(meta(S.EMPTY, epoch=10, last_epoch=9))
    new_instance = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW))
    assert new_instance.response == InitProducerIdResponse(E.none, PID, 11)
    old_instance = h.init_producer_id(TID, TIMEOUT, PID, 10, INIT_V, NOW)
    assert old_instance.response == InitProducerIdResponse(E.producer_fenced)


def test_retry_init_producer_id_after_producer_id_rotation():
    h = owned(meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2), first_pid=PID + 1)
    first = h.append(h.init_producer_id(TID, TIMEOUT, PID, MAX - 1, INIT_V, NOW))
    assert first.response == InitProducerIdResponse(E.none, PID + 1, 0)
    assert (h.md().previous_producer_id, h.md().last_producer_epoch) == (PID, MAX - 1)
    retry = h.append(h.init_producer_id(TID, TIMEOUT, PID, MAX - 1, INIT_V, NOW))
    assert retry.response == InitProducerIdResponse(E.none, PID + 1, 0)


def test_init_producer_id_with_invalid_epoch_after_producer_id_rotation():
    h = owned(meta(S.EMPTY, epoch=MAX - 1, last_epoch=MAX - 2), first_pid=PID + 1)
    h.append(h.init_producer_id(TID, TIMEOUT, PID, MAX - 1, INIT_V, NOW))
    stale = h.init_producer_id(TID, TIMEOUT, PID, MAX - 2, INIT_V, NOW)
    assert stale.response == InitProducerIdResponse(E.producer_fenced)


def test_kip360_retry_spanning_a_coordinator_move_is_fenced():
    # Kafka does not persist the last epoch, so after a reload the retry cannot be recognized.
    h = owned(meta(S.EMPTY, epoch=10))
    bump = h.append(h.init_producer_id(TID, TIMEOUT, PID, 10, INIT_V, NOW))
    assert bump.response == InitProducerIdResponse(E.none, PID, 11)
    h.reload(h.partition_for(TID), 8)  # the bump's record is read back from the log
    assert h.init_producer_id(TID, TIMEOUT, PID, 10, INIT_V, NOW).response.error is E.producer_fenced
    assert h.init_producer_id(TID, TIMEOUT, PID, 11, INIT_V, NOW).response == InitProducerIdResponse(E.none, PID, 12)


# -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------


def test_should_respond_with_invalid_pid_mapping_on_add_partitions_when_transactional_id_not_present():
    h = Harness().own()
    result = h.add_partitions_to_txn(TID, 0, 1, PARTITIONS, TXN_V, NOW)
    assert result == Result(response=AddPartitionsResponse(E.invalid_producer_id_mapping))


@pytest.mark.parametrize("tid", ["", None])
def test_should_respond_with_invalid_request_add_partitions_when_transactional_id_is_empty_or_null(tid):
    h = Harness().own()
    assert h.add_partitions_to_txn(tid, 0, 1, PARTITIONS, TXN_V, NOW).response.error is E.invalid_request


def test_should_respond_with_not_coordinator_on_add_partitions_when_not_coordinator():
    assert Harness().refused("add_partitions_to_txn", TID, 0, 1, PARTITIONS, TXN_V, NOW) is E.not_coordinator


def test_should_respond_with_coordinator_load_in_progress_on_add_partitions_when_coordinator_loading():
    h = Harness()
    h.load_partition(h.partition_for(TID), 1)
    assert h.refused("add_partitions_to_txn", TID, 0, 1, PARTITIONS, TXN_V, NOW) is E.coordinator_load_in_progress


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_respond_with_concurrent_transactions_on_add_partitions_when_state_is_prepare(state):
    h = owned(meta(state))
    result = pure(h, lambda: h.add_partitions_to_txn(TID, PID, EPOCH, {("new", 0)}, TXN_V, NOW))
    assert result == Result(response=AddPartitionsResponse(E.concurrent_transactions))


def test_should_respond_with_producer_fenced_on_add_partitions_when_epochs_are_different():
    h = owned(meta(S.PREPARE_COMMIT, epoch=10, last_epoch=9))
    assert h.add_partitions_to_txn(TID, PID, 0, PARTITIONS, TXN_V, NOW).response.error is E.producer_fenced
    assert h.add_partitions_to_txn(TID, PID, 0, PARTITIONS, 1, NOW).response.error is E.invalid_producer_epoch


def test_add_partitions_with_other_producer_id_is_invalid_mapping():
    h = owned(meta(S.ONGOING))
    assert h.add_partitions_to_txn(TID, PID + 1, EPOCH, PARTITIONS, TXN_V, NOW).response.error is E.invalid_producer_id_mapping


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_should_append_new_metadata_to_log_on_add_partitions(state):
    # shouldAppendNewMetadataToLogOnAddPartitionsWhenPartitionsAdded and
    # shouldRespondWithSuccessOnAddPartitionsWhenStateIs{Ongoing,CompleteCommit,CompleteAbort}
    h = owned(meta(state, start=NOW - 100, partitions={("old", 0)} if state is S.ONGOING else None))
    result = pure(h, lambda: h.add_partitions_to_txn(TID, PID, EPOCH, PARTITIONS, TXN_V, NOW))
    assert result.response == AddPartitionsResponse(E.none)
    assert result.effects == ()
    h.append(result)
    md = h.md()
    assert md.state is S.ONGOING
    expected = PARTITIONS | {("old", 0)} if state is S.ONGOING else PARTITIONS
    assert md.topic_partitions == expected
    assert md.txn_start_timestamp_ms == (NOW - 100 if state is S.ONGOING else NOW)
    assert md.txn_last_update_timestamp_ms == NOW


def test_should_respond_with_errors_none_on_add_partition_when_no_errors_and_partitions_the_same():
    h = owned(meta(S.ONGOING))
    result = h.add_partitions_to_txn(TID, PID, EPOCH, {("topic1", 0)}, TXN_V, NOW)
    assert result == Result(response=AddPartitionsResponse(E.none))  # nothing to write


def test_add_offsets_to_txn_adds_the_group_coordinator_partition():
    config = TransactionConfig(offsets_topic_num_partitions=30)
    h = owned(meta(S.EMPTY), config=config)
    result = h.append(h.add_offsets_to_txn(TID, PID, EPOCH, "my-group", TXN_V, NOW))
    assert result.response == AddPartitionsResponse(E.none)
    assert h.md().topic_partitions == {("__consumer_offsets", partition_for("my-group", 30))}
    assert h.md().state is S.ONGOING


def test_add_offsets_to_txn_errors():
    h = owned(meta(S.PREPARE_COMMIT))
    assert h.add_offsets_to_txn(TID, PID, EPOCH, "g", TXN_V, NOW).response.error is E.concurrent_transactions
    assert h.add_offsets_to_txn(TID, PID, EPOCH - 1, "g", TXN_V, NOW).response.error is E.producer_fenced
    assert h.add_offsets_to_txn(TID, PID, EPOCH - 1, "g", 1, NOW).response.error is E.invalid_producer_epoch
    assert h.add_offsets_to_txn(TID, PID + 1, EPOCH, "g", TXN_V, NOW).response.error is E.invalid_producer_id_mapping
    assert h.add_offsets_to_txn("", PID, EPOCH, "g", TXN_V, NOW).response.error is E.invalid_request
    h.own("unknown-id")
    assert h.add_offsets_to_txn("unknown-id", PID, EPOCH, "g", TXN_V, NOW).response.error is E.invalid_producer_id_mapping


def verified(h, tid, pid, epoch, partitions):
    """verify_partitions_in_txn's errors."""
    return h.verify_partitions_in_txn(tid, pid, epoch, partitions).response.errors


def test_verify_partition_handling():
    extra = PARTITIONS | {("topic2", 0)}
    h = owned(meta(S.PREPARE_COMMIT, epoch=0))
    assert set(verified(h, TID, PID + 1, 0, extra).values()) == {E.invalid_producer_id_mapping}
    assert set(verified(h, TID, PID, 1, extra).values()) == {E.producer_fenced}
    assert set(verified(h, TID, PID, 0, extra).values()) == {E.concurrent_transactions}
    assert set(verified(h, "", PID, 0, extra).values()) == {E.invalid_request}
    h.own("nope")
    assert set(verified(h, "nope", PID, 0, extra).values()) == {E.invalid_producer_id_mapping}
    assert set(verified(Harness(), TID, PID, 0, extra).values()) == {E.not_coordinator}


def test_should_respond_with_errors_none_on_add_partition_when_ongoing_verify_only_and_partitions_the_same():
    h = owned(meta(S.ONGOING))
    result = pure(h, lambda: h.verify_partitions_in_txn(TID, PID, EPOCH, PARTITIONS))
    assert result.records == () and result.effects == ()
    assert result.response.errors == {tp: E.none for tp in PARTITIONS}
    assert verified(h, TID, PID, EPOCH, PARTITIONS) == result.response.errors


def test_should_respond_with_invalid_txn_state_when_verify_only_and_partition_not_present():
    # Kafka 3.8+ answers TRANSACTION_ABORTABLE here (the test kept its old name).
    h = owned(meta(S.ONGOING, partitions={("topic1", 0)}))
    errors = verified(h, TID, PID, EPOCH, [("topic1", 0), ("topic2", 0)])
    assert errors == {("topic1", 0): E.none, ("topic2", 0): E.transaction_abortable}


# -- EndTxn --------------------------------------------------------------------------------


def test_should_reply_with_invalid_pid_mapping_on_end_txn_when_txn_id_doesnt_exist():
    h = Harness().own()
    assert h.end_txn(TID, 0, 0, True, TXN_V, NOW) == Result(response=EndTxnResponse(E.invalid_producer_id_mapping))


def test_should_reply_with_invalid_pid_mapping_on_end_txn_when_pid_doesnt_match_mapped():
    h = owned(meta(S.ONGOING, pid=10, epoch=0))
    assert h.end_txn(TID, 0, 0, True, TXN_V, NOW).response.error is E.invalid_producer_id_mapping


def test_should_reply_with_producer_fenced_on_end_txn_when_epoch_is_not_same_as_transaction():
    h = owned(meta(S.ONGOING, last_epoch=EPOCH - 1))
    assert h.end_txn(TID, PID, 0, True, TXN_V, NOW).response.error is E.producer_fenced
    assert h.end_txn(TID, PID, 0, True, 1, NOW).response.error is E.invalid_producer_epoch


@pytest.mark.parametrize(("server_epoch", "request_epoch"), [(1, 2), (2, 1)])
def test_should_return_invalid_epoch_on_end_txn_when_epoch_is_larger_or_smaller(server_epoch, request_epoch):
    h = owned(meta(S.COMPLETE_COMMIT, epoch=server_epoch, last_epoch=1))
    assert h.end_txn(TID, PID, request_epoch, True, TXN_V, NOW).response.error is E.producer_fenced


def test_end_txn_when_status_is_complete_commit_and_result_is_commit_in_v1():
    h = owned(meta(S.COMPLETE_COMMIT))
    assert pure(h, lambda: h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW)) == Result(response=EndTxnResponse(E.none))


def test_end_txn_when_status_is_complete_abort_and_result_is_abort_in_v1():
    h = owned(meta(S.COMPLETE_ABORT))
    assert h.end_txn(TID, PID, EPOCH, False, TXN_V, NOW) == Result(response=EndTxnResponse(E.none))


def test_should_return_invalid_txn_request_on_end_txn_request_when_status_is_complete_abort_and_result_is_not_abort():
    h = owned(meta(S.COMPLETE_ABORT))
    assert h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW).response.error is E.invalid_txn_state


def test_should_return_invalid_txn_request_on_end_txn_request_when_status_is_complete_commit_and_result_is_not_commit():
    # also testEndTxnRequestWhenStatusIsCompleteCommitAndResultIsAbortInV1
    h = owned(meta(S.COMPLETE_COMMIT))
    assert h.end_txn(TID, PID, EPOCH, False, TXN_V, NOW).response.error is E.invalid_txn_state


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_while_the_markers_are_written_is_concurrent_whichever_end_it_asks(state, commit):
    # Kafka's TransactionCoordinatorTest builds PrepareCommit/PrepareAbort without the pending
    # Complete state and gets INVALID_TXN_STATE for the other end; a running coordinator
    # always holds that pending state (set by the prepare's append and by the load) until
    # the markers are written, so the client gets CONCURRENT_TRANSACTIONS and retries.
    # librdkafka sends EndTxn(abort) after an AddPartitionsToTxn answered
    # CONCURRENT_TRANSACTIONS, right after its previous commit: INVALID_TXN_STATE there
    # was fatal to the producer.
    h = owned(meta(state))
    assert pure(h, lambda: h.end_txn(TID, PID, EPOCH, commit, TXN_V, NOW)) == \
        Result(response=EndTxnResponse(E.concurrent_transactions))


def test_abort_right_after_a_commit_waits_for_its_markers_then_is_invalid():
    h = owned(meta(S.ONGOING))
    h.append(h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW))
    assert h.add_partitions_to_txn(TID, PID, EPOCH, {("orders", 1)}, TXN_V, NOW).response.error \
        is E.concurrent_transactions
    assert h.end_txn(TID, PID, EPOCH, False, TXN_V, NOW).response.error is E.concurrent_transactions
    h.append(h.markers_written(TID, PID, EPOCH, True, NOW))
    assert h.end_txn(TID, PID, EPOCH, False, TXN_V, NOW).response.error is E.invalid_txn_state


def test_a_prepare_commit_not_replicated_is_undone_so_the_retry_is_not_concurrent():
    """As Kafka clears the pending state when the append fails: ``restore`` puts back
    the transaction as it was, and the retried EndTxn prepares the commit again."""
    before = meta(S.ONGOING)
    h = owned(before)
    h.append(h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW))
    written = h.md()
    assert written.state is S.PREPARE_COMMIT
    assert h.restore(TID, written, before) and h.md() is before
    retried = h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW)
    assert retried.response.error is E.none and retried.records


def test_an_undo_after_the_partition_was_reloaded_changes_nothing():
    h = owned(meta(S.ONGOING))
    before = h.md()
    h.append(h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW))
    written = h.md()
    h.reload(h.partition_for(TID), 8)  # the log's PrepareCommit is what the new load holds
    assert not h.restore(TID, written, before)
    assert h.md().state is S.PREPARE_COMMIT


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_request_when_empty_transaction_state_in_v1(commit):
    h = owned(meta(S.EMPTY))
    assert h.end_txn(TID, PID, EPOCH, commit, TXN_V, NOW).response.error is E.invalid_txn_state


@pytest.mark.parametrize("commit", [True, False])
def test_should_append_prepare_commit_or_abort_to_log_on_end_txn_when_status_is_ongoing(commit):
    h = owned(meta(S.ONGOING, start=NOW - 10))
    result = pure(h, lambda: h.end_txn(TID, PID, EPOCH, commit, TXN_V, NOW))
    assert result.response == EndTxnResponse(E.none)
    _, value = only_record(result)
    prepared = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    assert value.transaction_status == prepared.id
    assert (value.producer_id, value.producer_epoch) == (PID, EPOCH)  # TV1: no epoch bump
    assert value.transaction_start_timestamp_ms == NOW - 10
    assert value.transaction_partitions == (("topic1", (0, 1)),)
    assert result.effects == (SendMarkers(TID, PID, EPOCH, 7, commit, (("topic1", 0), ("topic1", 1))),)
    h.append(result)
    complete = h.append(h.markers_written(TID, PID, EPOCH, commit, NOW + 5))
    _, value = only_record(complete)
    assert value.transaction_status == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT).id
    assert value.transaction_partitions == ()
    md = h.md()
    assert md.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert md.topic_partitions == frozenset()
    assert md.txn_last_update_timestamp_ms == NOW + 5
    # a retry of the same command after completion succeeds
    assert h.end_txn(TID, PID, EPOCH, commit, TXN_V, NOW).response.error is E.none


@pytest.mark.parametrize("tid", [None, ""])
def test_should_respond_with_invalid_request_on_end_txn_when_transactional_id_is_null_or_empty(tid):
    assert Harness().end_txn(tid, 0, 0, True, TXN_V, NOW).response.error is E.invalid_request


def test_should_respond_with_not_coordinator_on_end_txn_when_is_not_coordinator_for_id():
    assert Harness().refused("end_txn", TID, 0, 0, True, TXN_V, NOW) is E.not_coordinator


def test_should_respond_with_coordinator_load_in_progress_on_end_txn_when_coordinator_is_loading():
    h = Harness()
    h.load_partition(h.partition_for(TID), 1)
    assert h.refused("end_txn", TID, 0, 0, True, TXN_V, NOW) is E.coordinator_load_in_progress


# -- markers_written (TransactionMarkerChannelManagerTest) ----------------------------------


def test_should_only_write_txn_completion_once():
    h = owned(meta(S.PREPARE_COMMIT))
    assert len(h.append(h.markers_written(TID, PID, EPOCH, True, NOW)).records) == 1
    assert h.markers_written(TID, PID, EPOCH, True, NOW) == Result()


@pytest.mark.parametrize(
    ("pid", "epoch", "commit", "coordinator_epoch"),
    [(PID + 1, EPOCH, True, None), (PID, EPOCH + 1, True, None), (PID, EPOCH, False, None), (PID, EPOCH, True, 6)],
)
def test_markers_written_is_ignored_when_the_state_moved_on(pid, epoch, commit, coordinator_epoch):
    h = owned(meta(S.PREPARE_COMMIT))
    assert pure(h, lambda: h.markers_written(TID, pid, epoch, commit, NOW, coordinator_epoch)) == Result()


def test_markers_written_after_emigration_is_ignored():
    h = owned(meta(S.PREPARE_ABORT))
    h.unload_partition(h.partition_for(TID))
    assert h.refused("markers_written", TID, PID, EPOCH, False, NOW) is E.not_coordinator  # nothing written
    assert Harness().own().markers_written(TID, PID, EPOCH, False, NOW) == Result()  # unknown id


def test_should_not_lose_txn_completion_after_load():
    h = owned(meta(S.PREPARE_COMMIT))
    p = h.partition_for(TID)
    h.unload_partition(p)
    h.load_partition(p, 8)
    h.seed(meta(S.PREPARE_COMMIT))
    (roll_forward,) = h.finish_loading(p)
    assert roll_forward.effects == (SendMarkers(TID, PID, EPOCH, 8, True, tuple(sorted(PARTITIONS))),)
    h.append(h.markers_written(TID, PID, EPOCH, True, NOW, coordinator_epoch=8))
    assert h.md().state is S.COMPLETE_COMMIT


# -- timeouts ------------------------------------------------------------------------------


def test_should_abort_expired_transactions_in_ongoing_state_and_bump_epoch():
    h = owned(meta(S.ONGOING, start=NOW))
    assert h.abort_timed_out_transactions(NOW + TIMEOUT) == []  # not yet: strictly older
    (result,) = pure(h, lambda: h.abort_timed_out_transactions(NOW + TIMEOUT + 1))
    assert result.response is None
    _, value = only_record(result)
    assert value.transaction_status == S.PREPARE_ABORT.id
    assert (value.producer_id, value.producer_epoch) == (PID, EPOCH + 1)
    assert value.transaction_last_update_timestamp_ms == NOW + TIMEOUT + 1
    assert result.effects == (SendMarkers(TID, PID, EPOCH + 1, 7, False, tuple(sorted(PARTITIONS))),)
    h.append(result)
    assert h.add_partitions_to_txn(TID, PID, EPOCH, PARTITIONS, TXN_V, NOW).response.error is E.producer_fenced


def test_timers_can_be_run_one_coordinator_partition_at_a_time():
    other = next(f"other-{i}" for i in range(10_000)
                 if Harness().partition_for(f"other-{i}") != Harness().partition_for(TID))
    h = owned(meta(S.ONGOING, start=NOW), meta(S.ONGOING, tid=other, pid=PID + 1, start=NOW))
    mine = h.partition_for(TID)
    (result,) = h.abort_timed_out_transactions(NOW + TIMEOUT + 1, partition=mine)
    assert only_record(result)[0] == TID
    assert len(h.abort_timed_out_transactions(NOW + TIMEOUT + 1)) == 2
    # the runtime's timer round runs on the partitions it serves only
    h.runtime.start_timers(NOW)
    events = h.runtime.due_timer_events(NOW + TransactionConfig().remove_expired_transaction_cleanup_interval_ms)
    assert {(e.timer, e.partition) for e in events} == {
        (timer.name, p) for timer in h.coordinator.timers() for p in (mine, h.partition_for(other))}
    idle = owned(meta(S.COMPLETE_COMMIT, updated=NOW), meta(S.EMPTY, tid=other, pid=PID + 1, updated=NOW))
    late = NOW + TransactionConfig().transactional_id_expiration_ms
    (expired,) = idle.expire_transactional_ids(late, partition=idle.partition_for(other))
    assert decode_key(expired.records[0].key) == other


def test_should_not_abort_expired_transactions_that_have_a_pending_state_transition():
    h = owned(meta(S.ONGOING, start=NOW))
    h.append(h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW))
    assert h.abort_timed_out_transactions(NOW + 10 * TIMEOUT) == []


def test_should_not_bump_epoch_when_aborting_expired_transaction_if_append_to_log_fails():
    h = owned(meta(S.ONGOING, start=NOW))
    first = h.abort_timed_out_transactions(NOW + 2 * TIMEOUT)  # dropped: the append failed
    (second,) = h.abort_timed_out_transactions(NOW + 2 * TIMEOUT)
    assert first[0].records == second.records
    h.append(second)
    assert h.md().producer_epoch == EPOCH + 1
    assert h.abort_timed_out_transactions(NOW + 3 * TIMEOUT) == []  # not aborted twice


def test_timed_out_transaction_at_last_epoch_is_fenced_to_max_epoch():
    h = owned(meta(S.ONGOING, epoch=MAX - 1, start=NOW))
    (result,) = h.abort_timed_out_transactions(NOW + 2 * TIMEOUT)
    _, value = only_record(result)
    assert (value.producer_id, value.producer_epoch) == (PID, MAX)


def test_should_only_consider_transactions_in_the_ongoing_state_to_abort():
    h = Harness()
    states = {
        "ongoing": (S.ONGOING, TIMEOUT), "not-expiring": (S.ONGOING, 10_000),
        "prepare-commit": (S.PREPARE_COMMIT, TIMEOUT), "prepare-abort": (S.PREPARE_ABORT, TIMEOUT),
        "complete-commit": (S.COMPLETE_COMMIT, TIMEOUT), "complete-abort": (S.COMPLETE_ABORT, TIMEOUT),
        "empty": (S.EMPTY, TIMEOUT),
    }
    h.own(*states)
    for i, (tid, (state, timeout)) in enumerate(states.items()):
        h.seed(meta(state, pid=i, tid=tid, timeout=timeout, start=NOW))
    results = h.abort_timed_out_transactions(NOW + 2 * TIMEOUT)
    assert [decode_key(r.records[0].key) for r in results] == ["ongoing"]


def test_timers_skip_loading_partitions():
    h = Harness()
    h.load_partition(h.partition_for(TID), 1)
    h.seed(meta(S.ONGOING, start=0, updated=0))
    h.seed(meta(S.EMPTY, tid=neighbour(h, TID), updated=0))
    assert h.abort_timed_out_transactions(NOW * 1000) == []
    assert h.expire_transactional_ids(NOW * 1000) == []


# -- transactional id expiration -----------------------------------------------------------

EXPIRY = TransactionConfig(transactional_id_expiration_ms=10_000)


@pytest.mark.parametrize("state", [S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.EMPTY])
def test_should_remove_expired_transactional_ids(state):
    h = owned(meta(state, updated=NOW), config=EXPIRY)
    assert h.expire_transactional_ids(NOW + 9_999) == []
    (result,) = pure(h, lambda: h.expire_transactional_ids(NOW + 10_000))
    assert result.records == (TransactionLogRecord(encode_key(TID), None),)
    assert result.response is None and result.effects == ()
    h.append(result)
    assert h.md() is None
    assert h.describe_transactions([TID])[0].error is E.transactional_id_not_found


def test_should_not_remove_expired_transactional_ids_if_log_append_fails():
    h = owned(meta(S.COMPLETE_COMMIT, updated=NOW), config=EXPIRY)
    assert len(h.expire_transactional_ids(NOW + 20_000)) == 1  # dropped
    assert h.md() is not None
    assert len(h.expire_transactional_ids(NOW + 20_000)) == 1


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT])
def test_should_not_remove_transactional_ids_with_open_transactions(state):
    h = owned(meta(state, updated=NOW), config=EXPIRY)
    assert h.expire_transactional_ids(NOW + 10 * 10_000) == []


def test_transaction_expiration_should_not_fail_with_uninitialized_transaction_metadata():
    # A new id whose first append failed leaves nothing behind to expire.
    h = Harness(EXPIRY).own()
    h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW)
    assert h.md() is None
    assert h.expire_transactional_ids(NOW + 100_000) == []


def test_an_expired_id_starts_over_with_a_new_producer_id():
    h = owned(meta(S.COMPLETE_COMMIT, updated=NOW), config=EXPIRY, first_pid=300)
    h.append(h.expire_transactional_ids(NOW + 10_000)[0])
    result = h.append(h.init_producer_id(TID, TIMEOUT, PID, EPOCH, INIT_V, NOW + 10_001))
    assert result.response == InitProducerIdResponse(E.none, 300, 0)


# -- DescribeTransactions / ListTransactions -----------------------------------------------


def test_describe_transactions_with_empty_transactional_id():
    (described,) = Harness().own().describe_transactions([""])
    assert (described.transactional_id, described.error) == ("", E.invalid_request)


def test_describe_transactions_with_expiring_transactional_id():
    h = owned(meta(S.EMPTY))
    h.append(Result(records=(TransactionLogRecord(encode_key(TID), None),)))
    (described,) = h.describe_transactions([TID])
    assert (described.transactional_id, described.error) == (TID, E.transactional_id_not_found)


def test_describe_transactions_while_coordinator_loading():
    h = Harness()
    h.load_partition(h.partition_for(TID), 1)
    (described,) = h.describe_transactions([TID])
    assert (described.transactional_id, described.error) == (TID, E.coordinator_load_in_progress)
    assert Harness().describe_transactions([TID])[0].error is E.not_coordinator


def test_describe_transactions():
    h = owned(meta(S.ONGOING, start=NOW - 7))
    (described,) = pure(h, lambda: h.describe_transactions([TID]))
    assert described.error is E.none
    assert (described.producer_id, described.producer_epoch) == (PID, EPOCH)
    assert described.state == "Ongoing"
    assert described.transaction_timeout_ms == TIMEOUT
    assert described.transaction_start_time_ms == NOW - 7
    assert described.topics == (("topic1", (0, 1)),)


def _listing_harness():
    h = Harness(TransactionConfig(transaction_state_log_num_partitions=2))
    ids = {"t0": (S.EMPTY, 0), "t1": (S.ONGOING, 1), "t2": (S.PREPARE_COMMIT, 2), "t3": (S.PREPARE_ABORT, 3),
           "t4": (S.COMPLETE_COMMIT, 4), "t5": (S.COMPLETE_ABORT, 5),
           "my-special-0": (S.ONGOING, 7), "your-special-1": (S.ONGOING, 7), "their-special-2": (S.COMPLETE_ABORT, 7)}
    h.own(*ids)
    for tid, (state, pid) in ids.items():
        start = NOW - 500 if tid == "their-special-2" else NOW - 5000
        h.seed(meta(state, pid=pid, tid=tid, start=start))
    return h


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, {"t0", "t1", "t2", "t3", "t4", "t5", "my-special-0", "your-special-1", "their-special-2"}),
        ({"producer_id_filters": [0, 1, 2, 3]}, {"t0", "t1", "t2", "t3"}),
        ({"state_filters": ["Ongoing"]}, {"t1", "my-special-0", "your-special-1"}),
        ({"producer_id_filters": [4, 5], "state_filters": ["CompleteCommit"]}, {"t4"}),
        ({"producer_id_filters": [3, 6], "state_filters": ["UnknownState"]}, set()),
        ({"state_filters": ["Dead"]}, set()),
        ({"transactional_id_pattern": ".*special-.*"}, {"my-special-0", "your-special-1", "their-special-2"}),
        ({"transactional_id_pattern": "special"}, set()),  # anchored to the whole id
        ({"transactional_id_pattern": ".*special-.*", "duration_filter_ms": 1000}, {"my-special-0", "your-special-1"}),
        ({"producer_id_filters": [7], "state_filters": ["CompleteCommit", "CompleteAbort"],
          "transactional_id_pattern": ".*special-.*"}, {"their-special-2"}),
    ],
)
def test_list_transactions_filtering(kwargs, expected):
    h = _listing_harness()
    response = pure(h, lambda: h.list_transactions(now_ms=NOW, **kwargs))
    assert response.error is E.none
    assert {t.transactional_id for t in response.transaction_states} == expected


def test_list_transactions_reports_unknown_state_filters_and_state_names():
    h = _listing_harness()
    response = h.list_transactions(state_filters=["UnknownState", "Ongoing"], producer_id_filters=[1], now_ms=NOW)
    assert response.unknown_state_filters == ("UnknownState",)
    (listed,) = response.transaction_states
    assert (listed.transactional_id, listed.producer_id, listed.state) == ("t1", 1, "Ongoing")


def test_list_transactions_filtering_with_invalid_pattern():
    h = _listing_harness()
    assert h.list_transactions(transactional_id_pattern="(ab(cd", now_ms=NOW).error is E.invalid_regular_expression


def test_list_transactions_with_coordinator_loading_in_progress():
    h = _listing_harness()
    h.load_partition(0, 99)
    assert h.list_transactions(now_ms=NOW).error is E.coordinator_load_in_progress


# -- partition ownership and loading (TransactionStateManagerTest) -------------------------


def test_should_return_not_coordinator_error_if_transaction_id_partition_not_owned():
    h = Harness(TransactionConfig(transaction_state_log_num_partitions=2)).own("a")
    assert h.partition_for("a") == 1 and h.partition_for("b") == 0
    assert h.refused("init_producer_id", "b", TIMEOUT, -1, -1, INIT_V, NOW) is E.not_coordinator
    assert h.init_producer_id("a", TIMEOUT, -1, -1, INIT_V, NOW).response.error is E.none


def test_add_get_pids():
    h = Harness(TransactionConfig(transaction_state_log_num_partitions=2)).own("one", "two")
    assert h.md("one") is None
    h.seed(meta(S.EMPTY, pid=1, tid="one"))
    h.seed(meta(S.EMPTY, pid=2, tid="two"))
    assert (h.md("one").producer_id, h.md("two").producer_id) == (1, 2)


def test_delete_partition():
    h = Harness(TransactionConfig(transaction_state_log_num_partitions=2)).own("a", "b")
    h.seed(meta(S.EMPTY, pid=5, tid="b"))
    h.seed(meta(S.EMPTY, pid=10, tid="a"))
    h.unload_partition(0)
    assert h.md("b") is None and h.md("a") is not None
    assert h.runtime.loads.loaded() == {1}
    assert h.refused("end_txn", "b", 5, EPOCH, True, TXN_V, NOW) is E.not_coordinator


def test_delete_loading_partition():
    # also testMakeFollowerLoadingPartition: leaving a partition mid-load drops it
    h = Harness()
    p = h.partition_for(TID)
    h.load_partition(p, 0)
    h.seed(meta(S.PREPARE_COMMIT))
    h.unload_partition(p)
    assert h.runtime.loads.held() == frozenset()
    assert h.refused("init_producer_id", TID, TIMEOUT, -1, -1, INIT_V, NOW) is E.not_coordinator
    with pytest.raises(KeyError):
        h.finish_loading(p)


def test_load_and_remove_transactions_for_partition():
    h = Harness(TransactionConfig(transaction_state_log_num_partitions=2))
    h.load_partition(0, 10)
    first = meta(S.ONGOING, pid=1, tid="one", partitions={("topic1", 0), ("topic1", 1)})
    h.seed(first)
    h.seed(meta(S.ONGOING, pid=1, tid="one", partitions=first.topic_partitions | {("topic2", 0), ("topic2", 1), ("topic2", 2)}))
    h.seed(meta(S.PREPARE_COMMIT, pid=1, tid="one", partitions=first.topic_partitions | {("topic2", 0), ("topic2", 1), ("topic2", 2)}))
    h.seed(meta(S.ONGOING, pid=2, tid="two", partitions={("topic3", 0)}))
    h.seed(meta(S.PREPARE_ABORT, pid=2, tid="two", partitions={("topic3", 0)}))
    h.seed(meta(S.COMPLETE_ABORT, pid=2, tid="two"))
    h.seed(meta(S.EMPTY, pid=2, tid="two", epoch=EPOCH + 1))
    assert h.refused("init_producer_id", "one", TIMEOUT, -1, -1, INIT_V, NOW) is E.coordinator_load_in_progress
    rolled = h.finish_loading(0)
    assert h.md("one").state is S.PREPARE_COMMIT and len(h.md("one").topic_partitions) == 5
    assert h.md("two").state is S.EMPTY and h.md("two").producer_epoch == EPOCH + 1
    assert [e.transactional_id for r in rolled for e in r.effects] == ["one"]
    assert [md.transactional_id for md in h.open_transactions(0)] == ["one"]  # "two" is Empty
    h.unload_partition(0)
    assert h.open_transactions(0) == []
    assert h.md("one") is None and h.md("two") is None


def test_complete_transition_when_append_succeeded():
    h = owned(meta(S.EMPTY))
    h.append(h.add_partitions_to_txn(TID, PID, EPOCH, PARTITIONS, TXN_V, NOW))
    assert (h.md().state, h.md().topic_partitions) == (S.ONGOING, PARTITIONS)


def test_append_fail_leaves_state_unchanged():
    # testAppendFailTo{CoordinatorNotAvailable,NotCoordinator,CoordinatorLoading,Unknown}Error:
    # whatever the append error, nothing is replayed, so the state is as before.
    h = owned(meta(S.ONGOING))
    before = h.snapshot()
    h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW)
    h.add_partitions_to_txn(TID, PID, EPOCH, {("x", 9)}, TXN_V, NOW)
    assert h.snapshot() == before
    assert h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW).records  # may simply be retried


@pytest.mark.parametrize(("state", "commit"), [(S.PREPARE_COMMIT, True), (S.PREPARE_ABORT, False)])
def test_should_write_txn_markers_for_transaction_in_prepared_state(state, commit):
    h = Harness()
    p = h.partition_for(TID)
    h.load_partition(p, 11)
    h.seed(meta(state))
    h.seed(meta(S.ONGOING, tid=neighbour(h, TID), pid=99))
    results = h.finish_loading(p)
    assert [r.effects for r in results] == [(SendMarkers(TID, PID, EPOCH, 11, commit, tuple(sorted(PARTITIONS))),)]
    assert all(r.records == () and r.response is None for r in results)


def test_successful_reimmigration():
    h = owned(meta(S.PREPARE_COMMIT))
    p = h.partition_for(TID)
    h.unload_partition(p)
    assert h.refused("end_txn", TID, PID, EPOCH, True, TXN_V, NOW) is E.not_coordinator
    h.load_partition(p, 12)
    h.seed(meta(S.PREPARE_COMMIT))
    (result,) = h.finish_loading(p)
    assert result.effects[0].coordinator_epoch == 12
    assert h.coordinator.coordinator_epoch(p) == 12
    assert h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW).response.error is E.concurrent_transactions


def test_load_transaction_metadata_with_corrupted_log():
    h = owned(meta(S.ONGOING))
    before = h.snapshot()
    with pytest.raises(ValueError):
        h.replay(CoordinatorRecord(encode_key(TID), b"\x00\x01\x00\x00"), 99, NOW)
    assert h.snapshot() == before


def test_ignore_unknown_record_type():
    h = owned(meta(S.ONGOING))
    before = h.snapshot()
    h.replay(CoordinatorRecord(b"\x00\x05\x00\x01x", b"\x00\x00garbage"), 99, NOW)
    assert h.snapshot() == before


def test_should_return_txn_tombstone_for_null_value():
    h = owned(meta(S.EMPTY))
    h.replay(CoordinatorRecord(encode_key(TID), None), 99, NOW)
    assert h.md() is None
    h.replay(CoordinatorRecord(encode_key(TID), None), 100, NOW)  # a second tombstone is harmless


def test_replay_for_a_partition_not_held_is_ignored():
    h = Harness()
    h.seed(meta(S.EMPTY))
    assert h.snapshot() == {}


def test_partition_of_record():
    h = Harness()
    result = Harness().own().init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW)
    assert h.partition_of(result.records[0]) == partition_for(TID, 50)


# -- a whole transaction, and the purity property ------------------------------------------


def test_good_path_sequence():
    h = Harness(first_pid=1).own()
    pid = h.append(h.init_producer_id(TID, 60_000, -1, -1, INIT_V, 1)).response.producer_id
    h.append(h.add_partitions_to_txn(TID, pid, 0, {("orders", 3)}, TXN_V, 2))
    h.append(h.add_offsets_to_txn(TID, pid, 0, "group", TXN_V, 3))
    end = h.append(h.end_txn(TID, pid, 0, True, TXN_V, 4))
    (markers,) = end.effects
    assert set(markers.topic_partitions) == {("orders", 3), ("__consumer_offsets", partition_for("group", 50))}
    h.append(h.markers_written(TID, pid, 0, True, 5))
    assert h.md().state is S.COMPLETE_COMMIT
    h.append(h.add_partitions_to_txn(TID, pid, 0, {("orders", 4)}, TXN_V, 6))
    assert h.md().txn_start_timestamp_ms == 6


def test_every_handler_leaves_state_untouched():
    for state in S:
        if state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            continue
        h = owned(meta(state, start=0, updated=0), config=EXPIRY).own("fresh-id")
        calls = [
            lambda: h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW),
            lambda: h.init_producer_id(TID, TIMEOUT, PID, EPOCH, INIT_V, NOW),
            lambda: h.init_producer_id("fresh-id", TIMEOUT, -1, -1, INIT_V, NOW),
            lambda: h.add_partitions_to_txn(TID, PID, EPOCH, {("z", 1)}, TXN_V, NOW),
            lambda: h.add_offsets_to_txn(TID, PID, EPOCH, "g", TXN_V, NOW),
            lambda: h.verify_partitions_in_txn(TID, PID, EPOCH, {("z", 1)}),
            lambda: h.end_txn(TID, PID, EPOCH, True, TXN_V, NOW),
            lambda: h.end_txn(TID, PID, EPOCH, False, TXN_V, NOW),
            lambda: h.markers_written(TID, PID, EPOCH, True, NOW),
            lambda: h.markers_written(TID, PID, EPOCH, False, NOW),
            lambda: h.abort_timed_out_transactions(NOW),
            lambda: h.expire_transactional_ids(NOW),
            lambda: h.describe_transactions([TID, "other"]),
            lambda: h.list_transactions(now_ms=NOW),
        ]
        for call in calls:
            pure(h, call)


# -- EndTxn v5: transaction version 2 (KIP-890 part 2) --------------------------------------

TV2_V = 5


def test_tv2_end_bumps_the_epoch_persists_it_and_marks_with_it():
    h = owned(meta(S.ONGOING))
    result = h.append(h.end_txn(TID, PID, EPOCH, True, TV2_V, NOW))
    assert result.response == EndTxnResponse(E.none, PID, EPOCH + 1)
    _key, value = only_record(result)
    assert (value.producer_epoch, value.transaction_status, value.client_transaction_version) == (
        EPOCH + 1, S.PREPARE_COMMIT.id, 2)
    (markers,) = result.effects
    assert (markers.producer_epoch, markers.transaction_version, markers.commit) == (EPOCH + 1, 2, True)
    h.append(h.markers_written(TID, PID, EPOCH + 1, True, NOW))
    md = h.md()
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.COMPLETE_COMMIT, EPOCH + 1, EPOCH)


def test_tv2_retry_with_the_previous_epoch_is_answered_with_the_current_one():
    h = owned(meta(S.COMPLETE_COMMIT, epoch=EPOCH + 1, last_epoch=EPOCH))
    assert pure(h, lambda: h.end_txn(TID, PID, EPOCH, True, TV2_V, NOW)).response == \
        EndTxnResponse(E.none, PID, EPOCH + 1)
    assert h.end_txn(TID, PID, EPOCH, False, TV2_V, NOW).response.error is E.invalid_txn_state
    h2 = owned(meta(S.PREPARE_COMMIT, epoch=EPOCH + 1))
    assert h2.end_txn(TID, PID, EPOCH, True, TV2_V, NOW).response.error is E.concurrent_transactions


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_tv2_end_while_the_markers_are_out_is_concurrent_whatever_it_names(state):
    # Kafka 4.4's handleEndTransaction: the Complete state is pending while the markers
    # are written, and a pending transition answers CONCURRENT_TRANSACTIONS before the
    # producer id and epoch are checked: the retry, the bumped epoch, the other result.
    h = owned(meta(state, epoch=EPOCH + 1, last_epoch=EPOCH))
    for epoch in (EPOCH - 1, EPOCH, EPOCH + 1, EPOCH + 2):
        for commit in (True, False):
            assert pure(h, lambda: h.end_txn(TID, PID, epoch, commit, TV2_V, NOW)).response == \
                EndTxnResponse(E.concurrent_transactions), (epoch, commit)
    assert h.end_txn(TID, PID + 1, EPOCH + 1, True, TV2_V, NOW).response.error is E.concurrent_transactions


def test_tv2_epochs_must_match_exactly():
    h = owned(meta(S.ONGOING))
    assert h.end_txn(TID, PID, EPOCH + 1, True, TV2_V, NOW).response.error is E.producer_fenced
    assert h.end_txn(TID, PID, EPOCH - 1, True, TV2_V, NOW).response.error is E.producer_fenced
    assert h.end_txn(TID, PID + 1, EPOCH, True, TV2_V, NOW).response.error is E.invalid_producer_id_mapping


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_tv2_abort_without_a_transaction_bumps_the_epoch(state):
    h = owned(meta(state))
    result = h.append(h.end_txn(TID, PID, EPOCH, False, TV2_V, NOW))
    assert result.response == EndTxnResponse(E.none, PID, EPOCH + 1)
    (markers,) = result.effects
    assert markers.topic_partitions == ()
    h.append(h.markers_written(TID, PID, EPOCH + 1, False, NOW))  # none to write: complete at once
    assert h.end_txn(TID, PID, EPOCH + 1, True, TV2_V, NOW).response.error is E.invalid_txn_state
    # Version 1 keeps its rules: no transaction, nothing to abort (CompleteAbort: a retry).
    v1 = owned(meta(state)).end_txn(TID, PID, EPOCH, False, TXN_V, NOW)
    assert (v1.response.error, v1.records) == (
        E.none if state is S.COMPLETE_ABORT else E.invalid_txn_state, ())


@pytest.mark.parametrize("commit", [True, False])
def test_tv2_end_at_the_exhausted_epoch_rotates_the_producer_id(commit):
    # Kafka's endTransaction with an exhausted epoch (MAX-1): the bump goes to MAX for the
    # markers, the next producer id is allocated and persisted, the answer already carries
    # it at epoch 0, and the producer holds it once the markers are written.
    h = owned(meta(S.ONGOING, epoch=MAX - 1), first_pid=100)
    result = h.append(h.end_txn(TID, PID, MAX - 1, commit, TV2_V, NOW, h.pids.peek()))
    assert result.response == EndTxnResponse(E.none, 100, 0)
    _key, value = only_record(result)
    assert (value.producer_id, value.producer_epoch, value.next_producer_id) == (PID, MAX, 100)
    markers = next(e for e in result.effects if isinstance(e, SendMarkers))
    assert (markers.producer_id, markers.producer_epoch, markers.transaction_version) == (PID, MAX, 2)
    assert h.pids.peek() == 101  # the id is taken with the record
    # a retry while the markers are out: the transaction is still being written
    assert h.end_txn(TID, PID, MAX - 1, commit, TV2_V, NOW, 101).response.error is E.concurrent_transactions
    done = h.append(h.markers_written(TID, PID, MAX, commit, NOW))
    _key, value = only_record(done)
    assert (value.producer_id, value.producer_epoch, value.previous_producer_id, value.next_producer_id) == (
        100, 0, PID, -1)
    md = h.md()
    assert (md.state, md.producer_id, md.producer_epoch) == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
                                                             100, 0)
    # a retry from the old id and epoch is answered with the new ones; nothing changes
    assert pure(h, lambda: h.end_txn(TID, PID, MAX - 1, commit, TV2_V, NOW, 101)).response == \
        EndTxnResponse(E.none, 100, 0)
    assert h.end_txn(TID, PID, MAX - 1, not commit, TV2_V, NOW, 101).response.error is E.invalid_txn_state
    # the new id goes on at epoch 0; the old one is unknown now
    h.append(h.add_partitions_to_txn(TID, 100, 0, {("orders", 1)}, TXN_V, NOW))
    assert h.append(h.end_txn(TID, 100, 0, True, TV2_V, NOW, 101)).response == EndTxnResponse(E.none, 100, 1)
    h.append(h.markers_written(TID, 100, 1, True, NOW))
    assert h.end_txn(TID, PID, MAX - 1, True, TV2_V, NOW, 101).response.error is E.invalid_producer_id_mapping


def test_tv2_rotation_survives_a_coordinator_move():
    # The PrepareCommit record carries the next producer id: a coordinator that loads it
    # resends the markers with the old id and completes onto the new one.
    h = owned(meta(S.ONGOING, epoch=MAX - 1), first_pid=100)
    h.append(h.end_txn(TID, PID, MAX - 1, True, TV2_V, NOW, h.pids.peek()))
    effects = h.reload(h.partition_for(TID), 8)
    (markers,) = [e for e in effects if isinstance(e, SendMarkers)]
    assert (markers.producer_id, markers.producer_epoch) == (PID, MAX)
    h.append(h.markers_written(TID, PID, MAX, True, NOW, 8))
    assert (h.md().producer_id, h.md().producer_epoch) == (100, 0)


def test_tv2_end_below_the_exhausted_epoch_keeps_the_producer_id():
    h = owned(meta(S.ONGOING, epoch=MAX - 2), first_pid=100)
    result = h.append(h.end_txn(TID, PID, MAX - 2, True, TV2_V, NOW, h.pids.peek()))
    assert result.response == EndTxnResponse(E.none, PID, MAX - 1)
    assert h.pids.peek() == 100
    assert only_record(result)[1].next_producer_id == -1


# -- replaying a record just appended: the metadata it carries, or its bytes -------------


def _a_transaction_of_every_kind(h):
    """Init, a version 1 commit, a fenced abort, a version 2 commit that rotates the id."""
    init = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW)).response
    pid, epoch = init.producer_id, init.producer_epoch
    h.append(h.add_partitions_to_txn(TID, pid, epoch, PARTITIONS, TXN_V, NOW))
    h.append(h.add_offsets_to_txn(TID, pid, epoch, "group", TXN_V, NOW + 1))
    h.append(h.end_txn(TID, pid, epoch, True, TXN_V, NOW + 2))
    h.append(h.markers_written(TID, pid, epoch, True, NOW + 3))
    h.append(h.add_partitions_to_txn(TID, pid, epoch, PARTITIONS, TXN_V, NOW + 4))
    h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW + 5))  # fences, aborts
    md = h.md()
    h.append(h.markers_written(TID, md.producer_id, md.producer_epoch, False, NOW + 6))
    h.seed(h.md()._replace(producer_epoch=MAX - 2))
    init = h.append(h.init_producer_id(TID, TIMEOUT, -1, -1, INIT_V, NOW + 7)).response
    pid, epoch = init.producer_id, init.producer_epoch
    h.append(h.add_partitions_to_txn(TID, pid, epoch, PARTITIONS, TXN_V, NOW + 8))
    ended = h.append(h.end_txn(TID, pid, epoch, True, 5, NOW + 9, h.pids.peek())).response
    h.append(h.markers_written(TID, pid, epoch + 1, True, NOW + 10))
    assert (ended.producer_id, h.md().producer_id, h.md().state) == (h.pids.next - 1, h.pids.next - 1,
                                                                     S.COMPLETE_COMMIT)


def test_live_replay_gives_the_state_a_load_of_the_same_bytes_gives():
    h = Harness().own()
    _a_transaction_of_every_kind(h)
    # The same records as a load reads them (bytes only, no in-memory last epoch).
    from_disk = Harness().own()
    for record in h.appended:
        from_disk.coordinator.replay(CoordinatorRecord(record.key, record.value), 0, NOW)

    def without_last_epoch(c):
        return {p: (epoch, loading, {t: md._replace(last_producer_epoch=-1) for t, md in txns.items()})
                for p, (epoch, loading, txns) in c.snapshot().items()}

    assert without_last_epoch(from_disk.coordinator) == without_last_epoch(h.coordinator)


@pytest.mark.parametrize("epoch", [5, MAX - 2, MAX - 1])
def test_a_producer_id_is_needed_only_where_one_is_taken(epoch):
    # The handlers ask the allocator only when needs_producer_id says so: at any other
    # epoch an end and an init take no id, so no id handed in gives the same answer.
    h = owned(meta(S.ONGOING, epoch=epoch), first_pid=100)
    assert h.needs_producer_id(TID) is (epoch == MAX - 1)
    without = h.end_txn(TID, PID, epoch, True, TV2_V, NOW)
    with_id = h.end_txn(TID, PID, epoch, True, TV2_V, NOW, 100)
    assert (without == with_id) is (epoch != MAX - 1)
    assert Harness().needs_producer_id(TID)  # a new mapping always takes one
