"""Producer-state snapshot files: the storage side of broker/log/producer_state.py.

A snapshot records a partition's producer state as of a log offset, so that opening the
partition replays only the log after it. Written when a segment rolls and at close;
the newest readable one is loaded at open.

File <20-digit offset>.snapshot, all integers big-endian:
  header : version int16 (=1) | crc uint32 (CRC-32C of everything after the header)
  body   : entry_count int32, then per entry
           producer_id int64 | producer_epoch int16 | coordinator_epoch int32 |
           last_timestamp int64 | current_txn_first_offset int64 (-1 = none) |
           batch_count int8, then per batch (oldest first)
           first_seq int32 | last_seq int32 | first_offset int64 | last_offset int64 | timestamp int64
Unlike Kafka's snapshot (last batch only), all 5 cached batches are kept so
duplicate detection survives a restart.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from broker.log.files import read_small_file, replace_atomically
from broker.log.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from protocol import crc

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_TO_KEEP = 2
_SNAP_HEADER = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqqb")
_SNAP_BATCH = struct.Struct(">iiqqq")


class CorruptSnapshot(ValueError):
    pass


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path, names: Iterable[str] | None = None) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in ``directory``, oldest first; ``names``:
    the directory's listing, when the caller has one."""
    directory = Path(directory)
    if names is None:
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
    found = []
    for name in names:  # names first, paths only for snapshots: a partition close lists its directory
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            found.append((int(stem), directory / name))
    return sorted(found)


def encode_snapshot(manager: ProducerStateManager) -> bytes:
    entries = sorted(manager.entries().values(), key=lambda e: e.producer_id)
    parts = [_SNAP_COUNT.pack(len(entries))]
    for e in entries:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        parts.append(
            _SNAP_ENTRY.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp, txn, len(e.batches))
        )
        for b in e.batches:
            parts.append(_SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp))
    body = b"".join(parts)
    return _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc.crc32c(body)) + body


def decode_snapshot(data: bytes, emulate_older_than_2_5: bool = False) -> ProducerStateManager:
    try:
        version, stored_crc = _SNAP_HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshot(f"unknown snapshot version {version}")
        body = memoryview(data)[_SNAP_HEADER.size :]
        if crc.crc32c(body) != stored_crc:
            raise CorruptSnapshot("snapshot CRC mismatch")
        (count,) = _SNAP_COUNT.unpack_from(body, 0)
        pos = _SNAP_COUNT.size
        entries = []
        for _ in range(count):
            pid, epoch, coord_epoch, last_ts, txn, nbatches = _SNAP_ENTRY.unpack_from(body, pos)
            pos += _SNAP_ENTRY.size
            batches = []
            for _ in range(nbatches):
                batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, pos)))
                pos += _SNAP_BATCH.size
            entries.append(ProducerStateEntry(
                producer_id=pid,
                producer_epoch=epoch,
                batches=tuple(batches),
                current_txn_first_offset=None if txn < 0 else txn,
                coordinator_epoch=coord_epoch,
                last_timestamp=last_ts,
            ))
        if pos != len(body):
            raise CorruptSnapshot(f"{len(body) - pos} unexpected trailing bytes")
        return ProducerStateManager.from_entries(entries, 0, emulate_older_than_2_5)
    except struct.error as e:
        raise CorruptSnapshot(f"snapshot truncated: {e}") from None


def write_snapshot(manager: ProducerStateManager, directory: Path, offset: int, fsync: bool = True) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return write_snapshot_bytes(encode_snapshot(manager), directory, offset, fsync)


def write_snapshot_bytes(snapshot: bytes, directory: Path, offset: int, fsync: bool = True) -> Path:
    """Writes an encoded snapshot into an existing partition directory (never creating
    it: the partition may have been deleted meanwhile) and drops the oldest. Without
    ``fsync`` the caller makes the file and the directory durable (``fsync_all``);
    until then a crash may leave it torn, and a torn snapshot fails its CRC at load and
    the log is replayed from the one before."""
    path = snapshot_path(directory, offset)
    replace_atomically(path, snapshot, fsync=fsync)
    for _, old in list_snapshots(directory)[:-SNAPSHOTS_TO_KEEP]:
        old.unlink(missing_ok=True)
    return path


def delete_snapshots_after(directory: Path, offset: int, snapshots: list[tuple[int, Path]] | None = None) -> None:
    """Drops the snapshots past ``offset`` (the log lost or truncated its tail): once
    appends pass that offset again, such a file would describe records no longer there.
    ``snapshots``: ``list_snapshots``' answer, when the caller has it."""
    for snapshot_offset, path in list_snapshots(directory) if snapshots is None else snapshots:
        if snapshot_offset > offset:
            path.unlink(missing_ok=True)


def load_latest_snapshot(
    directory: Path,
    emulate_older_than_2_5: bool = False,
    log_end_offset: int | None = None,
    snapshots: list[tuple[int, Path]] | None = None,
) -> tuple[ProducerStateManager, int] | None:
    """The newest readable snapshot as (manager, offset), or None.

    A corrupt or truncated snapshot is logged and skipped in favour of the older one.
    Snapshots beyond ``log_end_offset`` (the log lost its tail) are skipped too.
    The caller then replays the log from ``offset`` with ``rebuild``. ``snapshots``:
    ``list_snapshots``' answer, when the caller has it.
    """
    for offset, path in reversed(list_snapshots(directory) if snapshots is None else snapshots):
        if log_end_offset is not None and offset > log_end_offset:
            log.warning("ignoring producer snapshot %s beyond log end offset %d", path, log_end_offset)
            continue
        try:
            manager = decode_snapshot(read_small_file(path), emulate_older_than_2_5)
        except (CorruptSnapshot, OSError) as e:
            log.warning("ignoring unreadable producer snapshot %s: %s", path, e)
            continue
        manager.map_end_offset = offset
        return manager, offset
    return None
