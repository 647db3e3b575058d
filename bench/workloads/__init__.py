"""The workload registry, in run order. A new workload is a module with a ``WORKLOAD``
and one line here; ``resources`` stays last so it covers the others."""

from bench.workloads import (
    concurrent_transactions, consume, idempotent_produce, idle_connections, many_transactional_producers, partition_restart, partition_scaling, produce, resources, sasl_ssl, spark_stream, spark_write, startup, startup_3_nodes, transactions, txn_id_scaling, txn_state_startup,
)
from bench.workloads.base import Metric, RunContext, Settings, Target, Workload, WorkloadFailed

WORKLOADS: tuple[Workload, ...] = (
    startup.WORKLOAD,
    startup_3_nodes.WORKLOAD,
    produce.WORKLOAD,
    consume.WORKLOAD,
    idempotent_produce.WORKLOAD,
    transactions.WORKLOAD,
    concurrent_transactions.WORKLOAD,
    idle_connections.WORKLOAD,
    sasl_ssl.WORKLOAD,
    txn_state_startup.WORKLOAD,
    spark_write.WORKLOAD,
    spark_stream.WORKLOAD,
    partition_scaling.WORKLOAD,
    partition_restart.WORKLOAD,
    txn_id_scaling.WORKLOAD,
    many_transactional_producers.WORKLOAD,
    resources.WORKLOAD,
)

BY_NAME: dict[str, Workload] = {w.name: w for w in WORKLOADS}


def execution_order(selected: list[str]) -> list[Workload]:
    """The selected workloads plus everything they require, in registry order."""
    needed: set[str] = set()
    pending = list(selected)
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(BY_NAME[name].requires)
    return [w for w in WORKLOADS if w.name in needed]


__all__ = ["WORKLOADS", "BY_NAME", "execution_order", "Metric", "RunContext", "Settings", "Target", "Workload", "WorkloadFailed"]
