"""min.insync.replicas above the replication factor. Kafka 4.4 caps the setting at the
partition's replica count (Partition.effectiveMinIsr), so on one broker a topic with
one replica and min.insync.replicas=2 takes acks=all writes, plain, idempotent and
transactional, as it takes acks=1. (A single Kafka broker cannot be made to answer
NOT_ENOUGH_REPLICAS: its ISR is always every replica; tests/integration/
test_cluster_min_isr.py gets it from eosbroker's `--nodes 3`.)"""

from __future__ import annotations

import uuid

from tests.reference.wire import Wire


async def _writes(port: int, topic: str) -> dict:
    w = await Wire.connect(port)
    try:
        out = {"create": await w.create_topic(topic, configs={"min.insync.replicas": "2"})}
        out["acks=all"] = await w.produce(topic, 0, [b"all"], acks=-1)
        out["acks=1"] = await w.produce(topic, 0, [b"one"], acks=1)
        r = await w.init_producer_id(None)
        out["idempotent acks=all"] = await w.produce(topic, 0, [b"idempotent"], pid=r.producer_id,
                                                     epoch=r.producer_epoch, seq=0, acks=-1)
        txn = f"txn-{topic}"
        r = await w.init_producer_id(txn)
        out["add"] = await w.add_partitions(txn, r.producer_id, r.producer_epoch, {topic: [0]})
        out["transactional acks=all"] = await w.produce(topic, 0, [b"txn"], pid=r.producer_id,
                                                        epoch=r.producer_epoch, seq=0, transactional_id=txn, acks=-1)
        out["commit"] = await w.end_txn(txn, r.producer_id, r.producer_epoch, commit=True)
        return out
    finally:
        await w.close()


async def test_min_insync_replicas_above_the_replication_factor_refuses_nothing(brokers):
    topic = f"min-isr-{uuid.uuid4().hex[:8]}"
    answers = {name: await _writes(b.port, topic) for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"]
    assert answers["kafka"]["acks=all"] == ("NONE", 0)
    assert answers["kafka"]["transactional acks=all"] == ("NONE", 3)
