"""Start-up: process spawn to the first good Metadata v1 answer on a raw socket.

The broker handle measures it while it waits for readiness (every run needs that wait
anyway); this workload reports it.
"""

from bench.workloads.base import Metric, RunContext, Target, Workload


def run(ctx: RunContext) -> dict[str, float]:
    return {"ms": ctx.broker.startup_s * 1000}


WORKLOAD = Workload(
    name="start-up",
    description="spawn to first Metadata answer",
    run=run,
    metrics=(Metric("ms", "ms", "lower"),),
    targets=(Target("ms", "start-up <= 150 ms", below=150.0),),
)
