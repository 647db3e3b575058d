"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timers, replay."""

from kio.schema.errors import ErrorCode as E

from coordinator.group import GroupConfig, GroupState, JoinProtocol, MemberIdentity
from coordinator.group import log_codec
from coordinator.runtime import CoordinatorRecord
from tests.unit.test_group_harness import Runtime

S = GroupState


def test_two_members_join_and_sync_with_the_leaders_assignment():
    rt = Runtime()
    first = rt.join("a0")
    assert first.error_code is E.member_id_required and first.member_id == "c-u1"
    second = rt.join("b0")
    assert second.error_code is E.member_id_required and second.member_id == "c-u2"
    a, b = first.member_id, second.member_id
    assert rt.join("a1", member_id=a) is None  # parked until the rebalance completes
    assert rt.join("b1", member_id=b) is None
    assert rt.coordinator.group("g").state is S.PREPARING_REBALANCE
    rt.advance(200)
    leader, follower = rt.replies["a1"], rt.replies["b1"]
    assert leader.error_code is E.none and leader.generation_id == 1
    assert leader.leader == a and leader.member_id == a and leader.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in leader.members] == [(a, b"range-sub"), (b, b"range-sub")]
    assert follower.leader == a and follower.members == () and follower.generation_id == 1
    assert rt.coordinator.group("g").state is S.COMPLETING_REBALANCE

    assert rt.sync("bs", b, 1) is None  # the follower waits for the leader
    response = rt.sync("as", a, 1, {a: b"for-a", b: b"for-b"})
    assert response.error_code is E.none and response.assignment == b"for-a"
    assert rt.replies["bs"].assignment == b"for-b" and rt.replies["bs"].protocol_type == "consumer"
    group = rt.coordinator.group("g")
    assert group.state is S.STABLE and group.generation_id == 1
    # The end of the rebalance is persisted as a GroupMetadata record.
    value = log_codec.decode_group_metadata_value(rt.appended[-1].value)
    assert value.generation == 1 and value.leader == a and value.protocol == "range"
    assert [(m.member_id, m.assignment, m.subscription) for m in value.members] == [
        (a, b"for-a", b"range-sub"), (b, b"for-b", b"range-sub"),
    ]
    # A later SyncGroup in Stable just returns the member's assignment.
    assert rt.sync("bs2", b, 1).assignment == b"for-b"


def test_leader_missing_assignment_for_a_member_gives_it_an_empty_one():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    assert rt.replies["bs"].assignment == b"B"
    rt.join("a2", member_id=a)  # leader rejoin in Stable forces a rebalance
    rt.join("b2", member_id=b)
    assert rt.replies["a2"].generation_id == gen + 1
    rt.sync("as2", a, gen + 1, {a: b"A2"})
    assert rt.sync("bs2", b, gen + 1).assignment == b""


def test_join_errors_before_v7_carry_an_empty_protocol_name():
    rt = Runtime()
    error = rt.join("x", session=1)
    assert error.protocol_name is None and error.for_version(7) is error
    assert error.for_version(6).protocol_name == ""


def test_join_before_v4_gets_a_member_id_without_the_extra_round_trip():
    rt = Runtime()
    assert rt.join("a", version=3) is None
    rt.advance(100)
    assert rt.replies["a"].member_id == "c-u1" and rt.replies["a"].generation_id == 1


def test_initial_rebalance_completes_at_the_delay_not_the_session_timeout():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a, session=30_000, rebalance=60_000)
    assert rt.coordinator.next_deadline() == rt.now + 100
    rt.advance(99)
    assert "a1" not in rt.replies
    rt.advance(1)
    assert rt.replies["a1"].generation_id == 1


def test_initial_delay_stretches_for_newcomers_but_not_past_the_rebalance_timeout():
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100))
    start = rt.now
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a, rebalance=250)
    # Newcomers at +90, +180, +240. Delays: 100, then 100 more (a newcomer came), then
    # 50 (all that is left of the 250 ms rebalance timeout), whoever keeps coming.
    for i, at in enumerate((90, 180, 240)):
        rt.advance(start + at - rt.now)
        rt.join(f"n{i}", version=3, rebalance=250)
    rt.advance(start + 249 - rt.now)
    assert "a1" not in rt.replies
    rt.advance(1)
    assert rt.replies["a1"].generation_id == 1
    assert [m.member_id for m in rt.replies["a1"].members] == [a, "c-u2", "c-u3", "c-u4"]


def test_later_rebalance_completes_when_everyone_rejoined():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    assert rt.join("a2", member_id=a) is None  # leader rejoin: PreparingRebalance
    assert rt.heartbeat(b, gen) is E.rebalance_in_progress
    response = rt.join("b2", member_id=b)  # the last one in completes the join phase at once
    assert response.generation_id == gen + 1 and rt.replies["a2"].generation_id == gen + 1


def test_rebalance_timeout_drops_members_that_did_not_rejoin():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    rt.join("a2", member_id=a, rebalance=30_000)
    for _ in range(5):
        rt.advance(5_000)
        assert rt.heartbeat(b, gen) is E.rebalance_in_progress  # alive, but not rejoining
    rt.advance(4_999)
    assert "a2" not in rt.replies
    rt.advance(1)
    assert rt.replies["a2"].generation_id == gen + 1
    assert [m.member_id for m in rt.replies["a2"].members] == [a]
    assert rt.heartbeat(b, gen) is E.unknown_member_id


def test_session_expiry_removes_the_member_and_triggers_a_rebalance():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    rt.advance(9_000)
    assert rt.heartbeat(a, gen) is E.none
    rt.advance(1_000)  # b's 10 s session ends
    group = rt.coordinator.group("g")
    assert b not in group.members and group.state is S.PREPARING_REBALANCE
    assert rt.heartbeat(a, gen) is E.rebalance_in_progress
    response = rt.join("a2", member_id=a)
    assert response.generation_id == gen + 1 and [m.member_id for m in response.members] == [a]


def test_last_member_leaving_empties_the_group_and_persists_the_empty_generation():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.advance(100)
    rt.sync("as", a, 1, {a: b"x"})
    response = rt.call("leave_group", group_id="g", members=[MemberIdentity(a)], api_version=0)
    assert response.error_code is E.none
    group = rt.coordinator.group("g")
    assert group.state is S.EMPTY and group.generation_id == 2 and not group.members
    value = log_codec.decode_group_metadata_value(rt.appended[-1].value)
    assert value.generation == 2 and value.members == () and value.protocol is None


def test_leave_errors_single_and_batched():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    single = rt.call("leave_group", group_id="g", members=[MemberIdentity("nobody")], api_version=2)
    assert single.error_code is E.unknown_member_id
    batch = rt.call("leave_group", group_id="g", api_version=3, members=[
        MemberIdentity("nobody"), MemberIdentity(b), MemberIdentity("", "no-such-instance"),
    ])
    assert batch.error_code is E.none
    assert [(m.member_id, m.error_code) for m in batch.members] == [
        ("nobody", E.unknown_member_id), (b, E.none), ("", E.unknown_member_id),
    ]
    assert b not in rt.coordinator.group("g").members
    assert rt.call("leave_group", group_id="other", members=[MemberIdentity(a)], api_version=3).error_code \
        is E.unknown_member_id


def test_leave_by_instance_id_and_of_a_pending_member():
    rt = Runtime()
    s = rt.join("s0", instance="inst-1", version=5)
    assert s is None
    rt.advance(100)
    member_id = rt.replies["s0"].member_id
    assert member_id == "inst-1-u1"
    pending = rt.join("p0").member_id
    response = rt.call("leave_group", group_id="g", api_version=4, members=[
        MemberIdentity("", "inst-1"), MemberIdentity(pending),
    ])
    assert [m.error_code for m in response.members] == [E.none, E.none]
    group = rt.coordinator.group("g")
    assert not group.members and not group.pending_members and group.state is S.EMPTY


def test_leaving_while_parked_answers_the_parked_join():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    rt.join("a2", member_id=a)
    rt.call("leave_group", group_id="g", members=[MemberIdentity(a)], api_version=3)
    assert rt.replies["a2"].error_code is E.unknown_member_id


def test_pending_member_that_never_rejoins_expires():
    rt = Runtime()
    pending = rt.join("p0", session=10_000).member_id
    assert pending in rt.coordinator.group("g").pending_members
    rt.advance(10_000)
    assert pending not in rt.coordinator.group("g").pending_members
    assert rt.join("p1", member_id=pending).error_code is E.unknown_member_id


def test_static_member_rejoin_in_stable_keeps_the_assignment_without_rebalance():
    rt = Runtime()
    rt.join("s0", instance="i1", version=9)
    rt.join("t0", instance="i2", version=9)
    rt.advance(200)
    s, t = rt.replies["s0"].member_id, rt.replies["t0"].member_id
    assert rt.replies["s0"].leader == s
    rt.sync("ss", s, 1, {s: b"S", t: b"T"}, instance="i1")
    rt.sync("ts", t, 1, instance="i2")
    # The follower restarts: unknown member id, same instance id.
    rejoined = rt.join("t1", instance="i2", version=9)
    assert rejoined.error_code is E.none and rejoined.generation_id == 1
    assert rejoined.member_id != t and rejoined.members == () and not rejoined.skip_assignment
    group = rt.coordinator.group("g")
    assert group.state is S.STABLE and group.generation_id == 1
    assert group.static_members["i2"] == rejoined.member_id
    assert rt.sync("ts1", rejoined.member_id, 1, instance="i2").assignment == b"T"
    # The new member id is persisted.
    value = log_codec.decode_group_metadata_value(rt.appended[-1].value)
    assert [m.member_id for m in value.members] == [s, rejoined.member_id]
    # The old incarnation is fenced.
    assert rt.heartbeat(t, 1, instance="i2") is E.fenced_instance_id
    assert rt.join("t2", member_id=t, instance="i2").error_code is E.fenced_instance_id


def test_static_leader_rejoin_v9_gets_members_and_skip_assignment_older_get_old_leader():
    rt = Runtime()
    rt.join("s0", instance="i1")
    rt.join("t0", instance="i2")
    rt.advance(200)
    s, t = rt.replies["s0"].member_id, rt.replies["t0"].member_id
    rt.sync("ss", s, 1, {s: b"S", t: b"T"}, instance="i1")

    v9 = rt.join("s1", instance="i1", version=9)
    assert v9.leader == v9.member_id and v9.skip_assignment
    assert [(m.member_id, m.group_instance_id) for m in v9.members] == [(v9.member_id, "i1"), (t, "i2")]

    v5 = rt.join("s2", instance="i1", version=5)
    assert v5.leader == v9.member_id != v5.member_id  # pre-KIP-814: the old leader id
    assert v5.members == () and not v5.skip_assignment
    assert rt.coordinator.group("g").state is S.STABLE


def test_static_member_rejoin_during_rebalance_fences_the_parked_old_join():
    rt = Runtime()
    a = rt.join("a0").member_id
    b = rt.join("b0").member_id
    rt.join("a1", member_id=a)
    rt.join("b1", member_id=b)
    rt.join("s0", instance="i1", version=5)
    rt.advance(300)
    s = rt.replies["s0"].member_id
    rt.sync("as", a, 1, {a: b"", b: b"", s: b""})
    rt.join("a2", member_id=a)  # leader rejoin: PreparingRebalance
    rt.join("s1", member_id=s, instance="i1", version=5)
    assert "s1" not in rt.replies  # b has not rejoined yet
    rt.join("s2", instance="i1", version=5)  # the instance restarted meanwhile
    assert rt.replies["s1"].error_code is E.fenced_instance_id
    assert rt.join("b2", member_id=b).generation_id == 2
    assert rt.replies["s2"].generation_id == 2 and rt.replies["s2"].member_id not in (s, "")
    assert rt.coordinator.group("g").static_members["i1"] == rt.replies["s2"].member_id


def test_join_errors():
    rt = Runtime()
    assert rt.join("x", session=5_999).error_code is E.invalid_session_timeout
    assert rt.join("x", session=1_800_001).error_code is E.invalid_session_timeout
    assert rt.join("x", member_id="ghost").error_code is E.unknown_member_id
    assert rt.join("x", group="").error_code is E.invalid_group_id
    assert rt.join("x", protocol_type="").error_code is E.inconsistent_group_protocol
    assert rt.join("x", protocols=()).error_code is E.inconsistent_group_protocol
    a, b, gen = rt.stable_pair()
    other = (JoinProtocol("roundrobin", b""),)
    assert rt.join("y", protocols=other).error_code is E.inconsistent_group_protocol
    assert rt.join("y", protocol_type="connect").error_code is E.inconsistent_group_protocol
    assert rt.join("y", member_id=a, protocols=other).error_code is E.inconsistent_group_protocol
    assert rt.join("y", member_id="ghost").error_code is E.unknown_member_id
    assert rt.join("y", member_id=a, instance="not-static").error_code is E.unknown_member_id


def test_group_max_size_turns_newcomers_away():
    config = GroupConfig(offsets_topic_num_partitions=1, group_max_size=2)
    rt = Runtime(config)
    a, b, gen = rt.stable_pair()
    response = rt.join("c", version=3)
    assert response.error_code is E.group_max_size_reached and response.member_id == ""


def test_protocol_selection_is_by_vote_among_protocols_all_support():
    rt = Runtime()
    both = (JoinProtocol("range", b"r"), JoinProtocol("roundrobin", b"rr"))
    rr_first = (JoinProtocol("roundrobin", b"rr"), JoinProtocol("range", b"r"))
    rt.join("a", protocols=rr_first, version=3)
    rt.join("b", protocols=rr_first, version=3)
    rt.join("c", protocols=both, version=3)
    rt.advance(300)
    assert rt.replies["a"].protocol_name == "roundrobin"
    assert {m.metadata for m in rt.replies["a"].members} == {b"rr"}


def test_member_with_same_metadata_in_completing_rebalance_gets_the_generation_again():
    rt = Runtime()
    a = rt.join("a0").member_id
    b = rt.join("b0").member_id
    rt.join("a1", member_id=a)
    rt.join("b1", member_id=b)
    rt.advance(200)
    again = rt.join("b2", member_id=b)
    assert again.generation_id == 1 and again.members == ()
    assert rt.join("a2", member_id=a).members  # the leader gets the member list again
    assert rt.coordinator.group("g").state is S.COMPLETING_REBALANCE


def test_member_changing_metadata_in_completing_rebalance_restarts_it():
    rt = Runtime()
    a = rt.join("a0").member_id
    b = rt.join("b0").member_id
    rt.join("a1", member_id=a)
    rt.join("b1", member_id=b)
    rt.advance(200)
    assert rt.sync("bs", b, 1) is None
    rt.join("b2", member_id=b, protocols=(JoinProtocol("range", b"new-sub"),))
    assert rt.replies["bs"].error_code is E.rebalance_in_progress
    assert rt.coordinator.group("g").state is S.PREPARING_REBALANCE
    assert rt.join("a2", member_id=a).members[1].metadata == b"new-sub"


def test_sync_errors():
    rt = Runtime()
    assert rt.sync("x", "ghost", 0).error_code is E.unknown_member_id  # no such group
    a, b, gen = rt.stable_pair()
    assert rt.sync("x", "ghost", gen).error_code is E.unknown_member_id
    assert rt.sync("x", b, gen + 1).error_code is E.illegal_generation
    assert rt.sync("x", b, gen, protocol_name="roundrobin").error_code is E.inconsistent_group_protocol
    assert rt.sync("x", b, gen, protocol_type="connect").error_code is E.inconsistent_group_protocol
    assert rt.sync("x", b, gen, protocol_type=None, protocol_name=None).error_code is E.none
    assert rt.sync("x", b, gen, group="").error_code is E.invalid_group_id
    rt.join("a2", member_id=a)
    assert rt.sync("y", b, gen).error_code is E.rebalance_in_progress


def test_member_that_never_syncs_is_dropped_after_the_rebalance_timeout():
    rt = Runtime()
    a = rt.join("a0").member_id
    b = rt.join("b0").member_id
    rt.join("a1", member_id=a, rebalance=30_000)
    rt.join("b1", member_id=b, rebalance=30_000)
    rt.advance(200)
    rt.sync("as", a, 1, {a: b"A", b: b"B"})
    for _ in range(5):
        rt.advance(5_000)
        assert rt.heartbeat(a, 1) is rt.heartbeat(b, 1) is E.none  # b never sends SyncGroup
    rt.advance(4_999)
    assert b in rt.coordinator.group("g").members
    rt.advance(1)
    group = rt.coordinator.group("g")
    assert b not in group.members and group.state is S.PREPARING_REBALANCE
    assert rt.join("a2", member_id=a).generation_id == 2


def test_heartbeat_errors():
    rt = Runtime()
    assert rt.heartbeat("ghost", 0) is E.unknown_member_id  # unknown group
    assert rt.heartbeat("ghost", 0, group="") is E.invalid_group_id
    a, b, gen = rt.stable_pair()
    assert rt.heartbeat(a, gen) is E.none
    assert rt.heartbeat("ghost", gen) is E.unknown_member_id
    assert rt.heartbeat(a, gen - 1) is E.illegal_generation
    assert rt.heartbeat(a, gen, instance="i9") is E.unknown_member_id
    rt.join("a2", member_id=a)
    assert rt.heartbeat(b, gen) is E.rebalance_in_progress


def test_heartbeat_in_completing_rebalance_is_accepted():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.advance(100)
    assert rt.heartbeat(a, 1) is E.none


def test_coordinator_placement_errors():
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=3))
    coordinator = rt.coordinator
    p = coordinator.partition_for("g")
    rt.unload(p)
    assert rt.join("x").error_code is E.not_coordinator
    rt.runtime.begin_load(p, 1)
    assert rt.join("x").error_code is E.coordinator_load_in_progress
    assert rt.heartbeat("m", 1) is E.coordinator_load_in_progress
    assert rt.sync("x", "m", 1).error_code is E.coordinator_load_in_progress
    assert rt.call("leave_group", group_id="g", members=[], api_version=3).error_code \
        is E.coordinator_load_in_progress
    assert coordinator.describe_groups(["g"]).groups[0].error_code is E.coordinator_load_in_progress
    assert coordinator.list_groups().error_code is E.coordinator_load_in_progress
    rt.runtime.load(p, rt.now)
    assert rt.join("x").error_code is E.member_id_required


def test_unloading_answers_parked_requests_with_not_coordinator():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.unload(0)
    assert rt.replies["a1"].error_code is E.not_coordinator
    assert rt.coordinator.next_deadline() is None


def test_describe_list_and_delete_groups():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    described = rt.coordinator.describe_groups(["g", "nope"]).groups
    g = described[0]
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (E.none, "Stable", "consumer", "range")
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in g.members] == [
        (a, b"range-sub", b"A"), (b, b"range-sub", b"B"),
    ]
    assert (described[1].error_code, described[1].group_state) == (E.none, "Dead")

    listed = rt.coordinator.list_groups()
    assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed.groups] == [
        ("g", "consumer", "Stable", "classic"),
    ]
    assert rt.coordinator.list_groups(states_filter=["empty"]).groups == ()
    assert len(rt.coordinator.list_groups(states_filter=["STABLE"]).groups) == 1
    assert rt.coordinator.list_groups(types_filter=["consumer"]).groups == ()

    deleted = rt.call("delete_groups", group_ids=["g", "nope"])
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g", E.non_empty_group), ("nope", E.group_id_not_found),
    ]
    rt.join("a2", member_id=a)
    described = rt.coordinator.describe_groups(["g"]).groups[0]
    assert described.group_state == "PreparingRebalance" and described.protocol_data == ""
    assert all(m.member_metadata == b"" and m.member_assignment == b"" for m in described.members)

    rt.call("leave_group", group_id="g", api_version=3, members=[MemberIdentity(a), MemberIdentity(b)])
    deleted = rt.call("delete_groups", group_ids=["g"])
    assert deleted.results[0].error_code is E.none
    assert rt.appended[-1] == log_codec.group_metadata_record("g", None)
    assert rt.coordinator.group("g") is None
    assert rt.coordinator.describe_groups(["g"]).groups[0].group_state == "Dead"


def test_restart_restores_members_generation_and_assignment():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    rt.advance(1_000)
    restarted = rt.restart()
    group = restarted.coordinator.group("g")
    assert group.state is S.STABLE and group.generation_id == gen
    assert group.leader_id == a and group.protocol_name == "range" and group.protocol_type == "consumer"
    assert {m.member_id: m.assignment for m in group.members.values()} == {a: b"A", b: b"B"}
    assert restarted.sync("bs", b, gen).assignment == b"B"
    # Loaded members get a full session from the load; a silent one expires from there.
    restarted.advance(9_999)
    assert restarted.heartbeat(a, gen) is E.none
    assert b in restarted.coordinator.group("g").members
    restarted.advance(1)
    assert b not in restarted.coordinator.group("g").members


def test_restart_after_generations_keeps_only_the_last_membership():
    rt = Runtime()
    a, b, gen = rt.stable_pair()
    rt.call("leave_group", group_id="g", members=[MemberIdentity(b)], api_version=3)
    rt.join("a2", member_id=a)
    rt.sync("as2", a, gen + 1, {a: b"all"})
    restarted = rt.restart()
    group = restarted.coordinator.group("g")
    assert list(group.members) == [a] and group.generation_id == gen + 1
    # The loaded leader rejoins: a rebalance that completes at once (it is alone).
    assert restarted.join("x", member_id=a).generation_id == gen + 2
    assert restarted.coordinator.group("g").state is S.COMPLETING_REBALANCE


def test_restart_after_delete_forgets_the_group():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.advance(100)
    rt.sync("as", a, 1, {a: b"x"})
    rt.call("leave_group", group_id="g", members=[MemberIdentity(a)], api_version=3)
    rt.call("delete_groups", group_ids=["g"])
    assert rt.restart().coordinator.group("g") is None


def test_records_of_other_group_types_are_skipped_on_replay():
    rt = Runtime()
    rt.coordinator.replay(CoordinatorRecord(b"\x00\x0b\x00\x01g", b"\x00\x00"), 0, 0)  # a share group's
    assert rt.coordinator.group("g") is None
    # A malformed consumer group record is skipped with a log line, not a failed load.
    rt.coordinator.replay(CoordinatorRecord(b"\x00\x05\x00\x01g", b"\x00\x00"), 0, 0)
    assert rt.coordinator.group("g") is None and rt.coordinator.consumer_group("g") is None


def test_group_max_size_turns_away_the_last_to_rejoin():
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=1, group_max_size=2))
    a, b, gen = rt.stable_pair()
    rt.join("a2", member_id=a)  # rebalance; a is back
    assert rt.join("n", version=3) is None  # a newcomer takes the second place
    response = rt.join("b2", member_id=b)
    assert response.error_code is E.group_max_size_reached and response.member_id == ""
    # b is out, and everyone left has rejoined: the new generation forms at once.
    assert [m.member_id for m in rt.replies["a2"].members] == [a, rt.replies["n"].member_id]


def test_static_member_that_does_not_rejoin_stays_until_its_session_ends():
    rt = Runtime()
    d = rt.join("d0").member_id
    rt.join("d1", member_id=d, rebalance=20_000)
    rt.join("s0", instance="i1", session=30_000, rebalance=20_000)
    rt.advance(200)
    s = rt.replies["s0"].member_id
    rt.sync("ds", d, 1, {d: b"", s: b""})
    rt.sync("ss", s, 1, instance="i1")
    rt.join("d2", member_id=d)  # leader rejoins, then leaves
    rt.call("leave_group", group_id="g", members=[MemberIdentity(d)], api_version=3)
    assert rt.replies["d2"].error_code is E.unknown_member_id
    rt.advance(20_000)  # the rebalance timeout: nobody rejoined, the static member is kept
    group = rt.coordinator.group("g")
    assert list(group.members) == [s] and group.state is S.PREPARING_REBALANCE
    rt.advance(10_000)  # its session (30 s from the sync) ends
    group = rt.coordinator.group("g")
    assert not group.members and group.state is S.EMPTY and group.generation_id == 2


def test_static_restart_while_the_old_one_waits_for_its_assignment():
    rt = Runtime()
    a = rt.join("a0").member_id
    rt.join("a1", member_id=a)
    rt.join("s0", instance="i1", version=5)
    rt.advance(200)
    s = rt.replies["s0"].member_id
    assert rt.sync("ss", s, 1, instance="i1") is None  # waiting for the leader
    rt.join("s1", instance="i1", version=5)
    assert rt.replies["ss"].error_code is E.fenced_instance_id
    assert rt.sync("old", s, 1, instance="i1").error_code is E.fenced_instance_id
    # The leader may have assigned to the old id: the generation starts over.
    assert rt.coordinator.group("g").state is S.PREPARING_REBALANCE
    assert rt.sync("as", a, 1, {a: b"", s: b""}).error_code is E.rebalance_in_progress


def test_unloading_answers_parked_syncs_too():
    rt = Runtime()
    a = rt.join("a0").member_id
    b = rt.join("b0").member_id
    rt.join("a1", member_id=a)
    rt.join("b1", member_id=b)
    rt.advance(200)
    rt.sync("bs", b, 1)
    rt.unload(0)
    assert "as" not in rt.replies and rt.replies["bs"].error_code is E.not_coordinator


def test_more_placement_errors():
    rt = Runtime(GroupConfig(offsets_topic_num_partitions=3))
    coordinator = rt.coordinator
    assert rt.call("leave_group", group_id="", members=[], api_version=3).error_code is E.invalid_group_id
    rt.unload(coordinator.partition_for("g"))
    assert rt.call("delete_groups", group_ids=["g"]).error_code is E.not_coordinator  # refused by the runtime
    assert rt.call("offset_delete", group_id="g", topics=[]).error_code is E.not_coordinator
    assert coordinator.describe_groups(["g"]).groups[0].error_code is E.not_coordinator
    assert rt.appended == []
