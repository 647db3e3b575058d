"""Start-up: process spawn to the first good Metadata v1 answer on a raw socket, and the
broker's own CPU time up to that answer.

The broker handle measures both while it waits for readiness (every run needs that wait
anyway); this workload reports them.
"""

from bench.workloads.base import Metric, RunContext, Target, Workload


def run(ctx: RunContext) -> dict[str, float]:
    return {"ms": ctx.broker.startup_s * 1000, "CPU ms": ctx.broker.startup_cpu_s * 1000}


WORKLOAD = Workload(
    name="start-up",
    description="spawn to first Metadata answer",
    run=run,
    metrics=(Metric("ms", "ms", "lower"), Metric("CPU ms", "ms", "lower")),
    targets=(Target("ms", "start-up <= 60 ms", below=60.0),),
)
