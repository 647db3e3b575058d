"""KIP-447 transactional offsets: pending until the marker, generation fencing, replay."""

from kio.schema.errors import ErrorCode as E

from coordinator.group import OffsetFetchGroup, OffsetToCommit
from coordinator.group import log_codec
from tests.unit.test_group_harness import Refused, Runtime

PID, EPOCH = 4000, 2


def txn_commit(rt, offsets, generation=-1, member_id="", instance=None, version=3, pid=PID, group="g"):
    response = rt.call(
        "txn_offset_commit", transactional_id="tx", group_id=group, producer_id=pid,
        producer_epoch=EPOCH, generation_id=generation, member_id=member_id,
        group_instance_id=instance, offsets=offsets, api_version=version,
    )
    if isinstance(response, Refused):  # the runtime's refusal: the broker answers it for every partition
        return [(o.topic, o.partition, response.error_code) for o in offsets]
    return [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions]


def fetched(rt, tp=("t", 0), require_stable=True, group="g"):
    topic, partition = tp
    response = rt.coordinator.offset_fetch([OffsetFetchGroup(group, ((topic, (partition,)),))], require_stable)
    p = response.groups[0].topics[0].partitions[0]
    return p.committed_offset, p.error_code


def test_pending_until_commit_marker():
    rt = Runtime()
    assert txn_commit(rt, [OffsetToCommit("t", 0, 10, 1, "m")]) == [("t", 0, E.none)]
    batch = rt.log.batches(0)[-1]  # a transactional batch of the producer
    assert batch.is_transactional and (batch.producer_id, batch.producer_epoch) == (PID, EPOCH)
    record = rt.appended[-1]
    assert record.key == log_codec.encode_offset_commit_key("g", "t", 0)
    assert fetched(rt) == (-1, E.unstable_offset_commit)
    assert fetched(rt, require_stable=False) == (-1, E.none)  # not visible yet
    assert fetched(rt, ("t", 1)) == (-1, E.none)  # other partitions are stable
    rt.marker(PID, commit=True)
    assert fetched(rt) == (10, E.none)
    assert rt.coordinator.committed_offset("g", "t", 0).metadata == "m"
    assert not rt.coordinator.has_pending_offsets("g")


def test_abort_marker_drops_pending_offsets():
    rt = Runtime()
    txn_commit(rt, [OffsetToCommit("t", 0, 5)])
    rt.marker(PID, commit=True)
    txn_commit(rt, [OffsetToCommit("t", 0, 10)])
    assert fetched(rt) == (-1, E.unstable_offset_commit)
    assert fetched(rt, require_stable=False) == (5, E.none)
    rt.marker(PID, commit=False)
    assert fetched(rt) == (5, E.none)
    assert not rt.coordinator.has_pending_offsets("g")


def test_markers_only_decide_their_own_producer():
    rt = Runtime()
    txn_commit(rt, [OffsetToCommit("t", 0, 1)], pid=1)
    txn_commit(rt, [OffsetToCommit("t", 1, 2)], pid=2)
    rt.marker(1, commit=True)
    assert fetched(rt, ("t", 0)) == (1, E.none)
    assert fetched(rt, ("t", 1)) == (-1, E.unstable_offset_commit)
    rt.marker(2, commit=False)
    assert fetched(rt, ("t", 1)) == (-1, E.none)


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one():
    rt = Runtime()
    txn_commit(rt, [OffsetToCommit("t", 0, 10)])
    rt.call("offset_commit", group_id="g", generation_id=-1, member_id="", group_instance_id=None,
            offsets=[OffsetToCommit("t", 0, 20)], api_version=8)
    rt.marker(PID, commit=True)
    assert fetched(rt) == (20, E.none)
    assert rt.restart().coordinator.committed_offset("g", "t", 0).offset == 20


def test_a_tombstone_clears_pending_offsets_too():
    rt = Runtime()
    txn_commit(rt, [OffsetToCommit("t", 0, 10)])
    result = rt.call("delete_groups", group_ids=["g"])
    assert result.results[0].error_code is E.none
    rt.marker(PID, commit=True)
    assert fetched(rt) == (-1, E.none)


def test_zombie_with_an_old_generation_is_fenced():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], gen, a) == [("t", 0, E.none)]
    # b's session ends and a newer generation forms without it...
    rt.advance(9_000)
    rt.heartbeat(a, gen)
    rt.advance(1_000)
    rt.join("a2", member_id=a)
    assert rt.replies["a2"].generation_id == gen + 1
    # ...then the zombie b tries to commit its transaction's offsets.
    assert txn_commit(rt, [OffsetToCommit("t", 1, 1)], gen, b) == [("t", 1, E.unknown_member_id)]
    assert txn_commit(rt, [OffsetToCommit("t", 1, 1)], gen, a) == [("t", 1, E.illegal_generation)]
    assert txn_commit(rt, [OffsetToCommit("t", 1, 1)], gen + 1, a) == [("t", 1, E.none)]


def test_fenced_static_member_cannot_commit_transactional_offsets():
    rt = Runtime()
    rt.join("s0", instance="i1")
    rt.advance(100)
    s = rt.replies["s0"].member_id
    rt.sync("ss", s, 1, {s: b""}, instance="i1")
    rt.join("s1", instance="i1")  # a new incarnation takes the instance id
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], 1, s, "i1") == [("t", 0, E.fenced_instance_id)]
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], 1, s, "other") == [("t", 0, E.unknown_member_id)]


def test_transactional_commit_is_allowed_during_completing_rebalance():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.advance(100)
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], 1, a) == [("t", 0, E.none)]


def test_versions_before_3_carry_no_member_and_are_not_checked():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], version=0) == [("t", 0, E.none)]
    # Even a bogus generation is ignored: v2 requests have no such field.
    assert txn_commit(rt, [OffsetToCommit("t", 0, 2)], 99, "ghost", version=2) == [("t", 0, E.none)]
    # v3 without a generation, though, is a non-member's commit: fine for transactions.
    assert txn_commit(rt, [OffsetToCommit("t", 0, 3)], version=3) == [("t", 0, E.none)]


def test_txn_commit_errors():
    rt = Runtime()
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], 1, "m") == [("t", 0, E.illegal_generation)]
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)], group="") == [("t", 0, E.invalid_group_id)]
    rt.unload(0)
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)]) == [("t", 0, E.not_coordinator)]
    rt.runtime.begin_load(0, 1)
    assert txn_commit(rt, [OffsetToCommit("t", 0, 1)]) == [("t", 0, E.coordinator_load_in_progress)]
    assert rt.appended == []


def test_replay_rebuilds_pending_offsets_and_their_markers():
    rt = Runtime()
    txn_commit(rt, [OffsetToCommit("t", 0, 1)], pid=1)
    txn_commit(rt, [OffsetToCommit("t", 1, 2)], pid=2)
    txn_commit(rt, [OffsetToCommit("t", 2, 3)], pid=3)
    rt.marker(1, commit=True)
    rt.marker(2, commit=False)
    restarted = rt.restart()
    assert fetched(restarted, ("t", 0)) == (1, E.none)
    assert fetched(restarted, ("t", 1)) == (-1, E.none)
    assert fetched(restarted, ("t", 2)) == (-1, E.unstable_offset_commit)  # still open
    restarted.marker(3, commit=True)
    assert fetched(restarted, ("t", 2)) == (3, E.none)


def test_replay_outside_a_transactional_batch_is_a_plain_commit():
    rt = Runtime()
    record = log_codec.offset_commit_record("g", "t", 0, log_codec.OffsetCommitValue(7, "", 0))
    rt.coordinator.replay(record, 0, 0)
    assert fetched(rt) == (7, E.none)


def test_an_older_producer_epoch_than_the_partition_has_seen_is_fenced():
    rt = Runtime()

    def commit_at(epoch, newest, offsets):
        response = rt.call(
            "txn_offset_commit", transactional_id="tx", group_id="g", producer_id=PID, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None, offsets=offsets, api_version=3,
            newest_producer_epoch=newest)
        return [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions]

    too_long = OffsetToCommit("t", 1, 5, metadata="x" * 5000)
    assert commit_at(EPOCH - 1, EPOCH, [OffsetToCommit("t", 0, 5), too_long]) == [
        ("t", 0, E.invalid_producer_epoch), ("t", 1, E.offset_metadata_too_large)]
    assert rt.appended == []
    assert commit_at(EPOCH, EPOCH, [OffsetToCommit("t", 0, 5)]) == [("t", 0, E.none)]
    assert commit_at(EPOCH - 1, None, [OffsetToCommit("t", 0, 6)]) == [("t", 0, E.none)]  # never seen: no fence
