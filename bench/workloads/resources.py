"""Broker resources over the workloads of one run: RSS (peak of 50 ms samples, and at the
end) and CPU seconds (user+system) from readiness to the end of the last workload, and
the part of them spent in a JVM's just-in-time compiler threads (0 for a broker without).

Runs last, so it covers everything before it in the same broker run.
"""

from bench.workloads.base import Metric, RunContext, Workload

_MB = 1e6


def run(ctx: RunContext) -> dict[str, float]:
    sampler = ctx.broker.sampler
    ctx.broker.check_alive()
    end_rss = sampler.sample()
    cpu = sampler.cpu_seconds() - sampler.cpu_at_start
    jit = sampler.jit_cpu_seconds() - sampler.jit_at_start
    return {"RSS peak MB": sampler.peak_rss / _MB, "RSS end MB": end_rss / _MB, "CPU s": cpu, "of which JIT s": jit}


WORKLOAD = Workload(
    name="resources",
    description="broker process RSS and CPU over the workloads",
    run=run,
    metrics=(
        Metric("RSS peak MB", "MB", "lower"),
        Metric("RSS end MB", "MB", "lower"),
        Metric("CPU s", "s", "lower", ",.2f"),
        Metric("of which JIT s", "s", "lower", ",.2f"),
    ),
)
