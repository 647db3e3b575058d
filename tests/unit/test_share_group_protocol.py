"""KIP-932 share groups in the group coordinator, driven through the real runtime by the
harness of test_group_harness: joining, the simple assignor sharing partitions among
more members than partitions, epochs, leaving and session expiry (with the effect that
releases a member's records), group types kept apart, ListGroups, DeleteGroups, and
recovery by replaying the records Kafka writes for share groups."""

from __future__ import annotations

import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from coordinator.group import GroupConfig
from coordinator.group import share_log_codec as codec
from coordinator.group.assignors import AssignmentSpec, simple
from coordinator.group.consumer_group import ConsumerGroupConfig, HeartbeatRequest
from coordinator.group.messages import Reply
from coordinator.group.share_group import InitializeShareState, ShareGroupConfig, ShareHeartbeatRequest
from tests.unit.test_group_harness import Runtime

E = ErrorCode
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
CONFIG = GroupConfig(offsets_topic_num_partitions=1, consumer=ConsumerGroupConfig(),
                     share=ShareGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=5_000, max_size=3,
                                            assignment_interval_ms=0))
INTERVAL = replace(CONFIG, share=replace(CONFIG.share, assignment_interval_ms=1_000))


class Shares(Runtime):
    def __init__(self, topics=None, config=CONFIG, **kwargs) -> None:
        self.initialize: list[InitializeShareState] = []  # asked of the share coordinator
        super().__init__(config, **kwargs)
        self.topic_table = dict(topics or {"t": (T, 2)})
        self.coordinator.topics = lambda: self.topic_table

    def _perform(self, effect):
        if isinstance(effect, InitializeShareState):
            self.initialize.append(effect)
        else:
            assert isinstance(effect, Reply)
            super()._perform(effect)

    def restart(self) -> "Shares":
        return Shares(self.topic_table, self.config, now_ms=self.now, log=type(self.log)(self.log.partitions))

    def hb(self, member: str, epoch: int, group: str = "g", **fields):
        if epoch == 0:
            fields.setdefault("subscribed_topic_names", ("t",))
        request = ShareHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, **fields)
        return self.run_checked(group, lambda: self.coordinator.share_group_heartbeat(request, self.now),
                                lambda: self.coordinator.heartbeat_request_error(request))

    def initialized(self, initialized: bool = True) -> None:
        """The share coordinator answers the InitializeShareGroupState calls asked so far."""
        while self.initialize:
            effect = self.initialize.pop(0)
            partitions = {t: ps for t, (_name, ps) in effect.partitions.items()}
            assert self.runtime.run(0, lambda: self.coordinator.share_group_state_changed(
                effect.group_id, partitions, initialized), self.now) is E.none

    def joined(self, member: str, group: str = "g", **fields):
        """A member's first heartbeat, its share-partitions initialized, and the heartbeat
        that brings it its assignment."""
        first = self.hb(member, 0, group, **fields)
        self.initialized()
        return self.hb(member, first.member_epoch, group)

    def group(self, group: str = "g"):
        return self.coordinator.share_group(group)


def parts(*ps: int, topic=T) -> dict:
    return {topic: frozenset(ps)}


def kinds(records) -> list[int]:
    return [int.from_bytes(r.key[:2], "big") for r in records]


def test_first_member_waits_for_its_partitions_to_be_initialized_then_gets_them_at_epoch_3():
    s = Shares()
    answer = s.hb("a", 0)  # a new share group's first epoch is 2, as on Kafka 4.4
    assert (answer.error_code, answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == (
        E.none, "a", 2, 5_000)
    assert answer.assignment == {}  # nothing is assigned before its state is initialized
    assert kinds(s.appended) == [codec.MEMBER_METADATA, codec.GROUP_METADATA, codec.TARGET_MEMBER,
                                 codec.TARGET_METADATA, codec.CURRENT_ASSIGNMENT, codec.STATE_PARTITION_METADATA]
    group = s.group()
    assert (group.initializing, group.initialized) == ({T: ("t", frozenset({0, 1}))}, {})
    assert s.initialize == [InitializeShareState("g", 2, {T: ("t", frozenset({0, 1}))})]
    before = len(s.appended)
    assert s.hb("a", 2).assignment is None and len(s.appended) == before  # still initializing
    s.initialized()
    assert (group.initializing, group.initialized) == ({}, {T: ("t", frozenset({0, 1}))})
    answer = s.hb("a", 2)  # initialized partitions nobody has: the group epoch moves
    assert (answer.member_epoch, answer.assignment) == (3, parts(0, 1))
    assert (group.state, group.group_epoch, group.assignment_epoch) == ("Stable", 3, 3)
    before = len(s.appended)
    steady = s.hb("a", 3)
    assert (steady.member_epoch, steady.assignment) == (3, None) and len(s.appended) == before
    assert s.initialize == []


def test_a_failed_initialization_is_asked_again_by_the_next_heartbeat():
    s = Shares()
    s.hb("a", 0)
    s.initialized(False)
    assert (s.group().initializing, s.group().initialized) == ({}, {})
    assert s.hb("a", 2).assignment is None
    assert s.initialize == [InitializeShareState("g", 2, {T: ("t", frozenset({0, 1}))})]


def test_more_members_than_partitions_share_them_and_a_restart_replays_the_group():
    s = Shares()
    s.joined("a")
    s.hb("b", 0)
    s.hb("c", 0)
    assert s.group().target == {"a": parts(0), "b": parts(1), "c": parts(0)}
    # No revocation: each member takes its target (and the epoch) on its next heartbeat.
    assert (s.hb("a", 3).assignment, s.hb("b", 4).assignment) == (parts(0), parts(1))
    assigned = {m: s.group().members[m].assigned for m in "abc"}
    assert assigned == {"a": parts(0), "b": parts(1), "c": parts(0)}
    again = s.restart()
    group = again.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (5, 5, "Stable")
    assert {m: group.members[m].assigned for m in "bc"} == {"b": parts(1), "c": parts(0)}
    assert group.members["a"].member_epoch == 5
    assert group.initialized == {T: ("t", frozenset({0, 1}))}
    assert again.hb("b", 5).error_code is E.none


def test_simple_assignor_spreads_partitions_and_shares_when_members_outnumber_them():
    spec = AssignmentSpec({"a": frozenset({T}), "b": frozenset({T, U})}, {T: 4, U: 1}, {})
    assignment = simple(spec)
    assert sorted(len(assignment[m].get(T, ())) for m in "ab") == [2, 2]
    assert assignment["b"][U] == frozenset({0})
    crowd = simple(AssignmentSpec({m: frozenset({T}) for m in "abc"}, {T: 2}, {}))
    assert [crowd[m][T] for m in "abc"] == [frozenset({0}), frozenset({1}), frozenset({0})]


def test_epochs_are_checked():
    s = Shares()
    s.hb("a", 0)
    assert s.hb("a", 5).error_code is E.fenced_member_epoch
    assert s.hb("zz", 1).error_code is E.unknown_member_id
    assert s.hb("a", 1, group="nobody").error_code is E.group_id_not_found
    assert s.hb("", 0).error_code is E.invalid_request
    assert s.hb("b", 0, subscribed_topic_names=()).error_code is E.invalid_request
    assert s.hb("a", -3).error_code is E.invalid_request


def test_leaving_fences_the_member_and_its_partitions_go_to_the_others():
    s = Shares()
    s.joined("a")
    s.hb("b", 0)
    assert s.hb("a", 3).assignment == parts(1)
    left = s.hb("b", -1)
    assert (left.error_code, left.member_epoch) == (E.none, -1)
    # No effect but the records (``_perform`` takes no other): what b holds stays acquired
    # until its share session ends or the locks do, as on Kafka 4.4.
    assert set(s.group().members) == {"a"}
    assert s.hb("a", 4).assignment == parts(0, 1)  # b's partition comes back to a
    assert s.hb("b", -1).error_code is E.unknown_member_id


def test_a_member_whose_session_ends_is_fenced_on_the_clock():
    s = Shares()
    s.hb("a", 0)
    s.now += 44_999
    s.runtime.fire_timers(s.now)
    assert "a" in s.group().members
    s.now += 1
    s.runtime.fire_timers(s.now)
    assert s.group().members == {} and s.group().state == "Empty"


def test_the_group_size_is_capped():
    s = Shares()
    for m in "abc":
        s.hb(m, 0)
    assert s.hb("d", 0).error_code is E.group_max_size_reached


def test_share_and_consumer_groups_keep_to_their_types():
    s = Shares()
    s.hb("a", 0, group="shared")
    consumer = HeartbeatRequest(group_id="shared", member_id="c", member_epoch=0, rebalance_timeout_ms=30_000,
                                subscribed_topic_names=("t",), owned={})
    answer = s.runtime.run(0, lambda: s.coordinator.consumer_group_heartbeat(consumer, s.now), s.now)
    assert (answer.error_code, answer.error_message) == (E.group_id_not_found, "Group shared is not a consumer group.")
    other = HeartbeatRequest(group_id="consumers", member_id="c", member_epoch=0, rebalance_timeout_ms=30_000,
                             subscribed_topic_names=("t",), owned={})
    s.runtime.run(0, lambda: s.coordinator.consumer_group_heartbeat(other, s.now), s.now)
    refused = s.hb("a", 0, group="consumers")
    assert (refused.error_code, refused.error_message) == (E.group_id_not_found, "Group consumers is not a share group.")
    assert s.coordinator.share_group_describe("consumers")[:2] == (
        E.group_id_not_found, "Group consumers is not a share group.")
    assert s.coordinator.share_group_describe("nobody")[:2] == (E.group_id_not_found, "Group nobody not found.")
    listed = {(g.group_id, g.group_type, g.group_state) for g in s.coordinator.list_groups().groups}
    assert ("shared", "share", "Stable") in listed and ("consumers", "consumer", "Stable") in listed
    assert [g.group_id for g in s.coordinator.list_groups(types_filter=["Share"]).groups] == ["shared"]


def test_an_empty_share_group_can_be_deleted_and_stays_deleted_after_replay():
    s = Shares()
    s.hb("a", 0)
    assert s.call("delete_groups", group_ids=["g"]).results[0].error_code is E.non_empty_group
    s.hb("a", -1)
    assert s.call("delete_groups", group_ids=["g"]).results[0].error_code is E.none
    assert s.group() is None
    assert s.restart().group() is None


def test_the_last_member_leaving_brings_the_assignment_epoch_to_the_new_group_epoch():
    """As Kafka 4.4's shareGroupFenceMember: an empty group has nothing to assign, so its
    target assignment epoch is the group epoch the leaving wrote; not so while others stay."""
    s = Shares()
    s.joined("a")
    s.hb("b", 0)
    s.hb("b", -1)
    assert (s.group().group_epoch, s.group().assignment_epoch) == (5, 4)
    before = len(s.appended)
    s.hb("a", -1)
    assert kinds(s.appended[before:]) == [codec.CURRENT_ASSIGNMENT, codec.TARGET_MEMBER, codec.MEMBER_METADATA,
                                          codec.GROUP_METADATA, codec.TARGET_METADATA]
    assert (s.group().state, s.group().group_epoch, s.group().assignment_epoch) == ("Empty", 6, 6)
    replayed = s.restart().group()
    assert (replayed.group_epoch, replayed.assignment_epoch) == (6, 6)


def test_a_deleted_share_group_leaves_only_tombstones_in_the_order_kafka_writes_them():
    s = Shares()
    s.joined("a")
    s.hb("b", 0)
    s.hb("b", -1)
    s.hb("a", -1)
    before = len(s.appended)
    assert s.call("delete_groups", group_ids=["g"]).results[0].error_code is E.none
    assert kinds(s.appended[before:]) == [codec.TARGET_METADATA, codec.STATE_PARTITION_METADATA,
                                          codec.GROUP_METADATA]
    latest = {r.key: r.value for r in s.appended}  # what compaction keeps of each key
    assert latest and all(value is None for value in latest.values())


def test_a_share_state_outcome_for_a_group_id_of_another_type_is_refused():
    from tests.unit.test_streams_group_protocol import Streams

    s = Streams()
    s.ready()
    before = len(s.appended)
    answer = s.runtime.run(0, lambda: s.coordinator.share_group_state_changed("g", {T: frozenset({0})}, True), s.now)
    assert answer is E.group_id_not_found and len(s.appended) == before
    assert s.coordinator.share_group("g") is None


def test_a_target_assignment_waits_for_the_assignment_interval_after_the_last_one():
    """As Kafka 4.4: a heartbeat moving the group epoch within share.assignment.interval.ms
    of the last target assignment answers that one (a joining member gets its epoch and
    nothing); the first heartbeat after the interval computes the new one."""
    s = Shares(config=INTERVAL)
    s.hb("a", 0)  # a new group: nothing computed before, so at once (epoch 2)
    s.initialized()
    s.now += 500
    assert (s.hb("a", 2).member_epoch, s.group().group_epoch) == (2, 3)  # within the interval: waits
    s.now += 500
    assert (s.hb("a", 2).member_epoch, s.hb("a", 3).assignment) == (3, None)
    assert s.group().members["a"].assigned == parts(0, 1)
    joined = s.hb("b", 0)
    assert (joined.member_epoch, joined.assignment) == (3, {})  # the last assignment's epoch, nothing
    assert (s.group().group_epoch, s.group().assignment_epoch) == (4, 3)
    s.now += 999
    assert s.hb("b", 3).member_epoch == 3
    s.now += 1
    assert (s.hb("b", 3).member_epoch, s.group().assignment_epoch) == (4, 4)
    assert s.restart().group().assignment_timestamp_ms == s.now  # replayed from the record
    s.hb("b", -1)
    s.hb("a", -1)  # the last one gone: an assignment time of 0, so the next join assigns at once
    assert s.group().assignment_timestamp_ms == 0
    assert s.hb("c", 0).member_epoch == 7


def test_a_resubscribed_member_keeps_no_partition_of_a_dropped_topic_while_the_assignment_waits():
    """As Kafka 4.4's ShareGroupAssignmentBuilder: the last target assignment, answered
    within the assignment interval, is filtered by the member's subscription."""
    s = Shares({"t": (T, 2), "u": (U, 1)}, config=INTERVAL)
    s.hb("a", 0)
    s.initialized()
    s.now += 1_000
    assert s.hb("a", 2).assignment == parts(0, 1)
    moved = s.hb("a", 3, subscribed_topic_names=("u",))  # within the interval: the target waits
    assert (moved.member_epoch, moved.assignment) == (3, {})
    s.initialized()
    s.now += 1_000
    assert s.hb("a", 3).assignment == {U: frozenset({0})}


def test_new_partitions_move_the_group_epoch_and_are_assigned_once_initialized():
    s = Shares()
    s.joined("a")
    s.topic_table["t"] = (T, 3)
    grown = s.hb("a", 3)
    assert (grown.member_epoch, grown.assignment) == (4, None)
    assert s.initialize == [InitializeShareState("g", 4, {T: ("t", frozenset({2}))})]
    s.initialized()
    answer = s.hb("a", 4)
    assert (answer.member_epoch, answer.assignment) == (5, parts(0, 1, 2))
    assert s.group().initialized[T] == ("t", frozenset({0, 1, 2}))


def test_share_partitions_still_initializing_after_the_retry_interval_are_asked_again():
    s = Shares()
    s.hb("a", 0)
    s.initialize.clear()  # the node asking died: no answer ever comes
    again = s.restart()  # the initializing record replayed, with its time
    again.now += 29_999
    assert again.hb("a", 2).assignment is None and again.initialize == []
    again.now += 1
    again.hb("a", 2)
    asked = [InitializeShareState("g", 2, {T: ("t", frozenset({0, 1}))})]
    assert again.initialize == asked
    again.now += 1_000
    again.hb("a", 2)
    assert again.initialize == asked  # asked again just now: waits another interval
    again.initialized()
    assert again.hb("a", 2).member_epoch == 3
