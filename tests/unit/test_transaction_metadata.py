"""TransactionMetadata transitions (Kafka's TransactionMetadataTest, transaction version 1)."""

import pytest

from coordinator.transaction.metadata import (
    MAX_EPOCH,
    InvalidTransition,
    ProducerFenced,
    TransactionMetadata,
)
from coordinator.transaction.metadata import TransactionState as S

PRODUCER_ID = 23423
NOW = 1_000_000


def metadata(epoch, state=S.EMPTY, last_epoch=-1, partitions=(), start=-1, previous=-1):
    return TransactionMetadata(
        transactional_id="txnlId",
        producer_id=PRODUCER_ID,
        previous_producer_id=previous,
        next_producer_id=-1,
        producer_epoch=epoch,
        last_producer_epoch=last_epoch,
        txn_timeout_ms=30000,
        state=state,
        topic_partitions=frozenset(partitions),
        txn_start_timestamp_ms=start,
        txn_last_update_timestamp_ms=NOW,
    )


def test_initialize_epoch():
    new = metadata(-1).prepare_increment_producer_epoch(30000, None, NOW)
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (PRODUCER_ID, 0, -1)
    assert new.state is S.EMPTY


def test_normal_epoch_bump():
    new = metadata(735).prepare_increment_producer_epoch(30000, None, NOW)
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (PRODUCER_ID, 736, -1)


def test_bump_epoch_not_allowed_if_epochs_exhausted():
    md = metadata(MAX_EPOCH - 1)
    assert md.is_producer_epoch_exhausted
    with pytest.raises(InvalidTransition):
        md.prepare_increment_producer_epoch(30000, None, NOW)


def test_epoch_exhaustion_threshold():
    assert not metadata(MAX_EPOCH - 2).is_producer_epoch_exhausted
    assert metadata(32766).is_producer_epoch_exhausted
    assert metadata(32767).is_producer_epoch_exhausted


def test_tolerate_update_time_shift_during_epoch_bump():
    md = metadata(1, start=1)
    new = md.prepare_increment_producer_epoch(30000, 1, NOW - 1)
    assert (new.producer_epoch, new.last_producer_epoch) == (2, 1)
    assert new.txn_start_timestamp_ms == -1
    assert new.txn_last_update_timestamp_ms == NOW - 1


def test_tolerate_update_time_reset_during_producer_id_rotation():
    md = metadata(1, start=1)
    new = md.prepare_producer_id_rotation(PRODUCER_ID + 1, 30000, NOW - 1, record_last_epoch=True)
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (PRODUCER_ID + 1, 0, 1)
    assert new.previous_producer_id == PRODUCER_ID
    assert new.txn_start_timestamp_ms == -1
    assert new.txn_last_update_timestamp_ms == NOW - 1


def test_tolerate_time_shift_during_add_partitions():
    md = metadata(1, start=NOW)
    # leaving Empty, the start time becomes the update time, even if earlier
    first = md.prepare_add_partitions(frozenset({("topic1", 0)}), NOW - 1)
    assert first.state is S.ONGOING
    assert first.topic_partitions == {("topic1", 0)}
    assert (first.producer_epoch, first.last_producer_epoch) == (1, -1)
    assert first.txn_start_timestamp_ms == NOW - 1
    assert first.txn_last_update_timestamp_ms == NOW - 1
    # while Ongoing, the start time stays
    second = first.prepare_add_partitions(frozenset({("topic2", 0)}), NOW - 2)
    assert second.topic_partitions == {("topic1", 0), ("topic2", 0)}
    assert second.txn_start_timestamp_ms == NOW - 1
    assert second.txn_last_update_timestamp_ms == NOW - 2


@pytest.mark.parametrize("target", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_tolerate_time_shift_during_prepare_commit_and_abort(target):
    md = metadata(1, state=S.ONGOING, start=1)
    new = md.prepare_abort_or_commit(target, NOW - 1)
    assert new.state is target
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (PRODUCER_ID, 1, -1)
    assert new.txn_start_timestamp_ms == 1
    assert new.txn_last_update_timestamp_ms == NOW - 1


@pytest.mark.parametrize(
    ("prepared", "completed"),
    [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT)],
)
def test_tolerate_time_shift_during_complete_commit_and_abort(prepared, completed):
    md = metadata(1, state=prepared, last_epoch=0, start=1, partitions={("t", 0)})
    new = md.prepare_complete(NOW - 1)
    assert new.state is completed
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (PRODUCER_ID, 1, 0)
    assert new.topic_partitions == frozenset()
    assert new.txn_start_timestamp_ms == 1
    assert new.txn_last_update_timestamp_ms == NOW - 1


def test_fence_producer_after_epochs_exhausted():
    md = metadata(MAX_EPOCH - 1, state=S.ONGOING)
    fencing = md.prepare_fence_producer_epoch()
    assert fencing.state is S.PREPARE_EPOCH_FENCE
    assert (fencing.producer_epoch, fencing.last_producer_epoch) == (MAX_EPOCH, MAX_EPOCH - 1)
    aborting = fencing.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    assert aborting.state is S.PREPARE_ABORT
    assert (aborting.producer_id, aborting.producer_epoch) == (PRODUCER_ID, MAX_EPOCH)


@pytest.mark.parametrize("state", [S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.EMPTY])
def test_invalid_transition_from_complete_or_empty_to_fence(state):
    with pytest.raises(InvalidTransition):
        metadata(MAX_EPOCH - 1, state=state).prepare_fence_producer_epoch()


def test_fence_producer_at_max_epoch_keeps_the_epoch():
    # Kafka 4 lets the fence (and the abort after it) through without overflowing
    fencing = metadata(MAX_EPOCH, state=S.ONGOING).prepare_fence_producer_epoch()
    assert (fencing.state, fencing.producer_epoch) == (S.PREPARE_EPOCH_FENCE, MAX_EPOCH)


def test_rotate_producer_id():
    md = metadata(MAX_EPOCH - 1)
    new = md.prepare_producer_id_rotation(9893, 30000, NOW, record_last_epoch=True)
    assert new.producer_id == 9893
    assert new.previous_producer_id == PRODUCER_ID
    assert (new.producer_epoch, new.last_producer_epoch) == (0, MAX_EPOCH - 1)
    without_last = md.prepare_producer_id_rotation(9893, 30000, NOW, record_last_epoch=False)
    assert without_last.last_producer_epoch == -1


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT])
def test_rotate_producer_id_in_ongoing_or_prepare_state(state):
    with pytest.raises(InvalidTransition):
        metadata(MAX_EPOCH - 1, state=state, previous=PRODUCER_ID).prepare_producer_id_rotation(
            9893, 30000, NOW, record_last_epoch=False
        )


def test_attempted_epoch_bump_with_newly_created_metadata():
    new = metadata(-1).prepare_increment_producer_epoch(30000, 735, NOW)
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (PRODUCER_ID, 0, -1)


def test_epoch_bump_with_current_epoch_provided():
    new = metadata(735).prepare_increment_producer_epoch(30000, 735, NOW)
    assert (new.producer_epoch, new.last_producer_epoch) == (736, 735)


def test_attempted_epoch_bump_with_last_epoch():
    new = metadata(735, last_epoch=734).prepare_increment_producer_epoch(30000, 734, NOW)
    assert (new.producer_epoch, new.last_producer_epoch) == (735, 734)


def test_no_bump_at_all_once_exhausted_not_even_a_retry():
    # Kafka's prepareIncrementProducerEpoch checks exhaustion before the retry case
    md = metadata(MAX_EPOCH - 1, last_epoch=MAX_EPOCH - 2)
    with pytest.raises(InvalidTransition):
        md.prepare_increment_producer_epoch(30000, MAX_EPOCH - 2, NOW)


def test_attempted_epoch_bump_with_fenced_epoch():
    md = metadata(735, last_epoch=734, previous=PRODUCER_ID)
    with pytest.raises(ProducerFenced):
        md.prepare_increment_producer_epoch(30000, 733, NOW)


def test_every_transition_records_the_producer_id_it_came_from():
    md = metadata(3, state=S.ONGOING, previous=-1, start=5)
    assert md.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW).previous_producer_id == PRODUCER_ID


def test_prepare_dead_only_from_idle_states():
    for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        assert metadata(1, state=state).prepare_dead().state is S.DEAD
    for state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(InvalidTransition):
            metadata(1, state=state).prepare_dead()


def test_prepare_abort_or_commit_rejects_other_targets_and_states():
    with pytest.raises(InvalidTransition):
        metadata(1, state=S.ONGOING).prepare_abort_or_commit(S.COMPLETE_COMMIT, NOW)
    # transaction version 1: no PrepareAbort straight from Empty/Complete*
    for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        with pytest.raises(InvalidTransition):
            metadata(1, state=state).prepare_abort_or_commit(S.PREPARE_ABORT, NOW)


def test_add_partitions_not_allowed_while_completing():
    for state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        with pytest.raises(InvalidTransition):
            metadata(1, state=state).prepare_add_partitions(frozenset({("t", 0)}), NOW)


def test_new_epoch_must_not_be_negative():
    # a never-initialized mapping cannot start a transaction
    with pytest.raises(InvalidTransition):
        metadata(-1).prepare_add_partitions(frozenset({("t", 0)}), NOW)


def test_transitions_do_not_mutate():
    md = metadata(1, state=S.ONGOING, start=1, partitions={("t", 0)})
    before = (md.state, md.producer_epoch, md.topic_partitions)
    md.prepare_add_partitions(frozenset({("u", 1)}), NOW)
    md.prepare_fence_producer_epoch()
    md.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    assert (md.state, md.producer_epoch, md.topic_partitions) == before


def test_transaction_state_id_and_name_mapping():
    expected = {
        S.EMPTY: (0, "Empty"),
        S.ONGOING: (1, "Ongoing"),
        S.PREPARE_COMMIT: (2, "PrepareCommit"),
        S.PREPARE_ABORT: (3, "PrepareAbort"),
        S.COMPLETE_COMMIT: (4, "CompleteCommit"),
        S.COMPLETE_ABORT: (5, "CompleteAbort"),
        S.DEAD: (6, "Dead"),
        S.PREPARE_EPOCH_FENCE: (7, "PrepareEpochFence"),
    }
    for state, (state_id, name) in expected.items():
        assert (state.id, state.state_name, str(state)) == (state_id, name, name)
        assert S.from_id(state_id) is state
        assert S.from_name(name) is state
    assert S.from_name("UnknownState") is None
    with pytest.raises(ValueError):
        S.from_id(8)


def test_all_transaction_states_are_mapped():
    assert len(S) == 8
    assert {s.id for s in S} == set(range(8))


ALLOWED = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    # Empty/Complete*: transaction version 2's abort without a transaction.
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


@pytest.mark.parametrize("target", list(S))
def test_allowed_transition_table(target):
    assert target.valid_previous_states == ALLOWED[target]


def test_expiration_allowed_only_for_idle_states():
    assert {s for s in S if s.is_expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


@pytest.mark.parametrize("name", [f for f in TransactionMetadata._fields
                                  if f not in ("transactional_id", "previous_producer_id", "state")])
def test_transit_is_replace_for_every_field(name):
    # _transit spells _replace out positionally: a field out of order would swap two values.
    md = TransactionMetadata("id", 1, 2, 3, 4, 5, 6, S.ONGOING, frozenset({("t", 0)}), 7, 8, 2)
    changed = 99
    assert md._transit(S.ONGOING, **{name: changed}) == md._replace(
        previous_producer_id=md.producer_id, **{name: changed})
    assert md._transit(S.ONGOING) == md._replace(previous_producer_id=md.producer_id)


def test_transit_refuses_an_unknown_field():
    with pytest.raises(ValueError):
        metadata(0)._transit(S.EMPTY, producer_epoc=1)
