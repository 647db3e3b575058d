"""Spark streaming into the eosbroker sink: end-to-end latency and rows/s (eosbroker only,
in a broker of its own, like spark-write).

A Structured Streaming query reads JSON files from a directory with a 1 s processing-time
trigger and writes them exactly once to a fresh 3-partition topic; a confluent-kafka
read_committed consumer on the topic notes when each row becomes visible. A file
"appears" when it is renamed into the directory (written beside it first, so Spark
never sees half a file).

- latency: after an untimed warm-up file, 20 files of 1,000 rows, one every 1.5 s; for each row, the time from its
  file appearing to the consumer receiving it (p50, p99, max over all rows). It
  includes the wait for the next trigger (up to 1 s), the batch's tasks, the two-phase
  commit and the consumer's fetch.
- rows/s: then 10 files of ``--records`` / 2 rows each (1,000,000 rows by default)
  appear at once; rows / (the last row visible - the files appearing).
The consumer must see every row exactly once, or the run fails.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.brokers import RunningBroker
from bench.workloads.base import Metric, RunContext, Workload, WorkloadFailed
from bench.workloads.spark_write import PARTITIONS, _spark

LATENCY_FILES, LATENCY_ROWS, LATENCY_GAP_S = 20, 1000, 1.5
THROUGHPUT_FILES = 10


class _Watcher(threading.Thread):
    """A read_committed consumer noting when each key first becomes visible."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.seen: dict[bytes, float] = {}
        self.duplicates = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for msg in self.consumer.consume(10_000, 0.05):
                if msg.error() is None:
                    if msg.key() in self.seen:
                        self.duplicates += 1
                    else:
                        self.seen[msg.key()] = time.time()
        self.consumer.close()

    def wait_for(self, count: int, deadline: float) -> None:
        while len(self.seen) < count:
            if time.perf_counter() > deadline:
                raise WorkloadFailed(f"only {len(self.seen)} of {count} rows became visible in time")
            time.sleep(0.01)


def _drop(source: Path, staging: Path, name: str, rows: list[dict]) -> float:
    """Writes a file beside the source directory, renames it in; returns when it appeared."""
    path = staging / name
    path.write_text("\n".join(json.dumps(r) for r in rows))
    os.rename(path, source / name)
    return time.time()


def run(ctx: RunContext) -> dict[str, float]:
    spark = _spark()
    from spark_client import create_topic

    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s) as broker, \
            tempfile.TemporaryDirectory(prefix="spark-stream-") as tmp:
        source, staging = Path(tmp) / "in", Path(tmp) / "staging"
        source.mkdir()
        staging.mkdir()
        topic = f"stream-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        watcher = _Watcher(broker.bootstrap, topic)
        watcher.start()
        query = (spark.readStream.schema("key string, value string").json(str(source))
                 .writeStream.format("eosbroker").option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
                 .option("transactional.id.prefix", "bench").trigger(processingTime="1 second").start())
        try:
            # Untimed: the query's first batches (Python workers starting) before anything is measured.
            _drop(source, staging, "warm.json", [{"key": f"w-{i}", "value": "x"} for i in range(100)])
            watcher.wait_for(100, ctx.deadline())
            appeared: dict[str, float] = {}
            for f in range(LATENCY_FILES):
                rows = [{"key": f"l{f}-{i}", "value": "x" * 100} for i in range(LATENCY_ROWS)]
                appeared[f"l{f}"] = _drop(source, staging, f"l{f}.json", rows)
                time.sleep(LATENCY_GAP_S)
            latency_rows = 100 + LATENCY_FILES * LATENCY_ROWS
            watcher.wait_for(latency_rows, ctx.deadline())
            latencies = sorted((seen - appeared[key.decode().split("-")[0]]) * 1000
                               for key, seen in watcher.seen.items() if key.startswith(b"l"))

            per_file = max(1, ctx.settings.records // 2)
            for f in range(THROUGHPUT_FILES):
                rows = [{"key": f"t{f}-{i}", "value": "x" * 100} for i in range(per_file)]
                (staging / f"t{f}.json").write_text("\n".join(json.dumps(r) for r in rows))
            start = time.time()
            for f in range(THROUGHPUT_FILES):
                os.rename(staging / f"t{f}.json", source / f"t{f}.json")
            total = latency_rows + THROUGHPUT_FILES * per_file
            watcher.wait_for(total, time.perf_counter() + 3 * ctx.settings.timeout_s)
            elapsed = max(watcher.seen.values()) - start
        finally:
            query.stop()
            watcher.stopping.set()
            watcher.join(10)
        if watcher.duplicates or len(watcher.seen) != total:
            raise WorkloadFailed(f"{len(watcher.seen)} distinct rows of {total}, {watcher.duplicates} duplicates")
    return {
        "rows/s": THROUGHPUT_FILES * per_file / elapsed,
        "latency p50 ms": statistics.median(latencies),
        "latency p99 ms": latencies[int(len(latencies) * 0.99) - 1],
        "latency max ms": latencies[-1],
    }


WORKLOAD = Workload(
    name="spark-stream",
    description="Spark streaming (1 s trigger) JSON files -> eosbroker sink: file-to-read_committed latency, rows/s",
    run=run,
    metrics=(
        Metric("rows/s", "rows/s", "higher", ",.0f"),
        Metric("latency p50 ms", "ms", "lower", ",.0f"),
        Metric("latency p99 ms", "ms", "lower", ",.0f"),
        Metric("latency max ms", "ms", "lower", ",.0f"),
    ),
    brokers=("eosbroker",),
    why_only="it writes through eosbroker's own PySpark data source",
)
