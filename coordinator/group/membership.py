"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and timers.

Each operation works on one ``ClassicGroup`` and fills an ``Outcome``: the answer to
the request at hand (None while it is parked), ``Reply`` effects for parked requests of
other members, and the records to append. Membership changes happen here, in memory,
as in Kafka's classic protocol (whose GroupMetadata records are snapshots written at
the end of a rebalance, never replayed over a live group). The one step that waits for
the log is CompletingRebalance -> Stable: the leader's assignment becomes the group's
when its GroupMetadata record is replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.group import ClassicGroup, GroupState, Member
from coordinator.group.log_codec import group_metadata_record
from coordinator.group.messages import (
    HeartbeatResponse,
    JoinGroupResponse,
    JoinProtocol,
    LeaveMemberResponse,
    MemberIdentity,
    Reply,
    SyncAssignment,
    SyncGroupResponse,
)
from coordinator.runtime import CoordinatorRecord, Result

E = ErrorCode
S = GroupState

# Kafka's classic.group.new.member.join.timeout.ms: a member that joined without an id
# cannot heartbeat, so its parked JoinGroup is given up after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
FIRST_VERSION_REQUIRING_MEMBER_ID = 4
FIRST_VERSION_SKIPPING_ASSIGNMENT = 9


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int
    reply_to: Any


@dataclass(slots=True)
class Outcome:
    response: Any = None
    replies: list[Reply] = field(default_factory=list)
    records: list[CoordinatorRecord] = field(default_factory=list)

    def reply(self, reply_to: Any, response: Any) -> None:
        self.replies.append(Reply(reply_to, response))

    def result(self, reply_to: Any = None) -> Result:
        """The request's own answer goes in ``response``, other parked ones in effects."""
        response = self.response
        effects = []
        for r in self.replies:
            if response is None and reply_to is not None and r.reply_to == reply_to:
                response = r.response
            else:
                effects.append(r)
        return Result(records=tuple(self.records), response=response, effects=tuple(effects))

    def __bool__(self) -> bool:
        return self.response is not None or bool(self.replies) or bool(self.records)


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    initial_rebalance_delay_ms: int
    group_max_size: int


class Rebalancer:
    def __init__(self, config: RebalanceConfig, new_member_uuid: Callable[[], str]) -> None:
        self.config = config
        self._new_member_uuid = new_member_uuid

    # -- JoinGroup -----------------------------------------------------------------------

    def join(self, g: ClassicGroup, req: JoinRequest, now_ms: int) -> Outcome:
        out = Outcome()
        if not self._accepts_joining_member(g, req.member_id):
            if g.remove(req.member_id) is not None:
                self._maybe_complete_join_phase(g, now_ms, out)
            out.response = JoinGroupResponse(E.group_max_size_reached)
        elif req.member_id == "":
            self._join_new_member(g, req, now_ms, out)
        else:
            self._join_existing_member(g, req, now_ms, out)
        return out

    def _accepts_joining_member(self, g: ClassicGroup, member_id: str) -> bool:
        limit = self.config.group_max_size
        if g.state is S.EMPTY:
            return True
        if g.state is S.PREPARING_REBALANCE:
            # Counting members that rejoined (not all members) lets the last ones to
            # rejoin be the ones turned away.
            member = g.members.get(member_id)
            return (member is not None and member.awaiting_join) or g.awaiting_join_count() < limit
        return member_id in g.members or len(g.members) < limit

    def _join_new_member(self, g: ClassicGroup, req: JoinRequest, now_ms: int, out: Outcome) -> None:
        if not g.supports_protocols(req.protocol_type, req.protocols):
            out.response = JoinGroupResponse(E.inconsistent_group_protocol)
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        member_id = f"{prefix}-{self._new_member_uuid()}"
        if req.group_instance_id is not None:
            old_member_id = g.static_members.get(req.group_instance_id)
            if old_member_id is not None:
                self._replace_static_member(g, old_member_id, member_id, req, now_ms, out)
            else:
                self._add_member_and_rebalance(g, member_id, req, now_ms, out)
        elif req.api_version >= FIRST_VERSION_REQUIRING_MEMBER_ID:
            # KIP-394: hand out the id first; the member joins for real with it.
            g.pending_members[member_id] = now_ms + req.session_timeout_ms
            out.response = JoinGroupResponse(E.member_id_required, member_id=member_id)
        else:
            self._add_member_and_rebalance(g, member_id, req, now_ms, out)

    def _join_existing_member(self, g: ClassicGroup, req: JoinRequest, now_ms: int, out: Outcome) -> None:
        if not g.supports_protocols(req.protocol_type, req.protocols):
            out.response = JoinGroupResponse(E.inconsistent_group_protocol, member_id=req.member_id)
            return
        if req.group_instance_id is None and req.member_id in g.pending_members:
            self._add_member_and_rebalance(g, req.member_id, req, now_ms, out)
            return
        error = g.validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            out.response = JoinGroupResponse(error, member_id=req.member_id)
            return
        member = g.members[req.member_id]
        if g.state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(g, member, req, now_ms, out)
        elif g.state is S.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # It probably missed its JoinGroup answer: give it again.
                out.response = self._joined(g, member.member_id, g.is_leader(member.member_id))
            else:
                self._update_member_and_rebalance(g, member, req, now_ms, out)
        # Stable (a group with members is never Empty). A leader's rejoin forces a
        # rebalance: its way to react to changes such as new topics.
        elif g.is_leader(member.member_id) or not member.matches(req.protocols):
            self._update_member_and_rebalance(g, member, req, now_ms, out)
        else:
            out.response = self._joined(g, member.member_id, with_members=False)

    def _add_member_and_rebalance(
        self, g: ClassicGroup, member_id: str, req: JoinRequest, now_ms: int, out: Outcome
    ) -> None:
        member = Member(
            member_id=member_id, group_instance_id=req.group_instance_id,
            client_id=req.client_id, client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms, protocol_type=req.protocol_type,
            protocols=req.protocols, join_reply_to=req.reply_to, is_new=True,
            session_deadline_ms=now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
        )
        if g.state is S.PREPARING_REBALANCE and g.previous_state is S.EMPTY:
            g.new_member_added = True  # lets the initial delay stretch once more
        g.add(member)
        self._maybe_prepare_rebalance_or_complete_join(g, now_ms, out)

    def _update_member_and_rebalance(
        self, g: ClassicGroup, member: Member, req: JoinRequest, now_ms: int, out: Outcome
    ) -> None:
        g.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.reply_to)
        self._maybe_prepare_rebalance_or_complete_join(g, now_ms, out)

    def _replace_static_member(
        self, g: ClassicGroup, old_member_id: str, new_member_id: str, req: JoinRequest,
        now_ms: int, out: Outcome,
    ) -> None:
        previous_leader = g.leader_id
        old, new = g.replace_static_member(old_member_id, new_member_id)
        if old.awaiting_join:
            out.reply(old.join_reply_to, JoinGroupResponse(E.fenced_instance_id, member_id=old_member_id))
        if old.awaiting_sync:
            out.reply(old.sync_reply_to, SyncGroupResponse(E.fenced_instance_id))
        new.session_deadline_ms = now_ms + req.session_timeout_ms
        g.update_member(new, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.reply_to)
        if g.state is S.STABLE:
            if g.protocol_name != g.select_protocol():
                self._maybe_prepare_rebalance_or_complete_join(g, now_ms, out)
                return
            # Same protocol: no rebalance, just persist the new member id, then answer.
            assignment = {m.member_id: m.assignment for m in g.members.values()}
            out.records.append(group_metadata_record(g.group_id, g.metadata_value(assignment, now_ms)))
            new.join_reply_to = None
            if req.api_version >= FIRST_VERSION_SKIPPING_ASSIGNMENT:
                # KIP-814: a returning leader learns the members but must not reassign.
                is_leader = g.is_leader(new_member_id)
                out.response = self._joined(g, new_member_id, is_leader, skip_assignment=is_leader)
            else:
                out.response = JoinGroupResponse(
                    E.none, member_id=new_member_id, generation_id=g.generation_id,
                    protocol_type=g.protocol_type, protocol_name=g.protocol_name,
                    leader=previous_leader or "",
                )
        elif g.state is S.COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: start over.
            self._prepare_rebalance(g, now_ms, out)
        else:
            self._maybe_prepare_rebalance_or_complete_join(g, now_ms, out)

    @staticmethod
    def _joined(
        g: ClassicGroup, member_id: str, with_members: bool, skip_assignment: bool = False
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            E.none, member_id=member_id, generation_id=g.generation_id,
            protocol_type=g.protocol_type, protocol_name=g.protocol_name,
            leader=g.leader_id or "", skip_assignment=skip_assignment,
            members=g.current_member_metadata() if with_members else (),
        )

    # -- the join phase ------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        if g.can_rebalance():
            self._prepare_rebalance(g, now_ms, out)
        else:
            self._maybe_complete_join_phase(g, now_ms, out)

    def _maybe_complete_join_phase(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        # The initial rebalance of an empty group always waits for its delay.
        if (
            g.state is S.PREPARING_REBALANCE
            and g.previous_state is not S.EMPTY
            and g.has_all_members_joined()
        ):
            self._complete_join(g, now_ms, out)

    def prepare_rebalance(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        """A rebalance the coordinator starts itself (a consumer group turned classic)."""
        self._prepare_rebalance(g, now_ms, out)

    def _prepare_rebalance(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        if g.state is S.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(g, E.rebalance_in_progress, now_ms, out)
        g.sync_deadline_ms = None
        initial = g.state is S.EMPTY
        g.transition_to(S.PREPARING_REBALANCE, now_ms)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            g.initial_delay = (delay, max(g.rebalance_timeout_ms() - delay, 0))
            g.join_deadline_ms = now_ms + delay
            g.new_member_added = False
        elif g.has_all_members_joined():
            self._complete_join(g, now_ms, out)
        else:
            g.initial_delay = None
            g.join_deadline_ms = now_ms + g.rebalance_timeout_ms()

    def join_deadline_reached(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        g.join_deadline_ms = None
        if g.initial_delay is not None:
            delay, remaining = g.initial_delay
            if g.new_member_added and remaining != 0:
                # Kafka's InitialDelayedJoin: each newcomer buys one more delay, until
                # the rebalance timeout is used up.
                g.new_member_added = False
                next_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                g.initial_delay = (next_delay, max(remaining - delay, 0))
                g.join_deadline_ms = now_ms + next_delay
                return
        self._complete_join(g, now_ms, out)

    def _complete_join(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        g.join_deadline_ms = None
        g.initial_delay = None
        for member in list(g.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                g.remove(member.member_id)  # dynamic members that did not rejoin in time
        if not g.maybe_elect_new_joined_leader() and g.members:
            # Only static members left and none rejoined: wait for their sessions to end.
            g.join_deadline_ms = now_ms + max(g.rebalance_timeout_ms(), 1)
            return
        g.init_next_generation(now_ms)
        if g.state is S.EMPTY:
            out.records.append(group_metadata_record(g.group_id, g.metadata_value({}, now_ms)))
            return
        for member in g.members.values():
            response = self._joined(g, member.member_id, g.is_leader(member.member_id))
            if member.awaiting_join:
                out.reply(member.join_reply_to, response)
                member.join_reply_to = None
            member.session_deadline_ms = now_ms + member.session_timeout_ms
            member.is_new = False
            g.pending_sync.add(member.member_id)
        g.sync_deadline_ms = now_ms + g.rebalance_timeout_ms()

    def _reset_and_propagate_assignment(self, g: ClassicGroup, error: ErrorCode, now_ms: int, out: Outcome) -> None:
        for member in g.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                out.reply(member.sync_reply_to, SyncGroupResponse(error))
                member.sync_reply_to = None
                member.session_deadline_ms = now_ms + member.session_timeout_ms

    # -- SyncGroup -----------------------------------------------------------------------

    def sync(
        self, g: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int,
        protocol_type: str | None, protocol_name: str | None,
        assignments: tuple[SyncAssignment, ...], reply_to: Any, now_ms: int,
    ) -> Outcome:
        out = Outcome()
        error = g.validate_member(member_id, group_instance_id)
        if error is None and generation_id != g.generation_id:
            error = E.illegal_generation
        if error is None and (
            _inconsistent(protocol_type, g.protocol_type) or _inconsistent(protocol_name, g.protocol_name)
        ):
            error = E.inconsistent_group_protocol
        if error is None and g.state is S.PREPARING_REBALANCE:
            error = E.rebalance_in_progress
        if error is not None:
            out.response = SyncGroupResponse(error)
            return out
        member = g.members[member_id]
        g.pending_sync.discard(member_id)
        if g.state is S.STABLE:
            out.response = SyncGroupResponse(E.none, g.protocol_type, g.protocol_name, member.assignment)
            return out
        member.sync_reply_to = reply_to  # CompletingRebalance: wait for the leader
        if g.is_leader(member_id):
            assignment = {a.member_id: a.assignment for a in assignments if a.member_id in g.members}
            for other in g.members:
                assignment.setdefault(other, b"")
            out.records.append(group_metadata_record(g.group_id, g.metadata_value(assignment, now_ms)))
            # Sent once the record is durable; replaying it makes the group Stable.
            for m in g.members.values():
                if m.awaiting_sync:
                    out.reply(m.sync_reply_to, SyncGroupResponse(
                        E.none, g.protocol_type, g.protocol_name, assignment[m.member_id]))
        return out

    def assignment_persisted(self, g: ClassicGroup, assignment: dict[str, bytes], now_ms: int) -> None:
        """The leader's GroupMetadata record is in the log: the generation is Stable."""
        for member in g.members.values():
            member.assignment = assignment.get(member.member_id, b"")
            if member.awaiting_sync:
                member.sync_reply_to = None  # answered by the leader's SyncGroup result
                member.session_deadline_ms = now_ms + member.session_timeout_ms
        g.transition_to(S.STABLE, now_ms)

    # -- Heartbeat -----------------------------------------------------------------------

    def heartbeat(
        self, g: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int, now_ms: int
    ) -> HeartbeatResponse:
        error = g.validate_member(member_id, group_instance_id)
        if error is not None:
            return HeartbeatResponse(error)
        if generation_id != g.generation_id:
            return HeartbeatResponse(E.illegal_generation)
        member = g.members[member_id]
        member.session_deadline_ms = now_ms + member.session_timeout_ms
        if g.state is S.PREPARING_REBALANCE:
            return HeartbeatResponse(E.rebalance_in_progress)
        return HeartbeatResponse(E.none)

    # -- LeaveGroup ----------------------------------------------------------------------

    def leave(
        self, g: ClassicGroup, members: tuple[MemberIdentity, ...], now_ms: int
    ) -> tuple[Outcome, tuple[LeaveMemberResponse, ...]]:
        out = Outcome()
        responses = []
        for ident in members:
            error: ErrorCode | None = None
            if ident.member_id == "":
                # Administrative removal by instance id (kafka-consumer-groups, KIP-345).
                member_id = (
                    g.static_members.get(ident.group_instance_id)
                    if ident.group_instance_id is not None else None
                )
                if member_id is None:
                    error = E.unknown_member_id
                else:
                    self._remove_current_member(g, member_id, out)
            elif ident.member_id in g.pending_members:
                g.remove(ident.member_id)
            else:
                error = g.validate_member(ident.member_id, ident.group_instance_id)
                if error is None:
                    self._remove_current_member(g, ident.member_id, out)
            responses.append(LeaveMemberResponse(ident.member_id, ident.group_instance_id, error or E.none))
        if any(r.error_code is E.none for r in responses):
            if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(g, now_ms, out)
            elif g.state is S.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(g, now_ms, out)
        return out, tuple(responses)

    @staticmethod
    def _remove_current_member(g: ClassicGroup, member_id: str, out: Outcome) -> None:
        member = g.members[member_id]
        # A parked request of a removed member is told to start over.
        if member.awaiting_join:
            out.reply(member.join_reply_to, JoinGroupResponse(E.unknown_member_id))
        if member.awaiting_sync:
            out.reply(member.sync_reply_to, SyncGroupResponse(E.unknown_member_id))
        g.remove(member_id)

    # -- timers --------------------------------------------------------------------------

    def session_expired(self, g: ClassicGroup, member: Member, now_ms: int, out: Outcome) -> None:
        member.session_deadline_ms = None
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # a parked request keeps a known member alive; rescheduled when answered
        self._remove_current_member(g, member.member_id, out)
        if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(g, now_ms, out)
        elif g.state is S.PREPARING_REBALANCE and g.has_all_members_joined():
            self._complete_join(g, now_ms, out)

    def pending_member_expired(self, g: ClassicGroup, member_id: str, now_ms: int, out: Outcome) -> None:
        g.remove(member_id)
        if g.state is S.PREPARING_REBALANCE and g.has_all_members_joined():
            self._complete_join(g, now_ms, out)

    def sync_deadline_reached(self, g: ClassicGroup, now_ms: int, out: Outcome) -> None:
        """Members that never sent SyncGroup for this generation are dropped."""
        g.sync_deadline_ms = None
        if g.state not in (S.COMPLETING_REBALANCE, S.STABLE) or not g.pending_sync:
            return
        for member_id in list(g.pending_sync):
            g.remove(member_id)
        self._prepare_rebalance(g, now_ms, out)

    def unload(self, g: ClassicGroup, out: Outcome) -> None:
        """The partition moved away: parked requests learn it from NOT_COORDINATOR."""
        for member in g.members.values():
            if member.awaiting_join:
                out.reply(member.join_reply_to, JoinGroupResponse(E.not_coordinator, member_id=member.member_id))
            if member.awaiting_sync:
                out.reply(member.sync_reply_to, SyncGroupResponse(E.not_coordinator))


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
