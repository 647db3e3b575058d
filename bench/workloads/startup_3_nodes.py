"""Start-up of a 3-node cluster in one process (``serve --nodes 3``): spawn to the
moment every node has answered a raw Metadata v1 request (eosbroker only)."""

from bench.brokers import EOSBROKER_3_NODES, RunningBroker
from bench.workloads.base import Metric, RunContext, Target, Workload


def run(ctx: RunContext) -> dict[str, float]:
    with RunningBroker(EOSBROKER_3_NODES, ctx.broker.startup_timeout_s) as cluster:
        return {"ms": cluster.startup_s * 1000}


WORKLOAD = Workload(
    name="start-up-3-nodes",
    description="spawn of serve --nodes 3 to every node's first Metadata answer",
    run=run,
    metrics=(Metric("ms", "ms", "lower"),),
    targets=(Target("ms", "3-node start-up <= 400 ms", below=400.0),),
    brokers=("eosbroker",),
    why_only="3 nodes in one process is eosbroker's `serve --nodes 3`",
)
