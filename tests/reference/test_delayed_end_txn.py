"""A late EndTxn, replayed against Apache Kafka 4.4 and eosbroker (scenario
delayed-end-txn; Jepsen's analysis of Bufstream, KAFKA-17754).

Kafka has no way to hold a request, but a coordinator cannot tell a delayed EndTxn
from the same request sent again later: the client here ends its first transaction,
starts the next one, and then sends its first EndTxn once more.
- Transactions v1 (EndTxn v3, AddPartitionsToTxn v3, Produce v9): both brokers apply
  the late commit to the next transaction, whose first record becomes readable while
  the client goes on writing, and whose abort then aborts only the rest.
- Transactions v2 (Produce v12, EndTxn v5): both answer the late EndTxn
  PRODUCER_FENCED, and the next transaction ends as its client says."""

from __future__ import annotations

import uuid

from tests.reference.wire import Wire, consumed_values, err


async def _late_end_txn_v1(port: int, topic: str) -> dict:
    w = await Wire.connect(port)
    try:
        txn = f"late-{topic}"
        out: dict = {"create": await w.create_topic(topic, partitions=2)}
        r = await w.init_producer_id(txn)
        pid, epoch = r.producer_id, r.producer_epoch
        await w.add_partitions(txn, pid, epoch, {topic: [0]})
        out["t1"] = await w.produce(topic, 0, [b"t1"], pid=pid, epoch=epoch, seq=0, transactional_id=txn)
        out["commit t1"] = await w.end_txn(txn, pid, epoch, commit=True)
        out["state"] = await w.settled_state(txn)
        await w.add_partitions(txn, pid, epoch, {topic: [0]})
        out["x"] = await w.produce(topic, 0, [b"x"], pid=pid, epoch=epoch, seq=1, transactional_id=txn)
        out["late commit"] = await w.end_txn(txn, pid, epoch, commit=True, retry=False)
        out["state after the late commit"] = await w.settled_state(txn)
        out["read_committed mid-transaction"] = consumed_values(await w.fetch(topic, 0, read_committed=True))
        out["add p1"] = await w.add_partitions(txn, pid, epoch, {topic: [1]})
        out["y"] = await w.produce(topic, 1, [b"y"], pid=pid, epoch=epoch, seq=0, transactional_id=txn)
        out["abort"] = await w.end_txn(txn, pid, epoch, commit=False)
        out["final state"] = await w.settled_state(txn)
        out["read_committed"] = [consumed_values(await w.fetch(topic, p, read_committed=True)) for p in (0, 1)]
        return out
    finally:
        await w.close()


async def _late_end_txn_v2(port: int, topic: str) -> dict:
    w = await Wire.connect(port)
    try:
        txn = f"late-{topic}"
        out: dict = {"create": await w.create_topic(topic, partitions=2)}
        r = await w.init_producer_id(txn)
        pid, epoch = r.producer_id, r.producer_epoch

        async def produce(value: bytes, partition: int, epoch: int, seq: int) -> str:
            return await w.produce_v12(topic, partition, value, txn, pid, epoch, seq)

        out["t1"] = await produce(b"t1", 0, epoch, 0)
        ended = await w.end_txn_v5(txn, pid, epoch, commit=True)
        out["commit t1"] = (err(ended.error_code), ended.producer_epoch - epoch)
        out["state"] = await w.settled_state(txn)
        out["x"] = await produce(b"x", 0, ended.producer_epoch, 0)
        body = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True}
        out["late commit"] = err((await w.request("end_txn", body, version=5)).error_code)
        out["state after the late commit"] = await w.settled_state(txn)
        out["y"] = await produce(b"y", 1, ended.producer_epoch, 0)
        aborted = await w.end_txn_v5(txn, pid, ended.producer_epoch, commit=False)
        out["abort"] = err(aborted.error_code)
        out["final state"] = await w.settled_state(txn)
        out["read_committed"] = [consumed_values(await w.fetch(topic, p, read_committed=True)) for p in (0, 1)]
        return out
    finally:
        await w.close()


async def test_transactions_v1_a_late_commit_ends_the_next_transaction_on_both(shared_broker, kafka_broker):
    topic = f"late-v1-{uuid.uuid4().hex[:10]}"
    kafka = await _late_end_txn_v1(kafka_broker.port, topic)
    eos = await _late_end_txn_v1(shared_broker.port, topic)
    assert eos == kafka
    assert kafka["late commit"] == "NONE" and kafka["state after the late commit"] == "CompleteCommit"
    assert kafka["read_committed mid-transaction"] == [b"t1", b"x"]  # torn: x readable, its transaction open
    assert kafka["abort"] == "NONE" and kafka["read_committed"] == [[b"t1", b"x"], []]  # aborted read


async def test_transactions_v2_the_late_end_txn_is_fenced_on_both(shared_broker, kafka_broker):
    topic = f"late-v2-{uuid.uuid4().hex[:10]}"
    kafka = await _late_end_txn_v2(kafka_broker.port, topic)
    eos = await _late_end_txn_v2(shared_broker.port, topic)
    assert eos == kafka
    assert kafka["late commit"] == "PRODUCER_FENCED" and kafka["state after the late commit"] == "Ongoing"
    assert kafka["abort"] == "NONE" and kafka["read_committed"] == [[b"t1"], []]
