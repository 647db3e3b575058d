"""ShareFetch (78): v1-v2, KIP-932. In a share session, acknowledges what the request
carries, then acquires records for the member on the session's partitions (under
acquisition locks of ``share.record.lock.duration.ms``) and returns the batches that
hold them with the acquired ranges and their delivery counts. Waits up to max_wait for
records when there are none: woken by appends and by records becoming available again.
``share.isolation.level=read_committed`` acquires only below the LSO and never hands
out an aborted transaction's records. v2: renew acknowledgements (IsRenewAck), which
fetch nothing.
"""

from __future__ import annotations

import asyncio

from broker.errors import code
from broker.handlers.share_sessions import (
    INITIAL_EPOCH, SessionRefused, acknowledge, check_request, current_leader, renew_allowed,
    resolve, session,
)
from broker.log.partition_log import OffsetOutOfRange
from protocol.answer_wire import answer_type, ms

API_KEY = 78
Answer = answer_type(API_KEY)


def _answer(ctx, error_name: str | None, message: str | None, topics: dict, lock_ms: int, leaders: set):
    return Answer(
        error_code=code(error_name) if error_name else 0, error_message=message, acquisition_lock_timeout_ms=lock_ms,
        responses=[Answer.ShareFetchableTopicResponse(
            topic_id=topic_id, partitions=sorted(parts.values(), key=lambda p: p.partition_index))
            for topic_id, parts in topics.items()],
        node_endpoints=[Answer.NodeEndpoint(**b) for b in ctx.node_endpoints(leaders)] if leaders else [],
    )


def _partition(index: int, leader: dict):
    return Answer.PartitionData(partition_index=index, error_code=0, acknowledge_error_code=0,
                                current_leader=Answer.LeaderIdAndEpoch(**leader), records=b"", acquired_records=[])


async def handle(ctx, request):
    shares = ctx.node.shares
    try:
        check_request(ctx, request)
        if request.share_session_epoch == INITIAL_EPOCH and any(
                p.acknowledgement_batches for t in request.topics for p in t.partitions):
            raise SessionRefused("INVALID_REQUEST", "Acknowledgements are not allowed when opening a share session.")
        live = session(ctx, shares, request, may_open=True)
    except SessionRefused as refused:
        return _answer(ctx, refused.error_name, str(refused), {}, 0, set())
    group_id, member_id = request.group_id, request.member_id
    settings = shares.settings(group_id)
    topics: dict = {}
    leaders: set[int] = set()

    def entry(topic_id, index: int, part, **changed):
        """The partition's answer so far, with ``changed`` fields set."""
        parts = topics.setdefault(topic_id, {})
        if index not in parts:
            parts[index] = _partition(index, current_leader(ctx, topic_id, index, part))
        if changed:
            parts[index] = parts[index]._replace(**changed)
        return parts[index]

    if live is not None:
        for forgotten in request.forgotten_topics_data:
            live.partitions -= {(forgotten.topic_id, p) for p in forgotten.partitions}
    renew = renew_allowed(ctx, request)
    for t in request.topics:
        for p in t.partitions:
            part, error = resolve(ctx, t.topic_id, p.partition_index)
            if live is not None:
                live.partitions.add((t.topic_id, p.partition_index))
            if error is not None:
                failed = entry(t.topic_id, p.partition_index, None, error_code=code(error))
                if p.acknowledgement_batches:
                    failed = entry(t.topic_id, p.partition_index, None, acknowledge_error_code=code(error))
                if error == "NOT_LEADER_OR_FOLLOWER":
                    leaders.add(failed.current_leader.leader_id)
                continue
            if p.acknowledgement_batches:
                error_code, message = await acknowledge(
                    ctx, shares, group_id, member_id, t.topic_id, part, p.acknowledgement_batches, renew)
                entry(t.topic_id, p.partition_index, part, acknowledge_error_code=error_code,
                      acknowledge_error_message=message)
    if live is None:  # epoch -1: the session ends and the member's records are released
        shares.release_member(group_id, member_id)
        return _answer(ctx, None, None, topics, settings.lock_ms, leaders)
    if renew:
        return _answer(ctx, None, None, topics, settings.lock_ms, leaders)
    deadline = ctx.clock.now_ms() + max(0, ms(request.max_wait))
    while True:
        for topic_id, index in list(live.partitions):
            part, error = resolve(ctx, topic_id, index)
            if part is not None:
                failed = await shares.prepare(group_id, topic_id, part, settings)
                if failed:  # the state could not be read: this partition answers the error
                    entry(topic_id, index, part, error_code=failed)
        acquired_any = _acquire(ctx, shares, request, live, settings, entry, leaders)
        remaining = deadline - ctx.clock.now_ms()
        errors = any(p.error_code for parts in topics.values() for p in parts.values())
        if acquired_any or errors or remaining <= 0 or shares.sessions.get((group_id, member_id)) is not live:
            return _answer(ctx, None, None, topics, settings.lock_ms, leaders)
        await _wait(ctx, shares, live, remaining)


def _acquire(ctx, shares, request, live, settings, entry, leaders) -> bool:
    max_records = max(1, request.max_records)
    max_bytes = request.max_bytes
    acquired_any = False
    for topic_id, index in sorted(live.partitions, key=lambda k: (str(k[0]), k[1])):
        if max_records <= 0 or max_bytes <= 0:
            break
        part, error = resolve(ctx, topic_id, index)
        if error is not None:
            failed = entry(topic_id, index, None, error_code=code(error))
            if error == "NOT_LEADER_OR_FOLLOWER":
                leaders.add(failed.current_leader.leader_id)
            continue
        try:
            data, acquired = shares.acquire(request.group_id, request.member_id, topic_id, part, max_records,
                                            max_bytes, settings)
        except OffsetOutOfRange:
            continue  # the log start moved under the read: the next round starts there
        if not acquired:
            continue
        acquired_any = True
        entry(topic_id, index, part, records=data, acquired_records=[
            Answer.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                   delivery_count=a.delivery_count) for a in acquired])
        max_records -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
        max_bytes -= len(data)
    return acquired_any


async def _wait(ctx, shares, live, remaining_ms: int) -> None:
    parts = []
    for topic_id, index in live.partitions:
        part, error = resolve(ctx, topic_id, index)
        if part is not None:
            parts.append(part)
    waiters = [part.waiter() for part in parts]
    changed = asyncio.ensure_future(shares.changed().wait())
    try:
        await ctx.clock.wait_for(asyncio.wait([*waiters, changed], return_when=asyncio.FIRST_COMPLETED),
                                 remaining_ms / 1000)
    except asyncio.TimeoutError:
        pass
    finally:
        changed.cancel()
        for part, fut in zip(parts, waiters):
            if not fut.done():
                part.forget_waiter(fut)
                fut.cancel()



