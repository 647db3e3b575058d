"""KIP-932 share groups on the group coordinator: membership by ShareGroupHeartbeat,
the target assignment of the simple assignor, and their records in __consumer_offsets
(share_log_codec), replayed as Kafka's GroupMetadataManager replays them.

A share group has no revocation: members of a share group may share a partition, so a
member takes its target assignment (and the assignment epoch) on its next heartbeat.
The group epoch moves when members come or go, a subscription changes, or the
subscribed topics change (their ids and partition counts, ``metadata_hash``).

The partitions a share group has consumed are recorded as initialized
(ShareGroupStatePartitionMetadata). Kafka first records them as initializing, asks the
share coordinator to initialize their state and then records them initialized; the
share-partition state here starts on the leader at the first ShareFetch (its start
offset from ``share.auto.offset.reset``), so they are recorded initialized at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from coordinator.group import share_log_codec as codec
from coordinator.group.assignors import AssignmentSpec, Partitions, simple
from coordinator.group.consumer_group import HeartbeatAnswer, Refused, TopicsSnapshot, metadata_hash
from coordinator.contract import CoordinatorRecord

E = ErrorCode
LEAVE_GROUP_MEMBER_EPOCH = -1
SHARE_ASSIGNOR = "simple"
EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The broker's group.share.* settings (group configs override the timeouts)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


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
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    initialized: codec.NamedPartitions = field(default_factory=dict)
    # Memory only, as on Kafka: every member loaded gets a full session.
    session_deadlines: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topics(self, topics: TopicsSnapshot) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names if n in topics}

    def replay(self, key: codec.ShareKey, value: bytes | None) -> None:
        kind, member_id = key.kind, key.member
        if kind == codec.GROUP_METADATA:
            self.group_epoch, self.metadata_hash = codec.decode_group_metadata(value)
        elif kind == codec.TARGET_METADATA:
            self.assignment_epoch = 0 if value is None else codec.decode_target_metadata(value)
        elif kind == codec.STATE_PARTITION_METADATA:
            self.initialized = {} if value is None else codec.decode_state_partition_metadata(value).initialized
        elif kind == codec.TARGET_MEMBER:
            if value is None:
                self.target.pop(member_id, None)
            else:
                self.target[member_id] = codec.decode_target_member(value)
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

    def deletion_records(self) -> list[CoordinatorRecord]:
        """Tombstones of every record of the group, in the order Kafka deletes them."""
        records = []
        for member_id in self.members:
            records += _member_tombstones(self.group_id, member_id)
        records += [codec.target_metadata_record(self.group_id, None),
                    codec.state_partition_metadata_record(self.group_id, None),
                    codec.group_metadata_record(self.group_id, None)]
        return records


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


def _member_tombstones(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    return [codec.current_assignment_record(group_id, member_id, None),
            codec.target_member_record(group_id, member_id, None),
            codec.member_metadata_record(group_id, member_id, None)]


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

    def __init__(self, config: ShareGroupConfig) -> None:
        self.config = config

    def heartbeat(self, group: ShareGroup | None, request: ShareHeartbeatRequest, topics: TopicsSnapshot,
                  now_ms: int, session_timeout_ms: int, heartbeat_interval_ms: int
                  ) -> tuple[list[CoordinatorRecord], HeartbeatAnswer, bool]:
        """(records, answer, whether the member left). Raises Refused. ``group`` is None
        for a group that does not exist yet; the records create it."""
        validate(request)
        member_id = request.member_id
        if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if group is None or member_id not in group.members:
                raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group "
                              f"{request.group_id}.")
            records = self.fence(group, member_id, topics)
            return records, HeartbeatAnswer(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH), True
        if group is None and request.member_epoch != 0:
            raise Refused(E.group_id_not_found, f"Group {request.group_id} not found.")
        group = group or ShareGroup(request.group_id)
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
        if subscriptions_changed or new_hash != group.metadata_hash:
            group_epoch += 1
            records.append(codec.group_metadata_record(group.group_id, group_epoch, new_hash))
            initialized = self._initialized(group, subscribed, topics)
            if initialized != group.initialized:
                records.append(codec.state_partition_metadata_record(
                    group.group_id, codec.StatePartitionMetadataValue({}, initialized, {})))
        target = group.target
        assignment_epoch = group.assignment_epoch
        if group_epoch > group.assignment_epoch:
            target = self._assign(members, group.target, topics)
            for m, partitions in sorted(target.items()):
                if group.target.get(m) != partitions:
                    records.append(codec.target_member_record(group.group_id, m, partitions))
            assignment_epoch = group_epoch
            records.append(codec.target_metadata_record(group.group_id, assignment_epoch, now_ms))
        new_assignment = target.get(member_id, {})
        if updated.member_epoch != assignment_epoch or updated.assigned != new_assignment:
            updated.previous_member_epoch = updated.member_epoch
            updated.member_epoch = assignment_epoch
            updated.assigned = new_assignment
            records.append(codec.current_assignment_record(group.group_id, member_id, updated.assignment_value()))
        group.session_deadlines[member_id] = now_ms + session_timeout_ms
        send_assignment = request.member_epoch == 0 or updated.assigned != member.assigned or joining
        return records, HeartbeatAnswer(
            member_id=member_id, member_epoch=updated.member_epoch, heartbeat_interval_ms=heartbeat_interval_ms,
            assignment=updated.assigned if send_assignment else None), False

    @staticmethod
    def _initialized(group: ShareGroup, subscribed: Iterable[str], topics: TopicsSnapshot) -> codec.NamedPartitions:
        out = dict(group.initialized)
        for name in subscribed:
            topic_id, count = topics[name]
            _, known = out.get(topic_id, (name, frozenset()))
            out[topic_id] = (name, known | frozenset(range(count)))
        return out

    @staticmethod
    def _assign(members: dict[str, ShareMember], previous: dict[str, Partitions], topics: TopicsSnapshot
                ) -> dict[str, Partitions]:
        spec = AssignmentSpec(
            subscriptions={m.member_id: frozenset(topics[n][0] for n in m.subscribed_topic_names if n in topics)
                           for m in members.values()},
            partition_counts={topic_id: count for topic_id, count in topics.values()},
            previous=previous)
        return {m: {t: ps for t, ps in partitions.items() if ps} for m, partitions in simple(spec).items()}

    def fence(self, group: ShareGroup, member_id: str, topics: TopicsSnapshot) -> list[CoordinatorRecord]:
        """A member leaves or its session ended: its records go, and the group epoch
        moves so the others are given its partitions on their next heartbeat."""
        records = _member_tombstones(group.group_id, member_id)
        rest = {n for m in group.members.values() if m.member_id != member_id
                for n in m.subscribed_topic_names if n in topics}
        records.append(codec.group_metadata_record(group.group_id, group.group_epoch + 1,
                                                   metadata_hash(topics, rest)))
        return records

    @staticmethod
    def expired_members(group: ShareGroup, now_ms: int) -> list[str]:
        return sorted(m for m, deadline in group.session_deadlines.items() if deadline <= now_ms)

    @staticmethod
    def deadlines(group: ShareGroup) -> Iterable[int]:
        return group.session_deadlines.values()
