"""The data source's exactly-once writes over SASL_SSL (SCRAM-SHA-512 as alice, the broker's
certificate checked against the development CA), batch and streaming, against eosbroker
and Apache Kafka 4.4: every row once in a read_committed read, read back by the data
source's own reader over the same listener too."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.testing.security import SecuredBroker, Security
from spark_client import create_topic
from tests.spark.helpers import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
MECHANISM = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2]")
    yield session
    session.stop()


class Target:
    """A broker's SASL_SSL listener: its address, the data source's options and
    confluent-kafka's settings, both logged in as alice."""

    def __init__(self, bootstrap: str, security: Security, plaintext: str) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.plaintext = plaintext  # the broker's plaintext listener, for the checks
        self.options = {"kafka.bootstrap.servers": bootstrap, **security.spark_options("alice")}

    def read_committed(self, topic: str, partitions: int) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, **self.security.confluent_kafka("alice"),
                             "group.id": f"check-{topic}", "isolation.level": "read_committed",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values, at_end = [], set()
        try:
            while len(at_end) < partitions:
                message = consumer.poll(30)
                assert message is not None, f"read_committed stalled after {len(values)} records"
                if message.error():
                    assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                    at_end.add(message.partition())
                else:
                    values.append(message.value())
        finally:
            consumer.close()
        return values


# Against Kafka (a JVM broker of its own) and the kill-restart: make test-long.
@pytest.fixture(scope="module", params=["eosbroker", pytest.param("kafka", marks=pytest.mark.long)])
def target(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(f"sasl-ssl-{request.param}")
    if request.param == "eosbroker":
        security = Security.of("SASL_SSL", MECHANISM, certs_dir=workdir / "certs")
        broker = SecuredBroker(workdir / "data", security, {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}).start()
        yield Target(broker.bootstrap_servers, security, f"127.0.0.1:{broker.internal_port}")
    else:
        from tests.reference.kafka_broker import KafkaBroker

        broker = KafkaBroker(workdir, secured=True).start()
        yield Target(broker.bootstrap_for("SASL_SSL"), broker.security("SASL_SSL", MECHANISM), broker.bootstrap)
    broker.stop()


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def test_batch_write_over_sasl_ssl_exactly_once(spark, target):
    topic = _name("secured-batch")
    create_topic(target.bootstrap, topic, 3, options=target.options)
    rows = spark.range(600).repartition(3).selectExpr("cast(id as string) as key",
                                                      "concat('v', cast(id as string)) as value")
    writer = rows.write.format("eosbroker").option("topic", topic).option("transactional.id.prefix", _name("p"))
    for key, value in target.options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
    values = target.read_committed(topic, 3)
    assert sorted(values) == sorted(b"v%d" % i for i in range(600))
    reader = spark.read.format("eosbroker").option("subscribe", topic)
    for key, value in target.options.items():
        reader = reader.option(key, value)
    assert reader.load().count() == 600  # the data source's reader over SASL_SSL too


def test_streaming_write_over_sasl_ssl_exactly_once(spark, target, tmp_path):
    topic = _name("secured-stream")
    create_topic(target.bootstrap, topic, 2, options=target.options)
    source = tmp_path / "in"
    source.mkdir()
    for batch in range(3):
        (source / f"{batch}.json").write_text(
            "".join(json.dumps({"id": batch * 100 + i, "payload": f"b{batch}-{i}"}) + "\n" for i in range(100)))
    rows = (spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1).json(str(source))
            .repartition(2).selectExpr("cast(id as string) as key", "payload as value"))
    writer = (rows.writeStream.format("eosbroker").option("topic", topic).option("transactional.id.prefix", _name("s"))
              .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True))
    for key, value in target.options.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(600)
    assert query.exception() is None
    values = target.read_committed(topic, 2)
    assert sorted(values) == sorted(f"b{b}-{i}".encode() for b in range(3) for i in range(100))


def test_a_wrong_password_is_refused_on_the_driver(spark, target):
    options = {**target.options, "kafka.sasl.jaas.config":
               target.options["kafka.sasl.jaas.config"].replace("alice-secret", "not-her-password")}
    writer = spark.range(1).selectExpr("'x' as value").write.format("eosbroker").option("topic", "anything")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception) as failure:
        writer.mode("append").save()
    assert "SASL_AUTHENTICATION_FAILED" in str(failure.value)


@pytest.mark.long
def test_streaming_query_killed_mid_commit_over_sasl_ssl_restarts_exactly_once(target, tmp_path, monkeypatch):
    """The driver SIGKILLed between a batch's EndTxn calls, restarted from its checkpoint:
    both runs log in over SASL_SSL; the checks read over the broker's plaintext listener."""
    from tests.spark.test_spark_driver_crash import PARTITIONS, _assert_exactly_once_and_live, _run

    monkeypatch.setenv("SPARK_DRIVER_JOB_OPTIONS", json.dumps(target.options))
    topic, prefix = _name("secured-kill"), _name("k")
    create_topic(target.bootstrap, topic, PARTITIONS, options=target.options)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(3):
        (inputs / f"part-{f}.json").write_text(
            "\n".join(json.dumps({"id": f * 40 + i, "payload": f"row-{f * 40 + i}"}) for i in range(40)))
    args = ["stream", target.bootstrap, topic, prefix, str(inputs), str(tmp_path / "checkpoint")]
    _run(args, tmp_path / "job.log", "during-commit:1")
    _run(args, tmp_path / "job.log")
    _assert_exactly_once_and_live(target.plaintext, topic, prefix, {f"row-{i}".encode() for i in range(120)})
