"""ShareAcknowledge (79): v1-v2, KIP-932. Acknowledges records a member acquired, in
its share session (accept, release, reject; v2 renew, which restarts their locks);
epoch -1 also closes the session and releases whatever the member still holds."""

from __future__ import annotations

from broker.errors import code
from broker.handlers.share_sessions import (
    SessionRefused, acknowledge, check_request, current_leader, renew_allowed, resolve, session,
)
from protocol.answer_wire import answer_type

API_KEY = 79
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    shares = ctx.node.shares
    try:
        check_request(ctx, request)
        live = session(ctx, shares, request, may_open=False)
    except SessionRefused as refused:
        return Answer(error_code=code(refused.error_name), error_message=str(refused),
                      acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])
    settings = shares.settings(request.group_id)
    renew = renew_allowed(ctx, request)
    responses, leaders = [], set()
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            part, error = resolve(ctx, t.topic_id, p.partition_index)
            leader = Answer.LeaderIdAndEpoch(**current_leader(ctx, t.topic_id, p.partition_index, part))
            if error is not None:
                error_code, message = code(error), None
                if error == "NOT_LEADER_OR_FOLLOWER":
                    leaders.add(leader.leader_id)
            else:
                error_code, message = await acknowledge(
                    ctx, shares, request.group_id, request.member_id, t.topic_id, part,
                    p.acknowledgement_batches, renew)
            partitions.append(Answer.PartitionData(partition_index=p.partition_index, error_code=error_code,
                                                   error_message=message, current_leader=leader))
        responses.append(Answer.ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=partitions))
    if live is None:
        shares.release_member(request.group_id, request.member_id)
    return Answer(error_code=0, acquisition_lock_timeout_ms=settings.lock_ms, responses=responses,
                  node_endpoints=[Answer.NodeEndpoint(**b) for b in ctx.node_endpoints(leaders)] if leaders else [])
