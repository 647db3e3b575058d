"""No half-made topics: CreateTopics and CreatePartitions create every partition
(directories, registry, leaders) or answer an error and leave nothing; a kill -9 in the
middle of one is completed or rolled back at start-up from the intent journal, with a log
line; a data directory from before the journal is scanned once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.wire.client import KafkaConnection
from broker.testing.helpers import HOST
from broker.cluster.topic_intents import TopicIntents
from broker.cluster.topics import read_topic_entries


def _registry(broker) -> dict[str, int]:
    try:
        return {t["name"]: t["partitions"] for t in read_topic_entries(broker.data_dir)}
    except FileNotFoundError:
        return {}


def _dirs(broker, topic: str) -> set[str]:
    return {p.name for p in broker.data_dir.glob(f"{topic}-*") if p.is_dir()}


def _pending_intents(broker) -> list:
    journal = TopicIntents(broker.data_dir / "meta")
    journal.load()
    return journal.pending


def _error_of(future) -> KafkaError:
    try:
        future.result(30)
    except KafkaException as e:
        return e.args[0]
    raise AssertionError("no error")


def test_create_topics_failing_midway_leaves_nothing(broker_factory):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"half-{uuid.uuid4().hex[:6]}"
    (broker.data_dir / f"{topic}-3").write_text("in the way")  # partition 3's directory cannot be made

    error = _error_of(admin.create_topics([NewTopic(topic, 6, 1)])[topic])
    assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
    assert topic not in _registry(broker)
    assert _dirs(broker, topic) == set()  # partitions 0-2 were made, then removed
    assert topic not in admin.list_topics(timeout=10).topics
    assert "nothing created" in broker.log_text()

    (broker.data_dir / f"{topic}-3").unlink()
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 6
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(6):
        producer.produce(topic, b"v", partition=p)
    assert producer.flush(30) == 0


def test_create_partitions_failing_midway_leaves_the_topic_as_it_was(broker_factory):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    (broker.data_dir / f"{topic}-4").write_text("in the way")

    error = _error_of(admin.create_partitions([NewPartitions(topic, 6)])[topic])
    assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
    assert _registry(broker)[topic] == 2
    assert _dirs(broker, topic) == {f"{topic}-0", f"{topic}-1"}
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2


def test_kill_9_during_create_topics_is_repaired_at_start(broker_factory):
    broker = broker_factory(in_process=False)
    topic = f"big-{uuid.uuid4().hex[:6]}"
    partitions = 5000

    async def create_and_kill():
        conn = await KafkaConnection.connect(HOST, broker.port)
        conn.send(19, 5, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout_ms": 30000})
        while not _dirs(broker, topic):  # the creation has begun
            await asyncio.sleep(0.001)
        broker.kill()
        await conn.close()

    asyncio.run(create_and_kill())
    seen = len(broker.log_text())
    broker.start()
    started = broker.log_text()[seen:]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_topics(timeout=10).topics
    # whichever moment the kill met: the whole topic or none of it
    if topic in _registry(broker):
        assert len(listed[topic].partitions) == partitions
        assert len(_dirs(broker, topic)) == partitions
    else:
        assert topic not in listed
        assert _dirs(broker, topic) == set()
        assert f"rolled back the topic create of {topic}" in started

    # what an older version's kill left, made by hand in a data directory without the
    # journal: directories of a topic the registry does not name, and a registered topic
    # missing directories; the one scan such a directory gets repairs both
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    kept = f"kept-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(kept, 3, 1)])[kept].result(30)
    broker.kill()
    for p in range(4):
        (broker.data_dir / f"{ghost}-{p}").mkdir()
    (broker.data_dir / f"{ghost}-0" / f"{0:020d}.log").write_bytes(b"")
    (broker.data_dir / f"{kept}-2").rmdir()
    (broker.data_dir / "not-a-partition-7").mkdir()
    (broker.data_dir / "not-a-partition-7" / "notes.txt").write_text("a user's file")
    (broker.data_dir / "meta" / "topic-intents.json").unlink()
    seen = len(broker.log_text())
    broker.start()
    started = broker.log_text()[seen:]
    assert f"removed 4 partition directories of unknown topic {ghost} (0-3)" in started
    assert f"completed topic {kept}: created its 1 missing partition directories (2)" in started
    assert _dirs(broker, ghost) == set()
    assert (broker.data_dir / "not-a-partition-7" / "notes.txt").exists()  # not ours: left alone
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(kept, b"v", partition=2)
    assert producer.flush(30) == 0

    # the journal is back: later starts do not list the partition directories
    broker.kill()
    (broker.data_dir / f"{ghost}-0").mkdir()
    seen = len(broker.log_text())
    broker.start()
    assert "removed" not in broker.log_text()[seen:]
    assert (broker.data_dir / f"{ghost}-0").is_dir()  # not named by the registry nor the journal: not served
    assert ghost not in admin.list_topics(timeout=10).topics


def test_a_deleted_topics_directories_go_beside_the_broker_and_its_name_is_free_at_once(broker_factory):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"gone-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3000):
        producer.produce(topic, b"old", partition=i % 3)
    assert producer.flush(30) == 0

    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)  # at once: the directories are aside
    producer.produce(topic, b"new", partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen = []
    while not seen:
        message = consumer.poll(10)
        assert message is not None, "the recreated topic's record was not read"
        assert message.error() is None, message.error()
        seen.append(message.value())
    assert consumer.poll(1) is None and seen == [b"new"]  # nothing of the deleted topic
    consumer.close()
    for _ in range(500):  # removed by a thread: gone soon, the intent with them
        if not list(broker.data_dir.glob(f"{topic}-*-delete")) and _pending_intents(broker) == []:
            break
        time.sleep(0.01)
    assert not list(broker.data_dir.glob(f"{topic}-*-delete"))
    assert _pending_intents(broker) == []
    assert _dirs(broker, topic) == {f"{topic}-0", f"{topic}-1"}


def test_a_kill_9_before_the_renamed_directories_are_gone_removes_them_at_start(broker_factory):
    broker = broker_factory(in_process=False)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"aside-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    broker.kill()
    # what a kill -9 leaves after a delete's commit and renames, its topic created again since
    old_id = uuid.uuid4().hex
    for p in range(3):
        aside = broker.data_dir / f"{topic}-{p}.{old_id}-delete"
        aside.mkdir()
        (aside / f"{0:020d}.log").write_bytes(b"old records")
    (broker.data_dir / "meta" / "topic-intents.json").write_text(json.dumps(
        [{"op": "delete", "topic": topic, "first": 0, "end": 3, "configs": {}, "aside": old_id}]))
    seen = len(broker.log_text())
    broker.start()
    assert f"completed the delete of topic {topic} (since created again)" in broker.log_text()[seen:]
    assert not list(broker.data_dir.glob(f"{topic}-*-delete"))
    assert _dirs(broker, topic) == {f"{topic}-0", f"{topic}-1"}
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2
