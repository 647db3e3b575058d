"""A node's share partitions and share sessions (Kafka's SharePartitionManager): the
state of each (share group, topic partition) this node leads, the share sessions of
ShareFetch/ShareAcknowledge, and the acquisition-lock timer on the broker's clock.

A share-partition starts at the first fetch of its group: at the log start
(``share.auto.offset.reset=earliest``) or its end (``latest``, the default). Group
configs are read when used, so an IncrementalAlterConfigs takes effect at once.
The state is kept by the share coordinator (broker/coordinators/share_state_service.py) in
__share_group_state, reached by requests through the network between the nodes
(broker/coordinators/share_persister.py): read when a share-partition starts here (after
a restart or a leadership move it goes on where it was), written when records are
acknowledged, released, or their locks end.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from broker.config import SETTINGS
from broker.cluster.dynamic_configs import GROUP_CONFIG_SYNONYMS
from broker.log.partition import Partition
from broker.coordinators.share_persister import SharePersister
from coordinator.share.coordinator import READ_UNINITIALIZED
from coordinator.share.partition import AbortedRange, LogBatch, SharePartition
from coordinator.share.persister_policy import leader_error
from coordinator.share.state_log_codec import ShareSnapshot, StateBatch, StateKey
from kio.schema.errors import ErrorCode
from protocol.records import iter_batches

log = logging.getLogger(__name__)

_MAX_SLEEP_S = 30.0
READ_CHUNK_BYTES = 1 << 20
_MAX_EPOCH = 2**31 - 1
CONTROL_BIT, TRANSACTIONAL_BIT = 0x20, 0x10


@dataclass(slots=True)
class ShareSession:
    connection_id: int  # the connection that opened it: when it closes, the session ends
    next_epoch: int = 1
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)

    def advance(self) -> None:
        self.next_epoch = 1 if self.next_epoch == _MAX_EPOCH else self.next_epoch + 1


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """A group's share.* group configs, as they are now."""

    lock_ms: int
    delivery_limit: int
    max_in_flight: int
    read_committed: bool
    auto_offset_reset: str
    renew_enabled: bool


def group_setting(broker, group_id: str, key: str) -> str:
    """A group config: the group's own value, else the broker setting it defaults to."""
    value, overridden = broker.dynamic_configs.group_value(group_id, key)
    synonym = GROUP_CONFIG_SYNONYMS.get(key)
    if not overridden and synonym in SETTINGS:
        return str(broker.config[synonym])
    return value


class ShareService:
    def __init__(self, broker, node) -> None:
        self.broker = broker
        self.node = node
        self.clock = broker.cluster.clock
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.persister = SharePersister(broker, node)
        self._starting: dict[tuple[str, uuid.UUID, int], asyncio.Lock] = {}
        self._writing: dict[tuple[str, uuid.UUID, int], asyncio.Lock] = {}
        self._written: dict[tuple[str, uuid.UUID, int], ShareSnapshot] = {}  # the last state written
        self._writes: set[asyncio.Task] = set()
        # Set whenever records become available again (released, lock expired): share
        # fetches waiting for records look again.
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._timer: asyncio.Task | None = None

    # -- settings --------------------------------------------------------------------------

    def settings(self, group_id: str) -> ShareSettings:
        def value(key: str) -> str:
            return group_setting(self.broker, group_id, key)

        return ShareSettings(
            lock_ms=int(value("share.record.lock.duration.ms")),
            delivery_limit=int(value("share.delivery.count.limit")),
            max_in_flight=int(value("share.partition.max.record.locks")),
            read_committed=value("share.isolation.level") == "read_committed",
            auto_offset_reset=value("share.auto.offset.reset"),
            renew_enabled=value("share.renew.acknowledge.enable").lower() == "true",
        )

    # -- share partitions --------------------------------------------------------------------

    async def prepare(self, group_id: str, topic_id: uuid.UUID, part: Partition, settings: ShareSettings
                      ) -> ErrorCode:
        """Starts the share-partition from its durable state (ReadShareGroupState to the
        share coordinator), if it has not started here. The error a client gets when the
        state could not be read (the share-partition is not started then: the next request
        reads again)."""
        key = (group_id, topic_id, part.index)
        if key in self.partitions:
            return ErrorCode.none
        async with self._starting.setdefault(key, asyncio.Lock()):
            if key in self.partitions:
                return ErrorCode.none
            state_key = StateKey(group_id, topic_id, part.index)
            error, message, snapshot = await self.persister.read(state_key, self._leader_epoch(part))
            if error is ErrorCode.invalid_request and message == READ_UNINITIALIZED:
                # No heartbeat of the group initialized it (a fetch from a client outside
                # the group's protocol): the leader starts it itself.
                initialized = await self.persister.initialize(group_id, [(topic_id, part.index)], 0)
                error, snapshot = initialized[topic_id, part.index], None
            if error:
                log.warning("share group %s: %s-%d does not start, its state could not be read: %s", group_id,
                            part.topic, part.index, error.name.upper())
                return leader_error(error)
            if key in self.partitions:
                return ErrorCode.none
            if snapshot is not None and snapshot.start_offset >= 0:
                share = self.partitions[key] = SharePartition.restore(
                    snapshot.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                            for b in snapshot.state_batches])
                share.state_epoch = snapshot.state_epoch
                log.info("share group %s: %s-%d goes on from its state at offset %d (%d records in flight)",
                         group_id, part.topic, part.index, share.start_offset, len(share.records))
                return ErrorCode.none
            start = part.log_start_offset if settings.auto_offset_reset == "earliest" else part.high_watermark
            share = self.partitions[key] = SharePartition(start)
            share.state_epoch = 0 if snapshot is None else snapshot.state_epoch
            log.info("share group %s: %s-%d starts at offset %d (share.auto.offset.reset=%s)",
                     group_id, part.topic, part.index, start, settings.auto_offset_reset)
            self.persist(group_id, topic_id, part.index, share)
            return ErrorCode.none

    def share_partition(self, group_id: str, topic_id: uuid.UUID, part: Partition) -> SharePartition | None:
        """The share-partition started here (``prepare``), its start moved past what the
        log no longer holds; None when it has not started."""
        share = self.partitions.get((group_id, topic_id, part.index))
        if share is not None:
            share.move_start_to(part.log_start_offset)
        return share

    def _leader_epoch(self, part: Partition) -> int:
        own = self.broker.cluster.leadership(part.topic, part.index)
        return 0 if own is None else own.leader_epoch

    def persist(self, group_id: str, topic_id: uuid.UUID, index: int, share: SharePartition) -> None:
        """Writes the share-partition's state in the background (a failure is logged)."""
        task = asyncio.get_running_loop().create_task(self.write(group_id, topic_id, index, share))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def write(self, group_id: str, topic_id: uuid.UUID, index: int, share: SharePartition) -> ErrorCode:
        """Writes the share-partition's state as it is when its turn comes
        (WriteShareGroupState to the share coordinator, one at a time per share-partition);
        the error a client gets when it could not be written. A fenced share-partition is
        dropped: the next request reads the state again."""
        key = (group_id, topic_id, index)
        async with self._writing.setdefault(key, asyncio.Lock()):
            if self.partitions.get(key) is not share:
                return ErrorCode.none  # dropped meanwhile: its state is no longer this one's
            topic = self.broker.cluster.topics.by_id.get(topic_id)
            own = None if topic is None else self.broker.cluster.leadership(topic.name, index)
            snapshot = ShareSnapshot(0, share.state_epoch, own.leader_epoch if own is not None else 0,
                                     share.start_offset, 0, 0, tuple(StateBatch(*b) for b in share.state_batches()))
            if self._written.get(key) == snapshot:
                return ErrorCode.none
            error, message = await self.persister.write(StateKey(group_id, topic_id, index), snapshot)
            if not error:
                self._written[key] = snapshot
                return ErrorCode.none
            log.warning("share group %s: writing the state of %s-%d failed: %s%s", group_id, topic_id, index,
                        error.name.upper(), f" ({message})" if message else "")
            if error in (ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch) and \
                    self.partitions.get(key) is share:
                del self.partitions[key]
                self._written.pop(key, None)
            return leader_error(error)

    def rollback(self, share: SharePartition, undo) -> None:
        """Acknowledgements whose state was not written are undone (their records held by
        the member again, under their locks)."""
        share.rollback(undo)
        self._wake.set()

    def acquire(self, group_id: str, member_id: str, topic_id: uuid.UUID, part: Partition, max_records: int,
                max_bytes: int, settings: ShareSettings) -> tuple[bytes, list]:
        """(the batches holding what was acquired, the acquired ranges) for one partition."""
        share = self.share_partition(group_id, topic_id, part)
        if share is None:
            return b"", []
        upper = part.last_stable_offset if settings.read_committed else part.high_watermark
        start = share.fetch_offset()
        if start >= upper and not share.can_acquire(upper, settings.max_in_flight):
            return b"", []
        data = part.log.read(start, max(max_bytes, 1), upper, True) if start < upper else b""
        batches = list(iter_batches(data))
        metas = [LogBatch(b.base_offset, b.last_offset, b.header.producer_id,
                          bool(b.attributes & TRANSACTIONAL_BIT), bool(b.attributes & CONTROL_BIT)) for b in batches]
        aborted = []
        if settings.read_committed and batches:
            aborted = [AbortedRange(t.producer_id, t.first_offset, t.last_offset)
                       for t in part.aborted_overlapping(batches[0].base_offset, batches[-1].next_offset)]
        acquired = share.acquire(member_id, metas, self.clock.now_ms(), settings.lock_ms, max_records,
                                 settings.max_in_flight, aborted)
        self._wake.set()
        if not acquired:
            return b"", []
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        kept = [b for b in batches if b.last_offset >= first and b.base_offset <= last]
        begin = kept[0].pos if kept else 0
        end = kept[-1].pos + kept[-1].size if kept else 0
        return bytes(data[begin:end]), acquired

    def release_member(self, group_id: str, member_id: str) -> None:
        """A member's share session ended (its final request, or its connection closed)."""
        self.sessions.pop((group_id, member_id), None)
        limit = None
        released = 0
        for (g, topic_id, index), share in self.partitions.items():
            if g == group_id:
                limit = limit or self.settings(group_id).delivery_limit
                held = share.release_member(member_id, limit)
                if held:
                    self.persist(g, topic_id, index, share)
                released += held
        if released:
            log.info("share group %s: %d records of member %s released", group_id, released, member_id)
            self.records_changed()

    def connection_closed(self, connection_id: int) -> None:
        """A client's connection closed: its share sessions end and what their members
        hold is released, as Kafka does since KAFKA-19015."""
        for key in [k for k, s in self.sessions.items() if s.connection_id == connection_id]:
            self.release_member(*key)

    def records_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        return self._changed

    def forget(self, group_id: str, topic_id: uuid.UUID | None = None, index: int | None = None) -> None:
        """Drops a group's share-partitions here (of one topic partition, or all), whose
        state was set or deleted on the share coordinator: the next request reads it."""
        for key in [k for k in self.partitions if k[0] == group_id and topic_id in (None, k[1])
                    and index in (None, k[2])]:
            del self.partitions[key]
            self._written.pop(key, None)

    # -- acquisition locks ---------------------------------------------------------------------

    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(self._expire_locks())

    def halt(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._writes:
            task.cancel()
        self.partitions.clear()
        self._written.clear()
        self.sessions.clear()
        self.records_changed()

    def expire_locks(self, now_ms: int) -> int:
        expired = 0
        for (group_id, topic_id, index), share in list(self.partitions.items()):
            deadline = share.next_deadline()
            if deadline is not None and deadline <= now_ms:
                expired += share.expire_locks(now_ms, self.settings(group_id).delivery_limit)
                self.persist(group_id, topic_id, index, share)
        if expired:
            self.records_changed()
        return expired

    async def _expire_locks(self) -> None:
        while True:
            now = self.clock.now_ms()
            deadline = min((d for s in self.partitions.values() if (d := s.next_deadline()) is not None),
                           default=None)
            if deadline is not None and deadline <= now:
                try:
                    self.expire_locks(now)
                except Exception:
                    log.exception("share-partition lock expiry failed")
                    await self.clock.sleep(1)
                continue
            self._wake.clear()
            timeout = _MAX_SLEEP_S if deadline is None else min((deadline - now) / 1000, _MAX_SLEEP_S)
            try:
                await self.clock.wait_for(self._wake.wait(), max(timeout, 0.001))
            except asyncio.TimeoutError:
                pass
