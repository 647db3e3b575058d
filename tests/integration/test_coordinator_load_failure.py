"""A coordinator partition whose load fails (a record its replay cannot decode) is not
served: its requests get NOT_COORDINATOR, as from Kafka's runtime (a FAILED partition),
not COORDINATOR_LOAD_IN_PROGRESS forever; the log says which partition and why, and the
other partitions carry on."""

from __future__ import annotations

import asyncio
import uuid

from confluent_kafka import Producer

from broker.testing.helpers import HOST
from broker.wire.client import KafkaConnection
from coordinator.partitioning import partition_for
from coordinator.transaction.log_codec import encode_key
from protocol.names import TRANSACTION_STATE
from protocol.records import RecordBatch, build_batch

INIT_PRODUCER_ID = 22
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS = 16, 14


def _init_producer_id(port: int, transactional_id: str) -> int:
    async def ask() -> int:
        async with await KafkaConnection.connect(HOST, port) as conn:
            for _ in range(200):
                answer = await conn.request(INIT_PRODUCER_ID, 4, {
                    "transactional_id": transactional_id, "transaction_timeout_ms": 60_000,
                    "producer_id": -1, "producer_epoch": -1})
                if answer.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                    return answer.error_code
                await asyncio.sleep(0.05)
            return answer.error_code
    return asyncio.run(ask())


def test_a_coordinator_partition_whose_load_fails_answers_not_coordinator(broker_factory, caplog):
    broker = broker_factory(in_process=True)
    broken = f"broken-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": broken})
    producer.init_transactions(30)
    partition = partition_for(broken, 50)
    healthy = next(t for t in (f"healthy-{i}" for i in range(1000)) if partition_for(t, 50) != partition)

    async def write_undecodable_record() -> None:
        part = broker.broker.cluster.partition(TRANSACTION_STATE, partition)
        part.append(RecordBatch(build_batch([(encode_key(broken), b"\xff\xff not a transaction", (), 0)]), 0), 0)

    broker.call(write_undecodable_record)
    broker.stop()
    broker.start()

    assert _init_producer_id(broker.port, broken) == NOT_COORDINATOR
    assert f"failed to load coordinator partition {partition};" in caplog.text
    # the other partitions are served: a transaction on another one commits
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": healthy})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce("load-failure-other", b"v")
    other.commit_transaction(30)
