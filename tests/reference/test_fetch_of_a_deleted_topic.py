"""A fetch parked waiting for data (max_wait_ms) when its topic is deleted: Apache Kafka
4.4 completes it at the deletion (its delayed fetch reads its partitions again when it
completes) with the error a new fetch of that topic gets; eosbroker must answer the
same, by name (v12) and by topic id (v16), and not a storage error of a log it closed."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.reference.wire import Wire, err

FETCH, DELETE_TOPICS = 1, 20
MAX_WAIT_MS = 8000


def _fetch_body(version: int, topic: str, topic_id, offset: int) -> dict:
    partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    body = {"max_wait_ms": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": topic_id, "partitions": [partition]} if version >= 13
                       else {"topic": topic, "partitions": [partition]}]}
    if version < 15:
        body["replica_id"] = -1
    return body


async def _parked_fetch(port: int, version: int, topic: str, topic_id, offset: int) -> tuple[str, bool]:
    """(the partition's error, whether the answer came before max_wait_ms)."""
    wire = await Wire.connect(port)
    try:
        started = time.monotonic()
        r = await wire.request("fetch", _fetch_body(version, topic, topic_id, offset), version=version, key=FETCH)
        return err(r.responses[0].partitions[0].error_code), time.monotonic() - started < MAX_WAIT_MS / 2000
    finally:
        await wire.close()


async def _answers(port: int) -> dict[int, tuple[str, bool]]:
    wire = await Wire.connect(port)
    try:
        topic = f"fetch-of-deleted-{uuid.uuid4().hex[:8]}"
        assert await wire.create_topic(topic) == "NONE"
        assert (await wire.produce(topic, 0, [b"one"]))[0] == "NONE"
        topic_id = await wire.topic_id(topic)
        # parked at the log end: nothing to answer with until max_wait_ms
        fetches = {v: asyncio.create_task(_parked_fetch(port, v, topic, topic_id, 1)) for v in (12, 16)}
        await asyncio.sleep(1.0)
        assert not any(f.done() for f in fetches.values()), "a fetch at the log end did not wait"
        r = await wire.request("delete_topics", {"topics": [{"name": topic, "topic_id": None}],
                                                 "timeout_ms": 30000}, version=6, key=DELETE_TOPICS)
        assert err(r.responses[0].error_code) == "NONE"
        return {v: await f for v, f in fetches.items()}
    finally:
        await wire.close()


async def test_a_fetch_waiting_on_a_deleted_topic_is_answered_as_on_kafka(brokers):
    answers = {name: await _answers(b.port) for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"], answers
