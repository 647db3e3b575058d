"""KIP-1071 streams groups in the group coordinator, driven through the real runtime by
the harness of test_group_harness: the topology set by the first member, internal
topics reported missing (and named for creation) until they exist, the sticky task
assignor, revocation before a task moves, epoch fencing, leaving and session expiry,
TxnOffsetCommit fenced by the member epoch, group types kept apart, and recovery by
replaying the records Kafka writes for streams groups."""

from __future__ import annotations

import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from coordinator.group import GroupConfig, OffsetFetchGroup, OffsetToCommit
from coordinator.group import streams_log_codec as codec
from coordinator.group.consumer_group import (
    ConsumerGroupConfig, HeartbeatRequest, MemberState, owned_by_others, reconcile,
)
from coordinator.group.streams_group import (
    ASSIGNMENT_DELAYED, MISSING_INTERNAL_TOPICS, MISSING_SOURCE_TOPICS, STALE_TOPOLOGY, StreamsGroupConfig, StreamsHeartbeatRequest,
    StreamsMember, _revokes_standbys, _standbys_of_process, settle_standbys, assign_tasks, configure, MISSING_CLIENT_TAGS,
)
from coordinator.group.group_types import tag_list
from coordinator.group.streams_log_codec import AssignedTasks, CopartitionGroup, Subtopology, TopicInfo, Topology
from tests.unit.test_group_harness import Runtime

E = ErrorCode
CONFIG = GroupConfig(offsets_topic_num_partitions=1, consumer=ConsumerGroupConfig(),
                     streams=StreamsGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=5_000,
                                                initial_rebalance_delay_ms=0, assignment_interval_ms=0))
DELAYED = replace(CONFIG, streams=replace(CONFIG.streams, initial_rebalance_delay_ms=3_000))
INTERVAL = replace(CONFIG, streams=replace(CONFIG.streams, assignment_interval_ms=1_000))
# A word count: subtopology 0 reads the input and writes the repartition topic, which
# subtopology 1 reads into its counts (a changelog).
REPARTITION = "app-counts-repartition"
CHANGELOG = "app-counts-changelog"
TOPOLOGY = Topology(0, (
    Subtopology("0", source_topics=("input",), repartition_sink_topics=(REPARTITION,)),
    Subtopology("1", repartition_source_topics=(TopicInfo(REPARTITION, configs=(("cleanup.policy", "delete"),)),),
                changelog_topics=(TopicInfo(CHANGELOG, configs=(("cleanup.policy", "compact"),)),)),
))
NONE: dict = {}


class Streams(Runtime):
    def __init__(self, topics=None, config=CONFIG, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.topic_table = dict(topics or {"input": (uuid.UUID(int=1), 2)})
        self.coordinator.topics = lambda: self.topic_table

    def restart(self) -> "Streams":
        return Streams(self.topic_table, now_ms=self.now, log=type(self.log)(self.log.partitions))

    def create_internal_topics(self, answer) -> None:
        for n, info in enumerate(answer.topics_to_create):
            self.topic_table[info.name] = (uuid.UUID(int=100 + n + len(self.topic_table)), info.partitions)

    def hb(self, member: str, epoch: int, group: str = "g", active=None, **fields):
        if epoch == 0:
            fields.setdefault("topology", TOPOLOGY)
            fields.setdefault("rebalance_timeout_ms", 30_000)
            fields.setdefault("process_id", "process-" + member)
            active = {} if active is None else active
            fields.setdefault("standby_tasks", {})
            fields.setdefault("warmup_tasks", {})
        elif active is not None:
            fields.setdefault("standby_tasks", {})
            fields.setdefault("warmup_tasks", {})
        request = StreamsHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, active_tasks=active,
                                          **fields)
        return self.run_checked(group, lambda: self.coordinator.streams_group_heartbeat(request, self.now),
                                lambda: self.coordinator.heartbeat_request_error(request))

    def group(self, group: str = "g"):
        return self.coordinator.streams_group(group)

    def ready(self, member: str = "a"):
        """The first member joins, the broker creates what it was told to, and the next
        heartbeat gets the member its tasks."""
        joined = self.hb(member, 0)
        self.create_internal_topics(joined)
        return self.hb(member, joined.member_epoch, active={})


def tasks(**by_subtopology) -> dict:
    return {s.lstrip("s"): frozenset(ps) for s, ps in by_subtopology.items()}


def kinds(records) -> list[int]:
    return [int.from_bytes(r.key[:2], "big") for r in records]


def test_first_member_sets_the_topology_and_is_told_to_create_the_internal_topics():
    s = Streams()
    answer = s.hb("a", 0)
    assert (answer.error_code, answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == (
        E.none, "a", 1, 5_000)
    assert [code for code, _ in answer.statuses] == [MISSING_INTERNAL_TOPICS]
    # The changelog has as many partitions as its subtopology has tasks, which it gets
    # from the repartition topic, which takes them from the input's writer.
    assert {(i.name, i.partitions) for i in answer.topics_to_create} == {(REPARTITION, 2), (CHANGELOG, 2)}
    assert dict(next(i for i in answer.topics_to_create if i.name == CHANGELOG).configs) == {
        "cleanup.policy": "compact"}
    assert answer.active_tasks == NONE  # no tasks until the topology is ready
    assert kinds(s.appended) == [codec.TOPOLOGY, codec.MEMBER_METADATA, codec.GROUP_METADATA, codec.TARGET_MEMBER,
                                 codec.TARGET_METADATA, codec.CURRENT_ASSIGNMENT]
    assert s.group().state == "NotReady"
    assert s.group().topology == TOPOLOGY

    s.create_internal_topics(answer)
    ready = s.hb("a", 1, active={})
    assert (ready.member_epoch, ready.statuses, ready.topics_to_create) == (2, (), ())
    assert ready.active_tasks == tasks(s0={0, 1}, s1={0, 1})
    assert s.group().state == "Stable"


def test_missing_source_topics_are_reported_and_nothing_is_created():
    s = Streams(topics={"other": (uuid.UUID(int=9), 1)})
    answer = s.hb("a", 0)
    assert [code for code, _ in answer.statuses] == [MISSING_SOURCE_TOPICS]
    assert "input" in answer.statuses[0][1] and answer.topics_to_create == ()


def test_a_second_member_gets_tasks_only_after_the_first_revokes_them():
    s = Streams()
    s.ready("a")
    b = s.hb("b", 0)
    assert b.active_tasks == NONE  # its target tasks are still a's
    target = s.group().target
    assert {m: sum(len(ps) for ps in target[m].active.values()) for m in "ab"} == {"a": 2, "b": 2}
    # a is told to keep only its target and keeps its epoch until it revoked the rest.
    a = s.hb("a", 2, active=tasks(s0={0, 1}, s1={0, 1}))
    assert a.member_epoch == 2 and a.active_tasks == target["a"].active
    assert s.hb("b", 3).active_tasks is None  # still held back
    a = s.hb("a", 2, active=target["a"].active)
    assert a.member_epoch == 3
    b = s.hb("b", 3, active={})
    assert b.active_tasks == target["b"].active
    owned = [(sub, p) for m in "ab" for sub, ps in s.group().members[m].assigned.items() for p in ps]
    assert sorted(owned) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]  # each task once


def assign_active_tasks(processes, counts, previous):
    """Active tasks only (no stateful subtopologies, no standbys)."""
    out = assign_tasks(processes, counts, (), {m: AssignedTasks(t) for m, t in previous.items()})
    return {m: t.active for m, t in out.items()}


def test_sticky_assignor_keeps_tasks_balances_and_spreads_over_processes():
    counts = {"0": 4, "1": 2}
    first = assign_active_tasks({"a": "p1", "b": "p2"}, counts, {})
    assert sorted(sum(len(ps) for ps in t.values()) for t in first.values()) == [3, 3]
    # A third member takes two tasks; the others keep two of theirs each.
    second = assign_active_tasks({"a": "p1", "b": "p2", "c": "p3"}, counts, first)
    for m in "ab":
        kept = {(s, p) for s, ps in second[m].items() for p in ps} & {(s, p) for s, ps in first[m].items() for p in ps}
        assert len(kept) == 2
    assert sum(len(ps) for ps in second["c"].values()) == 2
    # A member giving up tasks keeps a share of each subtopology, as Kafka's assignor does.
    alone = assign_active_tasks({"a": "p1"}, {"0": 2, "1": 2}, {})
    split = assign_active_tasks({"a": "p1", "b": "p2"}, {"0": 2, "1": 2}, alone)
    assert (split["a"], split["b"]) == (tasks(s0={0}, s1={0}), tasks(s0={1}, s1={1}))
    # Two threads of one process and one of another: the single-thread process is the
    # least loaded per member, so it is filled first.
    shared = assign_active_tasks({"a1": "p1", "a2": "p1", "b": "p2"}, {"0": 3}, {})
    assert sum(len(ps) for ps in shared["b"].values()) == 1


def test_epoch_fencing_and_unknown_members():
    s = Streams()
    s.ready("a")
    assert s.hb("a", 5, active={}).error_code is E.fenced_member_epoch
    # The previous epoch is accepted only from a member owning no more than it was given.
    assert s.hb("a", 1, active=tasks(s0={0, 1, 2})).error_code is E.fenced_member_epoch
    assert s.hb("a", 1, active={}).error_code is E.none
    assert s.hb("x", 3).error_code is E.unknown_member_id
    assert s.hb("x", 1, group="nothing").error_code is E.group_id_not_found
    bad = s.hb("c", 0, topology=None)
    assert (bad.error_code, bad.error_message) == (E.invalid_request, "Topology must be non-null when (re-)joining.")
    wrong = Topology(0, (Subtopology("0", source_topics=("input",),
                                     changelog_topics=(TopicInfo("x-changelog", partitions=3),)),))
    assert s.hb("c", 0, topology=wrong).error_code is E.streams_invalid_topology
    # The group keeps its first topology: another one (at its epoch or a newer) is refused,
    # an older epoch is stale.
    other = Topology(0, (Subtopology("0", source_topics=("input",)),))
    refused = s.hb("c", 0, topology=other)
    assert (refused.error_code, refused.error_message) == (E.invalid_request, "Topology updates are not supported yet.")
    assert s.hb("c", 0, topology=Topology(1, TOPOLOGY.subtopologies)).error_code is E.invalid_request
    stale = s.hb("c", 0, topology=Topology(-1, other.subtopologies))
    assert stale.error_code is E.none and [code for code, _ in stale.statuses] == [STALE_TOPOLOGY]


def test_a_member_leaving_or_timing_out_hands_its_tasks_over():
    s = Streams()
    s.ready("a")
    s.hb("b", 0)
    left = s.hb("b", -1)
    assert (left.error_code, left.member_epoch) == (E.none, -1)
    assert set(s.group().members) == {"a"}
    back = s.hb("a", 2, active=s.group().members["a"].assigned)
    assert back.member_epoch == 4 and back.active_tasks is None  # kept all four tasks
    s.hb("c", 0)
    s.advance(45_001)  # neither heartbeats again: both sessions end
    assert s.group().members == {}
    assert s.group().state == "Empty"


def test_txn_offset_commit_and_offset_fetch_are_fenced_by_the_member_epoch():
    s = Streams()
    s.ready("a")
    offsets = [OffsetToCommit("input", 0, 5, -1, "")]

    def txn_commit(member, epoch):
        r = s.call("txn_offset_commit", transactional_id="tx", group_id="g", producer_id=7, producer_epoch=0,
                   generation_id=epoch, member_id=member, group_instance_id=None, offsets=offsets, api_version=5)
        return r.topics[0].partitions[0].error_code
    assert txn_commit("a", 2) is E.none
    assert txn_commit("a", 1) is E.stale_member_epoch
    assert txn_commit("zombie", 2) is E.unknown_member_id
    s.marker(7, commit=True)
    assert s.coordinator.committed_offset("g", "input", 0).offset == 5
    assert s.group() is not None and s.coordinator.group("g") is None  # no classic group made by the commit

    def fetch(member, epoch):
        (group,) = s.coordinator.offset_fetch([OffsetFetchGroup("g", (("input", (0,)),), member, epoch)], False).groups
        return group.error_code
    assert fetch("a", 2) is E.none and fetch("a", 1) is E.stale_member_epoch


def test_group_types_are_kept_apart_and_listed():
    s = Streams()
    s.ready("a")
    consumer = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("input",), owned={})
    answer = s.runtime.run(0, lambda: s.coordinator.consumer_group_heartbeat(consumer, s.now), s.now)
    assert answer.error_code is E.group_id_not_found
    other = HeartbeatRequest("cg", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("input",), owned={})
    s.runtime.run(0, lambda: s.coordinator.consumer_group_heartbeat(other, s.now), s.now)
    assert s.hb("x", 0, group="cg").error_code is E.group_id_not_found
    listed = s.coordinator.list_groups(types_filter=["streams"]).groups
    assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [("g", "streams", "Stable")]
    assert s.coordinator.streams_group_describe("cg")[0] is E.group_id_not_found
    # ConsumerGroupDescribe of a streams group's id: Kafka names the group's type.
    assert s.coordinator.consumer_group_describe("g")[:2] == (E.group_id_not_found,
                                                              "Group g is not a consumer group.")


def test_a_restart_replays_the_group_and_its_members_go_on():
    s = Streams()
    s.ready("a")
    s.hb("b", 0)
    a_tasks = s.group().target["a"].active
    s.hb("a", 2, active=a_tasks)
    s.hb("b", 3, active={})
    before = s.group()
    again = s.restart()
    group = again.group()
    assert (group.group_epoch, group.assignment_epoch, group.validated_topology_epoch) == (
        before.group_epoch, before.assignment_epoch, 0)
    assert group.topology == TOPOLOGY
    assert {m: (x.member_epoch, x.assigned, x.process_id) for m, x in group.members.items()} == {
        m: (x.member_epoch, x.assigned, x.process_id) for m, x in before.members.items()}
    assert group.target == before.target
    assert again.hb("b", 3, active=group.members["b"].assigned).error_code is E.none
    assert again.hb("a", 1, active={}).error_code is E.fenced_member_epoch


def test_an_empty_streams_group_can_be_deleted_and_stays_deleted_after_replay():
    s = Streams()
    s.ready("a")
    assert s.call("delete_groups", group_ids=["g"]).results[0].error_code is E.non_empty_group
    s.hb("a", -1)
    assert s.call("delete_groups", group_ids=["g"]).results[0].error_code is E.none
    assert s.group() is None
    assert s.restart().group() is None


def test_record_layouts_round_trip():
    topology = Topology(3, (Subtopology("0", ("a",), ("b.*",), (TopicInfo("c", 0, 3, (("k", "v"),)),), ("r",),
                                        (TopicInfo("r", 4),), (CopartitionGroup((0,), (), (0,)),)),))
    assert codec.decode_topology(codec.topology_record("g", topology).value) == topology
    value = codec.MemberMetadataValue("i", None, "client", "/127.0.0.1", 30_000, 3, "p", ("h", 8080), (("z", "1"),))
    assert codec.decode_member_metadata(codec.member_metadata_record("g", "m", value).value) == value
    assert codec.decode_group_metadata(codec.group_metadata_record("g", 4, -5, 3).value) == (4, -5, 3)
    key = codec.decode_key(codec.CURRENT_ASSIGNMENT, codec.current_assignment_record("g", "m", None).key)
    assert (key.group, key.member) == ("g", "m")
    current = codec.CurrentAssignmentValue(
        5, 4, 0, AssignedTasks(tasks(s0={0, 2}), tasks(s1={1}), active_epochs={("0", 0): 3, ("0", 2): 5}),
        AssignedTasks(tasks(s1={0}), active_epochs={("1", 0): 1}))
    assert codec.decode_current_assignment(codec.current_assignment_record("g", "m", current).value) == current
    # the epochs are tag 0 of an active entry: an int32 array after the partitions (0, 2)
    assert b"\x01\x00\x09\x03\x00\x00\x00\x03\x00\x00\x00\x05" in codec.current_assignment_record(
        "g", "m", current).value
    target = codec.target_member_record("g", "m", AssignedTasks(tasks(s0={0})))
    assert codec.decode_target_member(target.value) == AssignedTasks(tasks(s0={0}))


def test_copartitioned_repartition_topics_take_the_source_count():
    topology = Topology(0, (Subtopology(
        "0", source_topics=("input",), repartition_source_topics=(TopicInfo("rep"),),
        copartition_groups=(CopartitionGroup((0,), (), (0,)),)),))
    configured = configure(topology, {"input": (uuid.UUID(int=1), 3)})
    assert [(i.name, i.partitions) for i in configured.missing_internal_topics] == [("rep", 3)]
    assert configured.task_counts == {"0": 3}


def test_migration_between_empty_classic_and_streams_groups_keeps_the_offsets():
    s = Streams()
    # Offsets committed without membership make an empty classic group: it becomes a
    # streams group at the first streams heartbeat, its offsets kept.
    s.call("offset_commit", group_id="g", generation_id=-1, member_id="", group_instance_id=None,
           offsets=[OffsetToCommit("input", 0, 7, -1, "")], api_version=9)
    assert s.coordinator.group("g") is not None
    assert s.hb("a", 0).error_code is E.none
    assert s.coordinator.group("g") is None and s.group() is not None
    # A classic member cannot join while the streams group has members; once it is empty
    # the streams group gives way to a classic group, as Kafka 4.4 does.
    joined = s.join("t1")
    assert (joined.error_code, joined.member_id) == (E.inconsistent_group_protocol, "")
    s.hb("a", -1)
    s.join("t2")
    assert s.group() is None and s.coordinator.group("g") is not None
    assert s.coordinator.committed_offset("g", "input", 0).offset == 7
    assert s.restart().group() is None


def test_offsets_of_topics_the_members_read_cannot_be_deleted():
    s = Streams({"input": (uuid.UUID(int=1), 2), "old": (uuid.UUID(int=2), 1)})
    s.ready("a")
    s.call("offset_commit", group_id="g", generation_id=2, member_id="a", group_instance_id=None,
           offsets=[OffsetToCommit("input", 0, 5, -1, ""), OffsetToCommit("old", 0, 5, -1, "")], api_version=9)
    answer = s.call("offset_delete", group_id="g", topics=[("input", [0]), ("old", [0])])
    assert [(t.name, t.partitions[0].error_code) for t in answer.topics] == [
        ("input", E.group_subscribed_to_topic), ("old", E.none)]
    assert s.coordinator.committed_offset("g", "old", 0) is None


def test_a_new_groups_tasks_wait_for_the_initial_rebalance_delay():
    s = Streams(config=DELAYED)
    joined = s.hb("a", 0)
    # Nothing to assign yet (internal topics missing): the empty assignment is made at once.
    assert (joined.member_epoch, sorted(c for c, _ in joined.statuses)) == (1, [MISSING_INTERNAL_TOPICS,
                                                                              ASSIGNMENT_DELAYED])
    s.create_internal_topics(joined)
    waiting = s.hb("a", 1, active={})
    assert (waiting.member_epoch, [c for c, _ in waiting.statuses]) == (1, [ASSIGNMENT_DELAYED])
    b_joined = s.hb("b", 0)
    assert (b_joined.member_epoch, b_joined.active_tasks) == (1, NONE)  # the assignment epoch still
    s.advance(3_000)  # the timer makes the first assignment, for both members
    assert s.group().assignment_epoch == s.group().group_epoch == 3
    a = s.hb("a", 1, active={})
    b = s.hb("b", 1, active={})
    assert (a.member_epoch, b.member_epoch, a.statuses, b.statuses) == (3, 3, (), ())
    assert sum(len(ps) for ps in a.active_tasks.values()) == sum(len(ps) for ps in b.active_tasks.values()) == 2


def test_members_whose_sessions_end_together_leave_no_tasks_behind():
    # A killed application's two threads time out in the same poll: one write fences both,
    # so no task stays with either (it would never be processed again).
    s = Streams()
    s.ready("a")
    s.hb("b", 0)
    s.hb("a", 2, active=s.group().target["a"].active)
    s.hb("b", 3, active={})
    s.advance(40_000)
    s.hb("c", 0)  # the new instance, while the old ones are still members
    s.advance(5_001)
    assert set(s.group().members) == {"c"} and set(s.group().target) == {"c"}
    c = s.hb("c", s.group().members["c"].member_epoch, active={})
    assert c.active_tasks == tasks(s0={0, 1}, s1={0, 1})


def test_a_groups_own_session_timeout_and_heartbeat_interval():
    s = Streams()
    s.coordinator.group_timeouts = lambda group_type, group_id: (
        (10_000, 2_000) if (group_type, group_id) == ("streams", "g") else (45_000, 5_000))
    assert s.ready("a").heartbeat_interval_ms == 2_000
    assert s.hb("b", 0, group="other").heartbeat_interval_ms == 5_000
    s.advance(10_001)
    assert s.group().members == {} and set(s.group("other").members) == {"b"}


def test_assignments_are_made_at_most_once_an_assignment_interval():
    s = Streams(config=INTERVAL)
    joined = s.hb("a", 0)  # an assignment without tasks (internal topics missing) is made at once
    s.create_internal_topics(joined)
    waiting = s.hb("a", 1, active={})  # the tasks: not within the interval after it
    assert (waiting.member_epoch, [c for c, _ in waiting.statuses]) == (1, [ASSIGNMENT_DELAYED])
    s.advance(1_000)
    assert s.hb("a", 1, active={}).active_tasks == tasks(s0={0, 1}, s1={0, 1})
    joined = s.hb("b", 0)
    assert [c for c, _ in joined.statuses] == [ASSIGNMENT_DELAYED]
    assert s.group().group_epoch == 3 and s.group().assignment_epoch == 2
    s.advance(1_000)  # no timer: the next heartbeat after the interval makes it
    assert s.group().assignment_epoch == 2
    s.hb("b", joined.member_epoch, active={})
    assert s.group().assignment_epoch == 3 and set(s.group().target) == {"a", "b"}
    assert s.restart().group().last_assignment_ms == s.now
    s.hb("b", -1)  # leaving within the interval: the others' assignment waits too
    assert (s.group().group_epoch, s.group().assignment_epoch, s.group().state) == (4, 3, "Assigning")
    s.advance(1_000)
    s.hb("a", 2, active=s.group().members["a"].assigned)
    assert s.group().assignment_epoch == 4 and set(s.group().target) == {"a"}


def test_standby_tasks_of_stateful_tasks_never_go_to_the_process_running_them():
    counts = {"0": 2, "1": 2}  # subtopology 1 is stateful
    two = assign_tasks({"a": "p1", "b": "p2"}, counts, {"1"}, {}, num_standby_replicas=1)
    assert {m: two[m].standby for m in "ab"} == {"a": {"1": two["b"].active["1"]}, "b": {"1": two["a"].active["1"]}}
    # Two threads of one process: a standby never shares the process of its active task.
    one_process = assign_tasks({"a1": "p1", "a2": "p1"}, counts, {"1"}, {}, num_standby_replicas=1)
    assert all(t.standby == {} for t in one_process.values())
    # More replicas than other processes: as many as there are.
    three = assign_tasks({"a": "p1", "b": "p2", "c": "p3"}, counts, {"1"}, {}, num_standby_replicas=5)
    for task in (0, 1):
        holders = [m for m, t in three.items() if task in t.standby.get("1", ())]
        runner = next(m for m, t in three.items() if task in t.active.get("1", ()))
        assert sorted(holders + [runner]) == ["a", "b", "c"]


def test_a_standby_holder_takes_over_the_active_task_of_a_member_gone():
    counts = {"1": 3}
    before = assign_tasks({"a": "p1", "b": "p2", "c": "p3"}, counts, {"1"}, {}, num_standby_replicas=1)
    runner = next(m for m, t in before.items() if 0 in t.active.get("1", ()))
    standby = next(m for m, t in before.items() if 0 in t.standby.get("1", ()))
    rest = {m: p for m, p in {"a": "p1", "b": "p2", "c": "p3"}.items() if m != runner}
    after = assign_tasks(rest, counts, {"1"}, before, num_standby_replicas=1)
    assert 0 in after[standby].active["1"]  # the state it kept warm
    # and the task keeps a standby on the other process left
    other = next(m for m in rest if m != standby)
    assert 0 in after[other].standby.get("1", ())


def test_standby_tasks_in_the_heartbeat_answers_records_and_replay():
    s = Streams()
    s.coordinator.streams.group_config = lambda group_id: replace(CONFIG.streams, num_standby_replicas=1)
    s.ready("a")
    a_alone = s.group().members["a"]
    assert a_alone.standby == {}  # one process: nowhere to put a standby
    b = s.hb("b", 0)
    target = s.group().target
    # its active tasks wait for a to revoke them; its standby tasks do not (another process runs them)
    assert (b.active_tasks, b.standby_tasks) == ({}, target["b"].standby) and target["b"].standby
    a = s.hb("a", 2, active=a_alone.assigned)
    # revoking: the task it gives up (b's to run) is its standby at once (Kafka's demotion)
    assert (a.active_tasks, a.standby_tasks) == (target["a"].active, target["a"].standby)
    a = s.hb("a", a.member_epoch, active=target["a"].active)
    assert (a.active_tasks, a.standby_tasks) == (None, None)  # revoked: its tasks unchanged, none sent
    assert (s.group().members["a"].assigned, s.group().members["a"].standby) == (target["a"].active,
                                                                                  target["a"].standby)
    b = s.hb("b", b.member_epoch, active={})
    assert (b.active_tasks, b.standby_tasks) == (target["b"].active, target["b"].standby)
    # each member stands by for the stateful task the other runs (subtopology 1)
    assert target["a"].standby == {"1": target["b"].active["1"]}
    assert target["b"].standby == {"1": target["a"].active["1"]}
    # unchanged: nothing sent, whatever the member reports (as Kafka)
    again = s.hb("a", a.member_epoch, active=target["a"].active, standby_tasks=target["a"].standby)
    assert (again.active_tasks, again.standby_tasks) == (None, None)
    assert s.hb("a", a.member_epoch, active={}).active_tasks is None
    members = {m: (x.assigned, x.standby) for m, x in s.group().members.items()}
    assert {m: x.standby for m, x in s.restart().group().members.items()} == {m: st for m, (_a, st) in members.items()}


def promotion_member(**fields) -> StreamsMember:
    """A stable member at epoch 4 (process p1) running s0-0 and s1-0, standing by for s1-1 and s1-2."""
    return StreamsMember("m", process_id="p1", member_epoch=4, previous_member_epoch=3,
                         assigned=tasks(s0={0}, s1={0}), standby=tasks(s1={1, 2}), **fields)


def step(member: StreamsMember, target: AssignedTasks, owned: dict | None, *others: StreamsMember,
         owned_standby: dict | None = None) -> StreamsMember:
    """One reconciliation step towards ``target`` at epoch 5, as a heartbeat takes it; the
    member reports ``owned`` active tasks (None: nothing reported) and ``owned_standby``
    (by default the standbys it was given)."""
    members = {m.member_id: m for m in (member, *others)}
    held = {**owned_by_others(members, member.member_id), **_standbys_of_process(member, members)}
    if owned is not None and owned_standby is None:
        owned_standby = member.standby
    after = reconcile(member, 5, target.active, held, owned, _revokes_standbys(member, target, owned_standby))
    return settle_standbys(member, after, target, 5, members)


def test_promotion_keeps_the_standby_until_the_task_is_granted_active():
    """As Kafka 4.4's CurrentAssignmentBuilder: a standby its target makes active stays a
    standby while the member revokes, and while another member still runs the task."""
    target = AssignedTasks(tasks(s0={1}, s1={0, 1}), tasks(s1={2}))  # s0-0 revoked, s1-1 promoted
    revoking = step(promotion_member(), target, None)
    assert revoking.state is MemberState.UNREVOKED_PARTITIONS and revoking.pending_revocation == tasks(s0={0})
    assert (revoking.assigned, revoking.standby) == (tasks(s1={0}), tasks(s1={1, 2}))
    assert step(revoking, target, tasks(s0={0}, s1={0})).standby == tasks(s1={1, 2})  # not revoked yet
    # revoked, s1-1 and s0-1 free: s1-1 granted as active, its standby goes
    stable = step(revoking, target, tasks(s1={0}))
    assert (stable.state, stable.member_epoch) == (MemberState.STABLE, 5)
    assert (stable.assigned, stable.standby) == (tasks(s0={1}, s1={0, 1}), tasks(s1={2}))
    # another member still runs s1-1: held back as active (unreleased), kept as standby
    other = StreamsMember("o", process_id="p2", member_epoch=5, assigned=tasks(s1={1}))
    unreleased = step(revoking, target, tasks(s1={0}), other)
    assert (unreleased.state, unreleased.member_epoch) == (MemberState.UNRELEASED_PARTITIONS, 5)
    assert (unreleased.assigned, unreleased.standby) == (tasks(s0={1}, s1={0}), tasks(s1={1, 2}))
    assert step(unreleased, target, tasks(s0={1}, s1={0})).standby == tasks(s1={2})  # released: now active


def test_demotion_grants_the_standby_at_once_even_while_revoking():
    """An active task its target makes a standby is a standby at once (Kafka's demotion),
    unless another member of its process runs or stands by for it; a new standby waits
    for the revocation."""
    target = AssignedTasks(tasks(s0={0}), tasks(s1={0, 1, 2, 3}))  # s1-0 demoted, s1-3 new
    revoking = step(promotion_member(), target, None)
    assert revoking.state is MemberState.UNREVOKED_PARTITIONS and revoking.pending_revocation == tasks(s1={0})
    assert revoking.standby == tasks(s1={0, 1, 2})
    stable = step(revoking, target, tasks(s0={0}))
    assert (stable.state, stable.assigned, stable.standby) == (MemberState.STABLE, tasks(s0={0}),
                                                               tasks(s1={0, 1, 2, 3}))
    # another thread of its process stands by for s1-0 and s1-3: neither given
    thread = StreamsMember("t", process_id="p1", member_epoch=5, standby=tasks(s1={0, 3}))
    held_back = step(promotion_member(), target, None, thread)
    assert held_back.standby == tasks(s1={1, 2})
    assert step(held_back, target, tasks(s0={0}), thread).standby == tasks(s1={1, 2})
    assert step(held_back, target, tasks(s0={0})).standby == tasks(s1={0, 1, 2, 3})  # released


def test_a_member_whose_only_held_back_tasks_are_standbys_is_unreleased():
    """As Kafka 4.4 (it checks unreleased tasks of every role): a standby its target gives,
    held back while another thread of its process stands by for it, leaves the member
    UNRELEASED at the target epoch, not STABLE, until released."""
    member = StreamsMember("m", process_id="p1", member_epoch=4, previous_member_epoch=3, assigned=tasks(s0={0}))
    target = AssignedTasks(tasks(s0={0}), tasks(s1={1}))
    thread = StreamsMember("t", process_id="p1", member_epoch=5, standby=tasks(s1={1}))
    unreleased = step(member, target, tasks(s0={0}), thread)
    assert (unreleased.state, unreleased.member_epoch) == (MemberState.UNRELEASED_PARTITIONS, 5)
    assert (unreleased.assigned, unreleased.standby) == (tasks(s0={0}), {})
    assert step(unreleased, target, tasks(s0={0}), thread).state is MemberState.UNRELEASED_PARTITIONS
    stable = step(unreleased, target, tasks(s0={0}))
    assert (stable.state, stable.member_epoch, stable.standby) == (MemberState.STABLE, 5, tasks(s1={1}))


def test_a_member_still_reporting_a_dropped_standby_stays_revoking():
    """As Kafka 4.4 counts standbys in the tasks to revoke: a standby its target drops keeps
    the member revoking (at its epoch, no new standby) while it reports it, or reports
    nothing; the standby pending revocation is in its current assignment record."""
    target = AssignedTasks(tasks(s0={0}, s1={0}), tasks(s1={2, 3}))  # s1-1 dropped, s1-3 new
    revoking = step(promotion_member(), target, None)
    assert (revoking.state, revoking.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 4)
    assert (revoking.pending_revocation, revoking.standby_pending_revocation) == ({}, tasks(s1={1}))
    assert (revoking.assigned, revoking.standby) == (tasks(s0={0}, s1={0}), tasks(s1={2}))
    value = codec.decode_current_assignment(codec.current_assignment_record("g", "m", revoking.assignment_value()).value)
    assert value.pending_revocation.standby == tasks(s1={1})
    still = step(revoking, target, tasks(s0={0}, s1={0}), owned_standby=tasks(s1={1, 2}))
    assert (still.state, still.member_epoch, still.standby) == (MemberState.UNREVOKED_PARTITIONS, 4, tasks(s1={2}))
    assert step(revoking, target, None).state is MemberState.UNREVOKED_PARTITIONS
    stable = step(revoking, target, tasks(s0={0}, s1={0}), owned_standby=tasks(s1={2}))
    assert (stable.state, stable.member_epoch) == (MemberState.STABLE, 5)
    assert (stable.standby, stable.standby_pending_revocation) == (tasks(s1={2, 3}), {})
    # a member reporting it no longer holds the dropped standby goes on at once
    direct = step(promotion_member(), target, tasks(s0={0}, s1={0}), owned_standby=tasks(s1={2}))
    assert (direct.state, direct.member_epoch, direct.standby) == (MemberState.STABLE, 5, tasks(s1={2, 3}))


def static_pair() -> Streams:
    """Two static members, a (instance i-a) and b (i-b), each running its share of the tasks."""
    s = Streams()
    joined = s.hb("a", 0, instance_id="i-a")
    s.create_internal_topics(joined)
    s.hb("a", 1, active={}, instance_id="i-a")
    s.hb("b", 0, instance_id="i-b")
    for _ in range(3):
        for m in "ab":
            member = s.group().members[m]
            s.hb(m, member.member_epoch, active=member.assigned, instance_id=f"i-{m}")
    assert all(s.group().members[m].assigned for m in "ab")
    return s


def test_a_static_member_leaving_keeps_its_tasks_for_its_successor():
    s = static_pair()
    group_epoch, b_tasks = s.group().group_epoch, s.group().members["b"].assigned
    left = s.hb("b", -2, instance_id="i-b")
    assert (left.error_code, left.member_id, left.member_epoch) == (E.none, "b", -2)
    # No rebalance: the group epoch stays and the tasks stay b's; a gets none of them.
    group = s.group()
    assert (group.group_epoch, group.members["b"].member_epoch, group.members["b"].assigned) == (
        group_epoch, -2, b_tasks)
    a = group.members["a"]
    assert s.hb("a", a.member_epoch, active=a.assigned, instance_id="i-a").active_tasks is None
    # Back under a new member id with the same instance id: the same tasks, at once.
    back = s.hb("b2", 0, instance_id="i-b", process_id="process-b")  # the same process: no rebalance
    assert (back.error_code, back.active_tasks) == (E.none, b_tasks)
    assert set(s.group().members) == {"a", "b2"} and s.group().group_epoch == group_epoch
    assert s.group().target["b2"].active == b_tasks and "b" not in s.group().target
    again = s.restart()
    assert set(again.group().members) == {"a", "b2"} and again.group().members["b2"].assigned == b_tasks


def test_a_static_member_away_longer_than_its_session_loses_its_tasks():
    s = static_pair()
    s.hb("b", -2, instance_id="i-b")
    for _ in range(10):  # a heartbeats; b's session (45 s) ends
        s.advance(5_000)
        a = s.group().members["a"]
        s.hb("a", a.member_epoch, active=a.assigned, instance_id="i-a")
    assert set(s.group().members) == {"a"}
    a = s.group().members["a"]
    s.hb("a", a.member_epoch, active=a.assigned, instance_id="i-a")
    assert s.group().target["a"].active == tasks(s0={0, 1}, s1={0, 1})
    assert s.hb("b3", 0, instance_id="i-b").error_code is E.none  # a new member now


def test_static_membership_errors_are_kafkas():
    s = static_pair()
    a_epoch = s.group().members["a"].member_epoch
    unreleased = s.hb("a2", 0, instance_id="i-a")
    assert (unreleased.error_code, unreleased.error_message) == (
        E.unreleased_instance_id,
        "Static member a2 with instance id i-a cannot join the group because the instance id is owned by a member.")
    # Kafka refuses the rejoin of the instance's own member id too while it has not left.
    assert s.hb("a", 0, instance_id="i-a").error_code is E.unreleased_instance_id
    fenced = s.hb("x", a_epoch, active={}, instance_id="i-a")
    assert (fenced.error_code, fenced.error_message) == (
        E.fenced_instance_id, "Static member x with instance id i-a was fenced by member a.")
    unknown = s.hb("x", a_epoch, active={}, instance_id="i-z")
    assert (unknown.error_code, unknown.error_message) == (E.unknown_member_id, "Instance id i-z is unknown.")
    assert s.hb("x", -2, instance_id="i-a").error_code is E.fenced_instance_id
    assert s.hb("x", -2, instance_id="i-z").error_code is E.unknown_member_id
    assert s.hb("x", -1, group="nothing").error_code is E.group_id_not_found
    # -1 of a static member: gone at once, its tasks to the others.
    assert s.hb("a", -1, instance_id="i-a").error_code is E.none
    assert set(s.group().members) == {"b"}


def test_offset_commits_of_an_older_epoch_are_checked_per_task():
    """Kafka 4.4 keeps the epoch each active task was assigned at: a member may commit with
    an older member epoch the offsets of tasks it has had since that epoch."""
    s = Streams()
    s.ready("a")  # every task at epoch 2
    assert s.group().members["a"].task_epochs == dict.fromkeys([("0", 0), ("0", 1), ("1", 0), ("1", 1)], 2)

    def commit(epoch, *partitions, transactional=False):
        offsets = [OffsetToCommit(topic, p, 5, -1, "") for topic, p in partitions]
        if transactional:
            r = s.call("txn_offset_commit", transactional_id="tx", group_id="g", producer_id=7, producer_epoch=0,
                       generation_id=epoch, member_id="a", group_instance_id=None, offsets=offsets, api_version=5)
        else:
            r = s.call("offset_commit", group_id="g", generation_id=epoch, member_id="a", group_instance_id=None,
                       offsets=offsets, api_version=9)
        return [p.error_code for t in r.topics for p in t.partitions]

    # b comes and goes before a heartbeats: a moves on to epoch 4 keeping its tasks and their epochs.
    s.hb("b", 0)
    s.hb("b", -1)
    every = s.group().members["a"].assigned
    assert s.hb("a", 2, active=every).member_epoch == 4
    assert commit(2, ("input", 0), (REPARTITION, 1), ("elsewhere", 0)) == [
        E.none, E.none, E.stale_member_epoch]  # not a topic of the topology
    assert commit(1, ("input", 0)) == [E.stale_member_epoch]  # before the task was assigned
    assert commit(5, ("input", 0)) == [E.stale_member_epoch]  # newer than the member's
    assert commit(2, ("input", 1), transactional=True) == [E.none]
    assert s.restart().group().members["a"].task_epochs == s.group().members["a"].task_epochs  # tag 0, replayed

    # c joins: a is told to revoke half its tasks; those it keeps are at the new epoch from then.
    s.hb("c", 0)
    kept = s.group().target["a"].active
    (kept_input,) = kept["0"]
    s.hb("a", 4, active=every)
    assert commit(2, ("input", kept_input), ("input", 1 - kept_input)) == [E.stale_member_epoch, E.none]
    assert commit(4, ("input", kept_input), ("input", 1 - kept_input)) == [E.none, E.none]  # its epoch: no check
    a = s.hb("a", 4, active=kept)
    assert (a.member_epoch, a.active_tasks) == (5, None)  # moved on, its tasks unchanged
    assert set(s.group().members["a"].task_epochs.values()) == {5}
    assert commit(4, ("input", kept_input), ("input", 1 - kept_input)) == [E.stale_member_epoch] * 2


def test_a_static_member_away_has_its_task_epochs_reset():
    s = static_pair()
    s.hb("b", -2, instance_id="i-b")
    assert set(s.group().members["b"].task_epochs.values()) == {0}
    back = s.hb("b2", 0, instance_id="i-b")
    assert set(s.group().members["b2"].task_epochs.values()) == {0} and back.member_epoch > 0


def test_a_members_process_rack_tags_or_topology_epoch_moving_bumps_the_group_epoch():
    s = Streams()
    s.ready("a")
    epoch = s.group().group_epoch
    a = s.group().members["a"]
    s.hb("a", a.member_epoch, active=a.assigned, process_id=a.process_id, client_tags=(("x", "1"),))
    assert s.group().group_epoch == epoch + 1
    s.hb("a", s.group().members["a"].member_epoch, active=a.assigned, rebalance_timeout_ms=5_000)
    assert s.group().group_epoch == epoch + 1  # not one that matters to the assignment
    s.hb("a", s.group().members["a"].member_epoch, active=a.assigned, process_id="elsewhere")
    assert s.group().group_epoch == epoch + 2


def test_standby_candidates_are_previous_standbys_then_the_most_caught_up():
    processes = {"a": "p1", "b": "p2", "c": "p3"}
    previous = {"a": AssignedTasks(tasks(s1={0, 1, 2}))}
    # no previous standby: the member reporting the most of the task's changelog gets it
    offsets = {"b": {("1", 0): 5}, "c": {("1", 0): 100}}
    out = assign_tasks(processes, {"1": 3}, {"1"}, previous, 1, offsets)
    assert 0 in out["a"].active["1"] and out["c"].standby == tasks(s1={0})
    # a previous standby ranks ahead of offsets reported
    previous["b"] = AssignedTasks(standby=tasks(s1={0}))
    out = assign_tasks(processes, {"1": 3}, {"1"}, previous, 1, offsets)
    assert 0 in out["a"].active["1"] and 0 in out["b"].standby["1"] and 0 not in out["c"].standby.get("1", ())


def test_task_offsets_reported_are_kept_in_memory_for_the_assignor():
    s = Streams()
    s.ready("a")
    a = s.group().members["a"]
    s.hb("a", a.member_epoch, active=a.assigned, task_offsets={("1", 0): 7}, task_end_offsets={("1", 0): 9})
    assert s.group().task_offsets["a"] == ({("1", 0): 7}, {("1", 0): 9})
    s.hb("a", a.member_epoch, active=a.assigned, task_end_offsets={("1", 0): 12})  # offsets unchanged (None)
    assert s.group().task_offsets["a"] == ({("1", 0): 7}, {("1", 0): 12})
    s.hb("a", -1)
    assert "a" not in s.group().task_offsets


def test_an_active_task_waits_while_another_thread_of_its_process_holds_it_as_standby():
    """As Kafka's CurrentAssignmentBuilder: the task's state is that process's standby's."""
    s = Streams(config=INTERVAL)  # no new target assignment within the interval: the one set here stays
    s.ready("a")
    group = s.group()
    group.members["a"] = replace(group.members["a"], assigned=tasks(s0={0, 1}, s1={1}))
    group.members["b1"] = StreamsMember("b1", process_id="pb", member_epoch=group.assignment_epoch,
                                        standby=tasks(s1={0}))
    group.target["b2"] = AssignedTasks(tasks(s1={0}))
    joined = s.hb("b2", 0, process_id="pb")
    assert joined.active_tasks == {}  # held back: b1 of its process still stands by for it
    group.members["b1"] = replace(group.members["b1"], standby={})
    assert s.hb("b2", joined.member_epoch, active={}, process_id="pb").active_tasks == tasks(s1={0})


def test_members_missing_a_required_client_tag_get_missing_client_tags_from_v1():
    """streams.rack.aware.assignment.tags: a v1 heartbeat without one of the tags gets
    MISSING_CLIENT_TAGS (naming those missing, in the config's order); v0 never does."""
    assert tag_list(" zone ,  cluster ") == ("zone", "cluster") and tag_list("  ") == ()
    s = Streams()
    s.coordinator.streams.group_config = lambda group_id: replace(
        CONFIG.streams, rack_aware_assignment_tags=tag_list("zone,cluster"))

    def missing(member: str, version: int, tags: dict) -> list[str]:
        answer = s.hb(member, 0, version=version, client_tags=tuple(tags.items()))
        return [d for c, d in answer.statuses if c == MISSING_CLIENT_TAGS]

    assert missing("a", 1, {"cluster": "c1"}) == [
        "Missing required client tags for rack-aware standby assignment: [zone]. "
        "Configure them via 'client.tag.<tagKey>' in your Streams config."]
    assert missing("b", 1, {"zone": "z", "cluster": "c"}) == []
    assert missing("c", 0, {}) == []
