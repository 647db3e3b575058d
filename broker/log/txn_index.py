"""The aborted-transaction index of a partition: which producer's records between which
offsets were aborted, so read_committed consumers can drop them.

One append-only file per partition (``aborted-transactions.index``), fixed 28-byte
entries: producer id, first offset, last offset (the ABORT marker), CRC-32C of the
three. A torn last entry is ignored on load; an entry lost to a crash between the
marker append and the index write is re-added when producer state replays the log
tail at start-up (``add`` ignores entries it already has).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from broker.log.descriptors import PooledFile
from broker.log.files import replace_atomically
from protocol import crc

log = logging.getLogger(__name__)

FILE_NAME = "aborted-transactions.index"
_ENTRY = struct.Struct(">qqqI")
_FIELDS = struct.Struct(">qqq")


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    last_offset: int
    first_offset: int
    producer_id: int


def _encode(producer_id: int, first_offset: int, last_offset: int) -> bytes:
    fields = _FIELDS.pack(producer_id, first_offset, last_offset)
    return fields + struct.pack(">I", crc.crc32c(fields))


_NONE_KNOWN: frozenset = frozenset()


class AbortedTxnIndex:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self._entries: list[AbortedTxn] = []  # sorted by last offset
        # (producer id, last offset) of the entries; an empty set is 216 bytes, and most
        # partitions never see an abort, so an empty index shares one frozenset
        self._known: set[tuple[int, int]] | frozenset = _NONE_KNOWN
        if self.path.exists():
            self._load()
        self._file = PooledFile(self.path)  # opened at the first entry added

    def _load(self) -> None:
        data = self.path.read_bytes()
        good = 0
        for pos in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):
            pid, first, last, stored_crc = _ENTRY.unpack_from(data, pos)
            if crc.crc32c(data[pos : pos + _FIELDS.size]) != stored_crc:
                break
            self._insert(AbortedTxn(last, first, pid))
            good = pos + _ENTRY.size
        if good != len(data):
            log.warning("%s: dropping %d bytes of a torn or corrupt tail", self.path, len(data) - good)
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def _insert(self, entry: AbortedTxn) -> None:
        bisect.insort(self._entries, entry)
        if self._known is _NONE_KNOWN:
            self._known = set()
        self._known.add((entry.producer_id, entry.last_offset))

    def add(self, producer_id: int, first_offset: int, last_offset: int) -> None:
        if (producer_id, last_offset) in self._known:
            return
        os.write(self._file.fd, _encode(producer_id, first_offset, last_offset))
        self._insert(AbortedTxn(last_offset, first_offset, producer_id))

    def ready(self) -> None:
        """Opens the file now, so that an ``add`` that follows cannot fail for want of a
        descriptor."""
        self._file.fd

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end): they end at or after
        ``start`` and began before ``end``."""
        i = bisect.bisect_left(self._entries, AbortedTxn(start, -1, -1))
        return [e for e in self._entries[i:] if e.first_offset < end]

    def any_ending_at_or_after(self, offset: int) -> bool:
        """Whether some aborted transaction's marker is at or after ``offset`` (only those
        can overlap a read from there)."""
        return bool(self._entries) and self._entries[-1].last_offset >= offset

    def truncate_to(self, offset: int) -> None:
        """Forgets transactions whose marker is at or past ``offset`` (log truncated)."""
        if self._entries and self._entries[-1].last_offset >= offset:
            self._rewrite([e for e in self._entries if e.last_offset < offset])

    def delete_before(self, log_start_offset: int) -> None:
        """Forgets transactions that ended before the log start offset."""
        if self._entries and self._entries[0].last_offset < log_start_offset:
            self._rewrite([e for e in self._entries if e.last_offset >= log_start_offset])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        self._file.close()
        replace_atomically(self.path, b"".join(_encode(e.producer_id, e.first_offset, e.last_offset) for e in entries))
        self._entries = entries
        self._known = {(e.producer_id, e.last_offset) for e in entries}
        self._file = PooledFile(self.path)

    def flush(self, fsync: bool = False) -> None:
        if fsync and self.path.exists():
            os.fsync(self._file.fd)

    def close(self) -> None:
        self._file.close()

    def __len__(self) -> int:
        return len(self._entries)
