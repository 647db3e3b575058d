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
