"""KIP-848 consumer groups in the group coordinator, driven through the real runtime
(append, replay, timers) by the harness of test_group_harness: heartbeats, epochs,
revocation before assignment, timeouts, static members, offset fencing, classic and
consumer groups side by side, and recovery by replaying the log."""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group import GroupConfig, JoinProtocol, OffsetFetchGroup, OffsetToCommit
from coordinator.group.messages import MemberIdentity
from coordinator.group import consumer_log_codec as codec
from coordinator.group.assignors import AssignmentSpec, range_, uniform
from coordinator.group.consumer_group import ConsumerGroupConfig, HeartbeatRequest
from coordinator.group.log_codec import LogCodecError
from tests.unit.test_group_harness import Runtime

E = ErrorCode
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
CONFIG = GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100,
                     consumer=ConsumerGroupConfig(session_timeout_ms=45_000))


class Consumers(Runtime):
    def __init__(self, topics=None, config=CONFIG, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.topic_table = dict(topics or {"t": (T, 4)})
        self.coordinator.topics = lambda: self.topic_table

    def restart(self, config=None) -> "Consumers":
        again = Consumers(self.topic_table, now_ms=self.now, log=type(self.log)(self.log.partitions))
        return again

    def hb(self, member: str, epoch: int, group: str = "g", **fields):
        if epoch == 0:
            fields.setdefault("rebalance_timeout_ms", 30_000)
            fields.setdefault("owned", {})
            if "subscribed_topic_regex" not in fields:
                fields.setdefault("subscribed_topic_names", ("t",))
        request = HeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, **fields)
        return self.run_checked(group, lambda: self.coordinator.consumer_group_heartbeat(request, self.now),
                                lambda: self.coordinator.heartbeat_request_error(request))

    def group(self, group: str = "g"):
        return self.coordinator.consumer_group(group)


def parts(*ps: int, topic=T) -> dict:
    return {topic: frozenset(ps)}


def test_first_member_gets_every_partition_and_a_restart_replays_the_group():
    c = Consumers()
    answer = c.hb("a", 0)
    assert (answer.error_code, answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == (
        E.none, "a", 1, 5_000)
    assert answer.assignment == parts(0, 1, 2, 3)
    assert c.group().state == "Stable"
    kinds = [int.from_bytes(r.key[:2], "big") for r in c.appended]
    assert kinds == [codec.MEMBER_METADATA, codec.GROUP_METADATA, codec.TARGET_MEMBER, codec.TARGET_METADATA,
                     codec.CURRENT_ASSIGNMENT]
    # A steady heartbeat writes nothing and does not repeat the assignment.
    before = len(c.appended)
    steady = c.hb("a", 1, owned=parts(0, 1, 2, 3))
    assert (steady.member_epoch, steady.assignment) == (1, None) and len(c.appended) == before

    again = c.restart()
    group = again.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, "Stable")
    assert group.members["a"].assigned == parts(0, 1, 2, 3)
    assert again.hb("a", 1, owned=parts(0, 1, 2, 3)).error_code is E.none


def test_partitions_are_revoked_before_they_are_assigned_elsewhere():
    c = Consumers()
    c.hb("a", 0)
    b = c.hb("b", 0)
    assert (b.member_epoch, b.assignment) == (2, {})  # its partitions are still a's
    assert c.group().members["b"].state.name == "UNRELEASED_PARTITIONS"
    a = c.hb("a", 1, owned=parts(0, 1, 2, 3))
    kept = a.assignment[T]
    assert a.member_epoch == 1 and len(kept) == 2  # revoke first, same epoch
    assert c.group().state == "Reconciling"
    assert c.hb("b", 2, owned={}).assignment is None  # nothing released yet
    a = c.hb("a", 1, owned={T: kept})  # revoked
    assert (a.member_epoch, a.assignment) == (2, None)
    b = c.hb("b", 2, owned={})
    assert b.assignment == {T: frozenset(range(4)) - kept}
    c.hb("b", 2, owned=b.assignment)
    assert c.group().state == "Stable"


def test_heartbeat_errors_as_kafka_answers():
    c = Consumers()
    def error(member, epoch, **fields):
        answer = c.hb(member, epoch, **fields)
        return answer.error_code, answer.error_message

    assert error("a", 0, group="") == (E.invalid_request, "GroupId can't be empty.")
    assert error("", 0) == (E.invalid_request, "MemberId can't be empty.")
    assert error("a", 0, rebalance_timeout_ms=-1) == (E.invalid_request,
                                                       "RebalanceTimeoutMs must be provided in first request.")
    assert error("a", 0, owned=parts(1)) == (E.invalid_request, "TopicPartitions must be empty when (re-)joining.")
    assert error("a", -3)[0] is E.invalid_request
    assert error("a", -2)[0] is E.invalid_request  # a static leave without an instance id
    assert error("a", 0, instance_id="")[0] is E.invalid_request
    assert error("a", 0, server_assignor="sticky")[0] is E.unsupported_assignor
    assert error("a", 0, subscribed_topic_regex="(")[0] is E.invalid_regular_expression
    assert error("a", 3) == (E.group_id_not_found, "Consumer group g not found.")
    c.hb("a", 0)
    assert error("x", 1)[0] is E.unknown_member_id
    assert error("a", 2)[0] is E.fenced_member_epoch
    assert error("x", -1)[0] is E.unknown_member_id
    # After an epoch bump, the previous epoch is accepted with owned partitions it still has.
    c.hb("b", 0)
    c.hb("a", 1, owned=parts(2, 3))
    assert c.group().members["a"].member_epoch == 2
    assert c.hb("a", 1, owned=parts(2, 3)).error_code is E.none
    assert error("a", 1, owned=parts(0, 1, 2, 3))[0] is E.fenced_member_epoch


def test_leaving_bumps_the_group_epoch_and_the_rest_get_everything():
    c = Consumers()
    c.hb("a", 0)
    c.hb("b", 0)
    c.hb("a", 1, owned=parts(2, 3))
    c.hb("b", 2, owned={})
    left = c.hb("b", -1)
    assert (left.error_code, left.member_epoch) == (E.none, -1)
    assert set(c.group().members) == {"a"} and c.group().state == "Assigning"
    a = c.hb("a", 2, owned=parts(2, 3))
    assert (a.member_epoch, a.assignment) == (3, parts(0, 1, 2, 3))


def test_session_and_rebalance_timeouts_fence_members():
    c = Consumers()
    c.hb("a", 0)
    c.hb("b", 0)
    c.advance(44_000)
    c.hb("b", 2, owned={})  # b stays; a neither heartbeats nor revokes
    c.advance(2_000)
    assert set(c.group().members) == {"b"}
    assert c.hb("a", 1, owned={}).error_code is E.unknown_member_id
    assert c.hb("b", 2, owned={}).assignment == parts(0, 1, 2, 3)
    # A member that keeps heartbeating but never revokes is fenced at its rebalance timeout.
    c.hb("x", 0, rebalance_timeout_ms=1_000)
    epoch = c.group().members["b"].member_epoch
    c.hb("b", epoch, owned=parts(0, 1, 2, 3))
    assert c.group().members["b"].state.name == "UNREVOKED_PARTITIONS"
    c.advance(500)
    c.hb("b", epoch, owned=parts(0, 1, 2, 3))
    c.advance(30_001)
    assert "b" not in c.group().members


def test_static_member_leaves_for_a_while_and_its_successor_takes_over():
    c = Consumers()
    c.hb("a", 0, instance_id="i1")
    assert c.hb("a2", 0, instance_id="i1").error_code is E.unreleased_instance_id
    assert c.hb("zz", 1, instance_id="i1").error_code is E.fenced_instance_id
    gone = c.hb("a", -2, instance_id="i1")
    assert gone.member_epoch == -2
    assert c.group().members["a"].assigned == parts(0, 1, 2, 3)
    back = c.hb("a2", 0, instance_id="i1")
    assert (back.error_code, back.member_epoch, back.assignment) == (E.none, 1, parts(0, 1, 2, 3))
    assert set(c.group().members) == {"a2"} and c.group().group_epoch == 1  # no rebalance
    # Gone for longer than the session: fenced.
    c.hb("a2", -2, instance_id="i1")
    c.advance(45_001)
    assert not c.group().members


def test_regex_and_new_partitions_bump_the_group_epoch():
    c = Consumers({"t": (T, 2)})
    first = c.hb("a", 0, subscribed_topic_regex="t.*")
    assert first.assignment == parts(0, 1)
    c.topic_table["t"] = (T, 3)
    c.topic_table["t2"] = (U, 1)
    c.topic_table["other"] = (uuid.UUID(int=3), 1)
    grown = c.hb("a", 1, owned=parts(0, 1))
    assert grown.member_epoch == 2
    assert grown.assignment == {T: frozenset({0, 1, 2}), U: frozenset({0})}


def test_a_regex_resolves_to_internal_topics_and_names_starting_with_underscores_too():
    # As Kafka's refreshRegularExpressions: every topic the regex matches, filtered only by
    # the authorizer (franz-go's Test848RegexBrokerResolves expects __consumer_offsets).
    offsets, private = uuid.UUID(int=3), uuid.UUID(int=4)
    c = Consumers({"t": (T, 1), "__consumer_offsets": (offsets, 2), "__private": (private, 1)})
    assert c.hb("a", 0, subscribed_topic_regex="__.*").assignment == {offsets: frozenset({0, 1}),
                                                                      private: frozenset({0})}
    assert c.hb("b", 0, group="h", subscribed_topic_regex=".*").assignment == {
        T: frozenset({0}), offsets: frozenset({0, 1}), private: frozenset({0})}


def test_offset_commits_are_fenced_by_member_epoch():
    c = Consumers()
    c.hb("a", 0)
    offsets = [OffsetToCommit("t", 0, 5, -1, "")]
    def commit(member, epoch, version=9):
        r = c.call("offset_commit", group_id="g", generation_id=epoch, member_id=member, group_instance_id=None,
                    offsets=offsets, api_version=version)
        return r.topics[0].partitions[0].error_code
    assert commit("a", 1) is E.none
    assert commit("a", 0) is E.stale_member_epoch
    assert commit("a", 2) is E.stale_member_epoch  # newer too, as Kafka 4.4 answers
    assert commit("x", 1) is E.unknown_member_id
    assert commit("a", 1, version=8) is E.unsupported_version
    assert commit("", -1) is E.unknown_member_id  # not while the group has members

    def txn_commit(member, epoch):
        r = c.call("txn_offset_commit", transactional_id="tx", group_id="g", producer_id=7, producer_epoch=0,
                   generation_id=epoch, member_id=member, group_instance_id=None, offsets=offsets, api_version=3)
        return r.topics[0].partitions[0].error_code
    assert txn_commit("a", 1) is E.none
    assert txn_commit("a", 0) is E.stale_member_epoch
    assert txn_commit("", -1) is E.none  # no member fields: not checked

    def fetch(member, epoch):
        (group,) = c.coordinator.offset_fetch([OffsetFetchGroup("g", (("t", (0,)),), member, epoch)], False).groups
        return group.error_code
    assert fetch("a", 1) is E.none
    assert fetch(None, -1) is E.none
    assert fetch("a", 0) is E.stale_member_epoch
    assert fetch("x", 1) is E.unknown_member_id


def test_classic_and_consumer_groups_side_by_side():
    c = Consumers()
    c.hb("a", 0, group="new")
    classic = c.join("j0", group="old")
    assert classic.error_code is E.member_id_required
    c.join("j1", group="old", member_id=classic.member_id)
    c.advance(200)
    assert c.hb("a", 0, group="old").error_code is E.group_id_not_found  # its metadata is no consumer protocol
    # a classic member may join "new" (online migration), with the consumer protocol type only
    assert c.join("j2", group="new", protocol_type="connect").error_code is E.inconsistent_group_protocol
    listed = {(g.group_id, g.group_type, g.group_state) for g in c.coordinator.list_groups().groups}
    assert listed == {("new", "consumer", "Stable"), ("old", "classic", "CompletingRebalance")}
    assert [g.group_id for g in c.coordinator.list_groups(types_filter=["consumer"]).groups] == ["new"]
    assert c.coordinator.describe_groups(["new"]).groups[0].group_state == "Dead"
    assert c.coordinator.consumer_group_describe("old")[0] is E.group_id_not_found
    # An empty classic group (offsets only) becomes a consumer group, keeping its offsets.
    c.call("offset_commit", group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
           offsets=[OffsetToCommit("t", 0, 9, -1, "")], api_version=9)
    assert c.hb("s", 0, group="simple").error_code is E.none
    assert c.coordinator.committed_offset("simple", "t", 0).offset == 9
    assert c.coordinator.group("simple") is None
    # DeleteGroups: refused while members are in, then every record is tombstoned.
    assert c.call("delete_groups", group_ids=["new"]).results[0].error_code is E.non_empty_group
    c.hb("a", -1, group="new")
    assert c.call("delete_groups", group_ids=["new"]).results[0].error_code is E.none
    assert c.group("new") is None
    assert c.restart().group("new") is None


def test_uniform_assignor_is_balanced_and_sticky():
    members = {m: frozenset({T, U}) for m in "abc"}
    first = uniform(AssignmentSpec(members, {T: 4, U: 5}, {}))
    assert sorted(sum(len(ps) for ps in a.values()) for a in first.values()) == [3, 3, 3]
    more = dict(members, d=frozenset({T, U}))
    second = uniform(AssignmentSpec(more, {T: 4, U: 5}, first))
    moved = sum(len(first[m].get(t, frozenset()) - second[m].get(t, frozenset())) for m in first for t in (T, U))
    assert moved == 2  # only what d needs moves
    # Heterogeneous: each partition goes to a subscriber.
    mixed = uniform(AssignmentSpec({"a": frozenset({T}), "b": frozenset({T, U})}, {T: 2, U: 2}, {}))
    assert mixed["a"] == {T: frozenset({0, 1})} or U not in mixed["a"]
    assert mixed["b"].get(U) == frozenset({0, 1})


def test_range_assignor_gives_contiguous_ranges():
    out = range_(AssignmentSpec({"a": frozenset({T}), "b": frozenset({T})}, {T: 5}, {}))
    assert out == {"a": {T: frozenset({0, 1, 2})}, "b": {T: frozenset({3, 4})}}


def test_records_round_trip():
    key_value = codec.current_assignment_record("g", "m", codec.CurrentAssignmentValue(3, 2, 1, parts(1, 2), parts(0)))
    key = codec.decode_key(codec.CURRENT_ASSIGNMENT, key_value.key)
    assert (key.group, key.member) == ("g", "m")
    assert codec.decode_current_assignment(key_value.value) == codec.CurrentAssignmentValue(3, 2, 1, parts(1, 2), parts(0))
    meta = codec.MemberMetadataValue("i", None, "c", "/h", ("t", "u"), "x.*", "range", 100)
    assert codec.decode_member_metadata(codec.member_metadata_record("g", "m", meta).value) == meta
    # Kafka's layout: ... regex, rebalance timeout, assignor, then tagged fields (none)
    assert codec.member_metadata_record("g", "m", meta).value.endswith(b"\x04x.*\x00\x00\x00\x64\x06range\x00")
    classic = codec.MemberMetadataValue("i", None, "c", "/h", ("t",), None, None, 100,
                                        codec.ClassicMemberMetadata(45000, (("range", b"\x00\x01"),)))
    assert codec.decode_member_metadata(codec.member_metadata_record("g", "m", classic).value) == classic
    with pytest.raises(LogCodecError):
        codec.decode_current_assignment(key_value.value[:7])


# -- classic members in a consumer group (KIP-848 online migration) ----------------------


def subscription(*topics: str, owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription v1, as a classic consumer puts it in JoinGroup."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">ii", -1, len(owned or {}))
    for t, ps in (owned or {}).items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out


def assignment_of(data: bytes) -> dict[str, list[int]]:
    version, count = struct.unpack_from(">hi", data)
    pos, out = 6, {}
    for _ in range(count):
        (n,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        (k,) = struct.unpack_from(">i", data, pos)
        out[topic] = list(struct.unpack_from(f">{k}i", data, pos + 4))
        pos += 4 + 4 * k
    assert struct.unpack_from(">i", data, pos) == (-1,)
    return out


def test_classic_member_in_a_consumer_group():
    c = Consumers()
    c.hb("a", 0)
    protocols = [JoinProtocol("range", subscription("t")), JoinProtocol("roundrobin", subscription("t"))]
    assert c.join("x", protocol_type="connect", protocols=protocols).error_code is E.inconsistent_group_protocol
    first = c.join("j0", protocols=protocols)
    assert first.error_code is E.member_id_required
    m = first.member_id
    joined = c.join("j1", member_id=m, protocols=protocols)
    assert (joined.error_code, joined.member_id, joined.generation_id, joined.protocol_type, joined.protocol_name,
            joined.leader, joined.members) == (E.none, m, 2, "consumer", "range", "", ())
    assert c.group().members[m].classic == codec.ClassicMemberMetadata(
        10_000, tuple((p.name, p.metadata) for p in protocols))
    # Its partitions are still a's: nothing yet, and it waits (no rejoin asked) until a lets go.
    assert assignment_of(c.sync("s1", m, 2).assignment) == {}
    assert c.heartbeat(m, 2) is E.none
    assert c.sync("s2", m, 1).error_code is E.illegal_generation
    assert c.sync("s3", m, 2, protocol_name="roundrobin").error_code is E.inconsistent_group_protocol
    assert c.heartbeat(m, 1) is E.illegal_generation
    revoke = c.hb("a", 1, owned=parts(0, 1, 2, 3))
    kept = revoke.assignment
    assert len(kept[T]) == 2
    assert c.hb("a", 1, owned=kept).member_epoch == 2
    assert c.heartbeat(m, 2) is E.rebalance_in_progress  # the rest is free: rejoin to get it
    c.join("j2", member_id=m, protocols=protocols)
    mine = assignment_of(c.sync("s4", m, 2).assignment)
    assert sorted(mine["t"]) == sorted(set(range(4)) - kept[T])
    assert c.heartbeat(m, 2) is E.none
    # Offsets of a classic member carry its generation (its member epoch), any version.
    commit = {"group_id": "g", "member_id": m, "group_instance_id": None,
              "offsets": [OffsetToCommit("t", mine["t"][0], 5, -1, "")]}
    assert c.call("offset_commit", generation_id=2, api_version=8, **commit).topics[0].partitions[0].error_code \
        is E.none
    assert c.call("offset_commit", generation_id=1, api_version=9, **commit).topics[0].partitions[0].error_code \
        is E.illegal_generation
    # The member and its protocols are in the log.
    assert c.restart().group().members[m].classic == c.group().members[m].classic
    # LeaveGroup fences it: a new epoch, and a gets everything back.
    left = c.call("leave_group", group_id="g", members=[MemberIdentity(m), MemberIdentity("nobody")], api_version=3)
    assert [(r.member_id, r.error_code) for r in left.members] == [(m, E.none), ("nobody", E.unknown_member_id)]
    assert m not in c.group().members and c.group().group_epoch == 3
    assert c.call("leave_group", group_id="g", members=[MemberIdentity("a")], api_version=3
                  ).members[0].error_code is E.unknown_member_id  # a consumer-protocol member leaves by heartbeat
    back = c.hb("a", 2, owned=kept)
    assert (back.member_epoch, back.assignment) == (3, parts(0, 1, 2, 3))


def test_empty_consumer_group_becomes_classic_on_join():
    c = Consumers()
    c.hb("a", 0)
    c.hb("a", -1)
    assert c.group().state == "Empty"
    first = c.join("j0", protocols=[JoinProtocol("range", subscription("t"))])
    assert first.error_code is E.member_id_required
    assert c.group() is None and c.coordinator.group("g") is not None
    assert c.restart().group() is None


def _classic_beside_consumer_member(config=CONFIG) -> tuple[Consumers, str]:
    c = Consumers(config=config)
    c.hb("a", 0)
    protocols = [JoinProtocol("range", subscription("t"))]
    m = c.join("j0", protocols=protocols).member_id
    c.join("j1", member_id=m, protocols=protocols)
    return c, m


def test_group_becomes_classic_when_its_last_consumer_member_leaves():
    c, m = _classic_beside_consumer_member()
    epoch = c.group().group_epoch
    left = c.hb("a", -1)
    assert (left.error_code, left.member_id, left.member_epoch) == (E.none, "a", -1)
    assert c.group() is None
    classic = c.coordinator.group("g")
    assert (classic.state.value, classic.generation_id, classic.protocol_name, list(classic.members)) == (
        "PreparingRebalance", epoch, "range", [m])
    assert c.heartbeat(m, epoch) is E.rebalance_in_progress
    c.join("j2", member_id=m, protocols=[JoinProtocol("range", subscription("t"))])
    rejoined = c.replies["j2"]
    assert (rejoined.error_code, rejoined.generation_id, rejoined.leader) == (E.none, epoch + 1, m)
    # the log holds the classic group, not the consumer group
    again = c.restart()
    assert again.group() is None and again.coordinator.group("g") is not None


def test_no_downgrade_when_the_policy_forbids_it():
    for policy in ("upgrade", "disabled"):
        config = GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100,
                             consumer=ConsumerGroupConfig(migration_policy=policy))
        c, m = _classic_beside_consumer_member(config)
        c.hb("a", -1)
        assert list(c.group().members) == [m] and c.coordinator.group("g") is None
        assert c.heartbeat(m, c.group().members[m].member_epoch) is E.rebalance_in_progress  # epoch bumped


def _stable_classic_group(config=CONFIG) -> tuple[Consumers, str, int]:
    c = Consumers(config=config)
    protocols = [JoinProtocol("range", subscription("t"))]
    m = c.join("j0", protocols=protocols).member_id
    c.join("j1", member_id=m, protocols=protocols)
    c.advance(200)
    generation = c.replies["j1"].generation_id
    assignment = struct.pack(">hih", 1, 1, 1) + b"t" + struct.pack(">iiiiii", 4, 0, 1, 2, 3, -1)
    c.sync("s1", m, generation, assignments={m: assignment})
    assert c.coordinator.group("g").state.value == "Stable"
    return c, m, generation


def test_classic_group_with_members_upgraded_by_a_consumer_member():
    c, m, generation = _stable_classic_group()
    joined = c.hb("a", 0)
    assert (joined.error_code, joined.member_epoch, joined.assignment) == (E.none, generation + 1, {})
    assert c.coordinator.group("g") is None
    group = c.group()
    classic = group.members[m]
    assert (classic.member_epoch, classic.assigned, classic.subscribed_topic_names) == (
        generation, parts(0, 1, 2, 3), ("t",))
    assert classic.classic.session_timeout_ms == 10_000
    # the classic member is told to rejoin, gives up half, and a gets it
    assert c.heartbeat(m, generation) is E.rebalance_in_progress
    c.join("j2", member_id=m, protocols=[JoinProtocol("range", subscription("t", owned={"t": [0, 1, 2, 3]}))])
    rejoined = c.replies["j2"]
    assert rejoined.error_code is E.none
    kept = c.group().members[m]
    assert kept.state.name == "UNREVOKED_PARTITIONS"
    c.join("j3", member_id=m, protocols=[JoinProtocol("range", subscription("t"))])  # revoked them all (eager)
    synced = c.sync("s2", m, c.replies["j3"].generation_id)
    mine = set(assignment_of(synced.assignment).get("t", []))
    assert c.hb("a", joined.member_epoch, owned={}).assignment == parts(*(set(range(4)) - mine))
    assert c.restart().group().members[m].classic is not None


def test_no_upgrade_when_the_policy_forbids_it():
    for policy in ("downgrade", "disabled"):
        config = GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100,
                             consumer=ConsumerGroupConfig(migration_policy=policy))
        c, m, generation = _stable_classic_group(config)
        refused = c.hb("a", 0)
        assert (refused.error_code, refused.error_message) == (E.group_id_not_found, "Group g is not a consumer group.")
        assert c.group() is None and c.heartbeat(m, generation) is E.none


def test_classic_member_that_does_not_sync_or_rejoin_in_time_is_removed():
    c, m = _classic_beside_consumer_member()  # joined with a 30 s rebalance timeout, not synced
    c.advance(5_000)
    assert c.heartbeat(m, 2) is E.none  # its session is kept alive...
    c.advance(26_000)
    assert m not in c.group().members  # ...but its SyncGroup never came
    # told to rejoin (the group moved on) and never does: removed after the rebalance timeout
    c, m = _classic_beside_consumer_member()
    c.sync("s", m, 2)
    c.hb("b", 0)
    assert c.heartbeat(m, 2) is E.rebalance_in_progress
    for _ in range(6):
        c.advance(5_000)
        c.heartbeat(m, 2)
        c.hb("a", c.group().members["a"].member_epoch, owned=c.group().members["a"].assigned)
    assert m not in c.group().members and "a" in c.group().members
