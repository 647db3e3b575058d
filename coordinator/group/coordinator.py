"""The classic group coordinator over the __consumer_offsets partitions it owns.

Handlers return ``Result(records, response, effects)``. The runtime appends ``records``
to the partition of the group (``partition_for``), calls ``replay`` for each, then
sends ``response`` and carries out ``effects``: ``Reply(reply_to, response)`` answers a
JoinGroup or SyncGroup that was parked (its own handler returned ``response=None``).
``TransactionalOffsetRecord`` records go into a transactional batch of their producer.
``poll(now_ms)`` runs the timers that ``next_deadline()`` announces. Handlers, replay
and poll must be called from one serialized context per coordinator, and a Result's
records replayed before the next call: each call sees everything earlier ones did.

What is durable changes only in ``replay``: committed and pending offsets, and groups
as of their last GroupMetadata record. Membership in flight is memory only, as on
Kafka (see membership.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from coordinator.group import log_codec
from coordinator.group.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from coordinator.group.group_types import (
    CONSUMER, SHARE, STREAMS, ConsumerGroupConfig, Refused, ShareGroupConfig, StreamsGroupConfig, key_type, type_code,
    type_codec,
)
from coordinator.group.membership import JoinRequest, Outcome, RebalanceConfig, Rebalancer, Reply
from coordinator.group.messages import (
    NO_GENERATION,
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
    FetchedPartition,
    FetchedTopic,
    HeartbeatResponse,
    JoinGroupResponse,
    JoinProtocol,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListedGroup,
    ListGroupsResponse,
    MemberIdentity,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetToCommit,
    PartitionError,
    SyncAssignment,
    SyncGroupResponse,
    TopicErrors,
    TransactionalOffsetRecord,
    TxnOffsetCommitResponse,
)
from coordinator.group.offsets import CommittedOffset, OffsetStore
from coordinator.partitioning import partition_for
from coordinator.runtime import CoordinatorRecord, PartitionLoads, Result, Timer, TimerEvent, combined
from protocol.names import TopicPartition

if TYPE_CHECKING:  # each group type's code is imported when a group of the type first needs it
    from coordinator.group.consumer_group import ClassicJoin, ConsumerGroup, ConsumerGroups, HeartbeatAnswer
    from coordinator.group.consumer_group import HeartbeatRequest, TopicsSnapshot
    from coordinator.group.consumer_log_codec import ConsumerKey
    from coordinator.group.share_log_codec import ShareKey
    from coordinator.group.streams_log_codec import StreamsKey
    from coordinator.group.share_group import ShareGroup, ShareGroups, ShareHeartbeatRequest
    from coordinator.group.streams_group import StreamsGroup, StreamsGroups, StreamsHeartbeatAnswer
    from coordinator.group.streams_group import StreamsHeartbeatRequest

log = logging.getLogger(__name__)
E = ErrorCode
S = GroupState
NO_PRODUCER_ID = -1
FIRST_OFFSET_COMMIT_VERSION_WITH_GROUP_ID_NOT_FOUND = 9
FIRST_TXN_OFFSET_COMMIT_VERSION_WITH_MEMBER = 3
FIRST_JOIN_VERSION_REQUIRING_MEMBER_ID = 4
GROUP_DEADLINES = "group deadlines"  # the coordinator's timer (``timers``)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's settings, by their Kafka names, that the group coordinator consults."""

    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    group_initial_rebalance_delay_ms: int = 100  # group.initial.rebalance.delay.ms (local default)
    group_min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    group_max_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()  # group.consumer.* (KIP-848)
    share: ShareGroupConfig = ShareGroupConfig()  # group.share.* (KIP-932)
    streams: StreamsGroupConfig = StreamsGroupConfig()  # group.streams.* (KIP-1071)



@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int = 0
    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    offsets: OffsetStore = field(default_factory=OffsetStore)
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    share_groups: dict[str, ShareGroup] = field(default_factory=dict)
    streams_groups: dict[str, StreamsGroup] = field(default_factory=dict)
    # Session deadlines of a new consumer, share or streams group's first member, until its records replay.
    new_group_deadlines: dict[str, dict[str, int]] = field(default_factory=dict)
    # The end of a new streams group's initial rebalance delay, likewise.
    new_group_assignment_delays: dict[str, int] = field(default_factory=dict)

    def typed(self, kind: str) -> dict:
        """The groups of one type here: "classic", "consumer", "share" or "streams"."""
        return {"classic": self.groups, "consumer": self.consumer_groups, "share": self.share_groups,
                "streams": self.streams_groups}[kind]

    def holds(self, group_id: str, kinds: Iterable[str]) -> bool:
        """Whether a group of one of these types has this id here."""
        return any(group_id in self.typed(kind) for kind in kinds)


def _not_a(group_id: str, kind: str) -> str:
    """Kafka's message when a group id belongs to a group of another type."""
    return f"Group {group_id} is not a {kind} group."


def _random_uuid() -> str:
    return str(uuid.uuid4())


class GroupCoordinator:
    def __init__(self, config: GroupConfig | None = None, new_member_uuid: Callable[[], str] = _random_uuid) -> None:
        self.config = config or GroupConfig()
        self._rebalancer = Rebalancer(
            RebalanceConfig(self.config.group_initial_rebalance_delay_ms, self.config.group_max_size),
            new_member_uuid,
        )
        self._partitions: dict[int, _Partition] = {}
        # Whether each partition is loaded: the runtime that drives this coordinator keeps it.
        self.loads = PartitionLoads()
        self._new_member_uuid = new_member_uuid
        # The topics KIP-848 assignments are made of; the broker sets this.
        self.topics: Callable[[], TopicsSnapshot] = dict
        # A share or streams group's (session timeout, heartbeat interval), by group type
        # ("share", "streams") and id: its group configs or the broker's; the broker sets this.
        self.group_timeouts: Callable[[str, str], tuple[int, int]] = self._configured_timeouts
        # A share group's share.assignment.interval.ms (None: the broker's); the broker sets this.
        self.share_assignment_interval: Callable[[str], int | None] = lambda _group_id: None
        # A streams group's settings, the broker's with its group configs (None: the
        # broker's); the broker sets this.
        self.streams_group_config: Callable[[str], StreamsGroupConfig] | None = None

    # The KIP-848, KIP-932 and KIP-1071 group types, each made (and its code imported) on
    # first use: a coordinator that never sees a group of a type never loads it.

    @cached_property
    def consumer(self) -> ConsumerGroups:
        return type_code(CONSUMER).ConsumerGroups(self.config.consumer, self._new_member_uuid)

    @cached_property
    def share(self) -> ShareGroups:
        return type_code(SHARE).ShareGroups(self.config.share, lambda: self.topics())

    @cached_property
    def streams(self) -> StreamsGroups:
        streams = type_code(STREAMS).StreamsGroups(self.config.streams)
        if self.streams_group_config is not None:
            streams.group_config = self.streams_group_config
        return streams

    def _configured_timeouts(self, group_type: str, _group_id: str) -> tuple[int, int]:
        config = self.config.share if group_type == "share" else self.config.streams
        return config.session_timeout_ms, config.heartbeat_interval_ms

    # -- placement, ownership and inspection ----------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def load_partition(self, partition: int, coordinator_epoch: int = 0) -> None:
        """Become coordinator for ``partition``: forget what was held; replay comes next."""
        self._partitions[partition] = _Partition(coordinator_epoch)

    def coordinator_epoch(self, partition: int) -> int | None:
        state = self._partitions.get(partition)
        return None if state is None else state.coordinator_epoch

    def finish_loading(self, partition: int, now_ms: int) -> list[Result]:
        """Serve the partition. Loaded members get a full session to send a heartbeat."""
        state = self._partitions[partition]
        for group in state.groups.values():
            for member in group.members.values():
                member.session_deadline_ms = now_ms + member.session_timeout_ms
        for consumer_group in state.consumer_groups.values():
            for member_id, m in consumer_group.members.items():
                timeout = m.classic.session_timeout_ms if m.classic else self.config.consumer.session_timeout_ms
                consumer_group.session_deadlines[member_id] = now_ms + timeout
        for share_group in state.share_groups.values():
            session_timeout_ms, _ = self.group_timeouts("share", share_group.group_id)
            for member_id in share_group.members:
                share_group.session_deadlines[member_id] = now_ms + session_timeout_ms
        for streams_group in state.streams_groups.values():
            session_timeout_ms, _ = self.group_timeouts("streams", streams_group.group_id)
            for member_id in streams_group.members:
                streams_group.session_deadlines[member_id] = now_ms + session_timeout_ms
        return []

    def unload_partition(self, partition: int) -> list[Result]:
        """Forget the partition; parked JoinGroup/SyncGroup requests get NOT_COORDINATOR."""
        state = self._partitions.pop(partition, None)
        out = Outcome()
        if state is not None:
            for group in state.groups.values():
                self._rebalancer.unload(group, out)
        return [out.result()]

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self._stored(group_id, "consumer")

    def share_group(self, group_id: str) -> ShareGroup | None:
        return self._stored(group_id, "share")

    def streams_group(self, group_id: str) -> StreamsGroup | None:
        return self._stored(group_id, "streams")

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._stored(group_id, "classic")

    def _stored(self, group_id: str, kind: str) -> Any:
        """The group of this type with this id, if this coordinator holds it."""
        state = self._partitions.get(self.partition_for(group_id))
        return None if state is None else state.typed(kind).get(group_id)

    def committed_offset(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        state = self._partitions.get(self.partition_for(group_id))
        return None if state is None else state.offsets.get(group_id, (topic, partition))

    def pending_offsets(self, partition: int, producer_id: int) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """The offsets ``producer_id``'s open transaction committed on ``partition``, by group."""
        state = self._partitions.get(partition)
        pending = {} if state is None else state.offsets.pending.get(producer_id, {})
        return {group_id: dict(offsets) for group_id, offsets in pending.items()}

    def has_pending_offsets(self, group_id: str) -> bool:
        state = self._partitions.get(self.partition_for(group_id))
        return state is not None and bool(state.offsets.pending_partitions(group_id))

    # -- replay --------------------------------------------------------------------------

    # Group metadata records are replayed in order into live groups: load replays all.
    replays_latest_record_per_key = False

    def replay(
        self, record: CoordinatorRecord, offset: int, timestamp_ms: int, producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        """Applies one record; ``producer_id``: of its transactional batch (an offset
        commit that stays pending until that producer's marker)."""
        try:
            key = log_codec.decode_key(record.key)
        except log_codec.UnknownKeyVersion as e:
            group_type = key_type(e.version)
            try:
                if group_type == CONSUMER:
                    self._replay_consumer(type_codec(CONSUMER).decode_key(e.version, record.key), record.value)
                elif group_type == SHARE:
                    self._replay_share(type_codec(SHARE).decode_key(e.version, record.key), record.value,
                                       timestamp_ms)
                elif group_type == STREAMS:
                    self._replay_streams(type_codec(STREAMS).decode_key(e.version, record.key), record.value)
            except log_codec.LogCodecError as bad:
                log.warning("skipping a malformed group record at offset %d: %s", offset, bad)
            return
        state = self._partitions.get(self.partition_for(key.group))
        if state is None:
            return  # the partition is not ours (any more)
        if isinstance(key, log_codec.OffsetCommitKey):
            self._replay_offset(state, key, record.value, offset,
                                None if producer_id == NO_PRODUCER_ID else producer_id)
        else:
            self._replay_group(state, key.group, record.value, timestamp_ms)

    def _replay_consumer(self, key: ConsumerKey, value: bytes | None) -> None:
        target = self._replay_target(CONSUMER, key, value, type_codec(CONSUMER).GROUP_METADATA,
                                     type_code(CONSUMER).ConsumerGroup)
        if target is not None:
            target[1].replay(key, value)

    def _replay_share(self, key: ShareKey, value: bytes | None, timestamp_ms: int = 0) -> None:
        target = self._replay_target(SHARE, key, value, type_codec(SHARE).GROUP_METADATA, type_code(SHARE).ShareGroup)
        if target is not None:
            target[1].replay(key, value, timestamp_ms)

    def _replay_streams(self, key: StreamsKey, value: bytes | None) -> None:
        target = self._replay_target(STREAMS, key, value, type_codec(STREAMS).GROUP_METADATA,
                                     type_code(STREAMS).StreamsGroup)
        if target is None:
            return
        state, group, created = target
        if created:
            group.assignment_delayed_until = state.new_group_assignment_delays.pop(key.group, None)
            group.initial_delay = group.assignment_delayed_until is not None
            # The placeholder an earlier offset commit of the group made (compaction may
            # have removed the group's first records).
            classic = state.groups.get(key.group)
            if classic is not None and classic.state is S.EMPTY and not classic.generation_id:
                del state.groups[key.group]
        group.replay(key, value)

    def _replay_target(self, kind: str, key: Any, value: bytes | None, metadata_kind: int,
                       new_group: Callable[[str], Any]) -> tuple[_Partition, Any, bool] | None:
        """(partition state, group, created) a modern group's record replays into: the group
        is created on its first record, with the session deadlines its first heartbeat set.
        None where nothing replays: not this coordinator's group, or a tombstone (that of
        the group's metadata removes the group)."""
        state = self._partitions.get(self.partition_for(key.group))
        if state is None:
            return None
        groups = state.typed(kind)
        if key.kind == metadata_kind and value is None:
            groups.pop(key.group, None)
            return None
        group = groups.get(key.group)
        if group is not None:
            return state, group, False
        if value is None:
            return None
        group = groups[key.group] = new_group(key.group)
        group.session_deadlines.update(state.new_group_deadlines.pop(key.group, {}))
        return state, group, True

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` reached ``partition``."""
        state = self._partitions.get(partition)
        if state is not None:
            state.offsets.complete_transaction(producer_id, commit)

    @staticmethod
    def _replay_offset(
        state: _Partition, key: log_codec.OffsetCommitKey, value: bytes | None,
        record_offset: int, producer_id: int | None,
    ) -> None:
        tp = (key.topic, key.partition)
        if value is None:
            state.offsets.delete(key.group, tp)
            return
        decoded = log_codec.decode_offset_commit_value(value)
        committed = CommittedOffset(
            offset=decoded.offset, leader_epoch=decoded.leader_epoch, metadata=decoded.metadata,
            commit_timestamp_ms=decoded.commit_timestamp_ms,
            expire_timestamp_ms=decoded.expire_timestamp_ms, record_offset=record_offset,
        )
        # Committing offsets without group membership makes a "simple" (empty) group.
        if key.group not in state.consumer_groups and key.group not in state.streams_groups:
            state.groups.setdefault(key.group, ClassicGroup(key.group))
        if producer_id is None:
            state.offsets.commit(key.group, tp, committed)
        else:
            state.offsets.add_pending(producer_id, key.group, tp, committed)

    def _replay_group(self, state: _Partition, group_id: str, value: bytes | None, timestamp_ms: int) -> None:
        if value is None:
            state.groups.pop(group_id, None)
            return
        decoded = log_codec.decode_group_metadata_value(value)
        group = state.groups.get(group_id)
        if group is None or self.loads.is_loading(self.partition_for(group_id)):
            state.groups[group_id] = ClassicGroup.from_record(group_id, decoded)
        elif group.state is S.COMPLETING_REBALANCE and group.generation_id == decoded.generation:
            assignment = {m.member_id: m.assignment for m in decoded.members}
            self._rebalancer.assignment_persisted(group, assignment, timestamp_ms)
        # Otherwise the live group already is what the record describes (an empty
        # generation, a static member's new id): the handler changed it in memory.

    # -- what a request is answered before its group's partition is asked -----------------
    # Kafka's group coordinator service makes these checks before it schedules a request,
    # so any node answers them; the writes below run only requests that passed them (the
    # group service asks first, then routes the write through the runtime).

    @staticmethod
    def group_id_error(group_id: str | None) -> ErrorCode | None:
        """INVALID_GROUP_ID for an empty group id: the check of the APIs naming one group
        (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, TxnOffsetCommit, OffsetDelete), and
        of each group a describe names. OffsetCommit and OffsetFetch do not make it: Kafka
        keeps serving the empty group id there for old clients (refusing only a null id,
        which their wire formats cannot carry), so "" is a group like any other."""
        return None if group_id else E.invalid_group_id

    def join_group_request_error(self, group_id: str, member_id: str, session_timeout_ms: int
                                 ) -> JoinGroupResponse | None:
        """A JoinGroup's: an empty group id, a session timeout out of the broker's bounds.
        None: neither."""
        error = self.group_id_error(group_id)
        if error is None and not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                                  <= self.config.group_max_session_timeout_ms):
            error = E.invalid_session_timeout
        return None if error is None else JoinGroupResponse(error, member_id=member_id)

    def heartbeat_request_error(self, request: HeartbeatRequest | ShareHeartbeatRequest | StreamsHeartbeatRequest
                                ) -> HeartbeatAnswer | StreamsHeartbeatAnswer | None:
        """A consumer, share or streams group heartbeat's (INVALID_REQUEST,
        UNSUPPORTED_ASSIGNOR, ...): the answer, or None when it passes."""
        code = type_code(request.group_type)
        try:
            if request.group_type == CONSUMER:
                code.validate(request, self.config.consumer.assignors)
            else:
                code.validate(request)
        except Refused as refused:
            if request.group_type == STREAMS:
                return code.StreamsHeartbeatAnswer(refused.error, refused.message)
            return type_code(CONSUMER).HeartbeatAnswer(refused.error, refused.message)  # a share heartbeat's too
        return None

    # -- lookups -------------------------------------------------------------------------

    def _served_partition(self, group_id: str) -> _Partition:
        """The group's partition, for the writes: the runtime runs them only on a
        partition it serves."""
        return self._partitions[self.partition_for(group_id)]

    def _serving(self, group_id: str) -> tuple[ErrorCode | None, _Partition | None]:
        """For the reads asked outside the runtime (the describes, OffsetFetch), which
        Kafka checks per group: the group's partition, or why it is not served here."""
        partition = self.partition_for(group_id)
        refusal = self.loads.refusal(partition)
        return (refusal, None) if refusal is not None else (None, self._partitions[partition])

    def _typed_group(self, group_id: str, kind: str, rivals: tuple[str, ...]) -> tuple[ErrorCode, str | None, Any]:
        """(error, message, group) as a modern group's Describe answers for one group: the
        group of type ``kind`` with this id, or the error Kafka gives (saying "not a
        ``kind`` group" where a group of a type in ``rivals`` has the id)."""
        error = self.group_id_error(group_id)
        if error is not None:
            return error, None, None
        error, state = self._serving(group_id)
        if state is None:
            return error, None, None
        group = state.typed(kind).get(group_id)
        if group is None:
            if state.holds(group_id, rivals):
                return E.group_id_not_found, _not_a(group_id, kind), None
            return E.group_id_not_found, f"Group {group_id} not found.", None
        return E.none, None, group

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------

    def join_group(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
        protocols: Sequence[JoinProtocol], session_timeout_ms: int, rebalance_timeout_ms: int,
        client_id: str, client_host: str, api_version: int, reply_to: Any, now_ms: int,
    ) -> Result[JoinGroupResponse]:
        """``rebalance_timeout_ms``: JoinGroup v0 has none; pass the session timeout. For a
        join that passed ``join_group_request_error``."""
        _require_reply_to(reply_to)
        state = self._served_partition(group_id)
        if group_id in state.share_groups:
            return Result(response=JoinGroupResponse(E.inconsistent_group_protocol, member_id=member_id))
        streams_group = state.streams_groups.get(group_id)
        if streams_group is not None and streams_group.members:
            return Result(response=JoinGroupResponse(E.inconsistent_group_protocol, member_id=""))
        consumer_group = state.consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.members:
            # KIP-848 online migration: a classic member joins the consumer group.
            return self._join_consumer_group(
                consumer_group, type_code(CONSUMER).ClassicJoin(
                    group_id=group_id, member_id=member_id or self.consumer.new_member_id(), new=not member_id,
                    instance_id=group_instance_id, protocol_type=protocol_type,
                    protocols=tuple((p.name, p.metadata) for p in protocols), session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms, client_id=client_id, client_host=client_host),
                api_version, now_ms)
        # An empty consumer or streams group becomes a classic group: its records are
        # deleted, its offsets stay.
        records = consumer_group.deletion_records() if consumer_group is not None else []
        if streams_group is not None:
            records = streams_group.deletion_records()
        group = state.groups.get(group_id)
        if group is None:
            if member_id:
                return Result(response=JoinGroupResponse(E.unknown_member_id, member_id=member_id))
            group = state.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        request = JoinRequest(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
            protocol_type=protocol_type, protocols=tuple(protocols),
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id, client_host=client_host, api_version=api_version, reply_to=reply_to,
        )
        result = self._rebalancer.join(group, request, now_ms).result(reply_to)
        return result._replace(records=(*records, *result.records)) if records else result

    def _join_consumer_group(
        self, group: ConsumerGroup, join: ClassicJoin, api_version: int, now_ms: int,
    ) -> Result[JoinGroupResponse]:
        """Answered at once, as Kafka answers a classic member of a consumer group: no
        leader, no member list (the server assigned it); SyncGroup gives its partitions."""
        if not group.supports_classic_protocols(join.protocol_type, (name for name, _ in join.protocols)):
            return Result(response=JoinGroupResponse(E.inconsistent_group_protocol, member_id=join.member_id))
        if join.new and join.instance_id is None and api_version >= FIRST_JOIN_VERSION_REQUIRING_MEMBER_ID:
            return Result(response=JoinGroupResponse(E.member_id_required, member_id=join.member_id))
        try:
            records, member = self.consumer.classic_join(group, join, self.topics(), now_ms)
        except Refused as refused:
            return Result(response=JoinGroupResponse(refused.error, member_id=join.member_id))
        return Result(records=tuple(records), response=JoinGroupResponse(
            E.none, member_id=member.member_id, generation_id=member.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=join.protocols[0][0]))

    def sync_group(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: Sequence[SyncAssignment],
        reply_to: Any, now_ms: int,
    ) -> Result[SyncGroupResponse]:
        _require_reply_to(reply_to)
        state = self._served_partition(group_id)
        consumer_group = state.consumer_groups.get(group_id)
        if consumer_group is not None and group_id not in state.groups:
            try:
                member = self.consumer.classic_member(consumer_group, member_id, group_instance_id, generation_id)
                assignment = self.consumer.classic_sync(consumer_group, member, protocol_type, protocol_name,
                                                        self.topics(), now_ms)
            except Refused as refused:
                return Result(response=SyncGroupResponse(refused.error))
            return Result(response=SyncGroupResponse(E.none, CONSUMER_PROTOCOL_TYPE, member.classic.protocols[0][0],
                                                     assignment))
        group = state.groups.get(group_id)
        if group is None:
            return Result(response=SyncGroupResponse(E.unknown_member_id))
        return self._rebalancer.sync(
            group, member_id, group_instance_id, generation_id, protocol_type, protocol_name,
            tuple(assignments), reply_to, now_ms,
        ).result(reply_to)

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None, now_ms: int
    ) -> Result[HeartbeatResponse]:
        state = self._served_partition(group_id)
        consumer_group = state.consumer_groups.get(group_id)
        if consumer_group is not None and group_id not in state.groups:
            try:
                member = self.consumer.classic_member(consumer_group, member_id, group_instance_id, generation_id)
            except Refused as refused:
                return Result(response=HeartbeatResponse(refused.error))
            return Result(response=HeartbeatResponse(self.consumer.classic_heartbeat(consumer_group, member, now_ms)))
        group = state.groups.get(group_id)
        if group is None:
            return Result(response=HeartbeatResponse(E.unknown_member_id))
        return Result(response=self._rebalancer.heartbeat(group, member_id, group_instance_id, generation_id, now_ms))

    def leave_group(
        self, *, group_id: str, members: Sequence[MemberIdentity], api_version: int, now_ms: int
    ) -> Result[LeaveGroupResponse]:
        """v0-v2 name one member; its error becomes the top-level error, as Kafka answers."""
        state = self._served_partition(group_id)
        consumer_group = state.consumer_groups.get(group_id)
        if consumer_group is not None and group_id not in state.groups:
            return self._leave_consumer_group(consumer_group, members, api_version)
        group = state.groups.get(group_id)
        if group is None:
            return Result(response=LeaveGroupResponse(E.unknown_member_id))
        out, responses = self._rebalancer.leave(group, tuple(members), now_ms)
        top_error = responses[0].error_code if api_version < 3 and responses else E.none
        out.response = LeaveGroupResponse(top_error, responses)
        return out.result()

    def _leave_consumer_group(
        self, group: ConsumerGroup, members: Sequence[MemberIdentity], api_version: int,
    ) -> Result[LeaveGroupResponse]:
        """LeaveGroup of classic members of a consumer group: each is fenced (one epoch bump)."""
        responses = []
        leaving: list[str] = []
        for ident in members:
            error = E.none
            if ident.group_instance_id is not None:
                member = group.static_member(ident.group_instance_id)
                if member is None:
                    error = E.unknown_member_id
                elif ident.member_id and member.member_id != ident.member_id:
                    error = E.fenced_instance_id
            else:
                member = group.members.get(ident.member_id)
                if member is None:
                    error = E.unknown_member_id
            if error is E.none and member.classic is None:
                error = E.unknown_member_id  # it uses ConsumerGroupHeartbeat to leave
            if error is E.none and member.member_id not in leaving:
                leaving.append(member.member_id)
            responses.append(LeaveMemberResponse(ident.member_id, ident.group_instance_id, error))
        records = self.consumer.fence(group, leaving, self.topics()) if leaving else []
        top_error = responses[0].error_code if api_version < 3 and responses else E.none
        return Result(records=tuple(records), response=LeaveGroupResponse(top_error, tuple(responses)))

    # -- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) -------------------------

    def consumer_group_heartbeat(self, request: HeartbeatRequest, now_ms: int) -> Result[HeartbeatAnswer]:
        """For a heartbeat that passed ``heartbeat_request_error``."""
        from coordinator.group.consumer_group import LEAVE_GROUP_MEMBER_EPOCH, HeartbeatAnswer

        try:
            state = self._served_partition(request.group_id)
            records: list[CoordinatorRecord] = []
            if state.holds(request.group_id, ("share", "streams")):
                raise Refused(E.group_id_not_found, _not_a(request.group_id, "consumer"))
            group = state.consumer_groups.get(request.group_id)
            classic = state.groups.get(request.group_id)
            upgrade = Outcome()
            if group is None and classic is not None:
                if request.member_epoch != 0:
                    raise Refused(E.group_id_not_found, _not_a(request.group_id, "consumer"))
                # An empty classic group (say, offsets committed without membership)
                # becomes a consumer group; its offsets stay. One with members is
                # converted with them (KIP-848 online upgrade), when the policy allows.
                records.append(log_codec.group_metadata_record(request.group_id, None))
                if classic.state is not S.EMPTY:
                    group = self._upgraded(classic, records, upgrade.replies, now_ms)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH and group is not None:
                downgraded = self._maybe_downgrade(state, group, request.member_id, now_ms)
                if downgraded is not None:
                    return downgraded._replace(response=HeartbeatAnswer(
                        member_id=request.member_id, member_epoch=request.member_epoch))
            changes, answer = self.consumer.heartbeat(group, request, self.topics(), now_ms)
        except Refused as refused:
            return Result(response=HeartbeatAnswer(refused.error, refused.message))
        if request.group_id not in state.consumer_groups and answer.member_id is not None:
            deadlines = dict(group.session_deadlines) if group is not None else {}
            deadlines[answer.member_id] = now_ms + self.config.consumer.session_timeout_ms
            state.new_group_deadlines[request.group_id] = deadlines
        return Result(records=tuple(records + changes), response=answer, effects=tuple(upgrade.replies))

    def _upgraded(self, classic: ClassicGroup, records: list[CoordinatorRecord], replies: list, now_ms: int
                  ) -> ConsumerGroup:
        """A classic group with members as the consumer group it becomes (Kafka's online
        upgrade): each member keeps its subscription, protocols and assigned partitions
        at the generation, which becomes the group epoch. Its records are added to
        ``records``; parked JoinGroup/SyncGroup requests are told REBALANCE_IN_PROGRESS.
        Raises Refused when the policy or the group does not allow it."""
        from coordinator.group import consumer_log_codec, consumer_protocol
        from coordinator.group.consumer_group import ConsumerGroup, ConsumerMember, metadata_hash

        group_id = classic.group_id
        if not self.config.consumer.upgrade_enabled or classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise Refused(E.group_id_not_found, _not_a(group_id, "consumer"))
        if len(classic.members) > self.config.consumer.max_size:
            raise Refused(E.group_id_not_found, _not_a(group_id, "consumer"))
        topics = self.topics()
        epoch = classic.generation_id
        converted = ConsumerGroup(group_id, group_epoch=epoch, assignment_epoch=epoch)
        for m in classic.members.values():
            try:
                subscription = consumer_protocol.decode_subscription(
                    m.metadata(classic.protocol_name) if classic.protocol_name else m.protocols[0].metadata)
                assigned = consumer_protocol.decode_assignment(m.assignment) if m.assignment else {}
            except consumer_protocol.MalformedProtocol:
                raise Refused(E.group_id_not_found, f"Cannot upgrade the classic group {group_id} to consumer "
                              "group because the embedded consumer protocol is malformed.") from None
            partitions = {topics[t][0]: ps for t, ps in assigned.items() if t in topics and ps}
            member = ConsumerMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=subscription.topics,
                rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=epoch, previous_member_epoch=epoch,
                assigned=partitions, classic=consumer_log_codec.ClassicMemberMetadata(
                    m.session_timeout_ms, tuple((p.name, p.metadata) for p in m.protocols)))
            converted.members[m.member_id] = member
            converted.target[m.member_id] = partitions
            converted.session_deadlines[m.member_id] = now_ms + m.session_timeout_ms
            records.append(consumer_log_codec.member_metadata_record(group_id, m.member_id, member.metadata_value()))
            records.append(consumer_log_codec.target_member_record(group_id, m.member_id, partitions))
            records.append(consumer_log_codec.current_assignment_record(group_id, m.member_id,
                                                                        member.assignment_value()))
            if m.awaiting_join:
                replies.append(Reply(m.join_reply_to, JoinGroupResponse(E.rebalance_in_progress, member_id=m.member_id)))
            if m.awaiting_sync:
                replies.append(Reply(m.sync_reply_to, SyncGroupResponse(E.rebalance_in_progress)))
        converted.metadata_hash = metadata_hash(topics, converted.subscribed_topics(topics))
        records.append(consumer_log_codec.group_metadata_record(
            group_id, consumer_log_codec.GroupMetadataValue(epoch, converted.metadata_hash)))
        records.append(consumer_log_codec.target_metadata_record(group_id, epoch))
        log.info("group %s: upgraded from a classic group to a consumer group (%d members)",
                 group_id, len(classic.members))
        return converted

    # -- ShareGroupHeartbeat / ShareGroupDescribe (KIP-932) -----------------------------

    def share_group_heartbeat(self, request: ShareHeartbeatRequest, now_ms: int) -> Result[HeartbeatAnswer]:
        """For a heartbeat that passed ``heartbeat_request_error``."""
        from coordinator.group.consumer_group import HeartbeatAnswer

        state = self._served_partition(request.group_id)
        group = state.share_groups.get(request.group_id)
        try:
            if group is None and state.holds(request.group_id, ("classic", "consumer", "streams")):
                raise Refused(E.group_id_not_found, _not_a(request.group_id, "share"))
            session_timeout_ms, interval_ms = self.group_timeouts("share", request.group_id)
            records, answer, initialize = self.share.heartbeat(
                group, request, self.topics(), now_ms, session_timeout_ms, interval_ms,
                self.share_assignment_interval(request.group_id))
        except Refused as refused:
            return Result(response=HeartbeatAnswer(refused.error, refused.message))
        if group is None:
            state.new_group_deadlines[request.group_id] = {request.member_id: now_ms + session_timeout_ms}
        return Result(records=tuple(records), response=answer, effects=(initialize,) if initialize else ())

    def share_group_state_changed(self, group_id: str, partitions: dict, initialized: bool) -> Result[ErrorCode]:
        """The share coordinator initialized (``initialized``) or deleted the state of these
        share-partitions ({topic id: partitions}), or failed to initialize it: recorded in
        the group's ShareGroupStatePartitionMetadata (which creates a group not there yet,
        as AlterShareGroupOffsets does on Kafka)."""
        state = self._served_partition(group_id)
        if state.holds(group_id, ("classic", "consumer", "streams")):
            return Result(response=E.group_id_not_found)
        group = state.share_groups.get(group_id) or type_code(SHARE).ShareGroup(group_id)
        return Result(records=tuple(self.share.state_changed(group, partitions, initialized)), response=E.none)

    def share_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        """(error, message, group) as ShareGroupDescribe answers for one group."""
        return self._typed_group(group_id, "share", ("classic", "consumer", "streams"))

    def _share_timers(self, group: ShareGroup, now_ms: int) -> list[Result]:
        results = []
        for member_id in self.share.expired_members(group, now_ms):
            if member_id in group.members:
                log.info("share group %s: member %s fenced, its session timed out", group.group_id, member_id)
                results.append(Result(records=tuple(self.share.fence(group, member_id, self.topics()))))
            group.session_deadlines.pop(member_id, None)
        return results

    # -- StreamsGroupHeartbeat / StreamsGroupDescribe (KIP-1071) ------------------------

    def streams_group_heartbeat(self, request: StreamsHeartbeatRequest, now_ms: int
                                ) -> Result[StreamsHeartbeatAnswer]:
        """For a heartbeat that passed ``heartbeat_request_error``."""
        state = self._served_partition(request.group_id)
        group = state.streams_groups.get(request.group_id)
        records: list[CoordinatorRecord] = []
        try:
            if group is None:
                classic = state.groups.get(request.group_id)
                if (state.holds(request.group_id, ("consumer", "share"))
                        or (classic is not None and classic.state is not S.EMPTY)):
                    raise Refused(E.group_id_not_found, _not_a(request.group_id, "streams"))
                if classic is not None and request.member_epoch == 0:
                    # An empty classic group (offsets committed without membership)
                    # becomes a streams group; its offsets stay.
                    records.append(log_codec.group_metadata_record(request.group_id, None))
            session_timeout_ms, interval_ms = self.group_timeouts("streams", request.group_id)
            changes, answer, _left = self.streams.heartbeat(group, request, self.topics(), now_ms,
                                                            session_timeout_ms, interval_ms)
        except Refused as refused:
            return Result(response=type_code(STREAMS).StreamsHeartbeatAnswer(refused.error, refused.message))
        if group is None:
            state.new_group_deadlines[request.group_id] = {request.member_id: now_ms + session_timeout_ms}
            delay_ms = self.streams.group_config(request.group_id).initial_rebalance_delay_ms
            if delay_ms:
                state.new_group_assignment_delays[request.group_id] = now_ms + delay_ms
        return Result(records=tuple(records + changes), response=answer)

    def streams_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, StreamsGroup | None]:
        """(error, message, group) as StreamsGroupDescribe answers for one group."""
        return self._typed_group(group_id, "streams", ("classic", "consumer", "share"))

    def _streams_timers(self, group: StreamsGroup, now_ms: int) -> list[Result]:
        results = []
        delayed = self.streams.delayed_assignment(group, self.topics(), now_ms)
        if delayed:
            results.append(Result(records=tuple(delayed)))
        expired = [m for m in self.streams.expired_members(group, now_ms) if m in group.members]
        if expired:
            log.info("streams group %s: members %s fenced, their session or rebalance timed out", group.group_id,
                     ", ".join(expired))
            results.append(Result(records=tuple(self.streams.fence(group, expired, self.topics(), now_ms))))
        for member_id in self.streams.expired_members(group, now_ms):
            group.session_deadlines.pop(member_id, None)
            group.rebalance_deadlines.pop(member_id, None)
        return results

    def consumer_group_describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """(error, message, group) as ConsumerGroupDescribe answers for one group."""
        return self._typed_group(group_id, "consumer", ("classic", "share", "streams"))

    def _consumer_timers(self, group: ConsumerGroup, now_ms: int) -> list[Result]:
        results = []
        for member_id in self.consumer.expired_members(group, now_ms):
            if member_id in group.members:
                state = self._partitions[self.partition_for(group.group_id)]
                downgraded = self._maybe_downgrade(state, group, member_id, now_ms)
                if downgraded is not None:
                    return [*results, downgraded]
                results.append(Result(records=tuple(self.consumer.fence(group, member_id, self.topics()))))
        return results

    def _maybe_downgrade(self, state: _Partition, group: ConsumerGroup, leaving: str, now_ms: int) -> Result | None:
        """KIP-848 online downgrade, as Kafka does it when a member leaves or is fenced: if
        the members that remain all use the classic protocol (and the policy allows it),
        the consumer group becomes a classic group of them, at its group epoch as the
        generation with the target assignment, and a rebalance starts so they rejoin."""
        from coordinator.group import consumer_protocol

        member = group.members.get(leaving)
        rest = [m for m in group.members.values() if m.member_id != leaving]
        if (member is None or member.classic is not None or not rest or any(m.classic is None for m in rest)
                or not self.config.consumer.downgrade_enabled or len(rest) > self.config.group_max_size):
            return None
        classic = ClassicGroup(group.group_id, state=S.STABLE, state_timestamp_ms=now_ms,
                               generation_id=group.group_epoch, protocol_type=CONSUMER_PROTOCOL_TYPE)
        for m in rest:
            classic.add(Member(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=tuple(JoinProtocol(name, metadata) for name, metadata in m.classic.protocols),
                session_deadline_ms=now_ms + m.classic.session_timeout_ms))
        classic.leader_id = None
        classic.protocol_name = classic.select_protocol()
        names = {topic_id: name for name, (topic_id, _count) in self.topics().items()}
        for m in classic.members.values():
            target = group.target.get(m.member_id, {})
            m.assignment = consumer_protocol.encode_assignment(
                {names[t]: ps for t, ps in target.items() if t in names},
                _subscription_version(m.metadata(classic.protocol_name)))
        out = Outcome(records=[*group.deletion_records(), log_codec.group_metadata_record(
            group.group_id, classic.metadata_value({m.member_id: m.assignment for m in classic.members.values()},
                                                   now_ms))])
        # The state changes here, as in Kafka: the rebalance needs the classic group now.
        del state.consumer_groups[group.group_id]
        state.groups[group.group_id] = classic
        log.info("group %s: downgraded from a consumer group to a classic group (%d members)",
                 group.group_id, len(rest))
        self._rebalancer.prepare_rebalance(classic, now_ms, out)
        return out.result()

    # -- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------

    def describe_groups(self, group_ids: Iterable[str]) -> DescribeGroupsResponse:
        return DescribeGroupsResponse(tuple(self._describe(g) for g in group_ids))

    def _describe(self, group_id: str) -> DescribedGroup:
        error, state = self._serving(group_id)
        if state is None:
            return DescribedGroup(error, group_id)
        group = state.groups.get(group_id)
        if group is None:
            return DescribedGroup(E.none, group_id, group_state=S.DEAD.value)
        stable = group.state is S.STABLE
        return DescribedGroup(
            E.none, group_id, group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=tuple(
                DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.metadata(group.protocol_name) if stable else b"",
                    member_assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            ),
        )

    def list_groups(
        self, states_filter: Sequence[str] = (), types_filter: Sequence[str] = ()
    ) -> ListGroupsResponse:
        if self.loads.loading():
            return ListGroupsResponse(E.coordinator_load_in_progress)
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        listed = []
        if not types or "classic" in types:
            listed += [ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
                       for state in self._partitions.values() for g in state.groups.values()]
        if not types or "consumer" in types:
            listed += [ListedGroup(g.group_id, "consumer", g.state, "consumer")
                       for state in self._partitions.values() for g in state.consumer_groups.values()]
        if not types or "share" in types:
            listed += [ListedGroup(g.group_id, "share", g.state, "share")
                       for state in self._partitions.values() for g in state.share_groups.values()]
        if not types or "streams" in types:
            listed += [ListedGroup(g.group_id, "streams", g.state, "streams")
                       for state in self._partitions.values() for g in state.streams_groups.values()]
        return ListGroupsResponse(E.none, tuple(g for g in listed if not states or g.group_state.lower() in states))

    def delete_groups(self, group_ids: Iterable[str]) -> Result[DeleteGroupsResponse]:
        records: list[CoordinatorRecord] = []
        results = []
        for group_id in group_ids:
            error = None
            state = self._served_partition(group_id)
            group = state.groups.get(group_id)
            consumer_group = state.consumer_groups.get(group_id)
            share_group = state.share_groups.get(group_id)
            streams_group = state.streams_groups.get(group_id)
            if group is None and consumer_group is None and share_group is None and streams_group is None:
                error = E.group_id_not_found
            elif (group is not None and group.state is not S.EMPTY) or (
                    consumer_group is not None and consumer_group.members) or (
                    share_group is not None and share_group.members) or (
                    streams_group is not None and streams_group.members):
                error = E.non_empty_group
            elif share_group is not None:
                records += share_group.deletion_records()
            else:
                offsets = state.offsets
                for topic, partition in sorted(
                    set(offsets.group_offsets(group_id)) | offsets.pending_partitions(group_id)
                ):
                    records.append(log_codec.offset_commit_record(group_id, topic, partition, None))
                if consumer_group is not None:
                    records += consumer_group.deletion_records()
                elif streams_group is not None:
                    records += streams_group.deletion_records()
                else:
                    records.append(log_codec.group_metadata_record(group_id, None))
            results.append(DeletableGroupResult(group_id, error or E.none))
        return Result(records=tuple(records), response=DeleteGroupsResponse(tuple(results)))

    # -- OffsetCommit / TxnOffsetCommit ---------------------------------------------------

    def offset_commit(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit], api_version: int, now_ms: int, retention_time_ms: int = -1,
    ) -> Result[OffsetCommitResponse]:
        """``retention_time_ms`` is OffsetCommit v2-v4's field (-1: the broker default)."""
        refused = self._commit_membership_error(group_id, member_id, group_instance_id, generation_id, False,
                                                api_version)
        expire_ms = now_ms + retention_time_ms if retention_time_ms >= 0 else -1
        records = [
            log_codec.offset_commit_record(group_id, o.topic, o.partition, self._offset_value(o, now_ms, expire_ms))
            for o in offsets if self._metadata_fits(o) and refused(o) is None
        ]
        return Result(records=tuple(records), response=offset_errors(
            offsets, lambda o: refused(o) or self._commit_error(o)))

    def txn_offset_commit(
        self, *, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
        generation_id: int, member_id: str, group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit], api_version: int, now_ms: int,
        newest_producer_epoch: int | None = None,
    ) -> Result[TxnOffsetCommitResponse]:
        """KIP-447: the offsets stay pending until the producer's marker is replayed.

        ``newest_producer_epoch``: the newest epoch of the producer the group's partition
        has seen (its transactional offset commits and markers), None if none. An older
        epoch is fenced with INVALID_PRODUCER_EPOCH, as Kafka's log append refuses the
        batch, after the membership checks.
        """
        if api_version < FIRST_TXN_OFFSET_COMMIT_VERSION_WITH_MEMBER:
            generation_id, member_id, group_instance_id = NO_GENERATION, "", None
        refused = self._commit_membership_error(group_id, member_id, group_instance_id, generation_id, True,
                                                api_version)
        committing = [o for o in offsets if self._metadata_fits(o) and refused(o) is None]
        fenced = newest_producer_epoch is not None and producer_epoch < newest_producer_epoch
        if fenced and committing:
            return Result(response=offset_errors(offsets, lambda o: refused(o) or (
                E.invalid_producer_epoch if self._metadata_fits(o) else self._commit_error(o))))
        records = []
        for o in committing:
            plain = log_codec.offset_commit_record(group_id, o.topic, o.partition, self._offset_value(o, now_ms, -1))
            records.append(TransactionalOffsetRecord(plain.key, plain.value, producer_id, producer_epoch))
        return Result(records=tuple(records), response=offset_errors(
            offsets, lambda o: refused(o) or self._commit_error(o)))

    def _commit_membership_error(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
        transactional: bool, api_version: int,
    ) -> Callable[[OffsetToCommit], ErrorCode | None]:
        """Why an OffsetCommit or TxnOffsetCommit of this member may not commit each offset
        (None: it may): one error for all, or a streams member's per task."""
        check = self._commit_membership_check(group_id, member_id, group_instance_id, generation_id, transactional,
                                              api_version)
        if callable(check):
            return lambda o: check(o.topic, o.partition)
        return lambda _o: check

    def _commit_membership_check(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
        transactional: bool, api_version: int,
    ) -> ErrorCode | Callable[[str, int], ErrorCode | None] | None:
        state = self._served_partition(group_id)
        consumer_group = state.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.validate_offset_commit(
                consumer_group, member_id, group_instance_id, generation_id, transactional, api_version)
        streams_group = state.streams_groups.get(group_id)
        if streams_group is not None:
            return self.streams.validate_offset_commit(
                streams_group, member_id, group_instance_id, generation_id, transactional, api_version)
        group = state.groups.get(group_id)
        if group is not None:
            return group.validate_offset_commit(member_id, group_instance_id, generation_id, transactional)
        if generation_id < 0:
            return None
        # No such group, yet a generation: OffsetCommit v9+ says so, older clients (and
        # TxnOffsetCommit) expect ILLEGAL_GENERATION.
        if not transactional and api_version >= FIRST_OFFSET_COMMIT_VERSION_WITH_GROUP_ID_NOT_FOUND:
            return E.group_id_not_found
        return E.illegal_generation

    def _metadata_fits(self, o: OffsetToCommit) -> bool:
        return o.metadata is None or len(o.metadata.encode()) <= self.config.offset_metadata_max_bytes

    def _commit_error(self, o: OffsetToCommit) -> ErrorCode:
        return E.none if self._metadata_fits(o) else E.offset_metadata_too_large

    @staticmethod
    def _offset_value(o: OffsetToCommit, now_ms: int, expire_ms: int) -> log_codec.OffsetCommitValue:
        return log_codec.OffsetCommitValue(
            offset=o.offset, metadata=o.metadata or "", commit_timestamp_ms=now_ms,
            leader_epoch=o.leader_epoch, expire_timestamp_ms=expire_ms,
        )

    # -- OffsetFetch / OffsetDelete -------------------------------------------------------

    def offset_fetch(self, groups: Sequence[OffsetFetchGroup], require_stable: bool) -> OffsetFetchResponse:
        """``require_stable`` (v7+): partitions with pending transactional offsets answer
        UNSTABLE_OFFSET_COMMIT so the consumer waits for the transaction to finish."""
        return OffsetFetchResponse(tuple(self._fetch_group(g, require_stable) for g in groups))

    def _fetch_group(self, request: OffsetFetchGroup, require_stable: bool) -> OffsetFetchResponseGroup:
        group_id = request.group_id
        error, state = self._serving(group_id)
        if state is None:
            return OffsetFetchResponseGroup(group_id, error)
        consumer_group = state.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_offset_fetch(consumer_group, request.member_id, request.member_epoch)
            if error is not None:
                return OffsetFetchResponseGroup(group_id, error)
        streams_group = state.streams_groups.get(group_id)
        if streams_group is not None:
            error = self.streams.validate_offset_fetch(streams_group, request.member_id, request.member_epoch)
            if error is not None:
                return OffsetFetchResponseGroup(group_id, error)
        if request.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(state.offsets.group_offsets(group_id)):
                wanted.setdefault(topic, []).append(partition)
            topics = tuple(wanted.items())
        else:
            topics = request.topics
        return OffsetFetchResponseGroup(group_id, E.none, tuple(
            FetchedTopic(topic, tuple(
                self._fetch_partition(state.offsets, group_id, (topic, p), require_stable)
                for p in partitions
            ))
            for topic, partitions in topics
        ))

    @staticmethod
    def _fetch_partition(
        offsets: OffsetStore, group_id: str, tp: TopicPartition, require_stable: bool
    ) -> FetchedPartition:
        if require_stable and offsets.has_pending(group_id, tp):
            return FetchedPartition(tp[1], error_code=E.unstable_offset_commit)
        committed = offsets.get(group_id, tp)
        if committed is None:
            return FetchedPartition(tp[1])
        return FetchedPartition(tp[1], committed.offset, committed.leader_epoch, committed.metadata)

    def offset_delete(
        self, *, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> Result[OffsetDeleteResponse]:
        """Refused for a topic the group's live ``consumer`` subscriptions name."""
        state = self._served_partition(group_id)
        group = state.groups.get(group_id)
        consumer_group = state.consumer_groups.get(group_id)
        streams_group = state.streams_groups.get(group_id)
        if group is None and consumer_group is None and streams_group is None:
            return Result(response=OffsetDeleteResponse(E.group_id_not_found))
        if consumer_group is not None:
            subscribed = consumer_group.subscribed_topics(self.topics())
        elif streams_group is not None:
            subscribed = streams_group.subscribed_topics(self.topics())
        else:
            subscribed = group.subscribed_topics()
        if group is not None and group.state is not S.EMPTY and subscribed is None:
            # Members whose subscriptions cannot be read might use any topic.
            return Result(response=OffsetDeleteResponse(E.non_empty_group))
        records = []
        answers = []
        for topic, partitions in topics:
            errors = []
            for p in partitions:
                if subscribed is not None and topic in subscribed:
                    errors.append(PartitionError(p, E.group_subscribed_to_topic))
                    continue
                tp = (topic, p)
                if state.offsets.get(group_id, tp) is not None or tp in state.offsets.pending_partitions(group_id):
                    records.append(log_codec.offset_commit_record(group_id, topic, p, None))
                errors.append(PartitionError(p, E.none))
            answers.append(TopicErrors(topic, tuple(errors)))
        return Result(records=tuple(records), response=OffsetDeleteResponse(E.none, tuple(answers)))

    # -- timers --------------------------------------------------------------------------

    def timers(self) -> tuple[Timer, ...]:
        """One timer at the earliest deadline of any group (sessions, rebalance and sync
        timeouts, pending members); firing, each partition's due deadlines in one write."""
        def events(partition: int, now_ms: int) -> list[TimerEvent]:
            due = self.next_deadline(partition)
            if due is None or due > now_ms:
                return []
            return [TimerEvent(GROUP_DEADLINES, partition, lambda: combined(self.poll(now_ms, partition)))]

        return (Timer(GROUP_DEADLINES, events, deadline=self.next_deadline),)

    def next_deadline(self, partition: int | None = None) -> int | None:
        """The earliest deadline of any group (of one coordinator partition's groups)."""
        deadlines = [d for g in self._live_groups(partition) for d in _group_deadlines(g)]
        deadlines += [d for g in self._live_consumer_groups(partition) for d in self.consumer.deadlines(g)]
        deadlines += [d for g in self._live_share_groups(partition) for d in self.share.deadlines(g)]
        deadlines += [d for g in self._live_streams_groups(partition) for d in self.streams.deadlines(g)]
        return min(deadlines, default=None)

    def poll(self, now_ms: int, partition: int | None = None) -> list[Result]:
        """Fires every timer due at ``now_ms``, earliest first; one Result per firing.
        With ``partition``, only the timers of that partition's groups (whose records
        all go to that partition)."""
        results = []
        for group in list(self._live_groups(partition)):
            due = sorted(
                (deadline, order, key)
                for order, (deadline, key) in enumerate(_group_timers(group))
                if deadline <= now_ms
            )
            for deadline, _order, key in due:
                out = Outcome()
                self._fire(group, key, deadline, now_ms, out)
                if out:
                    results.append(out.result())
        for consumer_group in list(self._live_consumer_groups(partition)):
            results += self._consumer_timers(consumer_group, now_ms)
        for share_group in list(self._live_share_groups(partition)):
            results += self._share_timers(share_group, now_ms)
        for streams_group in list(self._live_streams_groups(partition)):
            results += self._streams_timers(streams_group, now_ms)
        return results

    def _fire(self, group: ClassicGroup, key: tuple[str, str], deadline: int, now_ms: int, out: Outcome) -> None:
        kind, member_id = key
        # An earlier firing in this poll may have moved or removed this timer.
        if kind == "join" and group.join_deadline_ms == deadline:
            self._rebalancer.join_deadline_reached(group, now_ms, out)
        elif kind == "sync" and group.sync_deadline_ms == deadline:
            self._rebalancer.sync_deadline_reached(group, now_ms, out)
        elif kind == "pending" and group.pending_members.get(member_id) == deadline:
            self._rebalancer.pending_member_expired(group, member_id, now_ms, out)
        elif kind == "session":
            member = group.members.get(member_id)
            if member is not None and member.session_deadline_ms == deadline:
                self._rebalancer.session_expired(group, member, now_ms, out)

    def _served(self, partition: int | None) -> list[_Partition]:
        """The loaded partitions' states (only ``partition``'s, if given)."""
        served = self.loads.loaded()
        return [s for p, s in self._partitions.items() if p in served and partition in (None, p)]

    def _live_consumer_groups(self, partition: int | None = None) -> Iterable[ConsumerGroup]:
        for state in self._served(partition):
            yield from state.consumer_groups.values()

    def _live_share_groups(self, partition: int | None = None) -> Iterable[ShareGroup]:
        for state in self._served(partition):
            yield from state.share_groups.values()

    def _live_streams_groups(self, partition: int | None = None) -> Iterable[StreamsGroup]:
        for state in self._served(partition):
            yield from state.streams_groups.values()

    def _live_groups(self, partition: int | None = None) -> Iterable[ClassicGroup]:
        for state in self._served(partition):
            yield from state.groups.values()


def _group_timers(g: ClassicGroup) -> list[tuple[int, tuple[str, str]]]:
    timers = [(d, ("session", m.member_id)) for m in g.members.values()
              if (d := m.session_deadline_ms) is not None]
    timers += [(d, ("pending", member_id)) for member_id, d in g.pending_members.items()]
    if g.join_deadline_ms is not None:
        timers.append((g.join_deadline_ms, ("join", "")))
    if g.sync_deadline_ms is not None:
        timers.append((g.sync_deadline_ms, ("sync", "")))
    return timers


def _group_deadlines(g: ClassicGroup) -> list[int]:
    return [d for d, _key in _group_timers(g)]


def offset_errors(
    offsets: Sequence[OffsetToCommit], error_of: Callable[[OffsetToCommit], ErrorCode]
) -> OffsetCommitResponse:
    """An OffsetCommit or TxnOffsetCommit answer: ``error_of(offset)`` for each offset, by topic."""
    by_topic: dict[str, list[PartitionError]] = {}
    for o in offsets:
        by_topic.setdefault(o.topic, []).append(PartitionError(o.partition, error_of(o)))
    return OffsetCommitResponse(tuple(TopicErrors(t, tuple(ps)) for t, ps in by_topic.items()))


def _subscription_version(metadata: bytes) -> int:
    from coordinator.group import consumer_protocol

    try:
        return consumer_protocol.subscription_version(metadata)
    except consumer_protocol.MalformedProtocol:
        return 0


def _require_reply_to(reply_to: Any) -> None:
    if reply_to is None:
        raise ValueError("a JoinGroup/SyncGroup needs a reply_to token: it may be answered later")
