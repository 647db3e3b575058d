"""EndTxn v5 (transactions v2) sent again while its markers are still being written,
against Apache Kafka 4.4 and eosbroker. Kafka 4.4's handleEndTransaction holds the
Complete state pending from the prepare's append until the markers are written, and a
pending transition is answered CONCURRENT_TRANSACTIONS before the producer id and epoch
are checked: a retry of the same end, the other result, the bumped epoch (the next
transaction's) and an older one all get it, and none changes the transaction.

The EndTxn and its repeats go pipelined on one connection, which both brokers answer in
order, one request after the other; a DescribeTransactions at the end tells that the
transaction was still PrepareCommit when they were handled (the state only moves on).
eosbroker's markers are held by a fault rule; Kafka's are written by its own
inter-broker request, which the repeats queued right behind the EndTxn overtake (if
they do not, the test is skipped: there is nothing to compare)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.reference.wire import API_KEYS, V, Wire, err

END_TXN = API_KEYS["end_txn"]


async def _repeats_while_prepared(port: int, topic: str) -> dict:
    w = await Wire.connect(port)
    try:
        txn = f"prepared-{topic}"
        out: dict = {"create": await w.create_topic(topic)}
        r = await w.init_producer_id(txn)
        pid, epoch = r.producer_id, r.producer_epoch
        out["t1"] = await w.produce_v12(topic, 0, b"t1", txn, pid, epoch, 0)

        def end(e: int, commit: bool):
            return w.conn.request(END_TXN, 5, {"transactional_id": txn, "producer_id": pid, "producer_epoch": e,
                                               "committed": commit})

        cases = [("commit", epoch, True), ("same epoch, commit again", epoch, True),
                 ("same epoch, abort", epoch, False), ("bumped epoch, commit", epoch + 1, True),
                 ("bumped epoch, abort", epoch + 1, False), ("older epoch, commit", epoch - 1, True)]
        describe = w.request("describe_transactions", {"transactional_ids": [txn]})
        answers = await asyncio.gather(*(end(e, c) for _, e, c in cases), describe)
        for (name, _, _), answer in zip(cases, answers):
            out[name] = (err(answer.error_code), answer.producer_epoch - epoch if not answer.error_code else None)
        out["state when handled"] = answers[-1].transaction_states[0].transaction_state
        return out
    finally:
        await w.close()


async def test_end_txn_v5_repeated_while_its_markers_are_written(broker_factory, kafka_broker):
    topic = f"prepared-{uuid.uuid4().hex[:10]}"
    kafka = await _repeats_while_prepared(kafka_broker.port, topic)
    if kafka["state when handled"] != "PrepareCommit":
        pytest.skip("Kafka wrote its markers before the repeats were handled")
    eos_broker = broker_factory({}, admin=True)
    control = eos_broker.control()
    held = control.fault_add(action="hold", api_key=27, client_id="eosbroker-node-1")
    try:
        eos = await _repeats_while_prepared(eos_broker.port, topic)
    finally:
        control.fault_remove(rule_id=held["id"])
    assert eos == kafka
    assert kafka["commit"] == ("NONE", 1)
    assert {kafka[name] for name in ("same epoch, commit again", "same epoch, abort", "bumped epoch, commit",
                                     "bumped epoch, abort", "older epoch, commit")} == {
        ("CONCURRENT_TRANSACTIONS", None)}
