"""A CreateTopics whose partition directories are still being made (by a thread): the
broker answers other clients meanwhile, and what they see is the topic whole or not yet
there (the wire side of tests/unit/test_topic_dirs_off_loop.py)."""

from __future__ import annotations

import asyncio
import threading

import broker.cluster.cluster as cluster_module
from broker.config import BrokerConfig
from broker.errors import code
from broker.process import Broker
from broker.wire.client import KafkaConnection

METADATA, CREATE_TOPICS, CREATE_PARTITIONS = 3, 19, 37


def _create(name: str, partitions: int) -> dict:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}], "timeout_ms": 30_000, "validate_only": False}


def _metadata(name: str) -> dict:
    return {"topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False}


async def test_clients_are_answered_while_a_topics_directories_are_made(tmp_path, monkeypatch):
    started, release = threading.Event(), threading.Event()
    real = cluster_module._make_dirs

    def held(data_dir, intent):
        started.set()
        assert release.wait(20)
        return real(data_dir, intent)

    monkeypatch.setattr(cluster_module, "_make_dirs", held)
    broker = Broker(BrokerConfig(), tmp_path, "127.0.0.1", 0)
    await broker.start()
    try:
        async with await KafkaConnection.connect("127.0.0.1", broker.port) as creator, \
                await KafkaConnection.connect("127.0.0.1", broker.port) as other:
            create = asyncio.ensure_future(creator.request(CREATE_TOPICS, 7, _create("big", 30)))
            assert await asyncio.to_thread(started.wait, 20)
            # an auto-creating Metadata for the name: not there yet (no TOPIC_ALREADY_EXISTS)
            answer = await other.request(METADATA, 12, _metadata("big"))
            assert [t.error_code for t in answer.topics] == [code("UNKNOWN_TOPIC_OR_PARTITION")]
            again = await other.request(CREATE_TOPICS, 7, _create("big", 1))
            assert [t.error_code for t in again.topics] == [code("TOPIC_ALREADY_EXISTS")]
            add = asyncio.ensure_future(other.request(CREATE_PARTITIONS, 3, {
                "topics": [{"name": "big", "count": 40, "assignments": None}], "timeout_ms": 30_000,
                "validate_only": False}))
            await asyncio.sleep(0.05)
            assert not create.done() and not add.done()
            release.set()
            created = await create
            assert [(t.error_code, t.num_partitions) for t in created.topics] == [(0, 30)]
            assert [r.error_code for r in (await add).results] == [0]
            answer = await other.request(METADATA, 12, _metadata("big"))
            assert [(t.error_code, len(t.partitions)) for t in answer.topics] == [(0, 40)]
    finally:
        release.set()
        await broker.stop()
    assert len(list(tmp_path.glob("big-*"))) == 40
