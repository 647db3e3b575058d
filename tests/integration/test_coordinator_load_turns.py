"""A restarted broker answers while its coordinators load: partitions open and load one
per event-loop turn, so Metadata and ApiVersions are not queued behind the whole of
``__transaction_state`` (requests for a partition not loaded yet get
COORDINATOR_LOAD_IN_PROGRESS meanwhile, as in Kafka).

No clock: the test counts loop turns between partition loads and checks that a client
request was answered before the last partition loaded.
"""

from __future__ import annotations

import asyncio

from broker.process import Broker
from broker.wire.client import KafkaConnection
from broker.config import BrokerConfig

INIT_PRODUCER_ID, METADATA, DESCRIBE_TRANSACTIONS = 22, 3, 65
COORDINATOR_LOAD_IN_PROGRESS = 14
PARTITIONS = 50  # many turns of loading: the probe needs only a few


def _config() -> BrokerConfig:
    return BrokerConfig({"transaction.state.log.num.partitions": PARTITIONS})


async def _fill(data_dir) -> None:
    """A few transactional ids, so every coordinator partition has records to replay."""
    broker = Broker(_config(), data_dir, "127.0.0.1", 0)
    await broker.start()
    try:
        async with await KafkaConnection.connect("127.0.0.1", broker.port, "fill") as conn:
            for n in range(20):
                body = {"transactional_id": f"load-turns-{n}", "transaction_timeout_ms": 60_000,
                        "producer_id": -1, "producer_epoch": -1}
                while (await conn.request(INIT_PRODUCER_ID, 4, body)).error_code != 0:
                    await asyncio.sleep(0.01)  # the first request creates the topic and loads it
    finally:
        await broker.stop()


async def test_partitions_load_one_per_loop_turn_and_metadata_is_answered_meanwhile(tmp_path):
    await _fill(tmp_path)
    broker = Broker(_config(), tmp_path, "127.0.0.1", 0)
    turns = 0
    turns_at_load: list[int] = []
    answered_while_loading: list[bool] = []

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(count_turns())
    try:
        await broker.start()  # the transaction coordinator starts loading its partitions once the listener is up
        # each opens in its load's turn: none before the listener is up
        opened_at_start = [key for key in broker.cluster.partitions if key[0] == "__transaction_state"]
        node = broker.nodes[0]
        while node.made("transactions") is None or node.transactions.topic.state_of(PARTITIONS - 1) != "loading":
            await asyncio.sleep(0)
        topic = node.transactions.topic
        runtime_load = topic.runtime.load

        def load(partition, now_ms):
            turns_at_load.append(turns)
            return runtime_load(partition, now_ms)

        topic.runtime.load = load  # observes the loads; they still run
        assert topic.state_of(PARTITIONS - 1) == "loading"
        async with await KafkaConnection.connect("127.0.0.1", broker.port, "probe") as conn:
            metadata = await conn.request(METADATA, 1, {"topics": []})
            assert metadata.brokers
            answered_while_loading.append(topic.state_of(PARTITIONS - 1) == "loading")
        while topic.state_of(PARTITIONS - 1) != "loaded":
            await asyncio.sleep(0.01)
    finally:
        ticker.cancel()
        await broker.stop()
    assert len(turns_at_load) == PARTITIONS
    assert all(b > a for a, b in zip(turns_at_load, turns_at_load[1:])), turns_at_load
    assert answered_while_loading == [True]
    assert opened_at_start == []


async def test_transaction_requests_right_after_a_restart_find_their_partitions_loading(tmp_path):
    """The coordinator topics start loading in the background once the listener is up; a
    request that comes first starts its coordinator's (DescribeTransactions, which reads
    the coordinator's state without a write, too): it is told to wait
    (COORDINATOR_LOAD_IN_PROGRESS) or served, never NOT_COORDINATOR."""
    await _fill(tmp_path)
    broker = Broker(_config(), tmp_path, "127.0.0.1", 0)
    await broker.start()
    described, initialised = [], []
    try:
        async with await KafkaConnection.connect("127.0.0.1", broker.port, "first") as conn:
            while not described or described[-1] == COORDINATOR_LOAD_IN_PROGRESS:
                answer = await conn.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["load-turns-19"]})
                described.append(answer.transaction_states[0].error_code)
                await asyncio.sleep(0.001)
            body = {"transactional_id": "load-turns-19", "transaction_timeout_ms": 60_000,
                    "producer_id": -1, "producer_epoch": -1}
            while not initialised or initialised[-1] == COORDINATOR_LOAD_IN_PROGRESS:
                initialised.append((await conn.request(INIT_PRODUCER_ID, 4, body)).error_code)
                await asyncio.sleep(0.001)
    finally:
        await broker.stop()
    assert described[-1] == 0 and initialised[-1] == 0, (described, initialised)


async def test_a_coordinator_partition_that_cannot_open_is_tried_again(tmp_path, caplog):
    """Out of descriptors (or a failing disk) when its load opens it: the partition stays
    loading (its requests get COORDINATOR_LOAD_IN_PROGRESS), the log says why, and the
    load tries again and completes."""
    await _fill(tmp_path)
    broker = Broker(_config(), tmp_path, "127.0.0.1", 0)
    real_partition = broker.cluster.partition
    refused = []

    def partition(topic, index):
        if (topic, index) == ("__transaction_state", 0) and not refused:
            refused.append(index)
            raise OSError(24, "Too many open files")
        return real_partition(topic, index)

    broker.cluster.partition = partition
    await broker.start()
    try:
        topic = broker.nodes[0].transactions.topic

        async def loaded() -> None:
            while topic.state_of(0) != "loaded":
                await asyncio.sleep(0.01)

        await asyncio.wait_for(loaded(), 30)
    finally:
        await broker.stop()
    assert refused == [0]
    assert "cannot open __transaction_state-0 to load it (" in caplog.text and "trying again" in caplog.text
