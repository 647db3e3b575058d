"""A classic consumer group: its members, generation, state and rebalance timers.

Membership is volatile, exactly as in Kafka's classic protocol: joins, heartbeats and
timers change it in memory without writing anything. What is durable is the snapshot
Kafka writes at the end of each rebalance (GroupMetadataValue), from which a group is
rebuilt when its partition loads (``ClassicGroup.from_record``).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.log_codec import GroupMetadataValue, MemberMetadata
from coordinator.group.messages import JoinGroupResponseMember, JoinProtocol

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    """DEAD is only ever reported (DescribeGroups of an unknown group): a deleted or
    unloaded group is simply dropped."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.PREPARING_REBALANCE: {
        GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
}


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    assignment: bytes = b""
    # Reply tokens of a parked JoinGroup / SyncGroup (None: not waiting).
    join_reply_to: Any = None
    sync_reply_to: Any = None
    # Joined without a member id and not yet through a join phase: expires sooner.
    is_new: bool = False
    session_deadline_ms: int | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_reply_to is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_reply_to is not None

    def metadata(self, protocol: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        return b""

    def matches(self, protocols: tuple[JoinProtocol, ...]) -> bool:
        return self.protocols == protocols


@dataclass(slots=True, eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Members told MEMBER_ID_REQUIRED, by id, with the deadline to come back by.
    pending_members: dict[str, int] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    supported_protocols: Counter[str] = field(default_factory=Counter)
    # The join phase ends at join_deadline_ms. During the initial rebalance of an empty
    # group, initial_delay holds (delay, remaining) for Kafka's InitialDelayedJoin.
    join_deadline_ms: int | None = None
    initial_delay: tuple[int, int] | None = None
    new_member_added: bool = False
    sync_deadline_ms: int | None = None

    # -- state ---------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    # -- membership ----------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.supported_protocols.update(p.name for p in member.protocols)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(p.name for p in member.protocols)
            self.supported_protocols += Counter()  # drop zero counts
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def update_member(
        self, member: Member, protocols: tuple[JoinProtocol, ...],
        rebalance_timeout_ms: int, session_timeout_ms: int, join_reply_to: Any,
    ) -> None:
        self.supported_protocols.subtract(p.name for p in member.protocols)
        self.supported_protocols.update(p.name for p in protocols)
        self.supported_protocols += Counter()
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.join_reply_to = join_reply_to

    def replace_static_member(self, old_member_id: str, new_member_id: str) -> tuple[Member, Member]:
        """Hands an instance id's membership to a new member id; returns (old, new)."""
        old = self.members[old_member_id]
        new = Member(
            member_id=new_member_id, group_instance_id=old.group_instance_id,
            client_id=old.client_id, client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms, protocol_type=old.protocol_type,
            protocols=old.protocols, assignment=old.assignment,
        )
        # Same place in the member order (the order the leader is shown).
        self.members = {
            (new_member_id if k == old_member_id else k): (new if k == old_member_id else m)
            for k, m in self.members.items()
        }
        assert old.group_instance_id is not None
        self.static_members[old.group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return old, new

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
            return None
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    def validate_offset_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int, transactional: bool
    ) -> ErrorCode | None:
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return None  # a simple consumer, or the admin client: fine while nobody is in
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if not transactional and self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return None

    # -- the join phase ------------------------------------------------------------------

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocols: tuple[JoinProtocol, ...]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and any(
            self.supported_protocols[p.name] == len(self.members) for p in protocols
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that most members list first."""
        candidates = [p for p, n in self.supported_protocols.items() if n == len(self.members)]
        votes = Counter({p: 0 for p in candidates})
        for member in self.members.values():
            votes[next(p.name for p in member.protocols if p.name in votes)] += 1
        order = {p: i for i, p in enumerate(candidates)}
        return max(candidates, key=lambda p: (votes[p], -order[p]))

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keeps the leader if it rejoined, else promotes a member that did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def current_member_metadata(self) -> tuple[JoinGroupResponseMember, ...]:
        return tuple(
            JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # -- offsets -------------------------------------------------------------------------

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members' ``consumer`` subscriptions name; None when unknowable."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = consumer_subscription_topics(member.metadata(self.protocol_name))
            if member_topics is None:
                return None
            topics.update(member_topics)
        return frozenset(topics)

    # -- the durable snapshot ------------------------------------------------------------

    def metadata_value(self, assignment: dict[str, bytes], now_ms: int) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=now_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        group = cls(
            group_id=group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=value.current_state_timestamp_ms,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
        )
        for m in value.members:
            group.add(Member(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=(JoinProtocol(value.protocol or "", m.subscription),),
                assignment=m.assignment,
            ))
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        return group


def consumer_subscription_topics(metadata: bytes) -> list[str] | None:
    """The topic names of a ConsumerProtocolSubscription (any version), None if malformed.

    Layout: int16 version, then an int32-counted array of int16-length topic names; the
    fields after it (user data, owned partitions, generation, rack) do not matter here.
    """
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
            topics.append(bytes(metadata[pos + 2 : pos + 2 + n]).decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
