"""What the group coordinator takes in and hands back.

Response classes use Kafka's field names (``error_code``, ``generation_id``, ...), so a
broker handler turns one into its API's answer with
``protocol.answer_wire.answer_from(Answer, response)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.log_codec import NO_LEADER_EPOCH
from coordinator.runtime import TransactionalRecord

NO_GENERATION = -1
NO_OFFSET = -1


# -- effects and annotated records -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer a parked JoinGroup/SyncGroup: send ``response`` to the request ``reply_to``."""

    reply_to: Any
    response: Any


@dataclass(slots=True, unsafe_hash=True)  # not frozen, as CoordinatorRecord
class TransactionalOffsetRecord(TransactionalRecord):
    """An offset commit that must be appended inside the producer's open transaction
    (KIP-447): it stays pending until that producer's marker reaches the partition."""


# -- request parts -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetFetchGroup:
    """One group of an OffsetFetch; ``topics`` None asks for every committed offset."""

    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    member_id: str | None = None  # v9+: a KIP-848 member's id and epoch, checked
    member_epoch: int = -1


# -- responses ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: ErrorCode
    member_id: str = ""
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupResponseMember, ...] = ()

    def for_version(self, api_version: int) -> JoinGroupResponse:
        """Before v7 the protocol name is not nullable: Kafka sends "" in its place."""
        if api_version < 7 and self.protocol_name is None:
            return replace(self, protocol_name="")
        return self


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    """v0-v2 carry only ``error_code`` (the single member's error); v3+ also ``members``."""

    error_code: ErrorCode
    members: tuple[LeaveMemberResponse, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: ErrorCode
    group_id: str
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: ErrorCode
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...]


@dataclass(frozen=True, slots=True)
class PartitionError:
    partition_index: int
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class TopicErrors:
    name: str
    partitions: tuple[PartitionError, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    """OffsetCommit and TxnOffsetCommit answer alike: an error per partition."""

    topics: tuple[TopicErrors, ...]


TxnOffsetCommitResponse = OffsetCommitResponse


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error_code: ErrorCode
    topics: tuple[TopicErrors, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition_index: int
    committed_offset: int = NO_OFFSET
    committed_leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error_code: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    name: str
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponseGroup:
    """One group's answer; OffsetFetch v0-v7 put ``topics``/``error_code`` at the top."""

    group_id: str
    error_code: ErrorCode
    topics: tuple[FetchedTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    groups: tuple[OffsetFetchResponseGroup, ...]
