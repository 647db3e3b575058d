"""Reads every torture topic back with stock consumers, as the checker needs it."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from torture.checker import Observed
from torture.history import decode_value


def _consumer(bootstrap: str, isolation: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"torture-check-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "enable.auto.commit": False,
                     "enable.partition.eof": True, "auto.offset.reset": "earliest", **extra})


def watermarks(bootstrap: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (high watermark, last stable offset), through ListOffsets."""
    out = {}
    uncommitted = _consumer(bootstrap, "read_uncommitted")
    committed = _consumer(bootstrap, "read_committed")
    try:
        for topic, p in partitions:
            hw = uncommitted.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
            lso = committed.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
            out[(topic, p)] = (hw, lso)
    finally:
        uncommitted.close()
        committed.close()
    return out


def wait_stable(bootstrap: str, partitions: list[tuple[str, int]], timeout_s: float) -> dict:
    """Waits until every LSO reaches its high watermark (open transactions end or time
    out); returns the last watermarks seen either way."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ends = watermarks(bootstrap, partitions)
        except KafkaException:
            ends = None
        if ends is not None and (all(lso >= hw for hw, lso in ends.values()) or time.monotonic() > deadline):
            return ends
        if time.monotonic() > deadline:
            raise RuntimeError("the broker did not answer ListOffsets")
        time.sleep(0.5)


def read_all(bootstrap: str, partitions: list[tuple[str, int]], isolation: str,
             quiet_s: float = 3.0, timeout_s: float = 120.0) -> list[Observed]:
    """Every record from offset 0 until each partition reports its end."""
    consumer = _consumer(bootstrap, isolation)
    consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
    at_end: set[tuple[str, int]] = set()
    out: list[Observed] = []
    deadline = time.monotonic() + timeout_s
    last_data = time.monotonic()
    try:
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline or time.monotonic() - last_data > max(quiet_s, 30.0):
                raise RuntimeError(f"read back ({isolation}) did not reach the end of {set(partitions) - at_end}")
            for m in consumer.consume(1000, 0.5):
                tp = (m.topic(), m.partition())
                if m.error() is not None:
                    if m.error().code() == -191:  # _PARTITION_EOF
                        at_end.add(tp)
                    continue
                at_end.discard(tp)
                last_data = time.monotonic()
                value = decode_value(m.value())
                if value is not None:
                    out.append(Observed(m.topic(), m.partition(), m.offset(), value))
    finally:
        consumer.close()
    return out


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 20)
        return {tp.partition: max(tp.offset, 0) for tp in got}
    finally:
        consumer.close()


SETTLED = ("Empty", "CompleteCommit", "CompleteAbort")
_RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def describe_transactions(node_ports: dict[int, int], transactional_ids: list[str],
                          timeout_s: float = 60.0) -> dict[str, tuple]:
    """transactional id -> (state, producer id, epoch) as its coordinator answers
    DescribeTransactions (asked at the node FindCoordinator names: the coordinator loads
    its partition on it, as for a client); ids no coordinator answered are left out."""
    import asyncio

    from broker.wire.client import KafkaConnection

    async def one(tid: str, deadline: float) -> tuple | None:
        while time.monotonic() < deadline:
            try:
                conn = await KafkaConnection.connect("127.0.0.1", next(iter(node_ports.values())), "torture-check")
                try:
                    found = (await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [tid]})).coordinators[0]
                finally:
                    await conn.close()
                if found.error_code == 0 and found.node_id in node_ports:
                    conn = await KafkaConnection.connect("127.0.0.1", node_ports[found.node_id], "torture-check")
                    try:
                        s = (await conn.request(65, 0, {"transactional_ids": [tid]})).transaction_states[0]
                    finally:
                        await conn.close()
                    if s.error_code == 0:
                        return s.transaction_state, s.producer_id, s.producer_epoch
                    if s.error_code not in _RETRIABLE:
                        return None
            except (OSError, asyncio.TimeoutError, ConnectionError):
                pass
            await asyncio.sleep(0.2)
        return None

    async def every() -> dict[str, tuple]:
        deadline = time.monotonic() + timeout_s
        found = await asyncio.gather(*(one(tid, deadline) for tid in transactional_ids))
        return {tid: f for tid, f in zip(transactional_ids, found) if f is not None}

    return asyncio.run(every())


def settled_transactions(node_ports: dict[int, int], transactional_ids: list[str],
                         timeout_s: float = 30.0) -> dict[str, tuple]:
    """``describe_transactions`` once every id is settled (Empty or Complete*; an open one
    is timed out by its coordinator meanwhile), or what settled by the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        described = describe_transactions(node_ports, transactional_ids)
        settled = {tid: d for tid, d in described.items() if d[0] in SETTLED}
        if len(settled) == len(transactional_ids) or time.monotonic() > deadline:
            return settled
        time.sleep(0.5)
