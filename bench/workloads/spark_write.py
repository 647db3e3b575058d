"""Spark batch write through the eosbroker data source: exactly-once vs at-least-once
(eosbroker only: the sink is what is measured, and Tansu need not run Spark).

It runs in a broker of its own (as txn-state-startup does), so the run's broker and its
resource figures are untouched. One local[2] SparkSession per bench process (created on first use, about 10-20 s, not
timed). 5 x ``--records`` rows (1,000,000 by default) of 100-byte values, keyless,
into a fresh 3-partition topic per write, by ``df.write.format("eosbroker")`` with
``delivery.guarantee`` exactly-once (two-phase commit over transactions) or
at-least-once (the same writer without transactions). A small untimed write warms
the Python workers up; then the modes alternate twice (ALO, EOS, ALO, EOS) and each
mode's best time counts, since the machine's noise dwarfs the protocol's fixed cost
(InitProducerId, AddPartitionsToTxn, the control-topic records, EndTxn per task).

Checked after each write: the partitions' high watermarks add up to the rows plus at
most one marker per task and partition (exactly-once) or exactly the rows (at-least-once).
"""

from __future__ import annotations

import os
import sys
import time
import uuid

from bench.brokers import RunningBroker
from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed

PARTITIONS = 3
_session = None


def _spark():
    global _session
    if _session is None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from spark_client import register

        _session = (SparkSession.builder.master("local[2]").appName("eosbroker-bench")
                    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                    .getOrCreate())
        _session.sparkContext.setLogLevel("ERROR")
        register(_session)
    return _session


def _write(bootstrap: str, df, mode: str, rows: int, tasks: int) -> float:
    from spark_client import wire

    topic = f"spark-{mode}-{uuid.uuid4().hex[:8]}"
    with wire.Client(bootstrap) as cluster:
        cluster.create_topic(topic, PARTITIONS)
    start = time.perf_counter()
    (df.write.format("eosbroker").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).option("delivery.guarantee", mode).save())
    elapsed = time.perf_counter() - start
    with wire.Client(bootstrap) as cluster:
        stored = sum(cluster.list_offsets(topic, range(PARTITIONS), wire.LATEST, wire.READ_UNCOMMITTED).values())
    markers = stored - rows
    if markers < 0 or (mode == "at-least-once" and markers) or markers > tasks * PARTITIONS:
        raise WorkloadFailed(f"{mode}: {stored} offsets stored for {rows} rows")
    return elapsed


def run(ctx: RunContext) -> dict[str, float]:
    spark = _spark()
    rows = 5 * ctx.settings.records
    value = "concat(lpad(cast(id as string), 10, '0'), repeat('x', 90)) as value"  # 100 bytes
    df = spark.range(rows).selectExpr(value)
    tasks = df.rdd.getNumPartitions()
    best = {"at-least-once": float("inf"), "exactly-once": float("inf")}
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s) as broker:
        _write(broker.bootstrap, spark.range(1000).selectExpr(value), "exactly-once", 1000, 1000)
        for mode in ("at-least-once", "exactly-once") * 2:
            best[mode] = min(best[mode], _write(broker.bootstrap, df, mode, rows, tasks))
    return {
        "EOS rows/s": rows / best["exactly-once"],
        "ALO rows/s": rows / best["at-least-once"],
        "EOS s": best["exactly-once"],
        "ALO s": best["at-least-once"],
        "EOS/ALO time": best["exactly-once"] / best["at-least-once"],
    }


WORKLOAD = Workload(
    name="spark-write",
    description="Spark batch write, 5 x records rows of 100 B, exactly-once vs at-least-once (own broker)",
    run=run,
    metrics=(
        Metric("EOS rows/s", "rows/s", "higher", ",.0f"),
        Metric("ALO rows/s", "rows/s", "higher", ",.0f"),
        Metric("EOS s", "s", "lower", ",.2f"),
        Metric("ALO s", "s", "lower", ",.2f"),
        Metric("EOS/ALO time", "x", "lower", ",.2f"),
    ),
    targets=(Target("EOS/ALO time", "exactly-once time <= 1.3x at-least-once", below=1.3),),
    brokers=("eosbroker",),
    why_only="it writes through eosbroker's own PySpark data source",
)
