"""The data source in Spark local mode: batch writes checked by a confluent-kafka
read_committed consumer, the JSON and protobuf formats, the source reading back across
aborted transactions, and a commit refused after transaction.timeout.ms."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
from confluent_kafka import Producer as ConfluentProducer

from spark_client.formats import protobuf_decoder
from spark_client.partitioner import partition_for_key
from tests.spark.helpers import consume, create_topic, spark_session, transaction_states

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]  # a Spark session starts slowly on a busy machine


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2]")
    yield session
    session.stop()


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def _write(df, bootstrap: str, **options):
    writer = df.write.format("eosbroker").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        writer = writer.option(k.replace("_", "."), v)
    writer.save()


def _read(spark, bootstrap: str, topic: str, **options):
    reader = spark.read.format("eosbroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_write_is_seen_exactly_once_by_a_read_committed_consumer(spark, broker):
    topic, prefix, n = _name("out"), _name("p"), 3000
    create_topic(broker.bootstrap, topic, 3)
    df = spark.range(n).repartition(4).selectExpr(
        "cast(id as string) as key", "concat('v', cast(id as string)) as value",
        "array(named_struct('key', 'row', 'value', cast(cast(id as string) as binary))) as headers")
    _write(df, broker.bootstrap, topic=topic, transactional_id_prefix=prefix)
    messages = consume(broker.bootstrap, topic, 3)
    values = [m.value() for m in messages]
    assert len(values) == n and set(values) == {b"v%d" % i for i in range(n)}
    for m in messages[:50]:  # keyed records land where the Java producer would put them
        assert m.partition() == partition_for_key(m.key(), 3)
        assert m.headers() == [("row", m.key())]
    states = transaction_states(broker.bootstrap, prefix)
    assert len(states) == 4 and set(states.values()) == {"CompleteCommit"}


def test_json_values_from_a_struct_column(spark, broker):
    topic = _name("json")
    create_topic(broker.bootstrap, topic, 1)
    df = spark.range(5).selectExpr("named_struct('id', id, 'name', concat('n', cast(id as string))) as value")
    _write(df, broker.bootstrap, topic=topic, value_format="json")
    got = sorted((json.loads(m.value()) for m in consume(broker.bootstrap, topic, 1, settle=0.5)), key=lambda v: v["id"])
    assert got == [{"id": i, "name": f"n{i}"} for i in range(5)]


def _descriptor_file(tmp_path) -> str:
    from google.protobuf import descriptor_pb2 as d

    f = d.FileDescriptorProto(name="reading.proto", package="demo", syntax="proto3")
    where = f.message_type.add(name="Location")
    where.field.add(name="lat", number=1, type=d.FieldDescriptorProto.TYPE_DOUBLE)
    where.field.add(name="lon", number=2, type=d.FieldDescriptorProto.TYPE_DOUBLE)
    reading = f.message_type.add(name="Reading")
    reading.field.add(name="sensor", number=1, type=d.FieldDescriptorProto.TYPE_STRING)
    reading.field.add(name="value", number=2, type=d.FieldDescriptorProto.TYPE_DOUBLE)
    reading.field.add(name="tags", number=3, type=d.FieldDescriptorProto.TYPE_STRING,
                      label=d.FieldDescriptorProto.LABEL_REPEATED)
    reading.field.add(name="where", number=4, type=d.FieldDescriptorProto.TYPE_MESSAGE, type_name=".demo.Location")
    path = tmp_path / "reading.desc"
    path.write_bytes(d.FileDescriptorSet(file=[f]).SerializeToString())
    return str(path)


def test_protobuf_values_round_trip(spark, broker, tmp_path):
    topic, descriptor = _name("proto"), _descriptor_file(tmp_path)
    create_topic(broker.bootstrap, topic, 2)
    df = spark.range(20).selectExpr(
        "cast(id as string) as key",
        "named_struct('sensor', concat('s', cast(id as string)), 'value', id * 1.5, "
        "'tags', array('a', cast(id as string)), 'where', named_struct('lat', 1.0, 'lon', -2.5)) as value")
    _write(df, broker.bootstrap, topic=topic, value_format="protobuf", protobuf_descriptor_file=descriptor,
           protobuf_message_name="demo.Reading")
    decode = protobuf_decoder(descriptor, "demo.Reading")
    rows = _read(spark, broker.bootstrap, topic).select("key", "value").collect()
    got = sorted((decode(r.value) for r in rows), key=lambda m: m["sensor"])
    assert got == sorted(({"sensor": f"s{i}", "value": i * 1.5, "tags": ["a", str(i)],
                           "where": {"lat": 1.0, "lon": -2.5}} for i in range(20)), key=lambda m: m["sensor"])


def test_source_reads_back_exactly_what_was_committed_across_aborted_transactions(spark, broker):
    topic = _name("mixed")
    create_topic(broker.bootstrap, topic, 2)
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    for round_, commit in enumerate([True, False, True, False]):
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, b"t%d-%d" % (round_, i), partition=i % 2)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    _write(spark.range(10).selectExpr("concat('s', cast(id as string)) as value"), broker.bootstrap, topic=topic)
    expected = consume(broker.bootstrap, topic, 2)
    assert len(expected) == 22
    rows = _read(spark, broker.bootstrap, topic).collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == \
        sorted((m.partition(), m.offset(), m.value()) for m in expected)
    assert {r.topic for r in rows} == {topic}
    uncommitted = _read(spark, broker.bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"}).count()
    assert uncommitted == 22 + 12
    # A sub-range by offsets, as Spark's Kafka source takes them.
    part = _read(spark, broker.bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 3, "1": -2}}),
                 endingOffsets=json.dumps({topic: {"0": 9, "1": -1}})).collect()
    assert sorted((r.partition, r.offset) for r in part) == sorted(
        (m.partition(), m.offset()) for m in expected if m.partition() == 1 or 3 <= m.offset() < 9)


def test_commit_after_transaction_timeout_fails_with_a_clear_error(spark, broker):
    topic, prefix = _name("late"), _name("p")
    create_topic(broker.bootstrap, topic, 2)
    with pytest.raises(Exception, match=r"transaction\.timeout\.ms=3000") as failure:
        _write(spark.range(100).selectExpr("cast(id as string) as value"), broker.bootstrap, topic=topic,
               transactional_id_prefix=prefix, transaction_timeout_ms="3000",
               **{"eosbroker_test_sleep_before_commit_ms": "3500"})
    assert "NOT committed" in str(failure.value)
    assert consume(broker.bootstrap, topic, 2, settle=0.5) == []
    assert set(transaction_states(broker.bootstrap, prefix).values()) == {"CompleteAbort"}


def test_streaming_read_in_micro_batches_sees_only_committed_records(spark, broker, tmp_path):
    topic = _name("stream-in")
    create_topic(broker.bootstrap, topic, 2)
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    for round_, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, b"r%d-%d" % (round_, i), partition=i % 2)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    stream = (spark.readStream.format("eosbroker").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "25").load())
    query = (stream.selectExpr("value").writeStream.format("memory").queryName(topic.replace("-", "_"))
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    query.processAllAvailable()
    query.stop()
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
    values = sorted(r.value for r in spark.table(topic.replace("-", "_")).collect())
    assert values == sorted(b"r%d-%d" % (r, i) for r in (0, 2) for i in range(30))
    assert len(batches) > 1  # maxOffsetsPerTrigger split the read


def _failure(action) -> str:
    with pytest.raises(Exception) as failure:
        action()
    return str(failure.value)


def test_configuration_errors_are_caught_on_the_driver_and_stay_short(spark, broker):
    topic = _name("checks")
    create_topic(broker.bootstrap, topic, 2)
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{s.getsockname()[1]}"

    typo = _failure(lambda: _write(df, broker.bootstrap, topic=topic, **{"delivery_guarantees": "at-least-once"}))
    assert "unknown option 'delivery.guarantees' for the eosbroker sink (did you mean 'delivery.guarantee'?)" in typo
    assert "valid options: kafka.bootstrap.servers, topic," in typo
    unreachable = _failure(lambda: _write(df, nobody, topic=topic))
    assert f"cannot reach the broker at kafka.bootstrap.servers='{nobody}'" in unreachable
    assert len(unreachable) < 2000, unreachable
    missing = _failure(lambda: _write(df, broker.bootstrap, topic="no-such-topic"))
    assert "topic 'no-such-topic' does not exist" in missing and "create_topic" in missing
    wrong_type = _failure(lambda: _write(spark.range(3).selectExpr("id as value"), broker.bootstrap, topic=topic))
    assert "column 'value' must be string or binary with value.format=raw, not bigint" in wrong_type
    no_source = _failure(lambda: _read(spark, nobody, topic).collect())
    assert "cannot reach the broker" in no_source and len(no_source) < 2000
    assert consume(broker.bootstrap, topic, 2, settle=0.5) == []  # no task ever ran
