"""The sans-IO share-partition (coordinator/share/partition.py): acquisition under
locks, acknowledgement, release, lock expiry, the delivery-count limit, the in-flight
window, and read_committed's archiving of control and aborted records."""

import pytest

from coordinator.share.partition import (
    ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, REJECT, RELEASE, RENEW, AbortedRange, Acknowledgement,
    AcknowledgeError, Acquired, LogBatch, SharePartition,
)

LOCK_MS, LIMIT, WINDOW = 30_000, 3, 2000


def batches(*ranges, **kw):
    return [LogBatch(first, last, **kw) for first, last in ranges]


def acquire(share, member="a", now=0, max_records=500, window=WINDOW, log=None, aborted=()):
    log = log if log is not None else batches((0, 4), (5, 9))
    return share.acquire(member, log, now, LOCK_MS, max_records, window, aborted)


def ack(first, last, *types):
    return Acknowledgement(first, last, types)


def test_acquires_new_records_once():
    share = SharePartition(0)
    assert acquire(share) == [Acquired(0, 9, 1)]
    assert acquire(share, member="b") == []  # all locked by a
    assert share.counts()["acquired"] == 10 and share.start_offset == 0 and share.end_offset == 10


def test_starts_where_the_share_partition_starts():
    share = SharePartition(7)
    assert acquire(share) == [Acquired(7, 9, 1)]


def test_max_records_stops_at_a_batch_boundary():
    share = SharePartition(0)
    assert acquire(share, max_records=3) == [Acquired(0, 4, 1)]  # whole batch, as Kafka's batch-optimized mode
    assert acquire(share, member="b", max_records=3) == [Acquired(5, 9, 1)]


def test_accept_moves_the_start_past_contiguous_done_records():
    share = SharePartition(0)
    acquire(share)
    share.acknowledge("a", [ack(0, 2, ACCEPT), ack(4, 4, ACCEPT)], 0, LIMIT, LOCK_MS)
    assert share.start_offset == 3  # offset 3 is still acquired
    share.acknowledge("a", [ack(3, 3, REJECT)], 0, LIMIT, LOCK_MS)
    assert share.start_offset == 5
    assert 0 not in share.records and share.records[5].state == ACQUIRED


def test_release_makes_records_available_again_with_a_higher_delivery_count():
    share = SharePartition(0)
    acquire(share)
    share.acknowledge("a", [ack(0, 9, *([ACCEPT] * 5 + [RELEASE] * 5))], 0, LIMIT, LOCK_MS)
    assert share.start_offset == 5 and share.fetch_offset() == 5
    assert acquire(share, member="b", log=batches((5, 9))) == [Acquired(5, 9, 2)]


def test_per_offset_types_and_gaps():
    share = SharePartition(0)
    acquire(share)
    share.acknowledge("a", [ack(0, 3, ACCEPT, GAP, REJECT, RELEASE)], 0, LIMIT, LOCK_MS)
    assert [share.records.get(o) and share.records[o].state for o in range(4)] == [None, None, None, AVAILABLE]


@pytest.mark.parametrize("bad, error", [
    ([ack(0, 9, ACCEPT)], "INVALID_RECORD_STATE"),  # 5-9 were never acquired by b
    ([ack(8, 7, ACCEPT)], "INVALID_REQUEST"),
    ([ack(6, 8, ACCEPT, ACCEPT)], "INVALID_REQUEST"),  # neither one type nor one per offset
    ([ack(6, 6, 7)], "INVALID_REQUEST"),
    ([ack(20, 20, ACCEPT)], "INVALID_RECORD_STATE"),
])
def test_bad_acknowledgements_change_nothing(bad, error):
    share = SharePartition(0)
    acquire(share, log=batches((0, 4)))
    acquire(share, member="b", log=batches((5, 9)))
    with pytest.raises(AcknowledgeError) as refused:
        share.acknowledge("b", [ack(5, 5, ACCEPT), *bad], 0, LIMIT, LOCK_MS)
    assert refused.value.error_name == error
    assert all(share.records[o].state == ACQUIRED for o in range(10))


def test_another_members_records_cannot_be_acknowledged():
    share = SharePartition(0)
    acquire(share)
    with pytest.raises(AcknowledgeError, match="not acquired by this member"):
        share.acknowledge("b", [ack(0, 0, ACCEPT)], 0, LIMIT, LOCK_MS)
    share.acknowledge("a", [ack(0, 0, ACCEPT), ack(2, 2, ACCEPT)], 0, LIMIT, LOCK_MS)
    with pytest.raises(AcknowledgeError):  # acknowledged once only
        share.acknowledge("a", [ack(2, 2, RELEASE)], 0, LIMIT, LOCK_MS)


def test_a_late_acknowledgement_of_records_below_the_start_is_passed_over():
    """As Kafka 4.4's SharePartition: records whose lock ended went to another member,
    which accepted them; the first member's late release changes nothing and is no error
    (the part of a range at or above the start is checked as ever)."""
    share = SharePartition(0)
    acquire(share, log=batches((0, 1)))
    assert share.expire_locks(LOCK_MS, LIMIT) == 2
    assert acquire(share, member="b", now=LOCK_MS, log=batches((0, 1))) == [Acquired(0, 1, 2)]
    share.acknowledge("b", [ack(0, 1, ACCEPT)], LOCK_MS, LIMIT, LOCK_MS)
    assert share.start_offset == 2
    assert share.acknowledge("a", [ack(0, 1, RELEASE)], LOCK_MS, LIMIT, LOCK_MS) == []
    assert share.start_offset == 2 and share.counts()["available"] == 0
    with pytest.raises(AcknowledgeError, match="not acquired by this member"):
        share.acknowledge("a", [ack(1, 2, RELEASE)], LOCK_MS, LIMIT, LOCK_MS)


def test_lock_expiry_releases_and_the_delivery_limit_archives():
    share = SharePartition(0)
    log = batches((0, 0))
    for delivery in range(1, LIMIT + 1):
        assert acquire(share, member=f"m{delivery}", now=delivery * LOCK_MS, log=log) == [Acquired(0, 0, delivery)]
        assert share.next_deadline() == (delivery + 1) * LOCK_MS
        assert share.expire_locks((delivery + 1) * LOCK_MS - 1, LIMIT) == 0
        assert share.expire_locks((delivery + 1) * LOCK_MS, LIMIT) == 1
    # delivered LIMIT times: archived, never handed out again, and the start moves past it
    assert acquire(share, now=10 * LOCK_MS, log=log) == []
    assert share.start_offset == 1 and share.next_deadline() is None


def test_renew_restarts_the_lock():
    share = SharePartition(0)
    acquire(share, log=batches((0, 0)))
    share.acknowledge("a", [ack(0, 0, RENEW)], LOCK_MS - 1, LIMIT, LOCK_MS)
    assert share.expire_locks(LOCK_MS, LIMIT) == 0
    assert share.records[0].state == ACQUIRED and share.next_deadline() == 2 * LOCK_MS - 1


def test_a_member_that_leaves_releases_what_it_holds():
    share = SharePartition(0)
    acquire(share, log=batches((0, 4)))
    acquire(share, member="b", log=batches((5, 9)))
    assert share.release_member("a", LIMIT) == 5
    assert [share.records[o].state for o in (0, 5)] == [AVAILABLE, ACQUIRED]
    assert acquire(share, member="c") == [Acquired(0, 4, 2)]


def test_release_at_the_delivery_limit_archives():
    share = SharePartition(0)
    for n in range(LIMIT):
        acquire(share, log=batches((0, 0)))
        share.acknowledge("a", [ack(0, 0, RELEASE)], 0, LIMIT, LOCK_MS)
    assert 0 not in share.records and share.start_offset == 1


def test_the_in_flight_window_bounds_new_acquisitions():
    share = SharePartition(0)
    assert acquire(share, window=3, log=batches((0, 0), (1, 1), (2, 2), (3, 3))) == [Acquired(0, 2, 1)]
    assert not share.can_acquire(upper_bound=4, max_in_flight=3)
    share.acknowledge("a", [ack(0, 0, ACCEPT)], 0, LIMIT, LOCK_MS)
    assert share.can_acquire(upper_bound=4, max_in_flight=3)
    assert acquire(share, window=3, log=batches((3, 3))) == [Acquired(3, 3, 1)]


def test_control_and_aborted_records_are_archived_never_acquired():
    share = SharePartition(0)
    log = [LogBatch(0, 1, producer_id=7, transactional=True),  # aborted
           LogBatch(2, 3, producer_id=8, transactional=True),  # committed
           LogBatch(4, 4, producer_id=7, transactional=True, control=True),  # ABORT marker
           LogBatch(5, 5, producer_id=8, transactional=True, control=True),  # COMMIT marker
           LogBatch(6, 6)]
    acquired = acquire(share, log=log, aborted=[AbortedRange(7, 0, 4)])
    assert acquired == [Acquired(2, 3, 1), Acquired(6, 6, 1)]
    share.acknowledge("a", [ack(2, 3, ACCEPT), ack(6, 6, ACCEPT)], 0, LIMIT, LOCK_MS)
    assert share.start_offset == 7 and not share.records


def test_offsets_the_log_no_longer_holds_are_skipped():
    share = SharePartition(0)
    assert acquire(share, log=batches((3, 4))) == [Acquired(3, 4, 1)]
    assert share.start_offset == 3  # 0-2 archived as gaps
    share.move_start_to(4)
    assert share.start_offset == 4 and list(share.records) == [4]
    assert share.records[4].state == ACQUIRED
    share.acknowledge("a", [ack(4, 4, ACCEPT)], 0, LIMIT, LOCK_MS)
    assert share.start_offset == 5 and share.end_offset == 5


def test_accepted_records_are_not_delivered_again():
    share = SharePartition(0)
    acquire(share)
    share.acknowledge("a", [ack(0, 9, ACCEPT)], 0, LIMIT, LOCK_MS)
    assert share.expire_locks(10 * LOCK_MS, LIMIT) == 0
    assert acquire(share) == [] and share.start_offset == 10
    assert ACKNOWLEDGED not in {r.state for r in share.records.values()}
    assert ARCHIVED not in {r.state for r in share.records.values()}


def test_an_acknowledgement_not_persisted_is_rolled_back_and_redelivered():
    share = SharePartition(0)
    share.acquire("a", [LogBatch(0, 3)], 0, 1000, 500, 2000)
    undo = share.acknowledge("a", [Acknowledgement(0, 2, (ACCEPT, ACCEPT, REJECT))], 10, 5, 1000)
    assert share.start_offset == 3
    share.rollback(undo)
    assert share.start_offset == 0
    assert [(share.records[o].state, share.records[o].member_id) for o in range(4)] == [(ACQUIRED, "a")] * 4
    assert share.expire_locks(1000, 5) == 4  # the locks end as they would have
    assert share.acquire("b", [LogBatch(0, 3)], 1000, 1000, 500, 2000) == [Acquired(0, 3, 2)]
