"""Scenario hanging-transaction: a transactional write delivered after its transaction
was aborted opens a transaction no coordinator will end; confluent-kafka's
read_committed consumer stalls before a committed transaction; `eosbroker
transactions find-hanging` lists it and `abort` ends it; then the consumer reads the
committed record once and neither the aborted nor the late one.

The late writer speaks the wire directly: librdkafka (like the Java client) never lets
a write outlive its transaction's abort (it times the batch out and bumps its epoch),
which is why this needs a network that delivers a request late."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from broker.wire.client import KafkaConnection
from tests.reference.wire import Wire
from tests.scenarios.helpers import HOST, assert_exactly_once, bootstrap, create_topic, read_committed

pytestmark = pytest.mark.timeout(120)


async def _abort_with_a_late_write(broker, topic: str) -> dict:
    coordinator = await Wire.connect(broker.port)
    late = Wire(await KafkaConnection.connect(HOST, broker.port, client_id="late-writer"))
    try:
        r = await coordinator.init_producer_id("late-app")
        pid, epoch = r.producer_id, r.producer_epoch
        assert await coordinator.add_partitions("late-app", pid, epoch, {topic: [0]}) == {(topic, 0): "NONE"}
        assert await coordinator.produce(topic, 0, [b"aborted"], pid=pid, epoch=epoch, seq=0,
                                         transactional_id="late-app") == ("NONE", 0)
        held = asyncio.create_task(late.produce(topic, 0, [b"late"], pid=pid, epoch=epoch, seq=1,
                                                transactional_id="late-app"))
        control = broker.control()
        while not control.faults()["rules"][0]["fired"]:  # the write is in the network
            await asyncio.sleep(0.05)
        assert await coordinator.end_txn("late-app", pid, epoch, commit=False) == "NONE"
        while (await coordinator.describe_transaction("late-app"))["state"] != "CompleteAbort":
            await asyncio.sleep(0.05)  # the ABORT marker is written
        assert not held.done()
        control.clock_advance(by="5m")  # the network delivers the held write
        error, offset = await held
        return {"producer_id": pid, "late_write": (error, offset),
                "state": (await coordinator.describe_transaction("late-app"))["state"]}
    finally:
        await late.close()
        await coordinator.close()


def tool(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.program", "transactions", "--bootstrap-server",
                           bootstrap(broker), *args], capture_output=True, text=True, timeout=60)


def test_the_late_write_hangs_until_aborted_by_the_operator(broker_factory):
    broker = broker_factory(scenario="hanging-transaction")
    topic = create_topic(broker)
    late = asyncio.run(_abort_with_a_late_write(broker, topic))
    # offsets: 0 the aborted record, 1 its ABORT marker, 2 the late write
    assert late["late_write"] == ("NONE", 2) and late["state"] == "CompleteAbort"

    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "other-app"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(30)
    assert read_committed(broker, topic, 1, 0, timeout=3) == []  # stalled at the hanging transaction

    found = tool(broker, "find-hanging", "--max-transaction-timeout", "0")
    assert found.returncode == 0, found.stderr
    rows = [line.split() for line in found.stdout.splitlines()[1:]]
    assert [row[:3] + [row[5]] for row in rows] == [[topic, "0", str(late["producer_id"]), "2"]]
    aborted = tool(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert aborted.returncode == 0, aborted.stderr
    assert tool(broker, "find-hanging", "--max-transaction-timeout", "0").stdout.count("\n") == 1  # header only

    assert_exactly_once(broker, topic, 1, [b"committed"])
    assert [r["fired"] for r in broker.control().faults()["rules"]] == [1]
