"""Reads the torture partitions' logs and ``__transaction_state`` from a stopped
broker's data directory, for the checker's producer-identity and outcome checks
(``torture.checker.check_log``): what was written, as it is on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from coordinator.transaction.log_codec import decode_key, decode_value
from coordinator.transaction.metadata import TransactionState
from protocol.names import TRANSACTION_STATE
from protocol.records import (
    CONTROL_TYPE_COMMIT,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    decode_records,
    peek_batch_size,
    read_control_record,
)
from torture.checker import LoggedBatch, LogScan, TxnLogRecord
from torture.history import decode_value as decode_writer


def _partition_dirs(data_dir: Path, topic: str) -> list[tuple[int, Path]]:
    out = []
    for path in data_dir.glob(f"{topic}-*"):
        index = path.name.rsplit("-", 1)[1]
        if path.is_dir() and path.name[: -len(index) - 1] == topic and index.isdigit():
            out.append((int(index), path))
    return sorted(out)


def _batches(directory: Path) -> Iterable[RecordBatch]:
    """Every whole batch of a partition's segments, in offset order (a torn tail, as a
    kill -9 leaves before recovery, ends the segment)."""
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos < len(data):
            size = peek_batch_size(data, pos)
            if size is None or size < RECORD_BATCH_OVERHEAD or pos + size > len(data):
                break
            batch = RecordBatch(data, pos)
            if not batch.crc_valid():
                break
            yield batch
            pos += size


def _writers(batch: RecordBatch) -> tuple[tuple[str, int], ...]:
    writers = set()
    for r in decode_records(batch):
        v = decode_writer(r.value)
        if v is not None and "x" in v:
            writers.add((v["p"], v.get("g", 0)))
    return tuple(sorted(writers))


def scan(data_dir: Path, topics: Iterable[str]) -> LogScan:
    topics = frozenset(topics)
    batches: list[LoggedBatch] = []
    for topic in topics:
        for partition, directory in _partition_dirs(data_dir, topic):
            for b in _batches(directory):
                if not b.is_transactional:
                    continue
                if b.is_control:
                    kind, coordinator_epoch = read_control_record(b)
                    batches.append(LoggedBatch(topic, partition, b.base_offset, b.producer_id, b.producer_epoch,
                                               "COMMIT" if kind == CONTROL_TYPE_COMMIT else "ABORT",
                                               coordinator_epoch))
                else:
                    batches.append(LoggedBatch(topic, partition, b.base_offset, b.producer_id, b.producer_epoch,
                                               writers=_writers(b)))
    records: list[TxnLogRecord] = []
    compacted: set[int] = set()
    for partition, directory in _partition_dirs(data_dir, TRANSACTION_STATE):
        expected_offset = 0
        for b in _batches(directory):
            for r in decode_records(b):
                if r.offset != expected_offset:
                    compacted.add(partition)  # cleaned or deleted: decisions may be missing
                expected_offset = r.offset + 1
                try:
                    tid = decode_key(r.key or b"")
                except ValueError:
                    continue
                if r.value is None:
                    records.append(TxnLogRecord(partition, r.offset, tid))
                    continue
                v = decode_value(r.value)
                tps = tuple((t, p) for t, ids in v.transaction_partitions or () for p in ids)
                records.append(TxnLogRecord(partition, r.offset, tid, v.producer_id, v.producer_epoch,
                                            TransactionState.from_id(v.transaction_status).state_name, tps))
    return LogScan(batches, records, compacted, topics)
