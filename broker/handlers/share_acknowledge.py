"""ShareAcknowledge (79): v1-v2, KIP-932. Acknowledges records a member acquired, in
its share session (accept, release, reject; v2 renew, which restarts their locks);
epoch -1 also closes the session and releases whatever the member still holds."""

from __future__ import annotations

from broker.errors import code
from broker.handlers.share_sessions import (
    SessionRefused, acknowledge, check_request, current_leader, renew_allowed, resolve, session,
)

API_KEY = 79


async def handle(ctx, request):
    shares = ctx.node.shares
    try:
        check_request(ctx, request)
        live = session(ctx, shares, request, may_open=False)
    except SessionRefused as refused:
        return {"throttle_time": 0, "error_code": code(refused.error_name), "error_message": str(refused),
                "acquisition_lock_timeout": 0, "responses": [], "node_endpoints": []}
    settings = shares.settings(request.group_id)
    renew = renew_allowed(ctx, request)
    responses, leaders = [], set()
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            part, error = resolve(ctx, t.topic_id, p.partition_index)
            answer = {"partition_index": p.partition_index, "error_code": 0, "error_message": None,
                      "current_leader": current_leader(ctx, t.topic_id, p.partition_index, part)}
            if error is not None:
                answer["error_code"] = code(error)
                if error == "NOT_LEADER_OR_FOLLOWER":
                    leaders.add(answer["current_leader"]["leader_id"])
            else:
                answer["error_code"], answer["error_message"] = await acknowledge(
                    ctx, shares, request.group_id, request.member_id, t.topic_id, part,
                    p.acknowledgement_batches, renew)
            partitions.append(answer)
        responses.append({"topic_id": t.topic_id, "partitions": partitions})
    if live is None:
        shares.release_member(request.group_id, request.member_id)
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout": settings.lock_ms, "responses": responses,
            "node_endpoints": ctx.node_endpoints(leaders) if leaders else []}
