"""Consume: one confluent-kafka consumer reads the produce workload's topic from the
beginning until it has every record.

Manual assignment, so no group rebalance is timed. The start is offset 0 (the beginning
of the topic produce just created) rather than OFFSET_BEGINNING: for a logical offset
librdkafka 2.16 waits about 450 ms on its own timer before it sends ListOffsets, a fixed
client-side delay that would swamp the broker's part of the figure.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed
from bench.workloads.produce import CLIENT_CPU_PER_RECORD, CPU_PER_RECORD, TOPIC_KEY

_BATCH = 10_000


def run(ctx: RunContext) -> dict[str, float]:
    topic = ctx.state[TOPIC_KEY]
    expected = ctx.settings.records
    consumer = Consumer(
        {
            "bootstrap.servers": ctx.bootstrap,
            "group.id": f"bench-consume-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # The default 1000 ms pause whenever the prefetch queue passes queued.min.messages
            # (which a Python loop lets happen) would time librdkafka's backoff, not the broker.
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = ctx.deadline()
        received = 0
        payload_bytes = 0
        next_offset = 0
        cpu_before = ctx.broker.sampler.run_seconds()
        client_before = time.thread_time()
        started = time.perf_counter()
        while received < expected:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise WorkloadFailed(f"consume: {received} of {expected} records after {ctx.settings.timeout_s} s")
            # consume() waits for the whole count or the timeout, so never ask for more than is left
            wanted = min(_BATCH, expected - received)
            for msg in consumer.consume(num_messages=wanted, timeout=min(1.0, remaining)):
                if msg.error():
                    raise WorkloadFailed(f"consume: {msg.error()}")
                if msg.offset() != next_offset:
                    raise WorkloadFailed(f"consume: offset {msg.offset()}, expected {next_offset}")
                next_offset += 1
                received += 1
                payload_bytes += len(msg.value())
        elapsed = time.perf_counter() - started
        client_s = time.thread_time() - client_before
        cpu_s = ctx.broker.sampler.run_seconds() - cpu_before
    finally:
        consumer.close()
    if received != expected:
        raise WorkloadFailed(f"consume: read {received} records, expected {expected}")
    return {"records/s": received / elapsed, "MB/s": payload_bytes / elapsed / 1e6,
            "CPU us/record": cpu_s * 1e6 / received, "client CPU us/record": client_s * 1e6 / received}


WORKLOAD = Workload(
    name="consume",
    description="from the beginning of the produced topic",
    run=run,
    metrics=(Metric("records/s", "records/s", "higher", ",.0f"), Metric("MB/s", "MB/s", "higher"), CPU_PER_RECORD,
             CLIENT_CPU_PER_RECORD),
    requires=("produce",),
    targets=(Target("records/s", "consume records/s >= 1.0x tansu", min_ratio_to_peer=1.0),),
)
