"""Spark's own `format("kafka")` (spark-sql-kafka-0-10, the jobs Spark users already have)
against eosbroker and Apache Kafka: the same jobs give the same rows.

The source topic holds what makes a reader's life hard: two partitions, keys and headers,
a committed transaction, an aborted one (its records and markers take offsets), plain
records. The rows a job sees, offsets included, must be equal on both brokers.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import pytest
from confluent_kafka import Producer

from tests.reference.spark_kafka import connector_jars
from tests.reference.wire import Wire

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# Spark starts slowly on a loaded machine; every wait inside is bounded on its own.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

# A read_committed poll that finds only aborted records or markers waits this long before
# Spark moves on (its default is spark.network.timeout, 120 s): the same on both brokers.
POLL_TIMEOUT_MS = "5000"


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("eosbroker-spark-kafka-connector")
               .config("spark.jars", connector_jars())
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "512m")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


async def _create(bootstrap: str, *topics: str) -> None:
    wire = await Wire.connect(int(bootstrap.rsplit(":", 1)[1]))
    try:
        for t in topics:
            assert await wire.create_topic(t, 2) == "NONE"
    finally:
        await wire.close()


async def _settled(bootstrap: str, txn_id: str) -> None:
    wire = await Wire.connect(int(bootstrap.rsplit(":", 1)[1]))
    try:
        for _ in range(400):
            if (await wire.describe_transaction(txn_id))["state"] in ("CompleteAbort", "CompleteCommit"):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{txn_id} never completed")
    finally:
        await wire.close()


def _fill_source(bootstrap: str, topic: str, txn_id: str) -> None:
    """plain records, a committed transaction with headers, an aborted one, more plain."""
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(4):
        plain.produce(topic, key=f"k{i}", value=f"plain-{i}", partition=i % 2)
    plain.flush(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    txn.init_transactions(60)
    txn.begin_transaction()
    for i in range(4):
        txn.produce(topic, key=f"k{i}", value=f"committed-{i}", partition=i % 2,
                    headers=[("h", f"hv{i}".encode()), ("n", None)])
    txn.commit_transaction(60)
    txn.begin_transaction()
    for i in range(4):
        txn.produce(topic, key=f"k{i}", value=f"aborted-{i}", partition=i % 2)
    txn.flush(30)
    txn.abort_transaction(60)
    # Kafka answers EndTxn before its markers are written: wait for them, so the records
    # after the abort land at the same offsets on both brokers.
    asyncio.run(_settled(bootstrap, txn_id))
    for i in range(4, 6):
        plain.produce(topic, key=f"k{i}", value=f"plain-{i}", partition=i % 2)
    plain.flush(30)


def _rows(df) -> list[tuple]:
    rows = df.selectExpr("partition", "offset", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v",
                         "headers").collect()
    return sorted((r.partition, r.offset, r.k, r.v,
                   tuple((h.key, None if h.value is None else bytes(h.value)) for h in (r.headers or ())))
                  for r in rows)


def _read(spark, bootstrap: str, topic: str, isolation: str, starting: str = "earliest"):
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", starting).option("endingOffsets", "latest")
            .option("kafka.isolation.level", isolation).option("includeHeaders", "true")
            .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS).load())


@pytest.fixture(scope="module")
def sources(eos_reference, kafka_broker):
    """The same source topic written to both brokers: {broker name: (bootstrap, topic)}."""
    topic = f"spark-src-{uuid.uuid4().hex[:8]}"
    out = {}
    for name, broker in (("eosbroker", eos_reference), ("kafka", kafka_broker)):
        asyncio.run(_create(broker.bootstrap, topic))
        _fill_source(broker.bootstrap, topic, f"{topic}-txn")
        out[name] = (broker.bootstrap, topic)
    return out


def test_batch_reads_give_the_same_rows(spark, sources):
    seen = {}
    for name, (bootstrap, topic) in sources.items():
        seen[name] = {
            "read_committed": _rows(_read(spark, bootstrap, topic, "read_committed")),
            "read_uncommitted": _rows(_read(spark, bootstrap, topic, "read_uncommitted")),
            "from offsets": _rows(_read(spark, bootstrap, topic, "read_committed",
                                        starting=f'{{"{topic}":{{"0":3,"1":-2}}}}')),
        }
    assert seen["eosbroker"] == seen["kafka"]
    committed = [r[3] for r in seen["kafka"]["read_committed"]]
    assert sorted(committed) == sorted([f"plain-{i}" for i in range(6)] + [f"committed-{i}" for i in range(4)])
    assert sum(1 for r in seen["kafka"]["read_uncommitted"] if r[3].startswith("aborted")) == 4
    assert ("h", b"hv0") in next(r for r in seen["kafka"]["read_committed"] if r[3] == "committed-0")[4]


def test_streaming_read_gives_the_same_rows(spark, sources, tmp_path):
    seen = {}
    for name, (bootstrap, topic) in sources.items():
        stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("kafka.isolation.level", "read_committed").option("includeHeaders", "true")
                  .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS).load())
        table = f"stream_{name}_{uuid.uuid4().hex[:6]}"
        query = (stream.writeStream.format("memory").queryName(table).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / name)).start())
        query.awaitTermination(180)
        assert query.exception() is None
        seen[name] = _rows(spark.table(table))
    assert seen["eosbroker"] == seen["kafka"]
    assert len(seen["kafka"]) == 10


def test_batch_and_streaming_writes_give_the_same_rows(spark, sources, tmp_path):
    from pyspark.sql import functions as F

    seen = {}
    for name, (bootstrap, topic) in sources.items():
        batch_out, stream_out = f"{topic}-batch-out", f"{topic}-stream-out"
        asyncio.run(_create(bootstrap, batch_out, stream_out))
        rows = (spark.createDataFrame([(f"k{i}", f"row-{i}", i % 2) for i in range(20)], ["key", "value", "partition"])
                .withColumn("partition", F.col("partition").cast("int")))
        (rows.withColumn("headers", F.array(F.struct(F.lit("src").alias("key"), F.lit(b"batch").alias("value"))))
             .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", batch_out).save())
        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", "read_committed")
                 .option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS).load()
                 .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "CAST(partition AS INT) AS partition")
                 .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", stream_out).option("checkpointLocation", str(tmp_path / name))
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        seen[name] = {
            # Spark's tasks write in parallel: the order within a partition is not fixed.
            "batch": sorted((r[0],) + r[2:] for r in _rows(_read(spark, bootstrap, batch_out, "read_committed"))),
            "stream": sorted(r[2:4] for r in _rows(_read(spark, bootstrap, stream_out, "read_committed"))),
        }
    assert seen["eosbroker"] == seen["kafka"]
    assert sorted(r[2] for r in seen["kafka"]["batch"]) == sorted(f"row-{i}" for i in range(20))
    assert all(r[0] == int(r[1][1:]) % 2 and r[3] == (("src", b"batch"),) for r in seen["kafka"]["batch"])
    assert len(seen["kafka"]["stream"]) == 10
