"""Fetch (1), v4+: stored batch bytes, long-polled on max_wait_ms / min_bytes.

Until min_bytes are available the request waits, woken by appends to any of its
partitions. The first batch of the first partition with data is returned whole even
when larger than the limits (KIP-74), so a consumer always makes progress.
read_committed reads stop at the last stable offset. Fetch sessions (KIP-227) are
declined: every answer carries session id 0, so clients send full requests.
Another node's fetch naming its replica id is a follower's: its fetch offsets tell
replication how far it holds each partition (broker/cluster/replication.py).
"""

from __future__ import annotations

import asyncio
import logging

from broker import malloc_tuning as allocator
from broker.security.acls import READ, TOPIC
from broker.errors import code
from broker.log.descriptors import storage_error
from broker.log.partition_log import OffsetOutOfRange
from protocol.answer_wire import ZERO_UUID, answer_type, ms

log = logging.getLogger(__name__)

API_KEY = 1
Answer = answer_type(API_KEY)
_Partition = Answer.PartitionData
KIP_951_VERSION = 16  # current_leader and node_endpoints in NOT_LEADER_OR_FOLLOWER answers
READ_COMMITTED = 1


def _partition_error(index: int, error: str) -> _Partition:
    return _Partition(partition_index=index, error_code=code(error), high_watermark=-1, last_stable_offset=-1,
                      log_start_offset=-1, aborted_transactions=None, records=b"")


class _Plan:
    """The request resolved once: each (response topic, partition request, Partition or error)."""

    def __init__(self, ctx, request, waited: bool = False) -> None:
        """``waited``: resolved again after waiting for data, when a topic gone meanwhile is
        UNKNOWN_TOPIC_OR_PARTITION whatever the version, as Kafka's delayed fetch finds it
        (a new fetch naming an unknown topic id gets UNKNOWN_TOPIC_ID)."""
        self.topics: list[tuple[tuple, list]] = []  # ((topic, topic id), its entries)
        self.leaders: set[int] = set()  # named in NOT_LEADER_OR_FOLLOWER answers (KIP-951)
        registry = ctx.cluster.topics
        by_id = ctx.version >= 13
        for t in request.topics:
            if by_id:
                info = registry.by_id.get(t.topic_id)
                name = info.name if info else None
                missing = "UNKNOWN_TOPIC_OR_PARTITION" if waited else "UNKNOWN_TOPIC_ID"
            else:
                name = t.topic
                missing = "UNKNOWN_TOPIC_OR_PARTITION"
            entries = []
            readable = name is None or ctx.allowed(READ, TOPIC, name)
            for p in t.partitions:
                part, error = ctx.led_partition(name, p.partition, missing, getattr(p, "current_leader_epoch", -1))
                if not readable:
                    part, error = None, "TOPIC_AUTHORIZATION_FAILED"
                if error is None:
                    entries.append((p, part))
                    continue
                failed = _partition_error(p.partition, error)
                if error == "NOT_LEADER_OR_FOLLOWER" and ctx.version >= KIP_951_VERSION:
                    failed = failed._replace(current_leader=Answer.LeaderIdAndEpoch(
                        **ctx.current_leader(name, p.partition)))
                    self.leaders.add(failed.current_leader.leader_id)
                entries.append((p, failed))
            self.topics.append(((name, getattr(t, "topic_id", ZERO_UUID)), entries))

    def partitions(self):
        for _, entries in self.topics:
            for _, target in entries:
                if target.__class__ is not _Partition:
                    yield target


def _read(plan: _Plan, max_bytes: int, committed: bool) -> tuple[list, int]:
    responses = []
    total = 0
    min_one = True
    for (topic, topic_id), entries in plan.topics:
        partitions = []
        for p, part in entries:
            if part.__class__ is _Partition:
                partitions.append(part)
                continue
            high_watermark = part.high_watermark
            last_stable = part.last_stable_offset
            upper = last_stable if committed else high_watermark
            limit = max(0, min(p.partition_max_bytes, max_bytes - total))
            try:
                data = part.log.read(p.fetch_offset, limit, upper, min_one) if limit or min_one else b""
            except OffsetOutOfRange:
                # As Kafka: an errored partition carries no offsets (-1), whatever the log holds.
                partitions.append(_partition_error(p.partition, "OFFSET_OUT_OF_RANGE"))
                continue
            except OSError as e:  # out of file descriptors, a failing disk
                log.warning("fetch from %s-%d failed: %s", part.topic, part.index, storage_error(e))
                partitions.append(_partition_error(p.partition, "KAFKA_STORAGE_ERROR"))
                continue
            if data:
                min_one = False
                total += len(data)
            aborted = None
            if committed:
                aborted = [Answer.AbortedTransaction(**t) for t in part.aborted_transactions(p.fetch_offset, data)]
            partitions.append(_Partition(
                partition_index=p.partition,
                error_code=0,
                high_watermark=high_watermark,
                last_stable_offset=last_stable,
                log_start_offset=part.log_start_offset,
                aborted_transactions=aborted,
                preferred_read_replica=-1,
                records=data,
            ))
        responses.append(Answer.FetchableTopicResponse(topic=topic, topic_id=topic_id, partitions=partitions))
    return responses, total


def _follower_fetched(ctx, request, plan: _Plan) -> None:
    """Tells replication how far the follower holds each partition it fetches (its fetch
    offsets), as Kafka's leader updates its replicas' state on a follower's fetch. (A
    client's fetch naming a replica id is served as a consumer's.)"""
    replica_id = request.replica_state.replica_id if ctx.version >= 15 else request.replica_id
    if replica_id < 0:
        return
    fetched = [(part.topic, part.index, p.fetch_offset, part.log.log_end_offset)
               for _, entries in plan.topics for p, part in entries if not isinstance(part, dict)]
    ctx.broker.replication.handled(replica_id, fetched)


async def handle(ctx, request):
    if not allocator.tuned:
        allocator.keep_freed_buffers()
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        return Answer(error_code=code("FETCH_SESSION_ID_NOT_FOUND"), session_id=0, responses=())
    plan = _Plan(ctx, request)
    if ctx.connection.id < 0:  # another node's: a follower's fetch (broker/cluster/replication.py)
        _follower_fetched(ctx, request, plan)
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_bytes = request.max_bytes
    deadline = ctx.clock.now_ms() + max(0, ms(request.max_wait))
    while True:
        responses, total = _read(plan, max_bytes, committed)
        remaining = deadline - ctx.clock.now_ms()
        errors = any(p.error_code for t in responses for p in t.partitions)
        if total >= request.min_bytes or errors or remaining <= 0:
            if ctx.version >= KIP_951_VERSION and plan.leaders:
                return Answer(error_code=0, session_id=0, responses=responses, node_endpoints=[
                    Answer.NodeEndpoint(**b) for b in ctx.node_endpoints(plan.leaders)])
            return Answer(error_code=0, session_id=0, responses=responses)
        waiters = [part.waiter() for part in plan.partitions()]
        if not waiters:
            await ctx.clock.sleep(remaining / 1000)
            continue
        try:
            await ctx.clock.wait_for(asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED), remaining / 1000)
        except asyncio.TimeoutError:
            pass
        finally:
            for part, fut in zip(plan.partitions(), waiters):
                if not fut.done():
                    part.forget_waiter(fut)
                    fut.cancel()
        # Resolved again, as Kafka's delayed fetch reads its partitions when it completes: a
        # topic deleted or a leadership moved meanwhile is answered, not read from a closed log.
        plan = _Plan(ctx, request, waited=True)
