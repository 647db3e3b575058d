"""A client that reuses a sequence number after an abort, with the same epoch.

A long crash-and-restart run with librdkafka lost a committed record this way: the
producer's batch (sequence N) was appended just before the broker died, the client
never saw the answer, aborted the transaction and sent sequence N again, same epoch,
with a record of its next transaction. The broker's duplicate check matched the old
(aborted) batch, answered success with its offset and appended nothing; the commit
then committed a transaction without that record.

What Apache Kafka does, and eosbroker now does too:
- the reused batch is answered as a duplicate (NONE, the old batch's offset) and not
  appended: Kafka has the hazard as well;
- the next batch of that transaction on the partition is OUT_OF_ORDER_SEQUENCE_NUMBER:
  the reused batch started a KIP-890 verification whose lowest sequence is N, and no
  append cleared it, so the transaction fails loudly instead of committing short;
- a transaction whose only batch on the partition is the reused one commits without it
  (silent loss on both brokers: README "Differences from Apache Kafka").
eosbroker also logs a WARN and counts the stale duplicate, and with
`transaction.refuse.sequence.reuse=true` refuses it with OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import asyncio
import uuid

from tests.broker_process import wait_until
from tests.reference.wire import Wire, consumed_values


async def _reuse_after_abort(port: int, topic: str, second_txn: list[tuple[int, bytes]]) -> dict:
    w = await Wire.connect(port)
    try:
        txn = f"txn-{topic}"
        out: dict = {"create": await w.create_topic(topic)}
        r = await w.init_producer_id(txn)
        pid, epoch = r.producer_id, r.producer_epoch
        out["add A"] = await w.add_partitions(txn, pid, epoch, {topic: [0]})
        out["A seq 0"] = await w.produce(topic, 0, [b"a0"], pid=pid, epoch=epoch, seq=0, transactional_id=txn)
        # Its answer is lost: the client does not know sequence 1 was written.
        out["A seq 1 (answer lost)"] = await w.produce(topic, 0, [b"a1"], pid=pid, epoch=epoch, seq=1,
                                                       transactional_id=txn)
        out["abort A"] = await w.end_txn(txn, pid, epoch, commit=False)
        out["add B"] = await w.add_partitions(txn, pid, epoch, {topic: [0]})
        for seq, value in second_txn:
            out[f"B seq {seq}"] = await w.produce(topic, 0, [value], pid=pid, epoch=epoch, seq=seq,
                                                  transactional_id=txn)
        out["commit B"] = await w.end_txn(txn, pid, epoch, commit=True)
        for _ in range(200):
            state = (await w.describe_transaction(txn))["state"]
            if state == "CompleteCommit":
                break
            await asyncio.sleep(0.05)
        out["state"] = state
        committed = await w.fetch(topic, read_committed=True)
        out["read_committed log"] = committed
        out["read_committed values"] = consumed_values(committed)
        out["read_uncommitted values"] = consumed_values(await w.fetch(topic, read_committed=False))
        out["producers"] = await w.describe_producers(topic)
        return out
    finally:
        await w.close()


async def test_reused_sequence_then_next_batch_is_out_of_order_as_on_kafka(shared_broker, kafka_broker):
    topic = f"reuse-{uuid.uuid4().hex[:10]}"
    second = [(1, b"b1"), (2, b"b2")]
    kafka = await _reuse_after_abort(kafka_broker.port, topic, second)
    eos = await _reuse_after_abort(shared_broker.port, topic, second)
    assert eos == kafka
    assert kafka["B seq 1"] == ("NONE", 1)  # the old, aborted batch's offset: nothing appended
    assert kafka["B seq 2"] == ("OUT_OF_ORDER_SEQUENCE_NUMBER", -1)
    assert kafka["read_committed values"] == []
    assert [b[2] for b in kafka["read_committed log"]["batches"]] == ["txn", "txn", "ABORT", "COMMIT"]
    assert "reused sequences 1..1" in shared_broker.log_text()


async def test_reused_sequence_alone_in_its_transaction_is_lost_on_both(shared_broker, kafka_broker):
    topic = f"reuse-{uuid.uuid4().hex[:10]}"
    second = [(1, b"b1")]
    kafka = await _reuse_after_abort(kafka_broker.port, topic, second)
    eos = await _reuse_after_abort(shared_broker.port, topic, second)
    assert eos == kafka
    # Kafka acknowledges b1 and commits a transaction without it.
    assert kafka["B seq 1"] == ("NONE", 1)
    assert kafka["commit B"] == "NONE" and kafka["state"] == "CompleteCommit"
    assert b"b1" not in kafka["read_committed values"] + kafka["read_uncommitted values"]


async def test_refuse_sequence_reuse_setting(broker_factory):
    broker = broker_factory({"transaction.refuse.sequence.reuse": "true"})
    out = await _reuse_after_abort(broker.port, "reuse", [(1, b"b1")])
    assert out["B seq 1"] == ("OUT_OF_ORDER_SEQUENCE_NUMBER", -1)
    assert out["read_uncommitted values"] == [b"a0", b"a1"]
    wait_until(lambda: "refused (transaction.refuse.sequence.reuse=true)" in broker.log_text(),
               message="the WARN line")
