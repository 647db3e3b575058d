"""A deleted topic's name asked for with allow_auto_topic_creation right after the deletion
(a producer's periodic metadata refresh: librdkafka's producers allow auto-creation by
default) creates the topic again, on Apache Kafka 4.4 as on eosbroker. The asking request
is answered UNKNOWN_TOPIC_OR_PARTITION without partitions or id (KRaft brokers create the
topic through the controller and answer before it exists); the name then stands for a new,
empty topic under a new id, and CreateTopics of it is TOPIC_ALREADY_EXISTS. Asked without
auto-creation (as consumers ask), the name stays free.

confluent-kafka-python's share-consumer test of a topic deleted and created again
(test_topic_recreate_resumes_with_fresh_delivery) keeps such a producer alive across the
deletion and fails this way on either broker when the producer's refresh comes between the
deletion and the test's CreateTopics."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.reference.wire import Wire, err

DELETE_TOPICS, CREATE_TOPICS = 20, 19


async def _delete(wire: Wire, topic: str) -> str:
    r = await wire.request("delete_topics", {"topics": [{"name": topic, "topic_id": None}], "timeout_ms": 30000},
                           version=6, key=DELETE_TOPICS)
    return err(r.responses[0].error_code)


async def _create(wire: Wire, topic: str) -> str:
    r = await wire.request("create_topics", {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 30000}, key=CREATE_TOPICS)
    return err(r.topics[0].error_code)


async def _metadata(wire: Wire, topic: str, auto_create: bool):
    r = await wire.request("metadata", {"topics": [{"name": topic, "topic_id": None}],
                                        "allow_auto_topic_creation": auto_create,
                                        "include_topic_authorized_operations": False})
    return r.topics[0]


async def _forgotten(wire: Wire, topic: str) -> None:
    """Until Metadata without auto-creation no longer names the deleted topic: Kafka's
    DeleteTopics answers once its controller committed the deletion, and the broker's
    metadata cache learns it a moment later (eosbroker's at once)."""
    deadline = time.monotonic() + 15
    while (await _metadata(wire, topic, auto_create=False)).partitions:
        assert time.monotonic() < deadline, "the deleted topic is still named"
        await asyncio.sleep(0.05)


def _id_kind(topic_id, old) -> str:
    if topic_id is None or topic_id.int == 0:
        return "none"
    return "the deleted topic's" if topic_id == old else "new"


async def _answers(port: int, tag: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        recreated, left_free = f"recreated-{tag}", f"left-free-{tag}"
        out: list[tuple] = []
        for topic in (recreated, left_free):
            assert await wire.create_topic(topic) == "NONE"
            assert (await wire.produce(topic, 0, [b"before-1", b"before-2"]))[0] == "NONE"
        old = await wire.topic_id(recreated)

        out.append(("delete", await _delete(wire, recreated)))
        await _forgotten(wire, recreated)
        asked = await _metadata(wire, recreated, auto_create=True)
        out.append(("metadata asking for auto-creation", err(asked.error_code), len(asked.partitions),
                    _id_kind(asked.topic_id, old)))
        # Kafka's controller creates it a little after that answer
        deadline = time.monotonic() + 15
        while not (now := await _metadata(wire, recreated, auto_create=False)).partitions:
            assert time.monotonic() < deadline, "the name was not taken again"
            await asyncio.sleep(0.05)
        out.append(("then", err(now.error_code), len(now.partitions), _id_kind(now.topic_id, old)))
        out.append(("its log", *await wire.retry(lambda: wire.list_offset(recreated, 0, -1),
                                                 error_of=lambda answer: 0 if answer[0] == "NONE" else 3)))
        out.append(("CreateTopics of the name", await _create(wire, recreated)))

        out.append(("delete", await _delete(wire, left_free)))
        await _forgotten(wire, left_free)
        asked = await _metadata(wire, left_free, auto_create=False)
        out.append(("metadata without auto-creation", err(asked.error_code), len(asked.partitions)))
        out.append(("CreateTopics of the name", await _create(wire, left_free)))
        return out
    finally:
        await wire.close()


def test_a_deleted_topic_is_created_again_by_a_metadata_request_as_on_kafka(kafka_broker, shared_broker):
    tag = uuid.uuid4().hex[:8]
    kafka = asyncio.run(_answers(kafka_broker.port, tag))
    assert kafka == [
        ("delete", "NONE"),
        ("metadata asking for auto-creation", "UNKNOWN_TOPIC_OR_PARTITION", 0, "none"),
        ("then", "NONE", 1, "new"),
        ("its log", "NONE", 0),
        ("CreateTopics of the name", "TOPIC_ALREADY_EXISTS"),
        ("delete", "NONE"),
        ("metadata without auto-creation", "UNKNOWN_TOPIC_OR_PARTITION", 0),
        ("CreateTopics of the name", "NONE"),
    ]
    assert asyncio.run(_answers(shared_broker.port, tag)) == kafka
