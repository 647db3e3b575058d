"""Shared by the Spark tests: sessions, topics, a read_committed confluent consumer,
transaction states from ListTransactions."""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, TopicPartition

from spark_client import wire

# Spark starts its Python workers with this interpreter (the venv's).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


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
    with wire.Cluster(bootstrap) as cluster:
        cluster.create_topic(topic, partitions)


def consume(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
            settle: float = 1.0) -> list:
    """Every message of ``topic`` a confluent-kafka consumer sees under ``isolation``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() - quiet_since < settle and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            out.append(msg)
            quiet_since = time.monotonic()
    consumer.close()
    return out


def transaction_states(bootstrap: str, prefix: str, timeout: float = 10.0) -> dict[str, str]:
    """transactional id -> state for every id starting with ``prefix`` (ListTransactions),
    once no transaction is still in PrepareCommit/PrepareAbort: EndTxn is answered
    before its markers are written, as in Kafka, so Complete* comes a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        with wire.Cluster(bootstrap) as cluster:
            r = cluster.any_connection().request(66, 1, {"state_filters": [], "producer_id_filters": [],
                                                         "duration_filter": -1})
        states = {s.transactional_id: s.transaction_state for s in r.transaction_states
                  if s.transactional_id.startswith(prefix)}
        if not any(state.startswith("Prepare") for state in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(0.02)
