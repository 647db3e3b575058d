"""Scenario delayed-txn-marker: a transaction marker held at the partition leader,
resent by the coordinator after request.timeout.ms (30 s of the broker's clock), then
delivered late into the producer's next transaction on that partition.

confluent-kafka (transactions v1) runs its next transaction at the same producer id and
epoch, so the partition takes the late marker: a late COMMIT commits a record its
client then aborts (aborted read), a late ABORT aborts a record its client then commits
(lost write). With transactions v2 (Produce v12, EndTxn v5: raw requests as the Java
client sends them) the marker carries the epoch bumped at its transaction's end, which
the next transaction writes at; the partition refuses it (KIP-1228) and the next
transaction ends as its client says."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from protocol.records import build_batch
from tests.broker_process import wait_until
from tests.reference.wire import Wire, err
from tests.scenarios.helpers import bootstrap, create_topic, read_committed

pytestmark = pytest.mark.timeout(120)

TXN_ID = "app"


def _state(broker) -> str:
    return next(t["state"] for t in broker.transactions() if t["transactional_id"] == TXN_ID)


def _rule(broker) -> dict:
    [rule] = broker.control().faults()["rules"]
    return rule


def _resent_after_the_timeout(broker, done: str) -> None:
    """The first marker request is held; the coordinator's timeout sends it again."""
    wait_until(lambda: _rule(broker)["held"] == 1, timeout=30, message="the marker is held")
    assert _state(broker) == done.replace("Complete", "Prepare")
    broker.advance_clock("31s")  # request.timeout.ms
    wait_until(lambda: _state(broker) == done, timeout=30, message="the resent marker completes it")


async def _log_of(broker, topic: str, partition: int) -> list[str]:
    wire = await Wire.connect(broker.port)
    try:
        return [b[2] for b in (await wire.fetch(topic, partition))["batches"]]
    finally:
        await wire.close()


def _v1(broker, commit_first: bool) -> tuple[str, list[bytes], list[str]]:
    topic = create_topic(broker, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": TXN_ID, "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"t1", partition=0)
    assert producer.flush(30) == 0
    (producer.commit_transaction if commit_first else producer.abort_transaction)(30)
    _resent_after_the_timeout(broker, "CompleteCommit" if commit_first else "CompleteAbort")
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0
    assert broker.release_fault(_rule(broker)["id"])["released"] == 1
    wait_until(lambda: asyncio.run(_log_of(broker, topic, 0))[-1] != "txn", timeout=30,
               message="the late marker is written after x")
    producer.produce(topic, b"y", partition=1)
    assert producer.flush(30) == 0
    # the client ends its transaction the other way: answered OK
    (producer.abort_transaction if commit_first else producer.commit_transaction)(30)
    wait_until(lambda: _state(broker) in ("CompleteCommit", "CompleteAbort"), timeout=30, message="ended")
    return topic, sorted(read_committed(broker, topic, 2, 1 if commit_first else 1)), \
        asyncio.run(_log_of(broker, topic, 0))


def test_a_late_commit_marker_commits_a_record_its_client_aborts(broker_factory):
    broker = broker_factory(scenario="delayed-txn-marker")
    _, committed, log = _v1(broker, commit_first=True)
    assert log == ["txn", "COMMIT", "txn", "COMMIT", "ABORT"]  # the late COMMIT ended x's transaction
    assert committed == [b"t1", b"x"]  # aborted read: x's transaction was aborted by its client


def test_a_late_abort_marker_loses_a_record_its_client_commits(broker_factory):
    broker = broker_factory(scenario="delayed-txn-marker")
    _, committed, log = _v1(broker, commit_first=False)
    assert log == ["txn", "ABORT", "txn", "ABORT", "COMMIT"]
    assert committed == [b"y"]  # lost write: x was acknowledged and its transaction committed


async def _v2(broker, topic: str) -> dict:
    client = await Wire.connect(broker.port)
    out = {}
    try:
        r = await client.init_producer_id(TXN_ID)
        pid, epoch = r.producer_id, r.producer_epoch

        async def produce(value: bytes, partition: int, epoch: int) -> str:
            batch = build_batch([(None, value, (), 1_700_000_000_000)], producer_id=pid, producer_epoch=epoch,
                                base_sequence=0, transactional=True)
            return err((await client.produce_raw(topic, partition, batch, TXN_ID, version=12)).error_code)

        out["t1"] = await produce(b"t1", 0, epoch)
        ended = await client.end_txn_v5(TXN_ID, pid, epoch, commit=True)
        out["commit"] = err(ended.error_code)
        await asyncio.to_thread(_resent_after_the_timeout, broker, "CompleteCommit")
        out["x"] = await produce(b"x", 0, ended.producer_epoch)
        broker.release_fault(_rule(broker)["id"])
        while _rule(broker)["held"]:
            await asyncio.sleep(0.05)
        out["y"] = await produce(b"y", 1, ended.producer_epoch)
        out["abort"] = err((await client.end_txn_v5(TXN_ID, pid, ended.producer_epoch, commit=False)).error_code)
        return out
    finally:
        await client.close()


def test_transactions_v2_refuses_the_late_marker(broker_factory):
    broker = broker_factory(scenario="delayed-txn-marker")
    topic = create_topic(broker, partitions=2)
    out = asyncio.run(_v2(broker, topic))
    assert out == {"t1": "NONE", "commit": "NONE", "x": "NONE", "y": "NONE", "abort": "NONE"}
    wait_until(lambda: _state(broker) == "CompleteAbort", timeout=30, message="the abort completes")
    assert asyncio.run(_log_of(broker, topic, 0)) == ["txn", "COMMIT", "txn", "ABORT"]  # no late COMMIT
    assert read_committed(broker, topic, 2, 1) == [b"t1"]
    # the late marker was delivered, and refused
    assert f"refused the COMMIT marker for {topic}-0: INVALID_PRODUCER_EPOCH" in broker.log_text()
