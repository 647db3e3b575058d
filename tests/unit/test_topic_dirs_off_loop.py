"""CreateTopics and CreatePartitions make their partition directories in a thread
(broker.cluster.cluster): the event loop goes on meanwhile, and what it runs then meets a
topic that is either whole or not there."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import broker.cluster.cluster as cluster_module
from broker.cluster.cluster import Cluster
from broker.cluster.topics import TopicError
from broker.config import BrokerConfig


class _HeldDirs:
    """``_make_dirs`` held in its thread until released, so a test can act while it runs."""

    def __init__(self, monkeypatch, fail_after: int | None = None) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        real = cluster_module._make_dirs

        def held(data_dir, intent):
            self.started.set()
            assert self.release.wait(10)
            if fail_after is not None:
                made, _ = real(data_dir, replace(intent, end=intent.first + fail_after))
                return made, OSError(28, "No space left on device")
            return real(data_dir, intent)

        monkeypatch.setattr(cluster_module, "_make_dirs", held)

    async def running(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 10)


def _cluster(data: Path) -> Cluster:
    cluster = Cluster(BrokerConfig(), data)
    cluster.open_all()
    return cluster


async def _create(cluster: Cluster, name: str, partitions: int):
    """As CreateTopics creates."""
    return await cluster.create_off_loop(cluster.check_create(name, partitions, -1, None, None))


def _error(call) -> str:
    with pytest.raises(TopicError) as e:
        call()
    return e.value.error_name


async def test_the_loop_runs_while_a_topics_directories_are_made(tmp_path: Path, monkeypatch) -> None:
    cluster = _cluster(tmp_path)
    held = _HeldDirs(monkeypatch)
    create = asyncio.ensure_future(_create(cluster, "t", 40))
    await held.running()
    # the loop answers meanwhile: the topic is not there, nor can it be made twice
    assert "t" not in cluster.topics.by_name and cluster.partition("t", 0) is None
    assert _error(lambda: cluster.create_topic("t", 1)) == "TOPIC_ALREADY_EXISTS"  # as an auto-create
    with pytest.raises(TopicError) as again:
        await _create(cluster, "t", 2)
    assert again.value.error_name == "TOPIC_ALREADY_EXISTS"
    assert _error(lambda: cluster.delete_topic("t")) == "UNKNOWN_TOPIC_OR_PARTITION"
    add = asyncio.ensure_future(cluster.add_partitions("t", 50))  # waits for the create
    await asyncio.sleep(0.01)
    assert not add.done()
    held.release.set()
    info = await create
    assert info.partitions == 40 and cluster.topics.by_name["t"].partitions == 40
    assert (await add).partitions == 50 and len(list(tmp_path.glob("t-*"))) == 50
    assert cluster.leader_of("t", 49) == 1 and cluster.intents.pending == []

    cluster.close()


async def test_a_create_whose_requester_goes_away_still_makes_the_whole_topic(tmp_path: Path, monkeypatch) -> None:
    cluster = _cluster(tmp_path)
    held = _HeldDirs(monkeypatch)
    create = asyncio.ensure_future(_create(cluster, "t", 5))
    await held.running()
    create.cancel()  # the connection closed
    await asyncio.sleep(0)
    held.release.set()
    await cluster.wait_for_file_threads()  # as a stopping broker waits
    assert cluster.topics.by_name["t"].partitions == 5 and cluster.intents.pending == []

    cluster.close()
    assert len(list(tmp_path.glob("t-*"))) == 5


async def test_a_failing_mkdir_in_the_thread_leaves_nothing_of_the_topic(tmp_path: Path, monkeypatch) -> None:
    cluster = _cluster(tmp_path)
    held = _HeldDirs(monkeypatch, fail_after=3)
    held.release.set()
    with pytest.raises(TopicError) as e:
        await _create(cluster, "t", 6)
    assert e.value.error_name == "KAFKA_STORAGE_ERROR" and "t-3" in str(e.value)
    assert "t" not in cluster.topics.by_name and not list(tmp_path.glob("t-*"))
    assert cluster.intents.pending == []
    monkeypatch.undo()
    assert (await _create(cluster, "t", 2)).partitions == 2  # the name is free again

    cluster.close()


async def test_a_topic_deleted_while_its_partitions_are_added_keeps_none_of_them(tmp_path: Path, monkeypatch) -> None:
    cluster = _cluster(tmp_path)
    cluster.create_topic("t", 2)
    held = _HeldDirs(monkeypatch)
    add = asyncio.ensure_future(cluster.add_partitions("t", 6))
    await held.running()
    cluster.delete_topic("t")
    held.release.set()
    with pytest.raises(TopicError) as e:
        await add
    assert e.value.error_name == "UNKNOWN_TOPIC_OR_PARTITION"
    await cluster.wait_for_file_threads()
    assert "t" not in cluster.topics.by_name and not list(tmp_path.glob("t-*"))
    assert cluster.intents.pending == []

    cluster.close()
