"""KIP-848 consumer groups: the state a ConsumerGroupHeartbeat drives, and its rules.

The broker computes every member's assignment. Each heartbeat may bump the group epoch
(a member joined, left, changed its subscription, or a subscribed topic changed), then
the target assignment is recomputed by the group's server-side assignor for that epoch,
and the member is reconciled towards its target: partitions it must give up are revoked
first (it keeps its epoch until it reports them gone), partitions another member still
owns are held back (UNRELEASED), the rest are assigned with the new epoch.

As everywhere in the coordinator, handlers only compute records; ``replay`` is what
changes a group (see coordinator.py). Session and rebalance deadlines are memory only.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar

from kio.schema.errors import ErrorCode

from coordinator.group import consumer_log_codec as codec
from coordinator.group import consumer_protocol
from coordinator.group.assignors import ASSIGNORS, AssignmentSpec, Partitions
from coordinator.group.group_types import CONSUMER, ConsumerGroupConfig, Refused
from coordinator.group.modern_group_records import member_tombstones, members_tombstones, replay_per_member
from coordinator.runtime import CoordinatorRecord

if TYPE_CHECKING:
    from coordinator.group.streams_group import StreamsGroup

E = ErrorCode
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
FIRST_VERSION_WITH_CLIENT_MEMBER_ID = 1
TopicsSnapshot = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (id, partition count)


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    # Set for a member that joined with JoinGroup (the classic protocol, online migration).
    classic: codec.ClassicMemberMetadata | None = None

    def metadata_value(self) -> codec.MemberMetadataValue:
        return codec.MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.server_assignor, self.rebalance_timeout_ms, self.classic)

    def assignment_value(self) -> codec.CurrentAssignmentValue:
        return codec.CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                            self.assigned, self.pending_revocation)

    def subscribed_topics(self, topics: TopicsSnapshot) -> set[str]:
        names = {n for n in self.subscribed_topic_names if n in topics}
        if self.subscribed_topic_regex:
            pattern = re.compile(self.subscribed_topic_regex)
            # Every topic, internal ones too: Kafka's refreshRegularExpressions filters only
            # by the authorizer (DESCRIBE on each topic matched).
            names |= {n for n in topics if pattern.fullmatch(n)}
        return names


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    # Memory only: member id -> deadline; member id -> (deadline, member epoch it guards).
    session_deadlines: dict[str, int] = field(default_factory=dict)
    rebalance_deadlines: dict[str, tuple[int, int]] = field(default_factory=dict)
    # A classic member's next JoinGroup (after REBALANCE_IN_PROGRESS) or SyncGroup (after
    # its JoinGroup) is due by then, within its rebalance timeout, or it is removed.
    classic_deadlines: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch != self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def classic_members(self) -> list[ConsumerMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Kafka's rule for a JoinGroup into the group: the consumer protocol type, and a
        protocol every classic member already in the group supports."""
        names = set(names)
        if protocol_type != "consumer" or not names:
            return False
        for m in self.classic_members():
            names &= {name for name, _ in m.classic.protocols}
        return bool(names)

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def subscribed_topics(self, topics: TopicsSnapshot) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topics(topics)}

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for, else the broker's default."""
        counts = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        return counts.most_common(1)[0][0] if counts else default

    # -- replay ---------------------------------------------------------------------------

    def replay(self, key: codec.ConsumerKey, value: bytes | None) -> None:
        member_id = key.member or ""
        if key.kind == codec.GROUP_METADATA and value is not None:
            decoded = codec.decode_group_metadata(value)
            self.group_epoch, self.metadata_hash = decoded.epoch, decoded.metadata_hash
        elif key.kind == codec.TARGET_METADATA:
            self.assignment_epoch = 0 if value is None else codec.decode_target_metadata(value)
        elif key.kind == codec.TARGET_MEMBER:
            replay_per_member(self.target, member_id, value, codec.decode_target_member)
        elif key.kind == codec.MEMBER_METADATA:
            if value is None:
                self.members.pop(member_id, None)
                self.session_deadlines.pop(member_id, None)
                self.rebalance_deadlines.pop(member_id, None)
                self.classic_deadlines.pop(member_id, None)
                return
            v = codec.decode_member_metadata(value)
            old = self.members.get(member_id, ConsumerMember(member_id))
            self.members[member_id] = replace(
                old, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                client_host=v.client_host, subscribed_topic_names=v.subscribed_topic_names,
                subscribed_topic_regex=v.subscribed_topic_regex, server_assignor=v.server_assignor,
                rebalance_timeout_ms=v.rebalance_timeout_ms, classic=v.classic)
        elif key.kind == codec.CURRENT_ASSIGNMENT and value is not None:
            v = codec.decode_current_assignment(value)
            old = self.members.get(member_id, ConsumerMember(member_id))
            state = MemberState(v.state) if v.state in MemberState._value2member_map_ else MemberState.UNKNOWN
            self.members[member_id] = replace(
                old, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=state,
                assigned=v.assigned, pending_revocation=v.pending_revocation)

    def deletion_records(self) -> list[CoordinatorRecord]:
        """Tombstones for every record of the group (DeleteGroups of an empty group)."""
        records = members_tombstones(self.group_id, self.members, self.target, codec.MEMBER_RECORDS,
                                     codec.TARGET_MEMBER)
        records.append(codec.target_metadata_record(self.group_id, None))
        records.append(codec.group_metadata_record(self.group_id, None))
        return records


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_type: ClassVar[str] = CONSUMER  # whose checks it passes (GroupCoordinator.heartbeat_request_error)
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None  # None: not sent (unchanged since the last heartbeat)
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup into a consumer group; ``new``: the member came without a member id
    (which ``member_id`` now is), as opposed to rejoining with the one it was given."""

    group_id: str
    member_id: str
    new: bool
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error_code: ErrorCode = E.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None


def validate(request: HeartbeatRequest, assignors: Sequence[str]) -> None:
    """The request checks Kafka makes before looking at the group; raises Refused."""
    def invalid(message: str) -> Refused:
        return Refused(E.invalid_request, message)

    if not request.group_id:
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if request.api_version >= FIRST_VERSION_WITH_CLIENT_MEMBER_ID and not request.member_id:
        raise invalid("MemberId can't be empty.")
    epoch = request.member_epoch
    if epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or request.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if request.subscribed_topic_regex is not None:
        try:
            re.compile(request.subscribed_topic_regex)
        except re.error as e:
            raise Refused(E.invalid_regular_expression,
                          f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid regular expression: {e}.") from None
    if request.server_assignor is not None and request.server_assignor not in assignors:
        raise Refused(E.unsupported_assignor, f"ServerAssignor {request.server_assignor} is not supported. "
                      f"Supported assignors: {', '.join(assignors)}.")


def metadata_hash(topics: TopicsSnapshot, subscribed: Iterable[str]) -> int:
    """A fingerprint of the subscribed topics' ids and partition counts: a change bumps
    the group epoch (new partitions, a topic created that a regex matches, a deletion)."""
    text = ";".join(f"{n}:{topics[n][0]}:{topics[n][1]}" for n in sorted(subscribed))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True) if text else 0


def _is_subset(owned: Partitions | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    if owned is None:
        return True  # not reported: assume it still owns them
    return any(ps & partitions.get(t, frozenset()) for t, ps in owned.items())


class ConsumerGroups:
    """The ConsumerGroupHeartbeat logic over ConsumerGroup objects (which it never changes)."""

    def __init__(self, config: ConsumerGroupConfig, new_member_id: Callable[[], str]) -> None:
        self.config = config
        self._new_member_id = new_member_id

    def new_member_id(self) -> str:
        return self._new_member_id()

    # -- heartbeat ------------------------------------------------------------------------

    def heartbeat(
        self, group: ConsumerGroup | None, request: HeartbeatRequest, topics: TopicsSnapshot, now_ms: int,
    ) -> tuple[list[CoordinatorRecord], HeartbeatAnswer]:
        """Raises Refused; ``group`` None: no consumer group of that id yet."""
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            if group is None:
                raise Refused(E.group_id_not_found, f"Consumer group {request.group_id} not found.")
            return self._leave(group, request, topics)
        joining = request.member_epoch == 0
        if group is None:
            if not joining:
                raise Refused(E.group_id_not_found, f"Consumer group {request.group_id} not found.")
            group = ConsumerGroup(request.group_id)
        if len(group.members) >= self.config.max_size and request.member_id not in group.members:
            raise Refused(E.group_max_size_reached, "The consumer group has reached its maximum capacity of "
                          f"{self.config.max_size} members.")
        member_id = request.member_id or self._new_member_id()
        records: list[CoordinatorRecord] = []
        members = dict(group.members)
        targets = dict(group.target)
        member, is_new = self._member(group, request, member_id, members, targets, records)

        updated = replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(request.subscribed_topic_names)
                                    if request.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(request.subscribed_topic_regex or None
                                    if request.subscribed_topic_regex is not None else member.subscribed_topic_regex),
            client_id=request.client_id, client_host=request.client_host,
        )
        reconciled = self._converge(group, members, targets, member, updated, is_new, request.owned, topics,
                                    records, now_ms, self.config.session_timeout_ms)

        full = joining or (request.rebalance_timeout_ms != -1 and request.subscribed_topic_names is not None
                           and request.owned is not None)
        changed = reconciled.assigned != member.assigned or is_new
        return records, HeartbeatAnswer(
            member_id=member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=reconciled.assigned if full or changed else None)

    def _converge(
        self, group: ConsumerGroup, members: dict[str, ConsumerMember], targets: dict[str, Partitions],
        member: ConsumerMember, updated: ConsumerMember, is_new: bool, owned: Partitions | None,
        topics: TopicsSnapshot, records: list[CoordinatorRecord], now_ms: int, session_timeout_ms: int,
    ) -> ConsumerMember:
        """What a heartbeat and a classic member's JoinGroup share: persist the member's
        new metadata, bump the group epoch when subscriptions or their topics changed,
        recompute the target assignment for a new epoch, and reconcile the member one
        step towards its target. Returns the reconciled member."""
        member_id = updated.member_id
        bump = is_new or (updated.subscribed_topic_names, updated.subscribed_topic_regex) != (
            member.subscribed_topic_names, member.subscribed_topic_regex)
        if is_new or updated.metadata_value() != member.metadata_value():
            records.append(codec.member_metadata_record(group.group_id, member_id, updated.metadata_value()))
        members[member_id] = updated

        subscribed = {t for m in members.values() for t in m.subscribed_topics(topics)}
        new_hash = metadata_hash(topics, subscribed)
        group_epoch = group.group_epoch
        if bump or new_hash != group.metadata_hash:
            group_epoch += 1
            records.append(codec.group_metadata_record(group.group_id, codec.GroupMetadataValue(group_epoch, new_hash)))

        target_epoch = group.assignment_epoch
        if group_epoch > group.assignment_epoch:
            targets = self._assign(group, members, targets, topics, records)
            target_epoch = group_epoch
            records.append(codec.target_metadata_record(group.group_id, target_epoch))

        return reconcile_step(group, updated, is_new, target_epoch, targets.get(member_id, {}), members, owned,
                              codec.current_assignment_record, records, now_ms, session_timeout_ms)

    def _member(
        self, group: ConsumerGroup, request: HeartbeatRequest, member_id: str,
        members: dict[str, ConsumerMember], targets: dict[str, Partitions], records: list[CoordinatorRecord],
    ) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is about (and whether it is new), after Kafka's
        membership and epoch checks. A static member rejoining under a new member id
        takes over its predecessor's assignment."""
        joining = request.member_epoch == 0
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
                return ConsumerMember(member_id), True
            _check_epoch(member, request)
            return member, False
        existing = group.static_member(request.instance_id)
        if joining:
            if existing is None:
                return ConsumerMember(member_id), True
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and existing.member_id != member_id:
                raise Refused(E.unreleased_instance_id,
                              f"Static member {member_id} with instance id {request.instance_id} cannot join the "
                              f"group because the instance id is owned by {existing.member_id} member.")
            if existing.member_id == member_id:
                _check_epoch(existing, request)
                return existing, False
            return self._succeed(group, existing, member_id, members, targets, records), False
        if existing is None:
            raise Refused(E.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise Refused(E.fenced_instance_id, f"Static member {member_id} with instance id {request.instance_id} "
                          f"was fenced by member {existing.member_id}.")
        _check_epoch(existing, request)
        return existing, False

    @staticmethod
    def _succeed(group: ConsumerGroup, existing: ConsumerMember, member_id: str, members: dict[str, ConsumerMember],
                 targets: dict[str, Partitions], records: list[CoordinatorRecord]) -> ConsumerMember:
        """A static member's successor under a new member id takes over its assignment."""
        successor = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        records += member_tombstones(group.group_id, existing.member_id, codec.MEMBER_RECORDS)
        del members[existing.member_id]
        target = targets.pop(existing.member_id, {})
        targets[member_id] = target
        records.append(codec.member_metadata_record(group.group_id, member_id, successor.metadata_value()))
        records.append(codec.target_member_record(group.group_id, member_id, target))
        records.append(codec.current_assignment_record(group.group_id, member_id, successor.assignment_value()))
        group.session_deadlines.pop(existing.member_id, None)
        group.rebalance_deadlines.pop(existing.member_id, None)
        return successor

    def _assign(
        self, group: ConsumerGroup, members: Mapping[str, ConsumerMember], previous: Mapping[str, Partitions],
        topics: TopicsSnapshot, records: list[CoordinatorRecord],
    ) -> dict[str, Partitions]:
        probe = ConsumerGroup(group.group_id, members=dict(members))
        assignor = ASSIGNORS[probe.preferred_assignor(self.config.assignors[0])]
        subscriptions = {m.member_id: frozenset(topics[t][0] for t in m.subscribed_topics(topics))
                         for m in members.values()}
        counts = {topic_id: n for topic_id, n in topics.values()}
        targets = assignor(AssignmentSpec(subscriptions, counts, previous))
        for member_id, partitions in targets.items():
            if previous.get(member_id) != partitions or member_id not in group.target:
                records.append(codec.target_member_record(group.group_id, member_id, partitions))
        return targets

    # -- classic members (KIP-848 online migration) -----------------------------------------

    def classic_join(
        self, group: ConsumerGroup, join: ClassicJoin, topics: TopicsSnapshot, now_ms: int,
    ) -> tuple[list[CoordinatorRecord], ConsumerMember]:
        """A JoinGroup into a consumer group with members: the member (new, or rejoining to
        catch up) is assigned by the server-side assignor like any other, from the
        subscription in its protocol metadata, and answered at once with its member epoch
        as the generation. Raises Refused."""
        if not group.supports_classic_protocols(join.protocol_type, (name for name, _ in join.protocols)):
            raise Refused(E.inconsistent_group_protocol, f"Member {join.member_id}'s protocols are not supported.")
        if len(group.members) >= self.config.max_size and join.member_id not in group.members:
            raise Refused(E.group_max_size_reached, "The consumer group has reached its maximum capacity of "
                          f"{self.config.max_size} members.")
        try:
            subscription = consumer_protocol.decode_subscription(join.protocols[0][1])
        except consumer_protocol.MalformedProtocol as e:
            raise Refused(E.inconsistent_group_protocol, f"Malformed consumer protocol subscription: {e}.") from None
        records: list[CoordinatorRecord] = []
        members = dict(group.members)
        targets = dict(group.target)
        member, is_new = self._classic_member(group, join, members, targets, records)
        classic = codec.ClassicMemberMetadata(join.session_timeout_ms, tuple(join.protocols))
        updated = replace(
            member, instance_id=join.instance_id, rack_id=subscription.rack_id or member.rack_id,
            rebalance_timeout_ms=join.rebalance_timeout_ms, subscribed_topic_names=subscription.topics,
            subscribed_topic_regex=None, client_id=join.client_id, client_host=join.client_host, classic=classic)
        owned = {topics[name][0]: ps for name, ps in subscription.owned_partitions.items() if name in topics and ps}
        reconciled = self._converge(group, members, targets, member, updated, is_new, owned, topics, records,
                                    now_ms, join.session_timeout_ms)
        group.classic_deadlines[reconciled.member_id] = now_ms + join.rebalance_timeout_ms  # its SyncGroup
        return records, reconciled

    def _classic_member(
        self, group: ConsumerGroup, join: ClassicJoin, members: dict[str, ConsumerMember],
        targets: dict[str, Partitions], records: list[CoordinatorRecord],
    ) -> tuple[ConsumerMember, bool]:
        if join.instance_id is None:
            member = group.members.get(join.member_id)
            if member is None:  # also a member id handed out with MEMBER_ID_REQUIRED
                return ConsumerMember(join.member_id), True
            if member.classic is None:
                raise Refused(E.unknown_member_id, f"Member {join.member_id} does not use the classic protocol.")
            return member, False
        existing = group.static_member(join.instance_id)
        if existing is None:
            return ConsumerMember(join.member_id), True
        if existing.member_id == join.member_id:
            return existing, False
        if not join.new:
            raise Refused(E.fenced_instance_id, f"Static member {join.member_id} with instance id "
                          f"{join.instance_id} was fenced by member {existing.member_id}.")
        # A classic static member coming back under a new id takes its predecessor's place.
        return self._succeed(group, existing, join.member_id, members, targets, records), False

    def classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                       generation_id: int) -> ConsumerMember:
        """The classic member a SyncGroup or Heartbeat names, after Kafka's checks. Raises Refused."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise Refused(E.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise Refused(E.unknown_member_id, f"Member with instance id {instance_id} is not a member of "
                              f"group {group.group_id}.")
            if member.member_id != member_id:
                raise Refused(E.fenced_instance_id, f"Static member {member_id} with instance id {instance_id} "
                              f"was fenced by member {member.member_id}.")
        if member.classic is None:
            raise Refused(E.unknown_member_id, f"Member {member.member_id} does not use the classic protocol.")
        if generation_id != member.member_epoch:
            raise Refused(E.illegal_generation, f"The received generation id {generation_id} does not match "
                          f"the expected member epoch {member.member_epoch}.")
        return member

    def classic_sync(self, group: ConsumerGroup, member: ConsumerMember, protocol_type: str | None,
                     protocol_name: str | None, topics: TopicsSnapshot, now_ms: int) -> bytes:
        """The member's assignment as its SyncGroup answer carries it. Raises Refused."""
        if (protocol_type is not None and protocol_type != "consumer") or (
                protocol_name is not None and protocol_name != member.classic.protocols[0][0]):
            raise Refused(E.inconsistent_group_protocol, "The protocol type or name does not match the member's.")
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            raise Refused(E.rebalance_in_progress, f"A new rebalance is triggered in group {group.group_id} and "
                          f"member {member.member_id} should rejoin to catch up.")
        group.session_deadlines[member.member_id] = now_ms + member.classic.session_timeout_ms
        group.classic_deadlines.pop(member.member_id, None)
        names = {topic_id: name for name, (topic_id, _count) in topics.items()}
        assigned = {names[t]: ps for t, ps in member.assigned.items() if t in names}
        try:
            version = consumer_protocol.subscription_version(member.classic.protocols[0][1])
        except consumer_protocol.MalformedProtocol:
            version = 0
        return consumer_protocol.encode_assignment(assigned, version)

    @staticmethod
    def classic_heartbeat(group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> ErrorCode:
        """NONE, or REBALANCE_IN_PROGRESS when the member must rejoin: the group moved to a
        new epoch, it has partitions to give up, or the partitions it waits for are free."""
        group.session_deadlines[member.member_id] = now_ms + member.classic.session_timeout_ms
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waits_for_others(group, member))):
            group.classic_deadlines.setdefault(member.member_id, now_ms + member.rebalance_timeout_ms)  # its rejoin
            return E.rebalance_in_progress
        return E.none

    # -- leaving and fencing --------------------------------------------------------------

    def _leave(
        self, group: ConsumerGroup, request: HeartbeatRequest, topics: TopicsSnapshot,
    ) -> tuple[list[CoordinatorRecord], HeartbeatAnswer]:
        answer = HeartbeatAnswer(member_id=request.member_id, member_epoch=request.member_epoch)
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise Refused(E.unknown_member_id,
                              f"Member {request.member_id} is not a member of group {group.group_id}.")
            return self.fence(group, member.member_id, topics), answer
        member = group.static_member(request.instance_id)
        if member is None:
            raise Refused(E.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
        if member.member_id != request.member_id:
            raise Refused(E.fenced_instance_id, f"Static member {request.member_id} with instance id "
                          f"{request.instance_id} was fenced by member {member.member_id}.")
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Gone for now: it keeps its partitions for a session, for its successor.
            leaving = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            group.rebalance_deadlines.pop(member.member_id, None)
            return [codec.current_assignment_record(group.group_id, member.member_id, leaving.assignment_value())], answer
        return self.fence(group, member.member_id, topics), answer

    def fence(self, group: ConsumerGroup, member_id: str | Sequence[str], topics: TopicsSnapshot
              ) -> list[CoordinatorRecord]:
        """Removes members (left, session or rebalance timeout) and bumps the group epoch once."""
        gone = [member_id] if isinstance(member_id, str) else list(member_id)
        records = [r for m in gone for r in member_tombstones(group.group_id, m, codec.MEMBER_RECORDS)]
        rest = [m for m in group.members.values() if m.member_id not in gone]
        new_hash = metadata_hash(topics, {t for m in rest for t in m.subscribed_topics(topics)})
        records.append(codec.group_metadata_record(
            group.group_id, codec.GroupMetadataValue(group.group_epoch + 1, new_hash)))
        for m in gone:
            group.session_deadlines.pop(m, None)
            group.rebalance_deadlines.pop(m, None)
            group.classic_deadlines.pop(m, None)
        return records

    # -- timers ---------------------------------------------------------------------------

    def expired_members(self, group: ConsumerGroup, now_ms: int) -> list[str]:
        """Members whose session ran out, or that did not revoke within their rebalance timeout."""
        out = [m for m, d in group.session_deadlines.items() if d <= now_ms and m in group.members]
        out += [m for m in overdue_revocations(group, now_ms) if m not in out]
        out += [m for m, d in group.classic_deadlines.items() if d <= now_ms and m in group.members and m not in out]
        return out

    @staticmethod
    def deadlines(group: ConsumerGroup) -> list[int]:
        return (list(group.session_deadlines.values()) + [d for d, _e in group.rebalance_deadlines.values()]
                + list(group.classic_deadlines.values()))

    # -- offsets --------------------------------------------------------------------------

    @staticmethod
    def validate_offset_commit(
        group: ConsumerGroup, member_id: str, instance_id: str | None, member_epoch: int,
        transactional: bool, api_version: int,
    ) -> ErrorCode | None:
        if member_epoch < 0 and not group.members:
            return None  # the admin client, or a consumer without group management
        if transactional and member_epoch < 0 and not member_id and instance_id is None:
            return None  # TxnOffsetCommit without member fields (v0-v2, or not sent)
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if member.classic is not None:  # a classic member: its generation is its member epoch
            return E.illegal_generation if member_epoch != member.member_epoch else None
        if not transactional and api_version < 9:
            return E.unsupported_version
        return _epoch_error(member_epoch, member.member_epoch)

    @staticmethod
    def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return E.unknown_member_id
        if member.classic is not None:
            return E.illegal_generation if member_epoch != member.member_epoch else None
        return _epoch_error(member_epoch, member.member_epoch)


def reconcile_step(group: Any, updated: Any, is_new: bool, target_epoch: int, target: Partitions,
                   members: Mapping[str, Any], owned: Partitions | None,
                   assignment_record: Callable[[str, str, Any], CoordinatorRecord],
                   records: list[CoordinatorRecord], now_ms: int, session_timeout_ms: int,
                   settle: Callable[[Any], Any] | None = None,
                   held: Mapping[tuple[Any, int], int] | None = None, revoking_elsewhere: bool = False) -> Any:
    """A consumer or streams member's heartbeat, one step towards its target (``members``
    holds it as ``updated``): its current assignment record (written by the group's
    codec) when it changed, and its rebalance and session deadlines. Returns the
    reconciled member (``settle``: what a streams member's standby tasks add to it;
    ``held``: tasks not to be given yet besides those other members own;
    ``revoking_elsewhere``: it still owns other tasks to give up, a streams member's standbys)."""
    member_id = updated.member_id
    reconciled = reconcile(updated, target_epoch, target, {**owned_by_others(members, member_id), **(held or {})},
                           owned, revoking_elsewhere)
    if settle is not None:
        reconciled = settle(reconciled)
    if is_new or reconciled.assignment_value() != updated.assignment_value():
        records.append(assignment_record(group.group_id, member_id, reconciled.assignment_value()))
    if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
        if (reconciled.state, reconciled.member_epoch) != (updated.state, updated.member_epoch) or is_new:
            group.rebalance_deadlines[member_id] = (now_ms + reconciled.rebalance_timeout_ms, reconciled.member_epoch)
    else:
        group.rebalance_deadlines.pop(member_id, None)
    group.session_deadlines[member_id] = now_ms + session_timeout_ms
    return reconciled


def overdue_revocations(group: ConsumerGroup | StreamsGroup, now_ms: int) -> Iterable[str]:
    """Members (consumer or streams) that did not revoke within their rebalance timeout,
    at the epoch the timer guards."""
    for member_id, (deadline, epoch) in group.rebalance_deadlines.items():
        member = group.members.get(member_id)
        if (deadline <= now_ms and member is not None and member.member_epoch == epoch
                and member.state is MemberState.UNREVOKED_PARTITIONS):
            yield member_id


def _epoch_error(received: int, expected: int) -> ErrorCode | None:
    """An offset commit or fetch from another epoch than the member's (older or newer)."""
    return E.stale_member_epoch if received != expected else None


def _check_epoch(member: ConsumerMember, request: HeartbeatRequest) -> None:
    received = request.member_epoch
    if received > member.member_epoch:
        raise Refused(E.fenced_member_epoch, f"The consumer group member has a greater member epoch ({received}) "
                      f"than the one known by the group coordinator ({member.member_epoch}). "
                      "The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.previous_member_epoch or not _is_subset(request.owned, member.assigned)):
        raise Refused(E.fenced_member_epoch, f"The consumer group member has a smaller member epoch ({received}) "
                      f"than the one known by the group coordinator ({member.member_epoch}). "
                      "The member must abandon all its partitions and rejoin.")


def _waits_for_others(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition of the member's target, not yet assigned to it, is still owned by another member."""
    owned = owned_by_others(group.members, member.member_id)
    for topic_id, ps in group.target.get(member.member_id, {}).items():
        mine = member.assigned.get(topic_id, frozenset())
        if any(p not in mine and (topic_id, p) in owned for p in ps):
            return True
    return False


def owned_by_others(members: Mapping[str, ConsumerMember], excluding: str) -> dict[tuple[uuid.UUID, int], int]:
    """Partitions (a streams group's tasks) owned, assigned or still being revoked, by other members."""
    out = {}
    for m in members.values():
        if m.member_id == excluding:
            continue
        for parts in (m.assigned, m.pending_revocation):
            for topic_id, ps in parts.items():
                for p in ps:
                    out[(topic_id, p)] = m.member_epoch
    return out


def reconcile(
    member: ConsumerMember, target_epoch: int, target: Partitions,
    owned_by_others: Mapping[tuple[uuid.UUID, int], int], owned: Partitions | None,
    revoking_elsewhere: bool = False,
) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder: one step of the member towards its target. A
    streams member (its active tasks by subtopology id) moves by the same rules; with
    ``revoking_elsewhere`` (it still owns standbys to give up) it stays or goes revoking."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned_by_others, owned,
                                revoking_elsewhere)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation) or revoking_elsewhere:
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, owned_by_others, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned_by_others, owned,
                                revoking_elsewhere)
    if owned is None or owned:
        raise Refused(E.fenced_member_epoch, "The consumer group member is in a unknown state. "
                      "The member must abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, owned_by_others, owned, revoking_elsewhere)


def _next_assignment(
    member: ConsumerMember, member_epoch: int, target_epoch: int, target: Partitions,
    owned_by_others: Mapping[tuple[uuid.UUID, int], int], owned: Partitions | None,
    revoking_elsewhere: bool = False,
) -> ConsumerMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        give_up = current - keep
        new = wanted - keep
        free = frozenset(p for p in new if (topic_id, p) not in owned_by_others)
        unreleased = unreleased or free != new
        for out, ps in ((assigned, keep), (revoking, give_up), (pending, free)):
            if ps:
                out[topic_id] = ps
    if revoking and _owns_any(owned, revoking) or revoking_elsewhere:
        return _with_epoch(member, member_epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoking)
    for topic_id, ps in pending.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state, assigned, {})


def _with_epoch(member: ConsumerMember, epoch: int, state: MemberState, assigned: Partitions,
                revoking: Partitions) -> ConsumerMember:
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch, state=state,
                   assigned=assigned, pending_revocation=revoking)
