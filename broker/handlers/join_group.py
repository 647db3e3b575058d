"""JoinGroup (11): v0-v9. A member without an id is given one first (MEMBER_ID_REQUIRED,
v4+); static members (group.instance.id) from v5. The answer usually waits for the
rest of the group (or the initial rebalance delay), parked in the group service."""

from broker.security.acls import GROUP, GROUP_DENIED, READ
from coordinator.group import JoinProtocol
from coordinator.group.messages import JoinGroupResponse
from protocol.answer_wire import answer_from, answer_type, ms

API_KEY = 11  # READ on the group, as Kafka checks
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(READ, GROUP, request.group_id):
        return answer_from(Answer, JoinGroupResponse(GROUP_DENIED).for_version(ctx.version))
    groups = ctx.node.groups
    session_timeout_ms = ms(request.session_timeout)
    # v0 has no rebalance timeout: the session timeout serves as both, as on Kafka.
    rebalance_timeout_ms = ms(request.rebalance_timeout) if ctx.version >= 1 else session_timeout_ms
    client_host = "/" + ctx.connection.peer.rsplit(":", 1)[0]
    response = await groups.run_parked(request.group_id, lambda answer: groups.coordinator.join_group(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None), protocol_type=request.protocol_type,
        protocols=[JoinProtocol(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
        client_id=ctx.header.client_id or "", client_host=client_host, api_version=ctx.version,
        reply_to=answer, now_ms=ctx.clock.now_ms()),
        lambda error: JoinGroupResponse(error, member_id=request.member_id),
        lambda: groups.coordinator.join_group_request_error(request.group_id, request.member_id, session_timeout_ms))
    return answer_from(Answer, response.for_version(ctx.version))
