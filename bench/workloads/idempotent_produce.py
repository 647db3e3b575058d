"""Idempotent produce: the produce workload with enable.idempotence=true (acks=all,
linger.ms=5, fixed-size records to partition 0 of a fresh single-partition topic).

The broker now checks every batch's producer id, epoch and sequence, so this is the
produce path with its producer-state bookkeeping. librdkafka asks for a producer id
(InitProducerId) before the first batch, during the untimed warm-up (see produce.py).
"""

from __future__ import annotations

from bench.workloads.base import Metric, RunContext, Target, Workload
from bench.workloads.produce import CLIENT_CPU_PER_RECORD, CPU_PER_RECORD, produce_to_fresh_topic


def run(ctx: RunContext) -> dict[str, float]:
    _topic, metrics = produce_to_fresh_topic(ctx, "idempotent-produce", {"enable.idempotence": True})
    return metrics


WORKLOAD = Workload(
    name="idempotent-produce",
    description="acks=all, linger.ms=5, enable.idempotence=true, 1 partition",
    run=run,
    metrics=(Metric("records/s", "records/s", "higher", ",.0f"), Metric("MB/s", "MB/s", "higher"), CPU_PER_RECORD,
             CLIENT_CPU_PER_RECORD),
    targets=(Target("records/s", "idempotent-produce records/s >= 1.0x tansu", min_ratio_to_peer=1.0),),
)
