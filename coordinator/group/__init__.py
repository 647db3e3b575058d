"""The classic consumer group coordinator: membership, committed and pending offsets."""

from coordinator.group.coordinator import GroupConfig, GroupCoordinator
from coordinator.group.group import ClassicGroup, GroupState
from coordinator.group.messages import (
    JoinProtocol,
    MemberIdentity,
    OffsetFetchGroup,
    OffsetToCommit,
    Reply,
    SyncAssignment,
    TransactionalOffsetRecord,
)

__all__ = [
    "ClassicGroup",
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "JoinProtocol",
    "MemberIdentity",
    "OffsetFetchGroup",
    "OffsetToCommit",
    "Reply",
    "SyncAssignment",
    "TransactionalOffsetRecord",
]
