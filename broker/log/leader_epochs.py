"""The leader epoch cache of a partition: where each leader epoch's records start.

Kept in ``leader-epoch-checkpoint`` in Kafka's text format (a version line ``0``, a
count, then ``epoch start_offset`` lines). OffsetForLeaderEpoch answers from it, so a
consumer can check after a leader change that its position is still on the log
(KIP-320).
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.log.files import read_small_file, replace_atomically

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path, on_disk: bool = True) -> None:
        """``on_disk``: whether the file may exist (False when the caller's listing of
        the directory has none: no look for it)."""
        self._path = directory / FILE_NAME
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), epochs increasing
        if not on_disk:
            return
        try:
            lines = read_small_file(self._path).decode().split("\n")
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, offset = line.split()
                self.entries.append((int(epoch), int(offset)))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, IndexError) as e:
            log.warning("ignoring unreadable %s (%s)", self._path, e)
            self.entries = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch ``epoch`` begins at ``start_offset`` (the log end when the leader
        changed); a repeated or older epoch changes nothing."""
        if epoch <= self.latest_epoch:
            return
        self.entries.append((epoch, start_offset))
        body = "\n".join(f"{e} {o}" for e, o in self.entries)
        replace_atomically(self._path, f"0\n{len(self.entries)}\n{body}\n".encode(), fsync=False)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's LeaderEpochFileCache.endOffsetFor answers: the
        largest epoch not above the requested one, and where the next epoch starts (the
        log end for the latest epoch)."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = next(((e, o) for e, o in self.entries if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor = next(((e, o) for e, o in reversed(self.entries) if e <= requested_epoch), None)
        return (requested_epoch if floor is None else floor[0]), higher[1]
