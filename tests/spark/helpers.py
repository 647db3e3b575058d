"""Shared by the Spark tests: sessions, topics, a read_committed confluent consumer,
transaction states from ListTransactions."""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from spark_client import wire

# Spark starts its Python workers with this interpreter (the venv's).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Spark binds to this machine's loopback only, not the first non-loopback interface.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_session(master: str):
    from pyspark.sql import SparkSession

    from spark_client import register

    spark = (SparkSession.builder.master(master).appName("eosbroker-tests")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with wire.Client(bootstrap) as cluster:
        cluster.create_topic(topic, partitions)


def consume(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
            settle: float = 1.0) -> list:
    """Every message of ``topic`` a confluent-kafka consumer sees under ``isolation``.

    Done once every partition has reported its end (for read_committed, the LSO) and
    nothing new arrived for ``settle`` seconds: a quiet window alone ends too early on a
    loaded machine, before the first fetch has been answered."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    at_end: set[int] = set()
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(at_end) == partitions and time.monotonic() - quiet_since >= settle:
            break
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is None:
            out.append(msg)
            at_end.discard(msg.partition())
            quiet_since = time.monotonic()
        elif msg.error().code() == KafkaError._PARTITION_EOF:
            at_end.add(msg.partition())
    consumer.close()
    return out


def transaction_states(bootstrap: str, prefix: str, timeout: float = 10.0) -> dict[str, str]:
    """transactional id -> state for every id starting with ``prefix`` (ListTransactions),
    once no transaction is still in PrepareCommit/PrepareAbort: EndTxn is answered
    before its markers are written, as in Kafka, so Complete* comes a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        with wire.Client(bootstrap) as cluster:
            r = cluster.any_connection().request(66, 1, {"state_filters": [], "producer_id_filters": [],
                                                         "duration_filter": -1})
        states = {s.transactional_id: s.transaction_state for s in r.transaction_states
                  if s.transactional_id.startswith(prefix)}
        if not any(state.startswith("Prepare") for state in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(0.02)


def last_stable_offsets(bootstrap: str, topic: str, partitions: int) -> tuple[dict[int, int], dict[int, int]]:
    """(last stable offset, high watermark) of every partition."""
    with wire.Client(bootstrap) as cluster:
        return (cluster.list_offsets(topic, range(partitions), wire.LATEST, wire.READ_COMMITTED),
                cluster.list_offsets(topic, range(partitions), wire.LATEST, wire.READ_UNCOMMITTED))


def nothing_open(bootstrap: str, topic: str, partitions: int) -> bool:
    """Whether the last stable offset equals the high watermark on every partition."""
    lso, high_watermark = last_stable_offsets(bootstrap, topic, partitions)
    return lso == high_watermark
