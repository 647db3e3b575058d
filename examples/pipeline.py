"""Demo: read a topic with read_committed, transform, write another topic exactly once.

    make spark-demo                              # starts a throw-away broker
    make spark-demo BOOTSTRAP=127.0.0.1:9092     # uses a running one

Seeds ``demo-input`` with JSON purchase events (plus one aborted transaction whose
events must never show up), runs a Spark batch job through the "eosbroker" data
source (source: read_committed; sink: two-phase commit over Kafka transactions),
then reads ``demo-output`` back and checks every expected record is there once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from spark_client import register, wire  # noqa: E402
from spark_client.reading import read_partition  # noqa: E402

EVENTS = 10_000
PARTITIONS = 3


def start_broker(data_dir: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "broker.program", "serve", "--host", "127.0.0.1", "--port", "0",
                             "--data-dir", data_dir], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            stderr=open(Path(data_dir) / "broker.log", "ab"))
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"the broker did not start: {line!r}")
    return proc, f"127.0.0.1:{line.rsplit(':', 1)[1].strip()}"


def seed(bootstrap: str, topic: str) -> list[dict]:
    """Committed events, and an aborted transaction of bogus ones in between."""
    events = [{"id": i, "user": f"u{i % 50}", "amount": i % 100} for i in range(EVENTS)]
    with wire.Client(bootstrap) as cluster:
        cluster.create_topic(topic, PARTITIONS)
        for n, chunk in enumerate((events[: EVENTS // 2], [{"id": -1, "user": "bogus", "amount": 99}] * 100,
                                   events[EVENTS // 2:])):
            producer = wire.Producer(cluster, transactional_id=f"demo-seed-{uuid.uuid4().hex[:6]}")
            for e in chunk:
                producer.send(topic, e["id"] % PARTITIONS, e["user"].encode(), json.dumps(e).encode())
            txn = producer.flush()
            wire.end_txn(cluster, txn, commit=(n != 1), deadline=time.monotonic() + 30)
    return events


def run_job(bootstrap: str, source: str, sink: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("eosbroker-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    events = (spark.read.format("eosbroker").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").load())
    big = (events.selectExpr("from_json(cast(value as string), 'id long, user string, amount int') as e")
           .where("e.amount >= 10")
           .selectExpr("e.user as key", "named_struct('id', e.id, 'user', e.user, 'cents', e.amount * 100) as value"))
    (big.write.format("eosbroker").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", sink).option("value.format", "json").option("transactional.id.prefix", "demo")
     .save())
    spark.stop()


def verify(bootstrap: str, topic: str, events: list[dict]) -> int:
    expected = sorted(e["id"] for e in events if e["amount"] >= 10)
    seen = []
    with wire.Client(bootstrap) as cluster:
        end = cluster.list_offsets(topic, range(PARTITIONS), wire.LATEST, wire.READ_COMMITTED)
        for p in range(PARTITIONS):
            seen += [json.loads(r.value)["id"] for r in read_partition(cluster, topic, p, 0, end[p])]
    if sorted(seen) != expected:
        dupes = len(seen) - len(set(seen))
        raise SystemExit(f"FAILED: {len(seen)} records read, {len(expected)} expected, {dupes} duplicates")
    return len(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        broker, bootstrap = start_broker(tempfile.mkdtemp(prefix="eosbroker-demo-"))
    try:
        run_id = uuid.uuid4().hex[:6]
        source, sink = f"demo-input-{run_id}", f"demo-output-{run_id}"
        events = seed(bootstrap, source)
        with wire.Client(bootstrap) as cluster:
            cluster.create_topic(sink, PARTITIONS)
        print(f"seeded {source} on {bootstrap}: {len(events)} committed events, 100 aborted", flush=True)
        started = time.perf_counter()
        run_job(bootstrap, source, sink)
        count = verify(bootstrap, sink, events)
        print(f"OK: {sink} holds {count} records, each exactly once, none from the aborted transaction "
              f"(Spark job {time.perf_counter() - started:.1f} s)")
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(20)


if __name__ == "__main__":
    main()
