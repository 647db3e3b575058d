"""The leader's view of its followers from their fetches (broker/cluster/follower_fetches.py)
and where a follower's copy ends after a fetch (broker/cluster/replication.py)."""

from __future__ import annotations

from broker.cluster.follower_fetches import FollowerFetches
from broker.cluster.replication import end_of_records
from protocol.records import build_batch

A, B = ("t", 0, 2), ("t", 0, 3)
LAG = 30_000


def test_the_high_watermark_is_the_lowest_offset_the_isr_holds():
    f = FollowerFetches(LAG)
    f.caught_up(A, 10)
    f.caught_up(B, 10)
    assert f.high_watermark([A, B], 12) == 10  # the leader appended two more
    f.handled(A, 12)
    assert f.high_watermark([A, B], 12) == 10
    f.handled(B, 11)
    assert f.high_watermark([A, B], 12) == 11
    assert f.high_watermark([A], 12) == 12  # B out of the ISR: A and the leader hold it all
    assert f.high_watermark([("t", 0, 4)], 12) == -1  # never heard from: holds nothing known


def test_a_follower_unable_to_fetch_for_longer_than_the_lag_is_out_of_sync_once():
    f = FollowerFetches(LAG)
    f.caught_up(A, 5)
    assert f.next_out_of_sync_ms() is None
    f.failed(A, 1_000)
    f.failed(A, 2_000)  # still failing: counted from the first
    assert not f.able(A)
    assert f.next_out_of_sync_ms() == 1_000 + LAG + 1
    assert f.take_out_of_sync(1_000 + LAG) == []  # not longer than the lag yet
    assert f.take_out_of_sync(1_000 + LAG + 1) == [(A, 1_000)]
    assert f.take_out_of_sync(90_000) == [] and f.next_out_of_sync_ms() is None  # given once
    assert not f.able(A)  # and it may not rejoin until a fetch of its is answered
    f.answered(A)
    assert f.able(A)
    f.failed(A, 100_000)  # unable again: a new count
    assert f.take_out_of_sync(100_000 + LAG + 1) == [(A, 100_000)]


def test_an_answer_or_a_fresh_start_ends_the_count():
    f = FollowerFetches(LAG)
    f.failed(A, 0)
    f.failed(B, 10)
    f.answered(A)
    assert f.next_out_of_sync_ms() == 10 + LAG + 1
    f.caught_up(B, 7)  # its leader moved: in sync with the new one
    assert f.next_out_of_sync_ms() is None and f.fetched_offset(B) == 7
    f.forget(B)
    assert f.fetched_offset(B) == -1


def test_the_end_of_fetched_records_is_after_the_last_whole_batch():
    first = bytes(build_batch([(None, b"a", (), 1), (None, b"b", (), 1)], base_offset=4))
    second = bytes(build_batch([(None, b"c", (), 1)], base_offset=6))
    assert end_of_records(b"", 4) == 4 and end_of_records(None, 4) == 4
    assert end_of_records(first, 4) == 6
    assert end_of_records(first + second, 4) == 7
    assert end_of_records(first + second[:20], 4) == 6  # a partial batch is fetched next time
    assert end_of_records(memoryview(first + second), 0) == 7
