"""``eosbroker dump-log``: print what a partition's files hold, like kafka-dump-log.sh.

Reads the files directly (no broker needed): segments (.log), offset indexes (.index),
time indexes (.timeindex), the aborted-transaction index and producer state
snapshots (.snapshot). Corrupt or truncated data is reported with the position where
it starts; the exit code is then 1.

``--transactional-id ID --data-dir DIR`` finds the ``__transaction_state`` partition
that holds the id (Kafka's placement: Java's String.hashCode modulo the partition count)
and prints that id's records only: its history as the coordinator wrote it.
Large files report their progress on stderr (always with ``--progress``).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import click
from protocol import crc

from broker.cluster.topics import read_topic_entries
from broker.log.segment import OFFSET_ENTRY, TIME_ENTRY
from broker.log.producer_snapshots import CorruptSnapshot, decode_snapshot
from broker.log.txn_index import FILE_NAME as ABORTED_TXN_INDEX_NAME
from coordinator.runtime import LogCodecError
from coordinator.group import log_codec as group_log_codec
from coordinator.partitioning import partition_for
from coordinator.transaction.log_codec import decode_key, decode_value
from coordinator.transaction.metadata import TransactionState
from protocol.names import TRANSACTION_STATE
from protocol.records import (
    CONTROL_TYPE_COMMIT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    InvalidBatch,
    RecordBatch,
    decode_records,
    increment_sequence,
    peek_batch_size,
    read_control_record,
)

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# aborted-transactions.index entry: producer id, first offset, last offset, CRC-32C of the three.
_ABORTED_ENTRY = struct.Struct(">qqqI")
_MAGIC_AT = 16

# Files this large report progress on a terminal without being asked.
_PROGRESS_FROM_BYTES = 64 << 20
_PROGRESS_STEPS = 10


class Dump:
    """Output of one run; remembers whether any file was corrupt."""

    def __init__(self, print_records: bool, decode_transaction_state: bool,
                 transactional_id: str | None = None, progress: bool | None = None,
                 decode_consumer_offsets: bool = False) -> None:
        self.print_records = (print_records or decode_transaction_state or decode_consumer_offsets
                              or transactional_id is not None)
        self.decode_consumer_offsets = decode_consumer_offsets
        self.decode_transaction_state = decode_transaction_state or transactional_id is not None
        self.transactional_id = transactional_id  # only this id's records, no batch lines
        self.progress = progress  # None: on a terminal, for large files
        self.failed = False
        self.matched = 0

    def line(self, text: str) -> None:
        click.echo(text)

    def corrupt(self, path: Path, position: int | None, reason: str) -> None:
        self.failed = True
        where = f" at position {position}" if position is not None else ""
        click.echo(f"Corruption in {path}{where}: {reason}", err=True)

    # -- files -----------------------------------------------------------------------

    def file(self, path: Path) -> None:
        if path.name == ABORTED_TXN_INDEX_NAME:
            dump = self.aborted_txn_index
        else:
            dump = {".log": self.segment, ".index": self.offset_index, ".timeindex": self.time_index,
                    ".snapshot": self.snapshot}.get(path.suffix)
        if dump is None:
            self.failed = True
            click.echo(f"Unsupported file {path}: expected .log, .index, .timeindex, .snapshot "
                       f"or {ABORTED_TXN_INDEX_NAME}", err=True)
            return
        try:
            data = path.read_bytes()
        except OSError as e:  # said alone: no "Dumping" line for a file that is not there
            self.failed = True
            click.echo(f"Cannot read {path}: {e.strerror or e}", err=True)
            return
        self.line(f"Dumping {path}")
        dump(path, data)

    def segment(self, path: Path, data: bytes) -> None:
        self.line(f"Log starting offset: {_base_offset(path)}")
        progress = Progress(path, len(data), self.progress)
        pos = 0
        while pos < len(data):
            progress.at(pos)
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
            if self.transactional_id is None:
                self.line(_batch_line(batch))
            if not batch.crc_valid():
                self.corrupt(path, pos, f"CRC mismatch: stored {batch.header.crc}, computed {batch.compute_crc()}")
            elif self.print_records:
                try:
                    self.records(batch)
                except InvalidBatch as e:
                    self.corrupt(path, pos, f"records of batch {batch.base_offset} cannot be read: {e}")
            pos += size
        progress.done()

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
            if self.transactional_id is not None:
                if _transactional_id(r.key) != self.transactional_id:
                    continue
                self.matched += 1
            if self.decode_transaction_state:
                self.line(f"{head} {transaction_state_text(r.key, r.value)}")
            elif self.decode_consumer_offsets:
                self.line(f"{head} {consumer_offsets_text(r.key, r.value)}")
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


class Progress:
    """``PATH: read N of M bytes (P%)`` on stderr at every tenth of a file."""

    def __init__(self, path: Path, total: int, enabled: bool | None) -> None:
        if enabled is None:
            enabled = total >= _PROGRESS_FROM_BYTES and sys.stderr.isatty()
        self.path, self.total, self.enabled = path, total, enabled and total > 0
        self._next = 1

    def at(self, position: int) -> None:
        if self.enabled and position * _PROGRESS_STEPS >= self._next * self.total:
            self._next = position * _PROGRESS_STEPS // self.total + 1
            self._show(position)

    def done(self) -> None:
        if self.enabled:
            self._show(self.total)

    def _show(self, position: int) -> None:
        click.echo(f"{self.path}: read {position} of {self.total} bytes ({position * 100 // self.total}%)", err=True)


def transaction_state_partition(data_dir: Path, transactional_id: str) -> tuple[int, int]:
    """(partition, partition count) of ``__transaction_state`` holding ``transactional_id``
    in a broker's data directory; the count comes from the topic registry, else from
    the partition directories present."""
    count = None
    registry = data_dir / "meta" / "topics.json"
    try:
        for entry in read_topic_entries(data_dir):
            if entry.get("name") == TRANSACTION_STATE:
                count = int(entry["partitions"])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise click.ClickException(f"cannot read the topic registry {registry}: {e}") from None
    if count is None:
        indexes = [int(p.name.rsplit("-", 1)[1]) for p in data_dir.glob(f"{TRANSACTION_STATE}-*")
                   if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()]
        if not indexes:
            raise click.ClickException(f"{data_dir} holds no {TRANSACTION_STATE} partitions "
                                       "(not a data directory, or no transaction was ever started)")
        count = max(indexes) + 1
    return partition_for(transactional_id, count), count


def _transactional_id(key: bytes | None) -> str | None:
    try:
        return decode_key(key or b"")
    except (ValueError, struct.error):
        return None


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


def consumer_offsets_text(key: bytes | None, value: bytes | None) -> str:
    """A __consumer_offsets record (offset commit or classic group metadata) in words;
    anything else (a consumer group's KIP-848 records among them) raw, with the reason."""
    try:
        k = group_log_codec.decode_key(key or b"")
        if isinstance(k, group_log_codec.OffsetCommitKey):
            head = f"offsetCommit: group: {k.group} partition: {k.topic}-{k.partition}"
            if value is None:
                return f"{head} payload: <DELETE>"
            v = group_log_codec.decode_offset_commit_value(value)
            return (f"{head} offset: {v.offset} leaderEpoch: {v.leader_epoch} metadata: {_text(v.metadata.encode())} "
                    f"commitTimestamp: {v.commit_timestamp_ms}")
        head = f"groupMetadata: group: {k.group}"
        if value is None:
            return f"{head} payload: <DELETE>"
        g = group_log_codec.decode_group_metadata_value(value)
        return (f"{head} protocolType: {g.protocol_type} generation: {g.generation} protocol: {g.protocol} "
                f"leader: {g.leader} members: [{','.join(m.member_id for m in g.members)}]")
    except (ValueError, struct.error, LogCodecError) as e:
        return f"key: {_text(key)} payload: {_text(value)} (not an offset commit or group metadata record: {e!r})"


def transaction_state_text(key: bytes | None, value: bytes | None) -> str:
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
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--print-records", is_flag=True, help="also print every record (key, value, headers, markers)")
@click.option("--decode-transaction-state", is_flag=True,
              help="decode records as __transaction_state keys and values (implies --print-records)")
@click.option("--offsets-decoder", "decode_consumer_offsets", is_flag=True,
              help="decode records as __consumer_offsets keys and values (implies --print-records)")
@click.option("--transactional-id", help="print this transactional id's records from the __transaction_state "
                                         "partition of --data-dir that holds it (no PATHS then)")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("./data"),
              show_default=True, help="the broker's data directory, for --transactional-id")
@click.option("--progress/--no-progress", default=None,
              help="report progress on stderr (default: for files of 64 MiB and more, on a terminal)")
def dump_log(paths: tuple[Path, ...], print_records: bool, decode_transaction_state: bool,
             decode_consumer_offsets: bool, transactional_id: str | None, data_dir: Path,
             progress: bool | None) -> None:
    """Print the batches, records, index entries or producer snapshot in partition files."""
    if transactional_id is not None:
        if paths:
            raise click.UsageError("give either PATHS or --transactional-id, not both")
        paths = _transaction_log_segments(data_dir, transactional_id)
    elif not paths:
        raise click.UsageError("give the files to dump, or --transactional-id ID --data-dir DIR")
    dump = Dump(print_records, decode_transaction_state, transactional_id, progress, decode_consumer_offsets)
    for path in paths:
        dump.file(path)
    if transactional_id is not None and not dump.matched:
        click.echo(f"No records of transactional id {transactional_id!r} (never used, or expired and compacted away)")
    if dump.failed:
        raise SystemExit(1)


def _transaction_log_segments(data_dir: Path, transactional_id: str) -> tuple[Path, ...]:
    if not data_dir.is_dir():
        raise click.ClickException(f"no data directory {data_dir}")
    partition, count = transaction_state_partition(data_dir, transactional_id)
    directory = data_dir / f"{TRANSACTION_STATE}-{partition}"
    click.echo(f"Transactional id {transactional_id!r} is in {TRANSACTION_STATE}-{partition} "
               f"(partition {partition} of {count}): {directory}")
    segments = sorted(directory.glob("*.log"), key=_base_offset)
    if not segments:
        raise click.ClickException(f"{directory} holds no log segments")
    return tuple(segments)
