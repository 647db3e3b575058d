"""The aborted-transaction index on disk, as Kafka writes it: one <base>.txnindex per
segment, entries of (version, producer id, first offset, last offset, last stable
offset). Two interleaved transactions aborted in turn: the first abort's LSO is held at
the other's first offset, the second's is past its marker. Producer ids differ between
the brokers; everything else in the files must match."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path

from tests.reference.wire import Wire, consumed_values


async def _wait_state(w: Wire, txn: str, state: str) -> None:
    for _ in range(200):
        if (await w.describe_transaction(txn))["state"] == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{txn} never reached {state}")


async def _interleaved_aborts(port: int, topic: str) -> dict:
    w = await Wire.connect(port)
    try:
        out: dict = {"create": await w.create_topic(topic)}
        ids = {}
        for name in ("first", "second"):
            txn = f"{name}-{topic}"
            r = await w.init_producer_id(txn)
            ids[name] = (txn, r.producer_id, r.producer_epoch)
            out[f"add {name}"] = await w.add_partitions(txn, r.producer_id, r.producer_epoch, {topic: [0]})
        for name in ("first", "second"):
            txn, pid, epoch = ids[name]
            out[f"produce {name}"] = await w.produce(topic, 0, [name.encode()], pid=pid, epoch=epoch, seq=0,
                                                     transactional_id=txn)
        for name in ("second", "first"):
            txn, pid, epoch = ids[name]
            out[f"abort {name}"] = await w.end_txn(txn, pid, epoch, commit=False)
            await _wait_state(w, txn, "CompleteAbort")
        out["read_committed values"] = consumed_values(await w.fetch(topic, read_committed=True))
        return out
    finally:
        await w.close()


def _txn_index_entries(directory: Path) -> list[tuple[int, int, int, int]]:
    """(version, first offset, last offset, LSO) of each entry of the .txnindex files, in
    segment order. Which segment holds them is not compared: Kafka rolls this log at
    offset 2: it counts segment.ms from the records' timestamps, which Wire sets in 2023."""
    return [(v, first, last, lso) for path in sorted(directory.glob("*.txnindex"))
            for v, _pid, first, last, lso in struct.iter_unpack(">hqqqq", path.read_bytes())]


async def test_txn_index_files_match_kafkas(shared_broker, kafka_broker):
    topic = f"txnidx-{uuid.uuid4().hex[:10]}"
    kafka = await _interleaved_aborts(kafka_broker.port, topic)
    eos = await _interleaved_aborts(shared_broker.port, topic)
    assert eos == kafka
    assert kafka["read_committed values"] == []
    kafka_entries = _txn_index_entries(kafka_broker.workdir / "data" / f"{topic}-0")
    assert kafka_entries == [(0, 1, 2, 0), (0, 0, 3, 4)]
    assert _txn_index_entries(shared_broker.data_dir / f"{topic}-0") == kafka_entries
