"""A late transaction marker, replayed against Apache Kafka 4.4 and eosbroker (scenario
delayed-txn-marker).

Kafka cannot hold its coordinator's WriteTxnMarkers, but a partition leader cannot tell
a delayed marker from the same request sent again later: after a committed transaction
and the next transaction's first record on the partition, the test sends the first
transaction's COMMIT marker once more (same producer id, producer epoch and coordinator
epoch as the one in the log; WriteTxnMarkers needs no ACL on a broker without an
authorizer).
- Transactions v1: both leaders write it, ending the next transaction there: its record
  becomes readable, and the client's abort no longer reaches it (aborted read).
- Transactions v2: the marker carries the epoch bumped at its transaction's end, the one
  the next transaction writes at; WriteTxnMarkers v2 says it is a v2 marker, and both
  leaders refuse it (KIP-1228): INVALID_PRODUCER_EPOCH."""

from __future__ import annotations

import uuid

from protocol.records import iter_batches, read_control_record
from tests.reference.wire import Wire, consumed_values, err

WRITE_TXN_MARKERS = 27


async def _last_marker(w: Wire, topic: str) -> tuple[int, int]:
    """(producer epoch, coordinator epoch) of the partition's last marker."""
    offset, markers = 0, []
    for _ in range(20):  # Kafka may answer with fewer batches than there are
        p = await w.fetch_raw(topic, 0, offset, read_committed=False)
        batches = list(iter_batches(memoryview(p.records or b"")))
        if not batches:
            break
        markers += [(b.producer_epoch, read_control_record(b)[1]) for b in batches if b.is_control]
        offset = batches[-1].last_offset + 1
    return markers[-1]


async def _late_marker(port: int, topic: str, v2: bool) -> dict:
    w = await Wire.connect(port)
    try:
        txn = f"marker-{topic}"
        out: dict = {"create": await w.create_topic(topic, partitions=2)}
        r = await w.init_producer_id(txn)
        pid, epoch = r.producer_id, r.producer_epoch

        async def produce(value: bytes, partition: int, epoch: int, seq: int) -> str:
            if not v2:
                return (await w.produce(topic, partition, [value], pid=pid, epoch=epoch, seq=seq,
                                        transactional_id=txn))[0]
            return await w.produce_v12(topic, partition, value, txn, pid, epoch, seq)

        async def end(epoch: int, commit: bool) -> tuple[str, int]:
            if not v2:
                return await w.end_txn(txn, pid, epoch, commit=commit), epoch
            ended = await w.end_txn_v5(txn, pid, epoch, commit=commit)
            return err(ended.error_code), ended.producer_epoch

        if not v2:
            await w.add_partitions(txn, pid, epoch, {topic: [0]})
        out["t1"] = await produce(b"t1", 0, epoch, 0)
        out["commit t1"], epoch = await end(epoch, True)
        out["state"] = await w.settled_state(txn)
        marker_epoch, coordinator_epoch = await _last_marker(w, topic)
        out["marker epoch is the next transaction's"] = marker_epoch == epoch
        if not v2:
            await w.add_partitions(txn, pid, epoch, {topic: [0]})
        out["x"] = await produce(b"x", 0, epoch, 1 if not v2 else 0)
        late = await w.request("write_txn_markers", {"markers": [{
            "producer_id": pid, "producer_epoch": marker_epoch, "transaction_result": True,
            "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": coordinator_epoch,
            "transaction_version": 2 if v2 else 0}]}, version=2 if v2 else 1, key=WRITE_TXN_MARKERS)
        out["late marker"] = err(late.markers[0].topics[0].partitions[0].error_code)
        out["read_committed mid-transaction"] = consumed_values(await w.fetch(topic, 0, read_committed=True))
        if not v2:
            await w.add_partitions(txn, pid, epoch, {topic: [1]})
        out["y"] = await produce(b"y", 1, epoch, 0)
        out["abort"] = (await end(epoch, False))[0]
        out["final state"] = await w.settled_state(txn)
        out["read_committed"] = [consumed_values(await w.fetch(topic, p, read_committed=True)) for p in (0, 1)]
        return out
    finally:
        await w.close()


async def test_transactions_v1_a_late_commit_marker_commits_the_next_transaction_on_both(shared_broker, kafka_broker):
    topic = f"marker-v1-{uuid.uuid4().hex[:10]}"
    kafka = await _late_marker(kafka_broker.port, topic, v2=False)
    eos = await _late_marker(shared_broker.port, topic, v2=False)
    assert eos == kafka
    assert kafka["late marker"] == "NONE"
    assert kafka["read_committed mid-transaction"] == [b"t1", b"x"]
    assert kafka["abort"] == "NONE" and kafka["read_committed"] == [[b"t1", b"x"], []]  # aborted read


async def test_transactions_v2_the_late_marker_is_refused_on_both(shared_broker, kafka_broker):
    topic = f"marker-v2-{uuid.uuid4().hex[:10]}"
    kafka = await _late_marker(kafka_broker.port, topic, v2=True)
    eos = await _late_marker(shared_broker.port, topic, v2=True)
    assert eos == kafka
    assert kafka["marker epoch is the next transaction's"] and kafka["late marker"] == "INVALID_PRODUCER_EPOCH"
    assert kafka["read_committed mid-transaction"] == [b"t1"]
    assert kafka["abort"] == "NONE" and kafka["read_committed"] == [[b"t1"], []]
