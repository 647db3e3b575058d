"""KIP-1071 streams groups on the group coordinator: membership by StreamsGroupHeartbeat,
the group's topology and its internal topics, the sticky assignment of active tasks,
and their records in __consumer_offsets (streams_log_codec), replayed at load.

A task is (subtopology id, partition). The first member to join an empty group sets
the topology; it is configured against the cluster's topics on every heartbeat: the
number of tasks of each subtopology is the largest partition count of its source
topics (repartition topics without a count take it from the subtopologies writing
to them), changelog topics have as many partitions as their subtopology has tasks.
Missing source topics, or internal topics that are missing or of another size, leave
the group without tasks and are reported in the heartbeat's status; missing internal
topics are named in the answer for the broker to create, as Kafka's coordinator does.

Members move towards their target assignment as KIP-848 consumers do (the consumer
group's reconciliation serves both): a task another member still owns is held back
until that member reports it revoked, so a task is never processed by two members.
Standby tasks (the group's ``streams.num.standby.replicas``, else the broker's
``group.streams.num.standby.replicas``, 0 by default) go to the stateful tasks, never to
a process running the task, by Kafka 4.4's sticky assignor. As Kafka 4.4 reconciles
them: a member keeps the standbys its target keeps; a standby its target makes active
stays a standby until it is granted as active (while the member revokes, or while another
member still runs it); an active task its target makes a standby is a standby at once,
even while the member revokes; its target's other standbys come once it is at the target
epoch and not revoking. A standby to be given (new or demoted) waits while another member
of its process runs the task or stands by for it; a member whose target has such held-back
tasks, of either role, is UNRELEASED. A standby its target drops (not made active) is
revoked as an active task is: the member stays revoking at its epoch while it still reports
that standby (or reports no tasks). Kafka 4.4 assigns no warm-up tasks.

A new group's first tasks wait ``group.streams.initial.rebalance.delay.ms`` (a timer), and
assignments come at most once every ``group.streams.assignment.interval.ms`` (the next
heartbeat after it), both answered ASSIGNMENT_DELAYED, as Kafka 4.4 does.

Static members (an instance id): one leaving with epoch -2 keeps its tasks, without a
rebalance, until its session ends; a member joining with its instance id takes them
over under its new member id. Kafka's refusals: UNRELEASED_INSTANCE_ID (the instance id
is a member's that has not left), FENCED_INSTANCE_ID (another member id), UNKNOWN_MEMBER_ID.

The task offsets members report (their state's changelog offsets) are kept in memory,
shown by StreamsGroupDescribe, and rank standby candidates after the previous standbys.

Client tags: with streams.rack.aware.assignment.tags set, a member (heartbeat v1+)
missing one of those tags gets the MISSING_CLIENT_TAGS status, as Kafka 4.4's coordinator
answers; Kafka 4.4's sticky assignor itself reads neither racks nor client tags, so
standbys are placed here without them too.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from kio.schema.errors import ErrorCode

from coordinator.runtime import CoordinatorRecord
from coordinator.group import streams_log_codec as codec
from coordinator.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerGroups, MemberState, TopicsSnapshot,
    metadata_hash, overdue_revocations, reconcile_step,
)
from coordinator.group.group_types import STREAMS, Refused, StreamsGroupConfig
from coordinator.group.modern_group_records import member_tombstones, members_tombstones, replay_per_member
from coordinator.group.streams_log_codec import AssignedTasks, TaskEpochs, Tasks, TopicInfo, Topology

TaskOffsets = dict[tuple[str, int], int]  # (subtopology id, partition) -> a changelog offset (summed)

E = ErrorCode
_CURRENT_ASSIGNMENT_KEY = codec.CURRENT_ASSIGNMENT.to_bytes(2, "big")
STREAMS_ASSIGNOR = "sticky"
EMPTY, NOT_READY, ASSIGNING, RECONCILING, STABLE, DEAD = (
    "Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead")

# StreamsGroupHeartbeatResponse status codes
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5
MISSING_CLIENT_TAGS = 6  # from v1 (v0 clients do not know it)


@dataclass(frozen=True, slots=True)
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Tasks = field(default_factory=dict)  # active tasks
    pending_revocation: Tasks = field(default_factory=dict)  # active tasks being revoked
    standby: Tasks = field(default_factory=dict)
    standby_pending_revocation: Tasks = field(default_factory=dict)  # dropped standbys it still reports
    # The epoch each active task (assigned or being revoked) was assigned at: an offset
    # commit of an older member epoch is accepted for the tasks it had by then.
    task_epochs: TaskEpochs = field(default_factory=dict)

    @property
    def classic(self) -> None:
        """Streams members never use the classic protocol (the offset commit rules ask)."""
        return None

    def metadata_value(self) -> codec.MemberMetadataValue:
        return codec.MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
            self.topology_epoch, self.process_id, self.user_endpoint, self.client_tags)

    def assignment_value(self) -> codec.CurrentAssignmentValue:
        return codec.CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                            AssignedTasks(self.assigned, self.standby,
                                                          active_epochs=_epochs_of(self.task_epochs, self.assigned)),
                                            AssignedTasks(self.pending_revocation, self.standby_pending_revocation,
                                                          active_epochs=_epochs_of(
                                                self.task_epochs, self.pending_revocation)))


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    """The topology against the cluster's topics now."""

    task_counts: dict[str, int]  # subtopology id -> tasks; empty unless ready
    stateful: frozenset[str] = frozenset()  # subtopologies with state (changelog topics): they get standbys
    source_topics: dict[str, tuple[str, ...]] = field(default_factory=dict)  # subtopology id -> its inputs
    missing_source_topics: tuple[str, ...] = ()
    missing_internal_topics: tuple[TopicInfo, ...] = ()  # with the partition counts to create
    incorrectly_partitioned: tuple[str, ...] = ()
    referenced: frozenset[str] = frozenset()  # the existing topics it reads or makes

    @property
    def ready(self) -> bool:
        return not (self.missing_source_topics or self.missing_internal_topics or self.incorrectly_partitioned)


@dataclass(slots=True, eq=False)
class StreamsGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    assignment_epoch: int = 0
    topology: Topology | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    target: dict[str, AssignedTasks] = field(default_factory=dict)
    # Memory only, as on Kafka.
    session_deadlines: dict[str, int] = field(default_factory=dict)
    rebalance_deadlines: dict[str, tuple[int, int]] = field(default_factory=dict)
    shutdown_requested_by: str | None = None
    endpoint_epoch: int = 0
    # A new group's first assignment is made then, by the timer (Kafka's initial delay).
    assignment_delayed_until: int | None = None
    initial_delay: bool = False
    last_assignment_ms: int | None = None  # the last target assignment's timestamp
    # What each member last reported of its tasks' changelogs: (offsets, end offsets) by
    # task, memory only as on Kafka; the assignor ranks standby candidates by them.
    task_offsets: dict[str, tuple[TaskOffsets, TaskOffsets]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        # Validated: the topology was ready (its topics all there) at the last group epoch.
        if self.topology is None or self.validated_topology_epoch != self.topology.epoch:
            return NOT_READY
        if self.group_epoch != self.assignment_epoch:
            return ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return RECONCILING
        return STABLE

    def static_member(self, instance_id: str) -> StreamsMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def subscribed_topics(self, topics: TopicsSnapshot) -> set[str]:
        """The topics the members read (their offsets may not be deleted): the topology's
        source and repartition topics while the group has members."""
        if not self.members or self.topology is None:
            return set()
        configured = configure(self.topology, topics)
        return ({n for names in configured.source_topics.values() for n in names}
                | {i.name for s in self.topology.subtopologies for i in s.repartition_source_topics})

    def replay(self, key: codec.StreamsKey, value: bytes | None) -> None:
        kind, member_id = key.kind, key.member or ""
        if kind == codec.GROUP_METADATA and value is not None:
            self.group_epoch, self.metadata_hash, self.validated_topology_epoch = codec.decode_group_metadata(value)
        elif kind == codec.TOPOLOGY:
            self.topology = None if value is None else codec.decode_topology(value)
        elif kind == codec.TARGET_METADATA:
            self.assignment_epoch, self.last_assignment_ms = (0, None) if value is None else (
                codec.decode_target_metadata(value))
        elif kind == codec.TARGET_MEMBER:
            replay_per_member(self.target, member_id, value, codec.decode_target_member)
        elif kind == codec.MEMBER_METADATA:
            if value is None:
                self.members.pop(member_id, None)
                self.task_offsets.pop(member_id, None)
                self.session_deadlines.pop(member_id, None)
                self.rebalance_deadlines.pop(member_id, None)
                if not self.members:
                    self.shutdown_requested_by = None
                return
            v = codec.decode_member_metadata(value)
            old = self.members.get(member_id, StreamsMember(member_id))
            self.members[member_id] = replace(
                old, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
                rebalance_timeout_ms=v.rebalance_timeout_ms, topology_epoch=v.topology_epoch,
                process_id=v.process_id, user_endpoint=v.user_endpoint, client_tags=v.client_tags)
        elif kind == codec.CURRENT_ASSIGNMENT and value is not None:
            v = codec.decode_current_assignment(value)
            old = self.members.get(member_id, StreamsMember(member_id))
            state = MemberState(v.state) if v.state in MemberState._value2member_map_ else MemberState.UNKNOWN
            epochs = {**v.assigned.active_epochs, **v.pending_revocation.active_epochs}
            self.members[member_id] = replace(
                old, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=state,
                assigned=v.assigned.active, pending_revocation=v.pending_revocation.active, standby=v.assigned.standby,
                standby_pending_revocation=v.pending_revocation.standby,
                task_epochs={t: epochs.get(t, v.member_epoch) for t in _task_set(v.assigned.active,
                                                                                 v.pending_revocation.active)})
            self.endpoint_epoch += 1

    def deletion_records(self) -> list[CoordinatorRecord]:
        """Tombstones of every record of the group, as Kafka deletes an empty group."""
        records = members_tombstones(self.group_id, self.members, self.target, codec.MEMBER_RECORDS,
                                     codec.TARGET_MEMBER)
        records += [codec.target_metadata_record(self.group_id, None), codec.topology_record(self.group_id, None),
                    codec.group_metadata_record(self.group_id, None)]
        return records


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatRequest:
    group_type: ClassVar[str] = STREAMS  # whose checks it passes (GroupCoordinator.heartbeat_request_error)
    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active_tasks: Tasks | None = None  # None: unchanged since the last heartbeat
    standby_tasks: Tasks | None = None
    warmup_tasks: Tasks | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    version: int = 0  # the StreamsGroupHeartbeat version: MISSING_CLIENT_TAGS needs v1
    client_id: str = ""
    client_host: str = ""
    task_offsets: TaskOffsets | None = None  # None: unchanged since the last heartbeat
    task_end_offsets: TaskOffsets | None = None


@dataclass(frozen=True, slots=True)
class EndpointPartitions:
    endpoint: tuple[str, int]
    active: dict[str, frozenset[int]]  # topic name -> partitions
    standby: dict[str, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatAnswer:
    error_code: ErrorCode = E.none
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    active_tasks: Tasks | None = None  # None: unchanged (standby tasks come with them)
    standby_tasks: Tasks | None = None
    statuses: tuple[tuple[int, str], ...] = ()
    topics_to_create: tuple[TopicInfo, ...] = ()  # missing internal topics, for the broker
    endpoint_information_epoch: int = 0
    partitions_by_endpoint: tuple[EndpointPartitions, ...] | None = None


def validate(request: StreamsHeartbeatRequest) -> None:
    """The checks Kafka makes before looking at the group; raises Refused."""
    def invalid(message: str) -> Refused:
        return Refused(E.invalid_request, message)

    if not request.group_id:
        raise invalid("GroupId can't be empty.")
    if not request.member_id:
        raise invalid("MemberId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if request.member_epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.active_tasks is None or request.active_tasks:
            raise invalid("ActiveTasks must be empty when (re-)joining.")
        if request.standby_tasks is None or request.standby_tasks:
            raise invalid("StandbyTasks must be empty when (re-)joining.")
        if request.warmup_tasks is None or request.warmup_tasks:
            raise invalid("WarmupTasks must be empty when (re-)joining.")
        if request.topology is None:
            raise invalid("Topology must be non-null when (re-)joining.")
    elif request.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {request.member_epoch}, but must be greater than or equal to -2.")
    sent = [t is not None for t in (request.active_tasks, request.standby_tasks, request.warmup_tasks)]
    if any(sent) and not all(sent):
        raise invalid("If one task-type is non-null, all must be non-null.")
    if request.topology is not None:
        validate_topology(request.topology)


def validate_topology(topology: Topology) -> None:
    """Kafka's topology checks: STREAMS_INVALID_TOPOLOGY."""
    seen: set[str] = set()
    for s in topology.subtopologies:
        if s.subtopology_id in seen:
            raise Refused(E.streams_invalid_topology, f"Duplicate subtopology id {s.subtopology_id}.")
        seen.add(s.subtopology_id)
        for info in s.changelog_topics:
            if info.partitions != 0:
                raise Refused(E.streams_invalid_topology, f"Changelog topic {info.name} must have an undefined "
                              f"partition count, but it is set to {info.partitions}.")
        for regex in s.source_topic_regex:
            try:
                re.compile(regex)
            except re.error as e:
                raise Refused(E.streams_invalid_topology, f"Invalid source topic regex {regex}: {e}.") from None


def configure(topology: Topology, topics: TopicsSnapshot) -> ConfiguredTopology:
    """The topology's tasks and internal topics against the cluster's ``topics``."""
    internal = {info.name for s in topology.subtopologies for info in s.repartition_source_topics}
    sources: dict[str, tuple[str, ...]] = {}
    missing_sources: set[str] = set()
    for s in topology.subtopologies:
        names = [n for n in s.source_topics]
        for regex in s.source_topic_regex:
            pattern = re.compile(regex)
            matched = sorted(n for n in topics if not n.startswith("__") and n not in internal and pattern.fullmatch(n))
            if not matched:
                missing_sources.add(regex)
            names += matched
        missing_sources |= {n for n in names if n not in topics}
        sources[s.subtopology_id] = tuple(names)
    referenced = {n for names in sources.values() for n in names if n in topics}
    if missing_sources:
        return ConfiguredTopology({}, source_topics=sources, missing_source_topics=tuple(sorted(missing_sources)),
                                  referenced=frozenset(referenced))

    # Repartition topics: a set count, else the largest task count of the subtopologies
    # writing to them, until nothing changes (they may chain).
    repartition = {info.name: info.partitions for s in topology.subtopologies for info in s.repartition_source_topics}
    writers = {name: [s for s in topology.subtopologies if name in s.repartition_sink_topics] for name in repartition}

    def tasks_of(s) -> int:
        counts = [topics[n][1] for n in sources[s.subtopology_id]]
        counts += [repartition[i.name] for i in s.repartition_source_topics if repartition[i.name] > 0]
        return max(counts, default=0)

    changed = True
    while changed:
        changed = False
        for name, count in repartition.items():
            if count > 0:
                continue
            derived = max((tasks_of(s) for s in writers[name]), default=0)
            if derived > 0:
                repartition[name] = derived
                changed = True
    # Copartitioned repartition topics without a count of their own take the group's.
    incorrect: set[str] = set()
    for s in topology.subtopologies:
        for g in s.copartition_groups:
            external = [s.source_topics[i] for i in g.source_topics if i < len(s.source_topics)]
            counts = {topics[n][1] for n in external if n in topics}
            if len(counts) > 1:
                incorrect |= set(external)
                continue
            fixed = [s.repartition_source_topics[i] for i in g.repartition_source_topics
                     if i < len(s.repartition_source_topics)]
            target = next(iter(counts)) if counts else max((repartition[i.name] for i in fixed), default=0)
            for info in fixed:
                if info.partitions == 0 and target > 0:
                    repartition[info.name] = target
    task_counts = {s.subtopology_id: tasks_of(s) for s in topology.subtopologies}
    wanted: dict[str, TopicInfo] = {}
    for s in topology.subtopologies:
        for info in s.repartition_source_topics:
            wanted[info.name] = replace(info, partitions=repartition[info.name])
        for info in s.changelog_topics:
            wanted[info.name] = replace(info, partitions=task_counts[s.subtopology_id])
    missing = []
    for name, info in sorted(wanted.items()):
        if name not in topics:
            if info.partitions > 0:
                missing.append(info)
        elif topics[name][1] != info.partitions:
            incorrect.add(name)
        else:
            referenced.add(name)
    stateful = frozenset(s.subtopology_id for s in topology.subtopologies if s.changelog_topics)
    return ConfiguredTopology(task_counts, stateful, sources, (), tuple(missing), tuple(sorted(incorrect)),
                              frozenset(referenced))


class _Process:
    """One Kafka Streams process (client) while tasks are assigned: its members (stream
    threads) and their task counts, active and standby. Its load is tasks per member."""

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self.counts: dict[str, int] = {}
        self.active: dict[str, set[Task]] = {}
        self.standby: dict[str, set[Task]] = {}
        self.tasks: set[Task] = set()
        self.task_count = 0

    @property
    def load(self) -> float:
        return self.task_count / len(self.counts) if self.counts else -1.0

    def add(self, member_id: str, task: Task, active: bool) -> int:
        """The member's task count after taking ``task``."""
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        self.counts[member_id] += 1
        return self.counts[member_id]

    def add_to_least_loaded(self, task: Task, active: bool) -> int:
        if not self.counts:
            return -1
        member_id = min(self.counts, key=lambda m: (self.counts[m], m))
        return self.add(member_id, task, active)


Task = tuple[str, int]  # (subtopology id, partition)


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


class _Quotas:
    """The assignor's running quotas: active tasks and all tasks per member, recomputed
    over the members still below them whenever one reaches its quota."""

    def __init__(self, active_tasks: int, all_tasks: int, members: int) -> None:
        self.active_left, self.active_members = active_tasks, members
        self.all_left, self.all_members = all_tasks, members
        self.active = _per_member(active_tasks, members)
        self.all = _per_member(all_tasks, members)

    def took(self, count: int, active: bool) -> None:
        if active and count == self.active:
            self.active_members -= 1
            self.active_left -= count
            self.active = _per_member(self.active_left, self.active_members)
        if count == self.all:
            self.all_members -= 1
            self.all_left -= count
            self.all = _per_member(self.all_left, self.all_members)


def assign_tasks(processes: dict[str, str], task_counts: dict[str, int], stateful: Iterable[str],
                 previous: dict[str, AssignedTasks], num_standby_replicas: int = 0,
                 task_offsets: dict[str, TaskOffsets] | None = None) -> dict[str, AssignedTasks]:
    """Kafka 4.4's sticky task assignor (``processes``: member id -> process id).

    Active tasks: a task stays with the member that had it, then goes to a member that
    had it as a standby, while those are below their quota (tasks / members, rounded up);
    the rest go to the least loaded process (tasks per member) and its least loaded
    member. Standby tasks (``num_standby_replicas`` of each task of a stateful
    subtopology, one with changelog topics) never go to a process holding the task
    already: to the member that had the task as active or standby while below its quota,
    else to the least loaded process without it. "Had it as a standby": the previous
    standbys first, then the members reporting offsets of its state (``task_offsets``),
    the most caught up first. Ties break by id here (Kafka's by its hash maps' order)."""
    if not processes:
        return {}
    stateful = set(stateful)
    everything = [(s, p) for s in task_counts for p in range(task_counts[s])]
    stateful_tasks = [(s, p) for s, p in everything if s in stateful]
    quotas = _Quotas(len(everything), len(everything) + len(stateful_tasks) * num_standby_replicas, len(processes))
    by_process: dict[str, _Process] = {}
    for m in sorted(processes):
        by_process.setdefault(processes[m], _Process(processes[m])).counts[m] = 0
    prev_active: dict[Task, str] = {}
    candidates: dict[Task, list[tuple[int, int, str]]] = {}  # (not a standby, -offset sum, member)
    for m in sorted(processes):
        offsets = (task_offsets or {}).get(m, {})
        standby = set()
        for s, ps in previous.get(m, AssignedTasks()).active.items():
            for p in ps:
                prev_active[(s, p)] = m
        for s, ps in previous.get(m, AssignedTasks()).standby.items():
            for p in ps:
                standby.add((s, p))
                candidates.setdefault((s, p), []).append((0, -offsets.get((s, p), 0), m))
        for task, offset in offsets.items():
            if task not in standby:
                candidates.setdefault(task, []).append((1, -offset, m))
    prev_standby = {task: [m for *_rank, m in sorted(ranked)] for task, ranked in candidates.items()}

    def process_of(m: str) -> _Process:
        return by_process[processes[m]]

    def least_loaded_previous(candidates: list[str], task: Task | None) -> str | None:
        best, best_load, best_count = None, 0.0, 0
        for m in candidates:
            process = process_of(m)
            if task is not None and task in process.tasks:
                continue
            load, count = process.load, process.counts[m]
            if best is None or (load < best_load and count < best_count):
                best, best_load, best_count = m, load, count
        return best

    def give(m: str, task: Task, active: bool) -> None:
        quotas.took(process_of(m).add(m, task, active), active)

    # Active tasks: kept, then to a previous standby, then to the least loaded.
    left = sorted(everything, key=lambda t: (t[1], t[0]))
    for task in list(left):
        m = prev_active.get(task)
        if m is not None and process_of(m).counts[m] < quotas.active:
            give(m, task, True)
            left.remove(task)
    for task in list(left):
        m = least_loaded_previous(prev_standby.get(task, []), None)
        if m is not None and process_of(m).counts[m] < quotas.active:
            give(m, task, True)
            left.remove(task)
    heap = [(p.load, pid) for pid, p in by_process.items()]
    heapq.heapify(heap)
    for task in sorted(left):
        _load, pid = heapq.heappop(heap)
        quotas.took(by_process[pid].add_to_least_loaded(task, True), True)
        heapq.heappush(heap, (by_process[pid].load, pid))

    if num_standby_replicas > 0:
        to_place: list[tuple[Task, int]] = []
        for task in sorted(stateful_tasks, key=lambda t: (t[1], t[0]), reverse=True):
            for placed in range(num_standby_replicas):
                m = prev_active.get(task)
                if m is not None and task not in process_of(m).tasks and process_of(m).counts[m] < quotas.all:
                    give(m, task, False)
                    continue
                m = least_loaded_previous(prev_standby.get(task, []), task)
                if m is not None and process_of(m).counts[m] < quotas.all:
                    give(m, task, False)
                    continue
                to_place.append((task, num_standby_replicas - placed))
                break
        heap = [(p.load, pid) for pid, p in by_process.items()]
        heapq.heapify(heap)
        for task, replicas in sorted(to_place, reverse=True):
            for _ in range(replicas):
                if not _standby_to_least_loaded(heap, by_process, task, quotas):
                    break  # fewer processes than replicas: as Kafka, a warning and fewer standbys

    out: dict[str, AssignedTasks] = {}
    for m in processes:
        process = process_of(m)
        out[m] = AssignedTasks(_by_subtopology(process.active.get(m, ())), _by_subtopology(process.standby.get(m, ())))
    return out


def _standby_to_least_loaded(heap: list, by_process: dict[str, _Process], task: Task, quotas: _Quotas) -> bool:
    """A standby of ``task`` to the least loaded process not holding it (Kafka polls its
    processes by load until one does not)."""
    if not heap:
        return False
    entry = heapq.heappop(heap)
    process = by_process[entry[1]]
    placed = False
    if task not in process.tasks:
        count = process.add_to_least_loaded(task, False)
        if count != -1:
            placed = True
            quotas.took(count, False)
    elif heap:
        placed = _standby_to_least_loaded(heap, by_process, task, quotas)
    heapq.heappush(heap, (process.load, process.process_id))
    return placed


def _by_subtopology(tasks: Iterable[Task]) -> Tasks:
    out: dict[str, set[int]] = {}
    for s, p in tasks:
        out.setdefault(s, set()).add(p)
    return {s: frozenset(ps) for s, ps in out.items()}


class StreamsGroups:
    """The StreamsGroupHeartbeat logic over StreamsGroup objects: it computes their records
    (replay changes them) and sets only what is memory only (deadlines, delays)."""

    def __init__(self, config: StreamsGroupConfig) -> None:
        self.config = config
        # A group's settings: the broker's with the group's configs (streams.num.standby.replicas,
        # streams.initial.rebalance.delay.ms, streams.assignment.interval.ms); the broker sets this.
        self.group_config: Callable[[str], StreamsGroupConfig] = lambda _group_id: config

    def heartbeat(self, group: StreamsGroup | None, request: StreamsHeartbeatRequest, topics: TopicsSnapshot,
                  now_ms: int, session_timeout_ms: int | None = None, heartbeat_interval_ms: int | None = None,
                  ) -> tuple[list[CoordinatorRecord], StreamsHeartbeatAnswer, bool]:
        """(records, answer, whether the member left), for a request that passed ``validate``.
        Raises Refused; ``group`` None:
        no streams group of that id yet (the records create it). The timeouts: the group's
        configs (streams.session.timeout.ms, streams.heartbeat.interval.ms), else the broker's."""
        config = self.group_config(request.group_id)
        session_timeout_ms = session_timeout_ms or config.session_timeout_ms
        heartbeat_interval_ms = heartbeat_interval_ms or config.heartbeat_interval_ms
        member_id = request.member_id
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(group, request, topics, now_ms)
        joining = request.member_epoch == 0
        if group is None:
            if not joining:
                raise Refused(E.group_id_not_found, f"Streams group {request.group_id} not found.")
            group = StreamsGroup(request.group_id)
        records: list[CoordinatorRecord] = []
        previous_targets = group.target
        predecessor = _static_predecessor(group, request)
        member = group.members.get(member_id)
        if predecessor is not None:
            # A static member back under a new member id takes over its predecessor's tasks.
            member = replace(predecessor, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            previous_targets = {(member_id if m == predecessor.member_id else m): t for m, t in group.target.items()}
            records += member_tombstones(group.group_id, predecessor.member_id, codec.MEMBER_RECORDS)
            records.append(codec.member_metadata_record(group.group_id, member_id, member.metadata_value()))
            records.append(codec.target_member_record(group.group_id, member_id,
                                                      previous_targets.get(member_id, AssignedTasks())))
            records.append(codec.current_assignment_record(group.group_id, member_id, member.assignment_value()))
        elif member is None:
            if not joining:
                raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group {request.group_id}.")
            if len(group.members) >= self.config.max_size:
                raise Refused(E.group_max_size_reached, "The streams group has reached its maximum capacity of "
                              f"{self.config.max_size} members.")
            member = StreamsMember(member_id)
        elif not joining:
            _check_epoch(member, request)
        is_new = member_id not in group.members and predecessor is None
        statuses: list[tuple[int, str]] = []

        topology = group.topology
        bump = is_new
        if request.topology is not None:
            # As Kafka 4.4: the first topology stays until the group is deleted; an older
            # epoch is stale (a status), a newer one or another at the same epoch refused.
            if topology is None:
                topology = request.topology
                records.append(codec.topology_record(group.group_id, topology))
                bump = True
            elif request.topology.epoch >= topology.epoch and request.topology != topology:
                raise Refused(E.invalid_request, "Topology updates are not supported yet.")
        updated = replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            topology_epoch=request.topology.epoch if request.topology is not None else member.topology_epoch,
            process_id=request.process_id if request.process_id is not None else member.process_id,
            user_endpoint=request.user_endpoint if request.user_endpoint is not None else member.user_endpoint,
            client_tags=request.client_tags if request.client_tags is not None else member.client_tags,
            client_id=request.client_id, client_host=request.client_host,
        )
        if request.task_offsets is not None or request.task_end_offsets is not None:
            offsets, end_offsets = group.task_offsets.get(member_id, ({}, {}))
            group.task_offsets[member_id] = (offsets if request.task_offsets is None else request.task_offsets,
                                             end_offsets if request.task_end_offsets is None
                                             else request.task_end_offsets)
        if topology is not None and updated.topology_epoch < topology.epoch:
            statuses.append((STALE_TOPOLOGY, f"The member's topology epoch {updated.topology_epoch} is behind the "
                                             f"group's topology epoch {topology.epoch}."))
        if is_new or updated.metadata_value() != member.metadata_value():
            records.append(codec.member_metadata_record(group.group_id, member_id, updated.metadata_value()))
        # As Kafka: a member's topology epoch, rack, client tags or process moving starts a rebalance.
        bump = bump or (updated.topology_epoch, updated.rack_id, dict(updated.client_tags), updated.process_id) != (
            member.topology_epoch, member.rack_id, dict(member.client_tags), member.process_id)
        members = {m: x for m, x in group.members.items() if predecessor is None or m != predecessor.member_id}
        members[member_id] = updated

        configured = configure(topology, topics) if topology is not None else None
        new_hash = metadata_hash(topics, configured.referenced) if configured is not None else 0
        group_epoch = group.group_epoch
        validated = topology.epoch if configured is not None and configured.ready else -1
        if bump or new_hash != group.metadata_hash or validated != group.validated_topology_epoch:
            group_epoch += 1
            records.append(codec.group_metadata_record(group.group_id, group_epoch, new_hash, validated))
        if configured is not None:
            statuses += _topology_statuses(configured)

        targets = previous_targets
        target_epoch = group.assignment_epoch
        if is_new and not group.members and not group.assignment_epoch and config.initial_rebalance_delay_ms:
            group.assignment_delayed_until = now_ms + config.initial_rebalance_delay_ms
            group.initial_delay = True
        # As Kafka answers: tasks wait for the timer within a new group's initial rebalance
        # delay, and for a heartbeat after the interval when sooner than the assignment
        # interval after the last assignment (one without tasks, the topology not ready, is
        # made at once).
        initial = group.initial_delay and group.assignment_delayed_until is not None and (
            now_ms < group.assignment_delayed_until)
        if initial:
            statuses.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
        if group_epoch > group.assignment_epoch:
            has_tasks = configured is not None and configured.ready
            next_allowed = (group.last_assignment_ms or 0) + config.assignment_interval_ms
            if has_tasks and not initial and group.last_assignment_ms is not None and now_ms < next_allowed:
                statuses.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval."))
            elif not (initial and has_tasks):
                targets = _assign(group, members, previous_targets, configured, group_epoch, now_ms, records,
                                  config.num_standby_replicas)
                target_epoch = group_epoch

        target = targets.get(member_id, AssignedTasks())
        owned_standby = None if request.active_tasks is None else request.standby_tasks or {}
        reconciled = reconcile_step(
            group, updated, is_new, target_epoch, target.active, members, request.active_tasks,
            codec.current_assignment_record, records, now_ms, session_timeout_ms,
            lambda m: settle_standbys(updated, m, target, target_epoch, members),
            _standbys_of_process(updated, members), _revokes_standbys(updated, target, owned_standby))
        members[member_id] = reconciled

        if request.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = member_id
        if group.shutdown_requested_by is not None:
            statuses.append((SHUTDOWN_APPLICATION, f"Streams group {group.group_id} is shutting down: "
                                                   f"member {group.shutdown_requested_by} requested it."))
        missing_tags = [t for t in config.rack_aware_assignment_tags if t not in dict(reconciled.client_tags)]
        if request.version >= 1 and missing_tags:
            statuses.append((MISSING_CLIENT_TAGS, "Missing required client tags for rack-aware standby assignment: "
                                                  f"[{', '.join(missing_tags)}]. Configure them via "
                                                  "'client.tag.<tagKey>' in your Streams config."))

        # As Kafka: the tasks are sent to a member joining and when they (or their epochs) changed.
        changed = is_new or (reconciled.assigned, reconciled.standby) != (member.assigned, member.standby) or (
            _epochs_of(reconciled.task_epochs, reconciled.assigned) != _epochs_of(member.task_epochs, member.assigned))
        full = joining
        # Replaying a current assignment moves the endpoint epoch: this one's, if written.
        endpoint_epoch = group.endpoint_epoch + sum(1 for r in records if r.key[:2] == _CURRENT_ASSIGNMENT_KEY)
        by_endpoint = None
        if request.endpoint_information_epoch != endpoint_epoch:
            by_endpoint = _partitions_by_endpoint(members, configured, topology)
        return records, StreamsHeartbeatAnswer(
            member_id=member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=heartbeat_interval_ms,
            active_tasks=reconciled.assigned if full or changed else None,
            standby_tasks=reconciled.standby if full or changed else None, statuses=tuple(statuses),
            topics_to_create=configured.missing_internal_topics if configured is not None else (),
            endpoint_information_epoch=endpoint_epoch, partitions_by_endpoint=by_endpoint), False

    def _leave(self, group: StreamsGroup | None, request: StreamsHeartbeatRequest, topics: TopicsSnapshot,
               now_ms: int) -> tuple[list[CoordinatorRecord], StreamsHeartbeatAnswer, bool]:
        """Epoch -1 or -2. A static member leaving with -2 keeps its tasks (no rebalance) for
        a successor with its instance id until its session ends; any other leaves at once."""
        member_id = request.member_id
        if group is None:
            raise Refused(E.group_id_not_found, f"Group {request.group_id} not found.")
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = _static_member(group, request)
        if request.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = member_id
        answer = StreamsHeartbeatAnswer(member_id=member_id, member_epoch=request.member_epoch)
        if request.instance_id is not None and request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # As Kafka: its tasks' assignment epochs go to 0 (its successor commits at a new epoch).
            away = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={},
                           standby_pending_revocation={}, task_epochs=dict.fromkeys(_task_set(member.assigned), 0))
            group.rebalance_deadlines.pop(member_id, None)
            return [codec.current_assignment_record(group.group_id, member_id, away.assignment_value())], answer, False
        return self.fence(group, [member_id], topics, now_ms), answer, True

    def fence(self, group: StreamsGroup, member_ids: Iterable[str], topics: TopicsSnapshot, now_ms: int
              ) -> list[CoordinatorRecord]:
        """Members leave or their sessions ended (all in one write: the group is only
        replayed after it): their records go, the group epoch moves and the others' target
        assignment is computed (as Kafka does: at once, or by a heartbeat after the
        assignment interval), so their tasks go to the others."""
        gone = set(member_ids)
        records = [r for m in sorted(gone) for r in member_tombstones(group.group_id, m, codec.MEMBER_RECORDS)]
        configured = configure(group.topology, topics) if group.topology is not None else None
        new_hash = metadata_hash(topics, configured.referenced) if configured is not None else 0
        epoch = group.group_epoch + 1
        records.append(codec.group_metadata_record(group.group_id, epoch, new_hash, group.validated_topology_epoch))
        rest = {m: member for m, member in group.members.items() if m not in gone}
        config = self.group_config(group.group_id)
        next_allowed = (group.last_assignment_ms or 0) + config.assignment_interval_ms
        if rest and configured is not None and configured.ready and group.last_assignment_ms is not None and (
                now_ms < next_allowed):
            pass  # within the assignment interval: the next heartbeat after it makes it
        else:
            _assign(group, rest, group.target, configured, epoch, now_ms, records, config.num_standby_replicas)
        return records

    @staticmethod
    def validate_offset_commit(group: StreamsGroup, member_id: str, instance_id: str | None, member_epoch: int,
                               transactional: bool, api_version: int
                               ) -> ErrorCode | Callable[[str, int], ErrorCode | None] | None:
        """An OffsetCommit or TxnOffsetCommit of a streams member: the consumer group's rules,
        but an older member epoch is checked per partition (the function returned), as Kafka
        4.4 does: the partition's topic is a source or repartition topic of the topology and
        its task the member's (assigned or being revoked) since that epoch or before; else
        STALE_MEMBER_EPOCH."""
        member = group.members.get(member_id)
        if member is None or member_epoch < 0 or member_epoch >= member.member_epoch:
            return ConsumerGroups.validate_offset_commit(group, member_id, instance_id, member_epoch, transactional,
                                                         api_version)
        if not transactional and api_version < 9:
            return E.unsupported_version
        subtopology_of = {}
        for s in group.topology.subtopologies if group.topology is not None else ():
            for topic in (*s.source_topics, *(i.name for i in s.repartition_source_topics)):
                subtopology_of[topic] = s.subtopology_id

        def stale(topic: str, partition: int) -> ErrorCode | None:
            epoch = member.task_epochs.get((subtopology_of.get(topic), partition))
            return E.stale_member_epoch if epoch is None or member_epoch < epoch else None
        return stale

    @staticmethod
    def validate_offset_fetch(group: StreamsGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        return ConsumerGroups.validate_offset_fetch(group, member_id, member_epoch)

    def delayed_assignment(self, group: StreamsGroup, topics: TopicsSnapshot, now_ms: int
                           ) -> list[CoordinatorRecord]:
        """The first assignment of a new group, once its initial rebalance delay is over."""
        if group.assignment_delayed_until is None or now_ms < group.assignment_delayed_until:
            return []
        group.assignment_delayed_until = None
        group.initial_delay = False
        if not group.members or group.group_epoch <= group.assignment_epoch:
            return []
        configured = configure(group.topology, topics) if group.topology is not None else None
        records: list[CoordinatorRecord] = []
        _assign(group, group.members, group.target, configured, group.group_epoch, now_ms, records,
                self.group_config(group.group_id).num_standby_replicas)
        return records

    @staticmethod
    def expired_members(group: StreamsGroup, now_ms: int) -> list[str]:
        """Members whose session ended, or that did not revoke tasks within their
        rebalance timeout (at the epoch the timer guards)."""
        expired = {m for m, deadline in group.session_deadlines.items() if deadline <= now_ms}
        return sorted(expired.union(overdue_revocations(group, now_ms)))

    @staticmethod
    def deadlines(group: StreamsGroup) -> Iterable[int]:
        yield from group.session_deadlines.values()
        yield from (d for d, _epoch in group.rebalance_deadlines.values())
        if group.assignment_delayed_until is not None:
            yield group.assignment_delayed_until


def _assign(group: StreamsGroup, members: dict[str, StreamsMember], previous: dict[str, AssignedTasks],
            configured: ConfiguredTopology | None, epoch: int, now_ms: int, records: list[CoordinatorRecord],
            num_standby_replicas: int) -> dict[str, AssignedTasks]:
    """The target assignment of ``members`` at ``epoch`` (no tasks while the topology is not
    ready), sticky to the ``previous`` one; the records of what changed and of the new
    assignment epoch are added."""
    ready = configured is not None and configured.ready
    targets = assign_tasks({m.member_id: m.process_id for m in members.values()},
                           configured.task_counts if ready else {}, configured.stateful if ready else (),
                           previous, num_standby_replicas,
                           {m: offsets for m, (offsets, _end) in group.task_offsets.items()})
    for m, tasks in sorted(targets.items()):
        if previous.get(m) != tasks:
            records.append(codec.target_member_record(group.group_id, m, tasks))
    records.append(codec.target_metadata_record(group.group_id, epoch, now_ms))
    return targets


def _task_set(*tasks: Tasks) -> set[tuple[str, int]]:
    return {(s, p) for t in tasks for s, ps in t.items() for p in ps}


def _epochs_of(epochs: TaskEpochs, tasks: Tasks) -> TaskEpochs:
    return {t: epochs[t] for t in _task_set(tasks) if t in epochs}


def _task_epochs(before: StreamsMember, after: StreamsMember, target_epoch: int) -> TaskEpochs:
    """A task the member had keeps its assignment epoch, a new one is assigned at the
    member's epoch now; a member told to revoke tasks has those it keeps at the target
    epoch, and those it revokes at theirs (what Kafka 4.4 answers: once it has moved on,
    it refuses commits of the epoch before for the tasks kept, and sends no task
    change)."""
    revoking = (after.state is MemberState.UNREVOKED_PARTITIONS
                and before.state is not MemberState.UNREVOKED_PARTITIONS)
    epochs = {t: before.task_epochs.get(t, after.member_epoch) for t in _task_set(after.assigned,
                                                                                  after.pending_revocation)}
    if revoking:
        epochs.update(dict.fromkeys(_task_set(after.assigned), target_epoch))
    return epochs


def _standbys_of_process(member: StreamsMember, members: dict[str, StreamsMember]) -> dict[tuple[str, int], int]:
    """Tasks another member of the member's process holds as standby: not its active
    tasks yet (Kafka holds them back until released, the state being that process's)."""
    return {(s, p): other.member_epoch for other in members.values()
            if other.member_id != member.member_id and other.process_id == member.process_id
            for s, ps in other.standby.items() for p in ps}


def _standbys_to_revoke(member: StreamsMember, target: AssignedTasks) -> set[tuple[str, int]]:
    """The standbys the member gives up at this step: those pending if it is revoking,
    else those its target neither keeps as standby nor makes active."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        return _task_set(member.standby_pending_revocation)
    return _dropped_standbys(member, target)


def _dropped_standbys(member: StreamsMember, target: AssignedTasks) -> set[tuple[str, int]]:
    return _task_set(member.standby) - _task_set(target.standby, target.active)


def _revokes_standbys(member: StreamsMember, target: AssignedTasks, owned_standby: Tasks | None) -> bool:
    """Whether the member must be (or stay) revoking for its standbys, as Kafka 4.4 counts
    standbys in the tasks to revoke: it still reports one, or reported nothing."""
    dropped = _standbys_to_revoke(member, target)
    return bool(dropped) and (owned_standby is None or bool(dropped & _task_set(owned_standby)))


def settle_standbys(before: StreamsMember, after: StreamsMember, target: AssignedTasks, target_epoch: int,
                    members: dict[str, StreamsMember]) -> StreamsMember:
    """What a heartbeat's step (``before`` to ``after`` by the shared reconciliation) makes
    of the member's standbys, their revocation and its task epochs. As Kafka 4.4, a member
    whose target standbys are held back by its process is UNRELEASED, not STABLE."""
    standby = _standby_step(before, after, target, target_epoch, members)
    state = after.state
    if state is MemberState.STABLE and _task_set(target.standby) - _task_set(standby):
        state = MemberState.UNRELEASED_PARTITIONS
    pending: Tasks = {}
    if state is MemberState.UNREVOKED_PARTITIONS:
        staying = (before.state, before.member_epoch) == (state, after.member_epoch)
        pending = before.standby_pending_revocation if staying else _by_subtopology(_dropped_standbys(before, target))
    return replace(after, state=state, standby=standby, standby_pending_revocation=pending,
                   task_epochs=_task_epochs(before, after, target_epoch))


def _standby_step(before: StreamsMember, after: StreamsMember, target: AssignedTasks, target_epoch: int,
                  members: dict[str, StreamsMember]) -> Tasks:
    """The member's standby tasks after a heartbeat moved its active tasks from ``before``
    to ``after``, as Kafka 4.4's CurrentAssignmentBuilder: it keeps the standbys its target
    keeps; one its target makes active stays a standby until granted as active (also while
    it revokes); an active task its target makes a standby is a standby at once (also while
    it revokes); its target's other standbys come at the target epoch, not revoking. A
    standby to be given (new or demoted) waits while another member of its process runs
    the task as active or holds it as standby."""
    held: set[tuple[str, int]] = set()
    for other in members.values():
        if other.member_id != after.member_id and other.process_id == after.process_id:
            held.update(_task_set(other.assigned, other.pending_revocation, other.standby))
    current, wanted = _task_set(before.standby), _task_set(target.standby)
    promoted = current & _task_set(target.active) - _task_set(after.assigned)
    demoted = _task_set(before.assigned) & wanted - current - held
    out = current & wanted | promoted | demoted
    if after.member_epoch == target_epoch and after.state is not MemberState.UNREVOKED_PARTITIONS:
        out |= wanted - held
    return _by_subtopology(out)


def _static_member(group: StreamsGroup, request: StreamsHeartbeatRequest) -> StreamsMember:
    """The static member of the request's instance id, as Kafka checks it for a heartbeat
    or a leave: known, and under this member id."""
    member = group.static_member(request.instance_id or "")
    if member is None:
        raise Refused(E.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
    if member.member_id != request.member_id:
        raise Refused(E.fenced_instance_id, f"Static member {request.member_id} with instance id "
                      f"{request.instance_id} was fenced by member {member.member_id}.")
    return member


def _static_predecessor(group: StreamsGroup, request: StreamsHeartbeatRequest) -> StreamsMember | None:
    """The member a static member joining (epoch 0) replaces: the one of its instance id,
    which must have left with -2 (else UNRELEASED_INSTANCE_ID, even under the same member
    id, as Kafka 4.4 answers). A static member's other heartbeats are checked here too
    (its epoch by the caller)."""
    if request.instance_id is None:
        return None
    if request.member_epoch != 0:
        _static_member(group, request)
        return None
    existing = group.static_member(request.instance_id)
    if existing is None:
        return None
    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise Refused(E.unreleased_instance_id, f"Static member {request.member_id} with instance id "
                      f"{request.instance_id} cannot join the group because the instance id is owned by "
                      f"{existing.member_id} member.")
    return existing


def _check_epoch(member: StreamsMember, request: StreamsHeartbeatRequest) -> None:
    received = request.member_epoch
    owned = request.active_tasks
    if received > member.member_epoch or (received < member.member_epoch and (
            received != member.previous_member_epoch or owned is None
            or not all(ps <= member.assigned.get(s, frozenset()) for s, ps in owned.items()))):
        raise Refused(E.fenced_member_epoch, f"The streams group member has a member epoch ({received}) different "
                      f"from the one known by the group coordinator ({member.member_epoch}). "
                      "The member must abandon all its tasks and rejoin.")


def _topology_statuses(configured: ConfiguredTopology) -> list[tuple[int, str]]:
    out = []
    if configured.missing_source_topics:
        out.append((MISSING_SOURCE_TOPICS, "Source topics " + ", ".join(configured.missing_source_topics)
                    + " are missing."))
    if configured.missing_internal_topics:
        out.append((MISSING_INTERNAL_TOPICS, "Internal topics are missing: "
                    + ", ".join(i.name for i in configured.missing_internal_topics)))
    if configured.incorrectly_partitioned:
        out.append((INCORRECTLY_PARTITIONED_TOPICS, "Following topics are not correctly partitioned: "
                    + ", ".join(configured.incorrectly_partitioned)))
    return out


def _partitions_by_endpoint(members: dict[str, StreamsMember], configured: ConfiguredTopology | None,
                            topology: Topology | None) -> tuple[EndpointPartitions, ...]:
    """Each member with an endpoint and the input partitions (source and repartition
    topics) of its active and of its standby tasks (one entry per member, as Kafka
    answers: a client's threads each have one)."""
    inputs: dict[str, tuple[str, ...]] = {}
    if configured is not None and topology is not None:
        for s in topology.subtopologies:
            inputs[s.subtopology_id] = (*configured.source_topics.get(s.subtopology_id, ()),
                                        *(i.name for i in s.repartition_source_topics))

    def partitions(tasks: Tasks) -> dict[str, frozenset[int]]:
        out: dict[str, set[int]] = {}
        for s, ps in tasks.items():
            for topic in inputs.get(s, ()):
                out.setdefault(topic, set()).update(ps)
        return {t: frozenset(ps) for t, ps in out.items()}

    return tuple(EndpointPartitions(m.user_endpoint, partitions(m.assigned), partitions(m.standby))
                 for m in sorted(members.values(), key=lambda m: m.member_id) if m.user_endpoint is not None)
