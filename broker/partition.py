"""One partition as the leader sees it: its log, and the waiters of long-polling fetches.

There is one replica, so the high watermark is the log end offset once an append has
reached the page cache.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.storage.log import LogConfig, PartitionLog
from protocol.records import RecordBatch


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self._waiters: list[asyncio.Future] = []

    @classmethod
    def open(cls, topic: str, index: int, directory: Path, config: LogConfig, now_ms: int) -> "Partition":
        return cls(topic, index, PartitionLog.open(directory, config, now_ms))

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def aborted_transactions(self, fetch_offset: int, data: bytes) -> list[dict]:
        """Aborted transactions overlapping a read_committed read (none without transactions)."""
        return []

    def append(self, batch: RecordBatch, now_ms: int):
        info = self.log.append(batch, now_ms)
        self.wake_fetchers()
        return info

    # long-poll fetch support -------------------------------------------------
    def waiter(self) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def wake_fetchers(self) -> None:
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def forget_waiter(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass
