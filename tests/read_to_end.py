"""Reading a topic back with a confluent-kafka consumer for an exactly-once assertion."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition


def read_to_end(bootstrap: str, topics: list[str], partitions: int, isolation: str = "read_committed",
                settle: float = 1.0, timeout: float = 60.0) -> list[bytes]:
    """Every value of ``topics`` from offset 0 that a consumer sees under ``isolation``, sorted.

    Done once every partition has reported its end (for read_committed, the LSO) and nothing
    new arrived for ``settle`` seconds (so a late or duplicated record would be seen). A quiet
    window alone ends too early on a loaded machine, before the first fetch was answered."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(partitions)])
        out: list[bytes] = []
        at_end: set[tuple[str, int]] = set()
        quiet_since = time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(at_end) == len(topics) * partitions and time.monotonic() - quiet_since >= settle:
                break
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error() is None:
                out.append(msg.value())
                at_end.discard((msg.topic(), msg.partition()))
                quiet_since = time.monotonic()
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add((msg.topic(), msg.partition()))
        else:
            raise AssertionError(f"{topics} not read to the end in {timeout} s: at the end of {sorted(at_end)}")
        return sorted(out)
    finally:
        consumer.close()


def read_partition_in_order(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Partition 0 of ``topic`` from offset 0 to its end (the LSO under read_committed), in
    log order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    while True:
        m = c.poll(20)
        assert m is not None, "read back stalled"
        if m.error():
            break
        out.append(m.value())
    c.close()
    return out
