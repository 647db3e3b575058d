"""Micro-batches in which the eosbroker sink has nothing to write, and the README's Spark
example, as scenarios any broker (eosbroker or Apache Kafka) can be put through.

A streaming query reads a read_committed topic with the eosbroker source, drops rows
whose value starts with "drop-" and writes the rest with the eosbroker sink. Between
micro-batches the source topic gets, in turn: committed rows; commit markers only (a
transaction that added both partitions and wrote nothing); an aborted transaction's
rows; rows the filter drops in one partition only; rows the filter drops everywhere.
Each step runs at least one micro-batch; the query must go on, across a restart, and a
read_committed consumer must see every kept row exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from spark_client import wire
from tests.broker_process import wait_until
from tests.spark.helpers import consume, create_topic, last_stable_offsets, nothing_open

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2


def _settled(bootstrap: str, topic: str) -> None:
    """The last transaction's markers are written: the source sees the step whole."""
    wait_until(lambda: nothing_open(bootstrap, topic, PARTITIONS), timeout=30,
               message=f"markers written on {topic}: {last_stable_offsets(bootstrap, topic, PARTITIONS)}")


def _transaction(bootstrap: str, topic: str, txn_id: str, values_by_partition: dict[int, list[str]],
                 commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    for partition, values in values_by_partition.items():
        for v in values:
            producer.produce(topic, value=v.encode(), partition=partition)
    producer.flush(60)  # abort_transaction drops what is not yet sent: the aborted rows must take offsets
    (producer.commit_transaction if commit else producer.abort_transaction)(60)
    _settled(bootstrap, topic)


def _markers_only(bootstrap: str, topic: str, txn_id: str) -> None:
    """A transaction over both partitions that wrote no record: one commit marker each."""
    deadline = time.monotonic() + 30
    with wire.Client(bootstrap) as cluster:
        txn = wire.init_producer_id(cluster, txn_id, 60000, deadline)
        wire.add_partitions(cluster, txn, [(topic, p) for p in range(PARTITIONS)], deadline)
        assert wire.end_txn(cluster, txn, True, deadline) == wire.ErrorCode.none
    _settled(bootstrap, topic)


def _start(spark, bootstrap: str, source: str, sink: str, prefix: str, checkpoint: Path):
    return (spark.readStream.format("eosbroker").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest").load()
            .where("NOT CAST(value AS STRING) LIKE 'drop-%'").selectExpr("value")
            .writeStream.format("eosbroker").option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
            .option("transactional.id.prefix", prefix).option("checkpointLocation", str(checkpoint)).start())


def _last_batch_run(query) -> int:
    """The id of the last micro-batch that ran (an idle trigger's progress, posted now and
    then, carries the next id without running it; it has no addBatch duration)."""
    return max(p["batchId"] for p in query.recentProgress if "addBatch" in p["durationMs"])


def run_empty_batches(spark, bootstrap: str, workdir: Path) -> dict[str, int]:
    """Runs every step; returns the id of the last micro-batch each step ran (they increase)."""
    name = uuid.uuid4().hex[:8]
    source, sink, prefix = f"empty-src-{name}", f"empty-out-{name}", f"empty-{name}"
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    txn_id = f"{source}-writer"
    steps = [
        ("rows", lambda: _transaction(bootstrap, source, txn_id, {0: ["a0", "a1"], 1: ["a2"]}, True)),
        ("control records only", lambda: _markers_only(bootstrap, source, f"{txn_id}-markers")),
        ("aborted data only", lambda: _transaction(bootstrap, source, txn_id, {0: ["x0"], 1: ["x1"]}, False)),
        ("a filter empties one task", lambda: _transaction(
            bootstrap, source, txn_id, {0: ["b0", "b1"], 1: ["drop-b2", "drop-b3"]}, True)),
        ("a filter empties every task", lambda: _transaction(
            bootstrap, source, txn_id, {0: ["drop-c0"], 1: ["drop-c1"]}, True)),
    ]
    last_batch: dict[str, int] = {}
    query = _start(spark, bootstrap, source, sink, prefix, workdir / "checkpoint")
    try:
        for step, produce in steps:
            produce()
            query.processAllAvailable()
            last_batch[step] = _last_batch_run(query)
    finally:
        query.stop()
    # A restart from the checkpoint goes on where the query stopped.
    query = _start(spark, bootstrap, source, sink, prefix, workdir / "checkpoint")
    try:
        _transaction(bootstrap, source, txn_id, {0: ["d0"], 1: ["d1"]}, True)
        query.processAllAvailable()
        last_batch["rows after a restart"] = _last_batch_run(query)
    finally:
        query.stop()
    values = sorted(m.value() for m in consume(bootstrap, sink, PARTITIONS))
    assert values == [b"a0", b"a1", b"a2", b"b0", b"b1", b"d0", b"d1"], values
    wait_until(lambda: nothing_open(bootstrap, sink, PARTITIONS), timeout=30,
               message=f"nothing left open on {sink}: {last_stable_offsets(bootstrap, sink, PARTITIONS)}")
    return last_batch


# -- the README's example ---------------------------------------------------------------

README = ROOT / "README.md"
README_BOOTSTRAP = 'BOOTSTRAP = "127.0.0.1:9092"'
README_CHECKPOINT = "/tmp/eosbroker-chk/orders-json"


def readme_spark_example() -> str:
    """The README's Spark example, as written (the block that follows "## Spark")."""
    spark_section = README.read_text().split("\n## Spark\n", 1)[1]
    return re.search(r"```python\n(.*?)```", spark_section, re.S).group(1)


def run_readme_example(bootstrap: str, workdir: Path, log: Path) -> str:
    """Runs the README's example as a script of its own against ``bootstrap``, with its
    checkpoint under ``workdir``; returns its output."""
    code = readme_spark_example()
    assert README_BOOTSTRAP in code and README_CHECKPOINT in code, "the README's example changed shape"
    code = code.replace(README_BOOTSTRAP, f'BOOTSTRAP = "{bootstrap}"').replace(
        README_CHECKPOINT, str(workdir / "orders-json-checkpoint"))
    script = workdir / "readme_example.py"
    script.write_text(code)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    with open(log, "ab") as out:
        job = subprocess.Popen([sys.executable, str(script)], cwd=workdir, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = job.wait(timeout=400)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            raise
    output = log.read_text()
    assert returncode == 0, f"exit {returncode}\n" + output[-6000:]
    return output


def readme_outputs(bootstrap: str) -> tuple[list[bytes], list[bytes]]:
    """What a read_committed consumer sees in the example's topics: (orders, orders-json)."""
    with wire.Client(bootstrap) as cluster:
        counts = {t: cluster.partition_count(t) for t in ("orders", "orders-json")}
    return ([m.value() for m in consume(bootstrap, "orders", counts["orders"])],
            [m.value() for m in consume(bootstrap, "orders-json", counts["orders-json"])])


def assert_readme_rows_exactly_once(bootstrap: str) -> None:
    import json

    orders, orders_json = readme_outputs(bootstrap)
    expected = sorted(b"order-%d" % i for i in range(1000))
    assert sorted(orders) == expected
    decoded = sorted(json.loads(v)["order"].encode() for v in orders_json)
    assert decoded == expected


def check_empty_batches(spark, bootstrap: str, workdir: Path) -> None:
    """run_empty_batches, and every step ran a micro-batch of its own."""
    last_batch = run_empty_batches(spark, bootstrap, workdir)
    ids = list(last_batch.values())
    assert ids == sorted(set(ids)), last_batch


def check_readme_example_twice(bootstrap: str, workdir: Path) -> None:
    for run in (1, 2):
        output = run_readme_example(bootstrap, workdir, workdir / f"run{run}.log")
        assert "1000 rows in orders-json" in output, output[-4000:]
        assert_readme_rows_exactly_once(bootstrap)
