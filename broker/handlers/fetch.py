"""Fetch (1), v4+: stored batch bytes, long-polled on max_wait_ms / min_bytes.

Until min_bytes are available the request waits, woken by appends to any of its
partitions. The first batch of the first partition with data is returned whole even
when larger than the limits (KIP-74), so a consumer always makes progress.
read_committed reads stop at the last stable offset. Fetch sessions (KIP-227) are
declined: every answer carries session id 0, so clients send full requests.
"""

from __future__ import annotations

import asyncio
import logging

from broker import malloc_tuning as allocator
from broker.security.acls import READ, TOPIC, allowed
from broker.errors import code
from broker.log.descriptors import storage_error
from broker.log.partition_log import OffsetOutOfRange
from protocol.answer_wire import ZERO_UUID, ms

log = logging.getLogger(__name__)

API_KEY = 1
KIP_951_VERSION = 16  # current_leader and node_endpoints in NOT_LEADER_OR_FOLLOWER answers
READ_COMMITTED = 1


def _partition_error(index: int, error: str) -> dict:
    return {"partition_index": index, "error_code": code(error), "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "records": b""}


class _Plan:
    """The request resolved once: each (response topic, partition request, Partition or error)."""

    def __init__(self, ctx, request) -> None:
        self.topics: list[tuple[dict, list]] = []
        self.leaders: set[int] = set()  # named in NOT_LEADER_OR_FOLLOWER answers (KIP-951)
        registry = ctx.cluster.topics
        by_id = ctx.version >= 13
        for t in request.topics:
            if by_id:
                info = registry.by_id.get(t.topic_id)
                name = info.name if info else None
                missing = "UNKNOWN_TOPIC_ID"
            else:
                name = t.topic
                missing = "UNKNOWN_TOPIC_OR_PARTITION"
            entries = []
            readable = name is None or allowed(ctx, READ, TOPIC, name)
            for p in t.partitions:
                part, error = ctx.led_partition(name, p.partition, missing, getattr(p, "current_leader_epoch", -1))
                if not readable:
                    part, error = None, "TOPIC_AUTHORIZATION_FAILED"
                if error is None:
                    entries.append((p, part))
                    continue
                failed = _partition_error(p.partition, error)
                if error == "NOT_LEADER_OR_FOLLOWER" and ctx.version >= KIP_951_VERSION:
                    failed["current_leader"] = ctx.current_leader(name, p.partition)
                    self.leaders.add(failed["current_leader"]["leader_id"])
                entries.append((p, failed))
            self.topics.append(({"topic": name, "topic_id": getattr(t, "topic_id", ZERO_UUID)}, entries))

    def partitions(self):
        for _, entries in self.topics:
            for _, target in entries:
                if not isinstance(target, dict):
                    yield target


def _read(plan: _Plan, max_bytes: int, committed: bool) -> tuple[list[dict], int]:
    responses = []
    total = 0
    min_one = True
    for topic, entries in plan.topics:
        partitions = []
        for p, part in entries:
            if isinstance(part, dict):
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
            partitions.append({
                "partition_index": p.partition,
                "error_code": 0,
                "high_watermark": high_watermark,
                "last_stable_offset": last_stable,
                "log_start_offset": part.log_start_offset,
                "aborted_transactions": part.aborted_transactions(p.fetch_offset, data) if committed else None,
                "preferred_read_replica": -1,
                "records": data,
            })
        responses.append(topic | {"partitions": partitions})
    return responses, total


async def handle(ctx, request):
    if not allocator.tuned:
        allocator.keep_freed_buffers()
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        return {"error_code": code("FETCH_SESSION_ID_NOT_FOUND"), "session_id": 0, "responses": []}
    plan = _Plan(ctx, request)
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_bytes = request.max_bytes
    deadline = ctx.clock.now_ms() + max(0, ms(request.max_wait))
    while True:
        responses, total = _read(plan, max_bytes, committed)
        remaining = deadline - ctx.clock.now_ms()
        errors = any(p["error_code"] for t in responses for p in t["partitions"])
        if total >= request.min_bytes or errors or remaining <= 0:
            out = {"error_code": 0, "session_id": 0, "responses": responses}
            if ctx.version >= KIP_951_VERSION:
                out["node_endpoints"] = ctx.node_endpoints(plan.leaders) if plan.leaders else []
            return out
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
