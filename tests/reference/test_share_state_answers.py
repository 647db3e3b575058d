"""The share-state APIs (83-87) sent by a client, against Apache Kafka 4.4 and eosbroker
(4.4 profile): FindCoordinator for a share-partition key, then reads and writes before
and after InitializeShareGroupState, a fenced state epoch, a summary and a deletion get
the same error codes, messages and states."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.reference.wire import Wire, err

FIND_COORDINATOR, INITIALIZE, READ, WRITE, DELETE, SUMMARY = 10, 83, 84, 85, 86, 87

pytestmark = pytest.mark.reference_extended  # beyond the CI subset: make test-reference runs it


async def _answers(port: int, topic: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        assert await wire.create_topic(topic, 1) == "NONE"
        topic_id = await wire.topic_id(topic)
        group = f"sg-{topic}"
        out = []

        async def call(label: str, api_key: int, version: int, partition: dict, fields=(), topic=None):
            body = {"group_id": group, "topics": [{"topic_id": topic or topic_id,
                                                   "partitions": [{"partition": 0, **partition}]}]}
            r = await wire.retry(lambda: wire.conn.request(api_key, version, body),
                                 error_of=lambda r: r.results[0].partitions[0].error_code)
            p = r.results[0].partitions[0]
            out.append((label, err(p.error_code), p.error_message, *(getattr(p, f) for f in fields)))

        found = await wire.retry(lambda: wire.conn.request(FIND_COORDINATOR, 6, {
            "key_type": 2, "coordinator_keys": [f"{group}:{_java_uuid(topic_id)}:0"]}),
            error_of=lambda r: r.coordinators[0].error_code)
        out.append(("find the share coordinator", err(found.coordinators[0].error_code)))
        write = {"state_epoch": 0, "leader_epoch": 0, "start_offset": 3, "delivery_complete_count": -1,
                 "state_batches": [{"first_offset": 3, "last_offset": 4, "delivery_state": 0, "delivery_count": 1}]}
        await call("read before initialize", READ, 0, {"leader_epoch": 0})
        await call("write before initialize", WRITE, 1, write)
        await call("summary before initialize", SUMMARY, 1, {"leader_epoch": 0}, ("start_offset",))
        await call("initialize", INITIALIZE, 0, {"state_epoch": 1, "start_offset": -1})
        await call("read after initialize", READ, 0, {"leader_epoch": 0}, ("state_epoch", "start_offset"))
        await call("write an older state epoch", WRITE, 1, write)
        await call("write", WRITE, 1, write | {"state_epoch": 1})
        await call("read back", READ, 0, {"leader_epoch": 0}, ("state_epoch", "start_offset"))
        await call("summary", SUMMARY, 1, {"leader_epoch": 0}, ("state_epoch", "start_offset"))
        await call("delete", DELETE, 0, {})
        await call("read after delete", READ, 0, {"leader_epoch": 0})
        unknown = uuid.uuid4()
        await call("read of an unknown topic", READ, 0, {"leader_epoch": 0}, topic=unknown)
        await call("summary of an unknown topic", SUMMARY, 1, {"leader_epoch": 0}, topic=unknown)
        return out
    finally:
        await wire.close()


def _java_uuid(value: uuid.UUID) -> str:
    from coordinator.share.state_log_codec import java_uuid

    return java_uuid(value)


def test_share_state_answers_match_kafka(kafka_broker, broker_factory, topic_name):
    eos = broker_factory({"emulate.kafka.version": "4.4"})
    kafka_answers = asyncio.run(_answers(kafka_broker.port, topic_name))
    eos_answers = asyncio.run(_answers(eos.port, topic_name))
    assert eos_answers == kafka_answers
