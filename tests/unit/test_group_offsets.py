"""OffsetCommit / OffsetFetch / OffsetDelete with Kafka's generation and member checks."""

import struct

from kio.schema.errors import ErrorCode as E

from coordinator.group import GroupConfig, JoinProtocol, MemberIdentity, OffsetFetchGroup, OffsetToCommit
from coordinator.group import log_codec
from tests.unit.test_group_harness import Refused, Runtime


def commit(rt, offsets, generation=-1, member_id="", instance=None, version=8, group="g", **kw):
    response = rt.call(
        "offset_commit", group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance, offsets=offsets, api_version=version, **kw,
    )
    if isinstance(response, Refused):  # the runtime's refusal: the broker answers it for every partition
        return [(o.topic, o.partition, response.error_code) for o in offsets]
    return [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions]


def fetch(rt, topics=None, group="g", require_stable=False):
    response = rt.coordinator.offset_fetch([OffsetFetchGroup(group, topics)], require_stable)
    g = response.groups[0]
    return g.error_code, {
        (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
        for t in g.topics for p in t.partitions
    }


def test_simple_commit_to_an_unknown_group_creates_an_empty_group():
    rt = Runtime()
    assert commit(rt, [OffsetToCommit("t", 0, 10, 3, "meta"), OffsetToCommit("t", 1, 20)]) == [
        ("t", 0, E.none), ("t", 1, E.none),
    ]
    assert fetch(rt, (("t", (0, 1, 2)),)) == (E.none, {
        ("t", 0): (10, 3, "meta", E.none), ("t", 1): (20, -1, "", E.none), ("t", 2): (-1, -1, "", E.none),
    })
    assert rt.coordinator.describe_groups(["g"]).groups[0].group_state == "Empty"
    value = log_codec.decode_offset_commit_value(rt.appended[0].value)
    assert (value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms) == (10, 3, "meta", rt.now)


def test_fetch_all_and_several_groups():
    rt = Runtime()
    commit(rt, [OffsetToCommit("b", 1, 5), OffsetToCommit("a", 0, 7)])
    commit(rt, [OffsetToCommit("x", 0, 1)], group="h")
    assert fetch(rt) == (E.none, {("a", 0): (7, -1, "", E.none), ("b", 1): (5, -1, "", E.none)})
    response = rt.coordinator.offset_fetch(
        [OffsetFetchGroup("h", None), OffsetFetchGroup("unknown", (("a", (0,)),)), OffsetFetchGroup("")], False)
    assert [(g.group_id, g.error_code, len(g.topics)) for g in response.groups] == [
        ("h", E.none, 1), ("unknown", E.none, 1), ("", E.none, 0),
    ]
    assert response.groups[0].topics[0].partitions[0].committed_offset == 1
    assert response.groups[1].topics[0].partitions[0].committed_offset == -1


def test_later_commit_overwrites():
    rt = Runtime()
    commit(rt, [OffsetToCommit("t", 0, 10)])
    commit(rt, [OffsetToCommit("t", 0, 11)])
    assert fetch(rt, (("t", (0,)),))[1][("t", 0)][0] == 11


def test_commit_by_member_of_the_current_generation():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    assert commit(rt, [OffsetToCommit("t", 0, 5)], gen, a) == [("t", 0, E.none)]
    assert commit(rt, [OffsetToCommit("t", 0, 6)], gen - 1, a) == [("t", 0, E.illegal_generation)]
    assert commit(rt, [OffsetToCommit("t", 0, 6)], gen, "ghost") == [("t", 0, E.unknown_member_id)]
    assert commit(rt, [OffsetToCommit("t", 0, 6)], gen, a, instance="i") == [("t", 0, E.unknown_member_id)]
    # No generation and no member: only allowed while the group is empty.
    assert commit(rt, [OffsetToCommit("t", 0, 6)]) == [("t", 0, E.unknown_member_id)]
    assert fetch(rt, (("t", (0,)),))[1][("t", 0)][0] == 5


def test_commit_by_a_fenced_static_member():
    rt = Runtime()
    rt.join("s0", instance="i1")
    rt.advance(100)
    s = rt.replies["s0"].member_id
    rt.sync("ss", s, 1, {s: b""}, instance="i1")
    assert commit(rt, [OffsetToCommit("t", 0, 1)], 1, s, instance="i1") == [("t", 0, E.none)]
    new = rt.join("s1", instance="i1").member_id
    assert commit(rt, [OffsetToCommit("t", 0, 2)], 1, s, instance="i1") == [("t", 0, E.fenced_instance_id)]
    assert commit(rt, [OffsetToCommit("t", 0, 2)], 1, new, instance="i1") == [("t", 0, E.none)]


def test_commit_during_completing_rebalance_is_rebalance_in_progress():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.advance(100)
    assert commit(rt, [OffsetToCommit("t", 0, 1)], 1, a) == [("t", 0, E.rebalance_in_progress)]


def test_commit_with_a_generation_to_an_unknown_group():
    rt = Runtime()
    assert commit(rt, [OffsetToCommit("t", 0, 1)], 3, "m", version=8) == [("t", 0, E.illegal_generation)]
    assert commit(rt, [OffsetToCommit("t", 0, 1)], 3, "m", version=9) == [("t", 0, E.group_id_not_found)]
    assert rt.coordinator.group("g") is None


def test_commit_errors_for_every_partition():
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=2))
    offsets = [OffsetToCommit("t", 0, 1), OffsetToCommit("u", 2, 1)]
    rt.runtime.begin_load(rt.coordinator.partition_for("g"), 1)
    assert {e for _t, _p, e in commit(rt, offsets)} == {E.coordinator_load_in_progress}
    rt.unload(rt.coordinator.partition_for("g"))
    assert {e for _t, _p, e in commit(rt, offsets)} == {E.not_coordinator}
    assert fetch(rt)[0] is E.not_coordinator
    assert rt.appended == []


def test_the_empty_group_id_commits_and_fetches_as_any_group():
    # Kafka refuses only a null group id here (for old clients' sake): "" is a simple
    # group on __consumer_offsets partition 0 (the hash of "" is 0).
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=4))
    assert rt.coordinator.partition_for("") == 0
    assert fetch(rt, (("t", (0,)),), group="") == (E.none, {("t", 0): (-1, -1, "", E.none)})
    for version in (2, 8, 9):
        assert commit(rt, [OffsetToCommit("t", 0, version)], group="", version=version) == [("t", 0, E.none)]
    assert commit(rt, [OffsetToCommit("t", 1, 5)], -1, "m", group="") == [("t", 1, E.none)]
    assert commit(rt, [OffsetToCommit("t", 0, 6)], 1, "", group="") == [("t", 0, E.unknown_member_id)]
    assert fetch(rt, group="", require_stable=True) == (E.none, {
        ("t", 0): (9, -1, "", E.none), ("t", 1): (5, -1, "", E.none)})
    assert rt.coordinator.group("") is not None
    assert rt.call("offset_delete", group_id="", topics=[]).error_code is E.invalid_group_id


def test_oversized_metadata_is_refused_per_partition():
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=1, offset_metadata_max_bytes=4))
    assert commit(rt, [OffsetToCommit("t", 0, 1, metadata="12345"), OffsetToCommit("t", 1, 1, metadata="1234"),
                       OffsetToCommit("t", 2, 1, metadata=None)]) == [
        ("t", 0, E.offset_metadata_too_large), ("t", 1, E.none), ("t", 2, E.none),
    ]
    assert len(rt.appended) == 2
    assert fetch(rt, (("t", (0, 2)),))[1] == {("t", 0): (-1, -1, "", E.none), ("t", 2): (1, -1, "", E.none)}


def test_retention_time_is_kept_as_an_expire_timestamp_in_a_v1_value():
    rt = Runtime()
    commit(rt, [OffsetToCommit("t", 0, 1)], version=2, retention_time_ms=60_000)
    assert rt.appended[0].value[:2] == b"\x00\x01"
    value = log_codec.decode_offset_commit_value(rt.appended[0].value)
    assert value.expire_timestamp_ms == rt.now + 60_000
    assert rt.coordinator.committed_offset("g", "t", 0).expire_timestamp_ms == rt.now + 60_000


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)  # null user data


def test_offset_delete():
    rt = Runtime()
    protocols = (JoinProtocol("range", subscription("in")),)
    a = rt.join("a0", protocols=protocols).member_id
    rt.join("a1", member_id=a, protocols=protocols)
    rt.advance(100)
    rt.sync("as", a, 1, {a: b""})
    commit(rt, [OffsetToCommit("in", 0, 1), OffsetToCommit("old", 0, 1)], 1, a)
    before = len(rt.appended)
    response = rt.call("offset_delete", group_id="g", topics=[("in", [0]), ("old", [0, 1])])
    assert response.error_code is E.none
    assert [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions] == [
        ("in", 0, E.group_subscribed_to_topic), ("old", 0, E.none), ("old", 1, E.none),
    ]
    assert rt.appended[before:] == [log_codec.offset_commit_record("g", "old", 0, None)]  # nothing for old-1
    assert fetch(rt, (("old", (0,)),))[1][("old", 0)][0] == -1
    # Once the group is empty, nothing is subscribed.
    rt.call("leave_group", group_id="g", members=[MemberIdentity(a)], api_version=3)
    response = rt.call("offset_delete", group_id="g", topics=[("in", [0])])
    assert response.topics[0].partitions[0].error_code is E.none
    assert fetch(rt, (("in", (0,)),))[1][("in", 0)][0] == -1


def test_offset_delete_errors():
    rt = Runtime()
    assert rt.call("offset_delete", group_id="g", topics=[("t", [0])]).error_code is E.group_id_not_found
    assert rt.call("offset_delete", group_id="", topics=[]).error_code is E.invalid_group_id
    # A live group of another protocol type: its subscriptions cannot be read.
    a = rt.join("a0", protocol_type="connect").member_id
    rt.join("a1", member_id=a, protocol_type="connect")
    rt.advance(100)
    assert rt.call("offset_delete", group_id="g", topics=[("t", [0])]).error_code is E.non_empty_group


def test_delete_group_tombstones_its_offsets_and_restart_agrees():
    rt = Runtime()
    commit(rt, [OffsetToCommit("t", 0, 1), OffsetToCommit("t", 1, 2)])
    commit(rt, [OffsetToCommit("t", 0, 9)], group="h")
    result = rt.call("delete_groups", group_ids=["g"])
    assert result.results[0].error_code is E.none
    assert rt.appended[-3:] == [
        log_codec.offset_commit_record("g", "t", 0, None), log_codec.offset_commit_record("g", "t", 1, None),
        log_codec.group_metadata_record("g", None),
    ]
    assert fetch(rt) == (E.none, {})
    restarted = rt.restart()
    assert fetch(restarted) == (E.none, {})
    assert restarted.coordinator.group("g") is None
    assert fetch(restarted, group="h")[1] == {("t", 0): (9, -1, "", E.none)}


def test_restart_restores_committed_offsets():
    rt = Runtime()
    commit(rt, [OffsetToCommit("t", 0, 1, 4, "m")])
    commit(rt, [OffsetToCommit("t", 0, 2, 5, "n")])
    restarted = rt.restart()
    assert fetch(restarted, (("t", (0,)),))[1] == {("t", 0): (2, 5, "n", E.none)}
    assert restarted.coordinator.describe_groups(["g"]).groups[0].group_state == "Empty"
