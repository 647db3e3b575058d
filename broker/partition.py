"""One partition as the leader sees it: its log, its producer state, and the waiters
of long-polling fetches.

There is one replica, so the high watermark is the log end offset once an append has
reached the page cache. Producer state is snapshotted when a segment rolls and at
clean shutdown, and rebuilt at start-up from the newest snapshot plus the log after it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from broker.storage.log import AppendInfo, LogConfig, PartitionLog
from broker.storage.producer_state import ProducerStateManager, load_latest_snapshot
from protocol.records import RecordBatch

log = logging.getLogger(__name__)


class ProduceRejected(Exception):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


@dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False


class Partition:
    def __init__(self, topic: str, index: int, log_: PartitionLog, producer_state: ProducerStateManager) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.producer_state = producer_state
        self._waiters: list[asyncio.Future] = []
        log_.roll_listeners.append(self._snapshot_at_roll)

    @classmethod
    def open(cls, topic: str, index: int, directory: Path, config: LogConfig, now_ms: int,
             emulate_older_than_2_5: bool = False) -> "Partition":
        log_ = PartitionLog.open(directory, config, now_ms)
        loaded = load_latest_snapshot(directory, emulate_older_than_2_5, log_.log_end_offset)
        if loaded is None:
            state, start = ProducerStateManager(emulate_older_than_2_5), log_.log_start_offset
        else:
            state, start = loaded[0], max(loaded[1], log_.log_start_offset)
        if start < log_.log_end_offset:
            state.rebuild(log_.batches(start), now_ms)
        return cls(topic, index, log_, state)

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        return self.high_watermark if first_unstable is None else first_unstable

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def aborted_transactions(self, fetch_offset: int, data: bytes) -> list[dict]:
        """Aborted transactions overlapping a read_committed read (none without transactions)."""
        return []

    def append_from_client(self, batch: RecordBatch, now_ms: int) -> Appended:
        """Validates the batch against producer state, then appends it.

        A retried batch already in the log is answered with its original offset and
        not appended again. Raises ProduceRejected with the Kafka error name.
        """
        check = self.producer_state.check(batch, self.log.log_start_offset)
        if check.duplicate_of is not None:
            return Appended(check.duplicate_of.first_offset, -1, self.log.log_start_offset, duplicate=True)
        if check.error is not None:
            raise ProduceRejected(check.error, check.message)
        info = self.append(batch, now_ms)
        return Appended(info.base_offset, info.log_append_time, info.log_start_offset)

    def append(self, batch: RecordBatch, now_ms: int) -> AppendInfo:
        info = self.log.append(batch, now_ms)
        self.producer_state.update(batch, now_ms)
        self.wake_fetchers()
        return info

    def _snapshot_at_roll(self, new_segment_base: int) -> None:
        self.producer_state.write_snapshot(self.log.directory, new_segment_base)

    def close(self) -> None:
        self.wake_fetchers()
        try:
            self.producer_state.write_snapshot(self.log.directory, self.log.log_end_offset)
        except OSError:
            log.exception("could not write the producer state snapshot of %s-%d", self.topic, self.index)
        self.log.close()

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
