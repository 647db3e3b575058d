"""What ShareFetch (78) and ShareAcknowledge (79) share: the share session of a
(group, member) with its epoch, the partitions a request names resolved on this node,
and the acknowledgements applied to the share partitions.

Session epochs as Kafka's ShareSessionCache keeps them: 0 opens a session (ShareFetch
only), -1 closes it (what the member holds is released), any other epoch must be the
session's next one.
"""

from __future__ import annotations

from broker.security.acls import GROUP, GROUP_DENIED, READ, TOPIC
from broker.errors import code
from broker.coordinators.share_service import ShareSession
from coordinator.share.partition import RENEW, Acknowledgement, AcknowledgeError

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
FIRST_VERSION_WITH_RENEW = 2


class SessionRefused(Exception):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


def check_request(ctx, request) -> None:
    """The request-level checks: the group's ACL, a group and member id."""
    if not ctx.allowed(READ, GROUP, request.group_id):
        raise SessionRefused(GROUP_DENIED.name.upper(), "Not authorized to access the group.")
    if not request.group_id:
        raise SessionRefused("INVALID_REQUEST", "Group id can't be empty.")
    if not request.member_id:
        raise SessionRefused("INVALID_REQUEST", "Member id can't be empty.")


def session(ctx, shares, request, may_open: bool) -> ShareSession | None:
    """The request's share session, opened, advanced or (epoch -1) removed; None when
    closed. Raises SessionRefused with Kafka's error."""
    key = (request.group_id, request.member_id)
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        if not may_open:
            raise SessionRefused("INVALID_SHARE_SESSION_EPOCH", "A share session is opened by ShareFetch.")
        # A member opening again replaces its session; what it holds stays held (Kafka
        # releases nothing here), until acknowledged, the lock ends, or it leaves.
        opened = shares.sessions[key] = ShareSession(ctx.connection.id)
        return opened
    current = shares.sessions.get(key)
    if current is None:
        raise SessionRefused("SHARE_SESSION_NOT_FOUND", "The share session was not found.")
    if epoch == FINAL_EPOCH:
        return None
    if epoch != current.next_epoch:
        raise SessionRefused("INVALID_SHARE_SESSION_EPOCH", f"The share session epoch {epoch} is not "
                             f"the expected {current.next_epoch}.")
    current.advance()
    return current


def resolve(ctx, topic_id, index: int):
    """(Partition, None) when this node leads the partition and the client may read it,
    else (None, the Kafka error name)."""
    info = ctx.cluster.topics.by_id.get(topic_id)
    if info is None:
        return None, "UNKNOWN_TOPIC_ID"
    if not ctx.allowed(READ, TOPIC, info.name):
        return None, "TOPIC_AUTHORIZATION_FAILED"
    return ctx.led_partition(info.name, index, "UNKNOWN_TOPIC_OR_PARTITION")


async def acknowledge(ctx, shares, group_id: str, member_id: str, topic_id, part, batches, renew_allowed: bool
                      ) -> tuple[int, str | None]:
    """Applies one partition's acknowledgement batches; (error code, message)."""
    acks = [Acknowledgement(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]
    if not renew_allowed and any(RENEW in a.types for a in acks):
        return code("INVALID_REQUEST"), "Renew acknowledgements need IsRenewAck."
    settings = shares.settings(group_id)
    error = await shares.prepare(group_id, topic_id, part, settings)
    if error:
        return error, None
    share = shares.share_partition(group_id, topic_id, part)
    try:
        undo = share.acknowledge(member_id, acks, ctx.clock.now_ms(), settings.delivery_limit, settings.lock_ms)
    except AcknowledgeError as e:
        return code(e.error_name), str(e)
    shares.records_changed()
    # Answered once the share coordinator has the state; one it could not take is rolled
    # back and answered with the error, as Kafka does.
    error = await shares.write(group_id, topic_id, part.index, share)
    if error:
        shares.rollback(share, undo)
        return error, "The acknowledgement could not be persisted."
    return error, None


def renew_allowed(ctx, request) -> bool:
    return ctx.version >= FIRST_VERSION_WITH_RENEW and bool(getattr(request, "is_renew_ack", False))


def current_leader(ctx, topic_id, index: int, part) -> dict:
    if part is not None:
        return {"leader_id": ctx.node.node_id, "leader_epoch": ctx.cluster.leadership(part.topic, index).leader_epoch}
    info = ctx.cluster.topics.by_id.get(topic_id)
    return ctx.current_leader(info.name if info else None, index)
