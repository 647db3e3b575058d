"""__transaction_state stays small under many transactions on few ids, and the coordinator
recovers the same state from the compacted log."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.broker_process import wait_until
from tests.segment_files import log_bytes

HOST = "127.0.0.1"
IDS = 3
ROUNDS = 60


async def _describe(port: int, ids: list[str]) -> dict:
    async with await KafkaConnection.connect(HOST, port) as conn:
        out = {}
        for tid in ids:
            # the coordinator loads in the background after a restart: retry while it does
            for _ in range(200):
                r = await conn.request(22, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                               "producer_id": -1, "producer_epoch": -1})
                if r.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                    break
                await asyncio.sleep(0.05)
            assert r.error_code == 0, r
            out[tid] = (r.producer_id, r.producer_epoch)
        return out


def test_many_transactions_on_few_ids_compact_and_recover(broker_factory, topic_name):
    broker = broker_factory({
        "transaction.state.log.segment.bytes": 4096,
        "log.cleaner.backoff.ms": 200,
        "transaction.state.log.num.partitions": 5,
    })
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    ids = [f"{topic_name}-{i}" for i in range(IDS)]
    producers = {tid: Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid}) for tid in ids}
    for p in producers.values():
        p.init_transactions(10)
    for round_ in range(ROUNDS):
        for tid, p in producers.items():
            p.begin_transaction()
            p.produce(topic_name, f"{tid}-{round_}".encode(), partition=0)
            p.commit_transaction(10)
    for p in producers.values():
        p.flush(5)
    # ~4 state records per transaction: 720 records; compaction keeps about one per id per segment
    segments = list(broker.data_dir.glob("__transaction_state-*/*.log"))
    assert len(segments) > 5 + 2, "the state log should have rolled"
    written = ROUNDS * IDS * 4 * 60  # a lower bound on the uncompacted size, ~60 bytes a record
    wait_until(lambda: log_bytes(broker.data_dir, "__transaction_state-*/*.log") < written / 4, timeout=20,
               message="compaction of __transaction_state")
    assert "cleaned __transaction_state" in broker.log_text()

    # Recovery from the compacted log: each id's next epoch continues where it was.
    broker.restart()
    epochs = asyncio.run(_describe(broker.port, ids))
    for tid, (pid, epoch) in epochs.items():
        assert epoch == 1, (tid, pid, epoch)  # initialised once before the rounds, bumped once now
    # and the old producers are fenced
    with pytest.raises(KafkaException):
        p = producers[ids[0]]
        p.begin_transaction()
        p.produce(topic_name, b"zombie", partition=0)
        p.commit_transaction(10)
