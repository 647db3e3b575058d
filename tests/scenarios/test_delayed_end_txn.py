"""Scenario delayed-end-txn: Jepsen's anomalies of transactions v1 (KAFKA-17754).

confluent-kafka speaks transactions v1 (EndTxn v1): its first EndTxn is held at the
coordinator, times out, is retried and ends the first transaction; the producer goes on
at the same producer id and epoch. Released, the held EndTxn ends the next transaction
half-way:
- a late commit makes that transaction's first record readable while the client still
  has it open (torn), and the client's abort then aborts only the rest (aborted read);
- a late abort aborts the first record, and the client's commit, answered OK, commits
  only the rest (lost write).
A transactions v2 client (EndTxn v5, Produce v12: raw requests as the Java client sends
them) holds the epoch its first EndTxn bumped; the late EndTxn is fenced
(PRODUCER_FENCED) and changes nothing."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from broker.wire.client import KafkaConnection
from protocol.records import build_batch
from tests.broker_process import wait_until
from tests.reference.wire import Wire, err
from tests.scenarios.helpers import HOST, bootstrap, create_topic, read_committed

pytestmark = pytest.mark.timeout(120)

TXN_ID = "app"


def _producer(broker) -> Producer:
    # A short request timeout: the held EndTxn times out and is sent again.
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": TXN_ID,
                         "socket.timeout.ms": 2000, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


def _state(broker) -> str:
    return next(t["state"] for t in broker.transactions() if t["transactional_id"] == TXN_ID)


def _held_rule(broker) -> dict:
    [rule] = broker.control().faults()["rules"]
    return rule


def _first_transaction_ended_by_the_retry(broker, producer: Producer, topic: str, commit: bool) -> None:
    producer.begin_transaction()
    producer.produce(topic, b"t1", partition=0)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(60)
    rule = _held_rule(broker)
    assert rule["fired"] == 1 and rule["held"] == 1 and rule["matched"] >= 2  # one held, its retry answered
    assert _state(broker) == ("CompleteCommit" if commit else "CompleteAbort")


def _release_into_the_next_transaction(broker, producer: Producer, topic: str, ended: str) -> None:
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0
    assert _state(broker) == "Ongoing"
    assert broker.release_fault(_held_rule(broker)["id"])["released"] == 1
    wait_until(lambda: _state(broker) == ended, timeout=30, message=f"the late EndTxn ends the open transaction")


def test_a_late_commit_tears_the_next_transaction_and_its_abort_is_read(broker_factory):
    broker = broker_factory(scenario="delayed-end-txn")
    topic = create_topic(broker, partitions=2)
    producer = _producer(broker)
    _first_transaction_ended_by_the_retry(broker, producer, topic, commit=True)
    _release_into_the_next_transaction(broker, producer, topic, "CompleteCommit")
    # Torn: the client's open transaction is visible in part.
    assert sorted(read_committed(broker, topic, 2, 2)) == [b"t1", b"x"]
    producer.produce(topic, b"y", partition=1)  # a new partition: AddPartitionsToTxn opens a new transaction
    assert producer.flush(30) == 0
    producer.abort_transaction(30)  # answered OK
    # Aborted read: x, of a transaction its client aborted, is committed; y is aborted.
    assert sorted(read_committed(broker, topic, 2, 2)) == [b"t1", b"x"]


def test_a_late_abort_loses_an_acknowledged_write_of_a_committed_transaction(broker_factory):
    broker = broker_factory(scenario="delayed-end-txn")
    topic = create_topic(broker, partitions=2)
    producer = _producer(broker)
    _first_transaction_ended_by_the_retry(broker, producer, topic, commit=False)
    _release_into_the_next_transaction(broker, producer, topic, "CompleteAbort")
    producer.produce(topic, b"y", partition=1)
    assert producer.flush(30) == 0
    producer.commit_transaction(30)  # answered OK
    # Lost write: x was acknowledged and its transaction committed; only y is readable.
    assert read_committed(broker, topic, 2, 1) == [b"y"]


async def _v2_transactions(broker, topic: str) -> dict:
    """Transactions v2 with a held first EndTxn v5: what the late EndTxn is answered."""
    client = await Wire.connect(broker.port)
    late = Wire(await KafkaConnection.connect(HOST, broker.port, client_id="late"))
    out = {}
    try:
        r = await client.init_producer_id(TXN_ID)
        pid, epoch = r.producer_id, r.producer_epoch

        async def produce(value: bytes, partition: int, epoch: int, seq: int) -> str:
            batch = build_batch([(None, value, (), 1_700_000_000_000)], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, transactional=True)
            return err((await client.produce_raw(topic, partition, batch, TXN_ID, version=12)).error_code)

        out["t1"] = await produce(b"t1", 0, epoch, 0)  # Produce v12 adds the partition itself
        body = {"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch, "committed": True}
        held = asyncio.create_task(late.request("end_txn", body, version=5))
        while not _held_rule(broker)["held"]:
            await asyncio.sleep(0.05)
        retried = await client.end_txn_v5(TXN_ID, pid, epoch, commit=True)  # the client's retry
        out["retry"] = (err(retried.error_code), retried.producer_epoch - epoch)
        while _state(broker) != "CompleteCommit":
            await asyncio.sleep(0.05)
        next_epoch = retried.producer_epoch
        out["x"] = await produce(b"x", 0, next_epoch, 0)
        broker.release_fault(_held_rule(broker)["id"])
        out["late"] = err((await held).error_code)
        out["state after the late EndTxn"] = _state(broker)
        out["y"] = await produce(b"y", 1, next_epoch, 0)
        ended = await client.end_txn_v5(TXN_ID, pid, next_epoch, commit=False)
        out["abort"] = err(ended.error_code)
        return out
    finally:
        await late.close()
        await client.close()


def test_transactions_v2_fences_the_late_end_txn(broker_factory):
    broker = broker_factory(scenario="delayed-end-txn")
    topic = create_topic(broker, partitions=2)
    out = asyncio.run(_v2_transactions(broker, topic))
    assert out == {"t1": "NONE", "retry": ("NONE", 1), "x": "NONE", "late": "PRODUCER_FENCED",
                   "state after the late EndTxn": "Ongoing", "y": "NONE", "abort": "NONE"}
    wait_until(lambda: _state(broker) == "CompleteAbort", timeout=30, message="the abort completes")
    assert read_committed(broker, topic, 2, 1) == [b"t1"]  # x and y aborted together, as the client asked
