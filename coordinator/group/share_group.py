"""KIP-932 share groups on the group coordinator: membership by ShareGroupHeartbeat,
the target assignment of the simple assignor, and their records in __consumer_offsets
(share_log_codec), replayed as Kafka's GroupMetadataManager replays them.

A share group has no revocation: members of a share group may share a partition, so a
member takes its target assignment (and the assignment epoch) on its next heartbeat.
The group epoch moves when members come or go, a subscription changes, or the
subscribed topics change (their ids and partition counts, ``metadata_hash``).

Only initialized share-partitions are assigned, as Kafka 4.4 does: a heartbeat records
the subscribed partitions not yet initialized as initializing
(ShareGroupStatePartitionMetadata) and asks for their state to be initialized
(``InitializeShareState``: InitializeShareGroupState to the share coordinator at the
group epoch, start offset -1, which the leader resolves by ``share.auto.offset.reset``);
once done they are recorded initialized, and the next heartbeat, finding initialized
partitions nobody is assigned, moves the group epoch and assigns them. So a new group's
first member is answered epoch 2 with nothing, then epoch 3 with its partitions, as on
Kafka 4.4.

As on Kafka 4.4, a target assignment is computed at most once per
``share.assignment.interval.ms`` (group.share.assignment.interval.ms) after the last one:
a heartbeat that moves the group epoch sooner answers the last target assignment (its
epoch, and nothing for a member not in it), and a later heartbeat computes the new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from kio.schema.errors import ErrorCode

from coordinator.group import share_log_codec as codec
from coordinator.group.assignors import AssignmentSpec, Partitions, simple
from coordinator.group.consumer_group import HeartbeatAnswer, TopicsSnapshot, metadata_hash
from coordinator.group.group_types import SHARE, Refused, ShareGroupConfig
from coordinator.group.modern_group_records import member_tombstones, replay_per_member
from coordinator.runtime import CoordinatorRecord

E = ErrorCode
LEAVE_GROUP_MEMBER_EPOCH = -1
NEW_GROUP_EPOCH = 1  # the epoch a share group made by a heartbeat is bumped from
SHARE_ASSIGNOR = "simple"
EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"


@dataclass(frozen=True, slots=True)
class InitializeShareState:
    """Effect: initialize the state of these share-partitions on the share coordinator
    (at ``state_epoch``), then record the outcome (``share_group_state_changed``)."""

    group_id: str
    state_epoch: int
    partitions: codec.NamedPartitions


@dataclass(slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Partitions = field(default_factory=dict)

    def metadata_value(self) -> codec.MemberMetadataValue:
        return codec.MemberMetadataValue(self.rack_id, self.client_id, self.client_host,
                                         self.subscribed_topic_names)

    def assignment_value(self) -> codec.CurrentAssignmentValue:
        return codec.CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, self.assigned)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignment_timestamp_ms: int = 0  # when the target assignment was computed (0: no wait after it)
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    initialized: codec.NamedPartitions = field(default_factory=dict)
    initializing: codec.NamedPartitions = field(default_factory=dict)
    # When each initializing topic was asked (its record's timestamp), as Kafka keeps it.
    initializing_since: dict = field(default_factory=dict)
    # Memory only, as on Kafka: every member loaded gets a full session.
    session_deadlines: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topics(self, topics: TopicsSnapshot) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names if n in topics}

    def replay(self, key: codec.ShareKey, value: bytes | None, timestamp_ms: int = 0) -> None:
        kind, member_id = key.kind, key.member
        if kind == codec.GROUP_METADATA:
            self.group_epoch, self.metadata_hash = codec.decode_group_metadata(value)
        elif kind == codec.TARGET_METADATA:
            self.assignment_epoch, timestamp = (0, None) if value is None else codec.decode_target_metadata(value)
            self.assignment_timestamp_ms = timestamp or 0
        elif kind == codec.STATE_PARTITION_METADATA:
            metadata = codec.decode_state_partition_metadata(value) if value is not None else None
            self.initialized = {} if metadata is None else metadata.initialized
            initializing = {} if metadata is None else metadata.initializing
            for topic_id, (_name, ps) in initializing.items():
                if not ps <= self.initializing.get(topic_id, ("", frozenset()))[1]:  # newly asked
                    self.initializing_since[topic_id] = timestamp_ms
            self.initializing_since = {t: v for t, v in self.initializing_since.items() if t in initializing}
            self.initializing = initializing
        elif kind == codec.TARGET_MEMBER:
            replay_per_member(self.target, member_id, value, codec.decode_target_member)
        elif kind == codec.MEMBER_METADATA:
            if value is None:
                self.members.pop(member_id, None)
                self.session_deadlines.pop(member_id, None)
                return
            v = codec.decode_member_metadata(value)
            member = self.members.setdefault(member_id, ShareMember(member_id))
            member.rack_id, member.client_id, member.client_host = v.rack_id, v.client_id, v.client_host
            member.subscribed_topic_names = v.subscribed_topic_names
        elif kind == codec.CURRENT_ASSIGNMENT:
            member = self.members.get(member_id)
            if member is None or value is None:
                return
            v = codec.decode_current_assignment(value)
            member.member_epoch, member.previous_member_epoch, member.assigned = (
                v.member_epoch, v.previous_member_epoch, v.assigned)

    def state_partitions(self) -> set[tuple[object, int]]:
        """(topic id, partition) of every share-partition whose state the group may have."""
        return {(t, p) for named in (self.initialized, self.initializing) for t, (_n, ps) in named.items()
                for p in ps}

    def state_metadata_record(self, initializing: codec.NamedPartitions, initialized: codec.NamedPartitions
                              ) -> CoordinatorRecord:
        return codec.state_partition_metadata_record(self.group_id, codec.StatePartitionMetadataValue(
            _without_empty(initializing), _without_empty(initialized), {}))

    def deletion_records(self) -> list[CoordinatorRecord]:
        """Tombstones of every record of the group, in the order Kafka 4.4 deletes them
        (ShareGroup.createGroupTombstoneRecords): the members' current and target
        assignments (and target assignments left of members no longer there), the target
        assignment epoch, the members' subscriptions, the state metadata, the group epoch."""
        members = list(self.members)
        targets = members + [m for m in self.target if m not in self.members]
        return [*(codec.current_assignment_record(self.group_id, m, None) for m in members),
                *(codec.target_member_record(self.group_id, m, None) for m in targets),
                codec.target_metadata_record(self.group_id, None),
                *(codec.member_metadata_record(self.group_id, m, None) for m in members),
                codec.state_partition_metadata_record(self.group_id, None),
                codec.group_metadata_record(self.group_id, None)]


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_type: ClassVar[str] = SHARE  # whose checks it passes (GroupCoordinator.heartbeat_request_error)
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


def _subscribed_partitions(subscribed: Iterable[str], topics: TopicsSnapshot) -> codec.NamedPartitions:
    return {topics[n][0]: (n, frozenset(range(topics[n][1]))) for n in subscribed}


def _initialized_unassigned(group: ShareGroup, subscribed: Iterable[str], topics: TopicsSnapshot) -> bool:
    """Whether an initialized share-partition of a subscribed topic is in no member's
    target assignment (Kafka's initializedAssignmentPending)."""
    if not group.members or not group.initialized:
        return False
    assigned: dict = {}
    for partitions in group.target.values():
        for t, ps in partitions.items():
            assigned[t] = assigned.get(t, frozenset()) | ps
    for topic_id, (_name, ps) in _subscribed_partitions(subscribed, topics).items():
        ready = group.initialized.get(topic_id, ("", frozenset()))[1] & ps
        if ready - assigned.get(topic_id, frozenset()):
            return True
    return False


def _to_initialize(group: ShareGroup, subscribed: Iterable[str], topics: TopicsSnapshot, stale_before_ms: int
                   ) -> codec.NamedPartitions:
    """Subscribed share-partitions neither initialized nor initializing (since
    ``stale_before_ms`` or later)."""
    out = {}
    for topic_id, (name, ps) in _subscribed_partitions(subscribed, topics).items():
        known = group.initialized.get(topic_id, ("", frozenset()))[1]
        if group.initializing_since.get(topic_id, stale_before_ms) > stale_before_ms:
            known |= group.initializing.get(topic_id, ("", frozenset()))[1]
        if ps - known:
            out[topic_id] = (name, ps - known)
    return out


def _merged(a: codec.NamedPartitions, b: codec.NamedPartitions) -> codec.NamedPartitions:
    out = dict(a)
    for topic_id, (name, ps) in b.items():
        out[topic_id] = (name or out.get(topic_id, ("", frozenset()))[0],
                         out.get(topic_id, ("", frozenset()))[1] | ps)
    return out


def _minus(a: codec.NamedPartitions, ids: dict) -> codec.NamedPartitions:
    return _without_empty({t: (n, ps - ids.get(t, frozenset())) for t, (n, ps) in a.items()})


def _without_empty(a: codec.NamedPartitions) -> codec.NamedPartitions:
    return {t: (n, ps) for t, (n, ps) in a.items() if ps}


def _may_assign(last_assignment_ms: int, interval_ms: int, now_ms: int) -> bool:
    """Whether a new target assignment may be computed now (Kafka 4.4's
    canComputeNextTargetAssignment): the last one has no time, there is no interval, or
    the interval since the last one has passed."""
    return last_assignment_ms == 0 or interval_ms == 0 or now_ms >= last_assignment_ms + interval_ms


def validate(request: ShareHeartbeatRequest) -> None:
    """The checks Kafka makes before looking at the group; raises Refused."""
    if not request.group_id:
        raise Refused(E.invalid_request, "GroupId can't be empty.")
    if not request.member_id:
        raise Refused(E.invalid_request, "MemberId can't be empty.")
    if request.rack_id == "":
        raise Refused(E.invalid_request, "RackId can't be empty.")
    if request.member_epoch == 0:
        if not request.subscribed_topic_names:
            raise Refused(E.invalid_request, "SubscribedTopicNames must be set in first request.")
    elif request.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise Refused(E.invalid_request, f"MemberEpoch is invalid: {request.member_epoch}.")


class ShareGroups:
    """The share-group heartbeat and its timers over a partition's share groups."""

    def __init__(self, config: ShareGroupConfig, topics: Callable[[], TopicsSnapshot] = dict) -> None:
        self.config = config
        self._topics = topics  # the cluster's topics (names for the state metadata record)

    def heartbeat(self, group: ShareGroup | None, request: ShareHeartbeatRequest, topics: TopicsSnapshot,
                  now_ms: int, session_timeout_ms: int, heartbeat_interval_ms: int,
                  assignment_interval_ms: int | None = None
                  ) -> tuple[list[CoordinatorRecord], HeartbeatAnswer, InitializeShareState | None]:
        """(records, answer, the share-partitions to initialize), for a request that passed
        ``validate``. Raises Refused. ``group`` is None for a group that does not exist yet; the records
        create it. ``assignment_interval_ms``: the group's (None: the broker's)."""
        member_id = request.member_id
        if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if group is None or member_id not in group.members:
                raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group "
                              f"{request.group_id}.")
            records = self.fence(group, member_id, topics)
            return records, HeartbeatAnswer(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH), None
        if group is None and request.member_epoch != 0:
            raise Refused(E.group_id_not_found, f"Group {request.group_id} not found.")
        # A group made by this heartbeat counts from epoch 1, so its first epoch is 2, as
        # Kafka 4.4 writes and answers it ("Bumped group epoch to 2" for a new share group).
        group = group or ShareGroup(request.group_id, group_epoch=NEW_GROUP_EPOCH)
        member = group.members.get(member_id)
        if member is None:
            if request.member_epoch != 0:
                raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group "
                              f"{request.group_id}.")
            if len(group.members) >= self.config.max_size:
                raise Refused(E.group_max_size_reached, f"The share group has reached its maximum capacity of "
                              f"{self.config.max_size} members.")
            member = ShareMember(member_id)
        elif request.member_epoch > member.member_epoch or (
                0 < request.member_epoch < member.member_epoch and request.member_epoch != member.previous_member_epoch):
            raise Refused(E.fenced_member_epoch, f"The share group member has a member epoch "
                          f"({request.member_epoch}) different from the expected one ({member.member_epoch}).")
        records: list[CoordinatorRecord] = []
        joining = member_id not in group.members
        updated = replace(member, assigned=dict(member.assigned))
        if request.rack_id is not None:
            updated.rack_id = request.rack_id
        if request.subscribed_topic_names is not None:
            updated.subscribed_topic_names = tuple(request.subscribed_topic_names)
        updated.client_id, updated.client_host = request.client_id, request.client_host
        members = dict(group.members)
        members[member_id] = updated
        if joining or updated.metadata_value() != member.metadata_value():
            records.append(codec.member_metadata_record(group.group_id, member_id, updated.metadata_value()))
        subscribed = {n for m in members.values() for n in m.subscribed_topic_names if n in topics}
        new_hash = metadata_hash(topics, subscribed)
        group_epoch = group.group_epoch
        subscriptions_changed = joining or updated.subscribed_topic_names != member.subscribed_topic_names
        if subscriptions_changed or new_hash != group.metadata_hash or (
                group.assignment_epoch >= group_epoch and _initialized_unassigned(group, subscribed, topics)):
            group_epoch += 1
            records.append(codec.group_metadata_record(group.group_id, group_epoch, new_hash))
        target = group.target
        assignment_epoch = group.assignment_epoch
        if assignment_interval_ms is None:
            assignment_interval_ms = self.config.assignment_interval_ms
        if group_epoch > group.assignment_epoch and _may_assign(group.assignment_timestamp_ms, assignment_interval_ms,
                                                                now_ms):
            target = self._assign(members, group.target, topics, group.initialized)
            for m, partitions in sorted(target.items()):
                if group.target.get(m) != partitions:
                    records.append(codec.target_member_record(group.group_id, m, partitions))
            assignment_epoch = group_epoch
            records.append(codec.target_metadata_record(group.group_id, assignment_epoch, now_ms))
        # The target's partitions of topics the member still subscribes to (a target
        # not yet recomputed after a subscription change keeps none of the dropped
        # topics), as Kafka 4.4's ShareGroupAssignmentBuilder filters them.
        subscribed_ids = {topics[n][0] for n in updated.subscribed_topic_names if n in topics}
        new_assignment = {t: ps for t, ps in target.get(member_id, {}).items() if t in subscribed_ids}
        if updated.member_epoch != assignment_epoch or updated.assigned != new_assignment:
            updated.previous_member_epoch = updated.member_epoch
            updated.member_epoch = assignment_epoch
            updated.assigned = new_assignment
            records.append(codec.current_assignment_record(group.group_id, member_id, updated.assignment_value()))
        initialize = _to_initialize(group, subscribed, topics, now_ms - self.config.initialize_retry_interval_ms)
        if initialize:
            records.append(group.state_metadata_record(_merged(group.initializing, initialize), group.initialized))
            group.initializing_since.update(dict.fromkeys(initialize, now_ms))  # asked again: a new wait
        group.session_deadlines[member_id] = now_ms + session_timeout_ms
        send_assignment = request.member_epoch == 0 or updated.assigned != member.assigned or joining
        answer = HeartbeatAnswer(
            member_id=member_id, member_epoch=updated.member_epoch, heartbeat_interval_ms=heartbeat_interval_ms,
            assignment=updated.assigned if send_assignment else None)
        effect = InitializeShareState(group.group_id, group_epoch, initialize) if initialize else None
        return records, answer, effect

    def state_changed(self, group: ShareGroup, partitions: dict, initialized: bool) -> list[CoordinatorRecord]:
        """The share coordinator initialized these partitions' state (``initialized``), or
        it failed or the state was deleted: they leave the initializing set, and join or
        leave the initialized one."""
        ids = dict(partitions)
        initializing = _minus(group.initializing, ids)
        if initialized:
            names = {t: n for named in (group.initializing, group.initialized) for t, (n, _ps) in named.items()}
            names.update((topic_id, name) for name, (topic_id, _count) in self._topics().items())
            done = _merged(group.initialized, {t: (names.get(t, ""), ps) for t, ps in ids.items()})
        else:
            done = _minus(group.initialized, ids)
        if (initializing, done) == (group.initializing, group.initialized):
            return []
        return [group.state_metadata_record(initializing, done)]

    @staticmethod
    def _assign(members: dict[str, ShareMember], previous: dict[str, Partitions], topics: TopicsSnapshot,
                initialized: codec.NamedPartitions) -> dict[str, Partitions]:
        """The simple assignor over the share-partitions whose state is initialized."""
        spec = AssignmentSpec(
            subscriptions={m.member_id: frozenset(topics[n][0] for n in m.subscribed_topic_names if n in topics)
                           for m in members.values()},
            partition_counts={topic_id: count for topic_id, count in topics.values()},
            previous=previous)
        ready = {t: ps for t, (_n, ps) in initialized.items()}
        return {m: {t: ps & ready.get(t, frozenset()) for t, ps in partitions.items() if ps & ready.get(t, frozenset())}
                for m, partitions in simple(spec).items()}

    def fence(self, group: ShareGroup, member_id: str, topics: TopicsSnapshot) -> list[CoordinatorRecord]:
        """A member leaves or its session ended: its records go, and the group epoch
        moves so the others are given its partitions on their next heartbeat. What it
        holds stays acquired until its share session ends or the locks do: as on Kafka
        4.4, the group coordinator does not tell the share-partition leaders (a leaving
        client's last acknowledgements may come after its leave)."""
        records = member_tombstones(group.group_id, member_id, codec.MEMBER_RECORDS)
        rest = {n for m in group.members.values() if m.member_id != member_id
                for n in m.subscribed_topic_names if n in topics}
        group_epoch = group.group_epoch + 1
        records.append(codec.group_metadata_record(group.group_id, group_epoch, metadata_hash(topics, rest)))
        if group.members.keys() <= {member_id}:
            # The last member gone: nothing is left to assign, so the target assignment is
            # at the new epoch at once (Kafka 4.4 writes it, with timestamp 0).
            records.append(codec.target_metadata_record(group.group_id, group_epoch))
        return records

    @staticmethod
    def expired_members(group: ShareGroup, now_ms: int) -> list[str]:
        return sorted(m for m, deadline in group.session_deadlines.items() if deadline <= now_ms)

    @staticmethod
    def deadlines(group: ShareGroup) -> Iterable[int]:
        return group.session_deadlines.values()
