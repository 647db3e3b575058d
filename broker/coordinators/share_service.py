"""A node's share partitions and share sessions (Kafka's SharePartitionManager): the
state of each (share group, topic partition) this node leads, the share sessions of
ShareFetch/ShareAcknowledge, and the acquisition-lock timer on the broker's clock.

A share-partition starts at the first fetch of its group: at the log start
(``share.auto.offset.reset=earliest``) or its end (``latest``, the default). Group
configs are read when used, so an IncrementalAlterConfigs takes effect at once.
The state is kept by the share coordinator (broker/coordinators/share_state_service.py) in
__share_group_state: read when a share-partition starts here (after a restart or a
leadership move it goes on where it was), written when records are acknowledged,
released, or their locks end.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from broker.config import SETTINGS
from broker.cluster.dynamic_configs import GROUP_CONFIG_SYNONYMS
from broker.log.partition import Partition
from coordinator.share.partition import AbortedRange, LogBatch, SharePartition
from coordinator.share.state_log_codec import ShareSnapshot, StateBatch, StateKey
from kio.schema.errors import ErrorCode
from protocol.names import SHARE_GROUP_STATE
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

    async def prepare(self, group_id: str, topic_id: uuid.UUID, part: Partition, settings: ShareSettings) -> None:
        """Starts the share-partition from its durable state, if it has not started here."""
        key = (group_id, topic_id, part.index)
        if key in self.partitions:
            return
        state_key = StateKey(group_id, topic_id, part.index)
        coordinator = await self.state_coordinator(state_key)
        snapshot = None
        if coordinator is not None:
            for _ in range(1000):  # a partition of __share_group_state still loading
                error, snapshot = coordinator.coordinator.read_state(state_key)
                if error is not ErrorCode.coordinator_load_in_progress:
                    break
                await self.clock.sleep(0.01)
        if key in self.partitions:
            return  # another request started it meanwhile
        if snapshot is not None and snapshot.start_offset >= 0:
            share = self.partitions[key] = SharePartition.restore(
                snapshot.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                        for b in snapshot.state_batches])
            share.state_epoch = snapshot.state_epoch
            log.info("share group %s: %s-%d goes on from its state at offset %d (%d records in flight)",
                     group_id, part.topic, part.index, share.start_offset, len(share.records))
        else:
            self.share_partition(group_id, topic_id, part, settings)

    def share_partition(self, group_id: str, topic_id: uuid.UUID, part: Partition,
                        settings: ShareSettings) -> SharePartition:
        key = (group_id, topic_id, part.index)
        share = self.partitions.get(key)
        if share is None:
            start = part.log_start_offset if settings.auto_offset_reset == "earliest" else part.high_watermark
            share = self.partitions[key] = SharePartition(start)
            log.info("share group %s: %s-%d starts at offset %d (share.auto.offset.reset=%s)",
                     group_id, part.topic, part.index, start, settings.auto_offset_reset)
            self.persist(group_id, topic_id, part.index, share)  # as InitializeShareGroupState
        share.move_start_to(part.log_start_offset)
        return share

    def _state_node(self, key: StateKey):
        """The node leading the key's partition of __share_group_state, if it is up."""
        partition = self.node.share_states.coordinator.partition_for(key)
        leadership = self.broker.cluster.leadership(SHARE_GROUP_STATE, partition)
        node = None if leadership is None else self.broker.node(leadership.leader)
        return node if node is not None and node.is_up else None

    async def state_coordinator(self, key: StateKey):
        """That node's share coordinator service, ready; None when the node is down."""
        await self.node.share_states.ready()  # creates the topic on first use
        node = self._state_node(key)
        if node is None:
            return None
        service = node.share_states
        await service.ready()
        return service

    def persist(self, group_id: str, topic_id: uuid.UUID, index: int, share: SharePartition) -> None:
        """Writes the share-partition's state (WriteShareGroupState) to its coordinator."""
        key = StateKey(group_id, topic_id, index)
        node = self._state_node(key)
        if node is None:
            log.warning("share group %s: the state of %s-%d is not written: no share coordinator", group_id,
                        topic_id, index)
            return
        topic = self.broker.cluster.topics.by_id.get(topic_id)
        own = None if topic is None else self.broker.cluster.leadership(topic.name, index)
        snapshot = ShareSnapshot(0, share.state_epoch, own.leader_epoch if own is not None else 0,
                                 share.start_offset, 0, 0, tuple(StateBatch(*b) for b in share.state_batches()))
        service = node.share_states
        service.ensure_ready()
        error = service.run(key, lambda: service.coordinator.write_state(key, snapshot, self.clock.now_ms()))
        if error:
            log.warning("share group %s: writing the state of %s-%d failed: %s", group_id, topic_id, index,
                        ErrorCode(error).name)

    def acquire(self, group_id: str, member_id: str, topic_id: uuid.UUID, part: Partition, max_records: int,
                max_bytes: int, settings: ShareSettings) -> tuple[bytes, list]:
        """(the batches holding what was acquired, the acquired ranges) for one partition."""
        share = self.share_partition(group_id, topic_id, part, settings)
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
                       for t in part.aborted.overlapping(batches[0].base_offset, batches[-1].next_offset)]
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
        """A member's share session ended or it left the group."""
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

    def forget_group(self, group_id: str) -> None:
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]

    # -- acquisition locks ---------------------------------------------------------------------

    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(self._expire_locks())

    def halt(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.partitions.clear()
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
