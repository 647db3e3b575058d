"""``eosbroker dump-log``: print what a partition's files hold, like kafka-dump-log.sh.

Reads the files directly (no broker needed): segments (.log), offset indexes (.index),
time indexes (.timeindex), the aborted-transaction index and producer state
snapshots (.snapshot). Corrupt or truncated data is reported with the position where
it starts; the exit code is then 1.
"""

from __future__ import annotations

import struct
from pathlib import Path

import click
from protocol import crc

from broker.storage.index import OFFSET_ENTRY, TIME_ENTRY
from broker.storage.producer_state import CorruptSnapshot, decode_snapshot
from broker.storage.txn_index import FILE_NAME as ABORTED_TXN_INDEX_NAME
from coordinator.transaction.log_codec import decode_key, decode_value
from coordinator.transaction.state import TransactionState
from protocol.record_codec import CONTROL_TYPE_COMMIT, decode_records, read_control_record
from protocol.records import (
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    InvalidBatch,
    RecordBatch,
    increment_sequence,
    peek_batch_size,
)

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# aborted-transactions.index entry: producer id, first offset, last offset, CRC-32C of the three.
_ABORTED_ENTRY = struct.Struct(">qqqI")
_MAGIC_AT = 16


class Dump:
    """Output of one run; remembers whether any file was corrupt."""

    def __init__(self, print_records: bool, decode_transaction_state: bool) -> None:
        self.print_records = print_records or decode_transaction_state
        self.decode_transaction_state = decode_transaction_state
        self.failed = False

    def line(self, text: str) -> None:
        click.echo(text)

    def corrupt(self, path: Path, position: int | None, reason: str) -> None:
        self.failed = True
        where = f" at position {position}" if position is not None else ""
        click.echo(f"Corruption in {path}{where}: {reason}", err=True)

    # -- files -----------------------------------------------------------------------

    def file(self, path: Path) -> None:
        self.line(f"Dumping {path}")
        try:
            data = path.read_bytes()
        except OSError as e:
            self.failed = True
            click.echo(f"Cannot read {path}: {e.strerror or e}", err=True)
            return
        if path.name == ABORTED_TXN_INDEX_NAME:
            self.aborted_txn_index(path, data)
        elif path.suffix == ".log":
            self.segment(path, data)
        elif path.suffix == ".index":
            self.offset_index(path, data)
        elif path.suffix == ".timeindex":
            self.time_index(path, data)
        elif path.suffix == ".snapshot":
            self.snapshot(path, data)
        else:
            self.failed = True
            click.echo(f"Unsupported file {path}: expected .log, .index, .timeindex, .snapshot "
                       f"or {ABORTED_TXN_INDEX_NAME}", err=True)

    def segment(self, path: Path, data: bytes) -> None:
        self.line(f"Log starting offset: {_base_offset(path)}")
        pos = 0
        while pos < len(data):
            size = peek_batch_size(data, pos)
            if size is None:
                return self.corrupt(path, pos, f"{len(data) - pos} trailing bytes, too few for a batch")
            if size < RECORD_BATCH_OVERHEAD:
                return self.corrupt(path, pos, f"batch length {size - LOG_OVERHEAD} is shorter than a batch header")
            if pos + size > len(data):
                return self.corrupt(path, pos, f"batch of {size} bytes is truncated to {len(data) - pos}")
            if data[pos + _MAGIC_AT] != MAGIC_V2:
                return self.corrupt(path, pos, f"unsupported magic {data[pos + _MAGIC_AT]}")
            batch = RecordBatch(data, pos)
            self.line(_batch_line(batch))
            if not batch.crc_valid():
                self.corrupt(path, pos, f"CRC mismatch: stored {batch.header.crc}, computed {batch.compute_crc()}")
            elif self.print_records:
                try:
                    self.records(batch)
                except InvalidBatch as e:
                    self.corrupt(path, pos, f"records of batch {batch.base_offset} cannot be read: {e}")
            pos += size

    def records(self, batch: RecordBatch) -> None:
        time_type = "LogAppendTime" if batch.timestamp_type == LOG_APPEND_TIME else "CreateTime"
        if batch.is_control:
            control_type, coordinator_epoch = read_control_record(batch)
            marker = "COMMIT" if control_type == CONTROL_TYPE_COMMIT else "ABORT"
            for r in decode_records(batch):
                self.line(f"| offset: {r.offset} {time_type}: {r.timestamp} {_sizes(r)} sequence: -1 "
                          f"endTxnMarker: {marker} coordinatorEpoch: {coordinator_epoch}")
            return
        for r in decode_records(batch):
            sequence = (-1 if batch.base_sequence < 0
                        else increment_sequence(batch.base_sequence, r.offset - batch.base_offset))
            head = f"| offset: {r.offset} {time_type}: {r.timestamp} {_sizes(r)} sequence: {sequence}"
            if self.decode_transaction_state:
                self.line(f"{head} {_transaction_state(r.key, r.value)}")
            else:
                headers = ", ".join(f"{k}={_text(v)}" for k, v in r.headers)
                self.line(f"{head} headers: [{headers}] key: {_text(r.key)} payload: {_text(r.value)}")

    def offset_index(self, path: Path, data: bytes) -> None:
        base = _base_offset(path)
        previous = None
        for pos in range(0, len(data) - len(data) % OFFSET_ENTRY.size, OFFSET_ENTRY.size):
            relative, position = OFFSET_ENTRY.unpack_from(data, pos)
            if previous is not None and (relative <= previous[0] or position <= previous[1]):
                return self.corrupt(path, pos, f"entry (offset {base + relative}, position {position}) "
                                               f"does not follow (offset {base + previous[0]}, position {previous[1]})")
            self.line(f"offset: {base + relative} position: {position}")
            previous = (relative, position)
        self._whole_entries(path, data, OFFSET_ENTRY.size)

    def time_index(self, path: Path, data: bytes) -> None:
        base = _base_offset(path)
        previous = None
        for pos in range(0, len(data) - len(data) % TIME_ENTRY.size, TIME_ENTRY.size):
            timestamp, relative = TIME_ENTRY.unpack_from(data, pos)
            if previous is not None and (timestamp <= previous[0] or relative < previous[1]):
                return self.corrupt(path, pos, f"entry (timestamp {timestamp}, offset {base + relative}) does not "
                                               f"follow (timestamp {previous[0]}, offset {base + previous[1]})")
            self.line(f"timestamp: {timestamp} offset: {base + relative}")
            previous = (timestamp, relative)
        self._whole_entries(path, data, TIME_ENTRY.size)

    def aborted_txn_index(self, path: Path, data: bytes) -> None:
        for pos in range(0, len(data) - len(data) % _ABORTED_ENTRY.size, _ABORTED_ENTRY.size):
            producer_id, first, last, stored_crc = _ABORTED_ENTRY.unpack_from(data, pos)
            if crc.crc32c(data[pos:pos + _ABORTED_ENTRY.size - 4]) != stored_crc:
                return self.corrupt(path, pos, "entry CRC mismatch")
            self.line(f"producerId: {producer_id} firstOffset: {first} lastOffset: {last}")
        self._whole_entries(path, data, _ABORTED_ENTRY.size)

    def _whole_entries(self, path: Path, data: bytes, entry_size: int) -> None:
        extra = len(data) % entry_size
        if extra:
            self.corrupt(path, len(data) - extra, f"{extra} trailing bytes, not a whole {entry_size}-byte entry")

    def snapshot(self, path: Path, data: bytes) -> None:
        try:
            manager = decode_snapshot(data)
        except CorruptSnapshot as e:
            return self.corrupt(path, None, str(e))
        for e in sorted(manager.entries().values(), key=lambda e: e.producer_id):
            txn = "None" if e.current_txn_first_offset is None else e.current_txn_first_offset
            last = e.batches[-1] if e.batches else None
            batch = (f"firstSequence: {last.first_seq} lastSequence: {last.last_seq} lastOffset: {last.last_offset} "
                     f"offsetDelta: {last.last_offset - last.first_offset} timestamp: {last.timestamp} "
                     f"cachedBatches: {len(e.batches)}") if last else "cachedBatches: 0"
            self.line(f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                      f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn} "
                      f"lastTimestamp: {e.last_timestamp} {batch}")


def _base_offset(path: Path) -> int:
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else 0


def _batch_line(b: RecordBatch) -> str:
    time_type = "LogAppendTime" if b.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    return (f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
            f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
            f"position: {b.pos} {time_type}: {b.max_timestamp} size: {b.size} magic: {b.magic} "
            f"compresscodec: {COMPRESSION_NAMES.get(b.compression, b.compression)} crc: {b.header.crc} "
            f"isvalid: {str(b.crc_valid()).lower()}")


def _sizes(r) -> str:
    return (f"keySize: {-1 if r.key is None else len(r.key)} "
            f"valueSize: {-1 if r.value is None else len(r.value)}")


def _text(data: bytes | None) -> str:
    """UTF-8 text with invalid bytes and control characters escaped, so one record stays one line."""
    if data is None:
        return "null"
    text = data.decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _transaction_state(key: bytes | None, value: bytes | None) -> str:
    """A __transaction_state record in words; anything else raw, with the reason."""
    try:
        transactional_id = decode_key(key or b"")
        if value is None:
            return f"transactionalId: {transactional_id} payload: <DELETE> (tombstone: the id expired)"
        v = decode_value(value)
        state = TransactionState.from_id(v.transaction_status).state_name
    except (ValueError, struct.error) as e:
        return f"key: {_text(key)} payload: {_text(value)} (not a transaction log record: {e})"
    partitions = ",".join(f"{t}-{p}" for t, ids in v.transaction_partitions or () for p in ids)
    extra = "".join(f" {name}: {n}" for name, n, unset in (
        ("previousProducerId", v.previous_producer_id, -1), ("nextProducerId", v.next_producer_id, -1),
        ("nextProducerEpoch", v.next_producer_epoch, -1),
        ("clientTransactionVersion", v.client_transaction_version, 0)) if n != unset)
    return (f"transactionalId: {transactional_id} producerId: {v.producer_id} producerEpoch: {v.producer_epoch} "
            f"state: {state} transactionTimeoutMs: {v.transaction_timeout_ms} partitions: [{partitions}] "
            f"lastUpdateTimestamp: {v.transaction_last_update_timestamp_ms} "
            f"startTimestamp: {v.transaction_start_timestamp_ms}{extra}")


@click.command("dump-log")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--print-records", is_flag=True, help="also print every record (key, value, headers, markers)")
@click.option("--decode-transaction-state", is_flag=True,
              help="decode records as __transaction_state keys and values (implies --print-records)")
def dump_log(paths: tuple[Path, ...], print_records: bool, decode_transaction_state: bool) -> None:
    """Print the batches, records, index entries or producer snapshot in partition files."""
    dump = Dump(print_records, decode_transaction_state)
    for path in paths:
        dump.file(path)
    if dump.failed:
        raise SystemExit(1)
