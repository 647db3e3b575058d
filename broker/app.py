"""The broker process: settings, cluster state, listeners and background duties."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from broker.clock import SYSTEM_CLOCK, Clock
from broker.cluster import Cluster, Node
from broker.config import BrokerConfig
from broker.handlers import HANDLERS
from broker.producer_ids import ProducerIdAllocator
from broker.server import Server
from broker.timers import every
from coordinator.partitioning import partition_for
from protocol.apis import ApiTable
from protocol.names import CONSUMER_OFFSETS, GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, TRANSACTION_STATE

log = logging.getLogger(__name__)

_COORDINATOR_TOPICS = {
    GROUP_KEY_TYPE: (CONSUMER_OFFSETS, "offsets.topic.num.partitions"),
    TRANSACTION_KEY_TYPE: (TRANSACTION_STATE, "transaction.state.log.num.partitions"),
}


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: Path, host: str = "127.0.0.1", port: int = 9092,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.apis = ApiTable(set(HANDLERS), config["emulate.kafka.version"])
        self.cluster = Cluster(config, self.data_dir, clock)
        self._cleaner = None
        self.producer_ids = ProducerIdAllocator(self.data_dir / "meta" / "producer-id-block")
        self.host = host
        self.servers = [Server(self, config["node.id"], host, port)]
        self._tasks: list[asyncio.Task] = []
        self._transactions = None
        self._groups = None

    # The coordinators load on first use (or at start-up when their topic exists), so
    # a broker that never sees a group or a transaction never imports them.
    @property
    def transactions(self):
        if self._transactions is None:
            from broker.transaction_service import TransactionService

            self._transactions = TransactionService(self.config, self.cluster, self.servers[0].node_id,
                                                    self.producer_ids)
        return self._transactions

    @property
    def groups(self):
        if self._groups is None:
            from broker.group_service import GroupService

            self._groups = GroupService(self.config, self.cluster, self.servers[0].node_id)
            self._tasks.append(asyncio.create_task(self._groups.run_timers()))
        return self._groups

    @property
    def port(self) -> int:
        return self.servers[0].port

    async def start(self) -> None:
        self.cluster.open_all()
        for server in self.servers:
            await server.start()
        self.cluster.nodes = [Node(s.node_id, self.host, s.port) for s in self.servers]
        topics = self.cluster.topics.by_name
        if TRANSACTION_STATE in topics:
            self.transactions.ensure_ready()
        if CONSUMER_OFFSETS in topics:
            self.groups.ensure_ready()
        self._tasks.append(asyncio.create_task(every(
            self.clock, self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"], self._abort_timed_out)))
        self._tasks.append(asyncio.create_task(every(
            self.clock, self.config["transaction.remove.expired.transaction.cleanup.interval.ms"], self._expire_transactional_ids)))
        self._tasks.append(asyncio.create_task(every(self.clock, self.config["log.retention.check.interval.ms"], self._retention)))
        self._tasks.append(asyncio.create_task(every(self.clock, self.config["log.cleaner.backoff.ms"], self._clean_logs)))
        self._tasks.append(asyncio.create_task(
            every(self.clock, self.config["producer.id.expiration.check.interval.ms"], self._expire_producers)))
        idle_ms = self.config["connections.max.idle.ms"]
        if idle_ms > 0:
            self._tasks.append(asyncio.create_task(every(self.clock, min(idle_ms / 4, 10_000), lambda: self._close_idle(idle_ms))))

    def coordinator_node(self, key: str, key_type: int):
        """The node leading the coordinator partition of a group (0) or transactional id (1)."""
        topic, setting = _COORDINATOR_TOPICS[key_type]
        partition = partition_for(key, self.config[setting])
        return self.cluster.node(self.cluster.leader_of(topic, partition))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._transactions is not None:
            await self._transactions.close()
        if self._groups is not None:
            await self._groups.close()
        for server in self.servers:
            await server.stop()
        self.cluster.close()

    def _abort_timed_out(self) -> None:
        if self._transactions is not None:
            self._transactions.abort_timed_out()

    def _expire_transactional_ids(self) -> None:
        if self._transactions is not None:
            self._transactions.expire_ids()

    def _retention(self) -> None:
        t = self.clock.now_ms()
        for part in list(self.cluster.partitions.values()):
            if "delete" in part.log.config.cleanup_policy:
                deleted = part.log.enforce_retention(t)
                if deleted:
                    part.log_start_moved()
                    log.info("retention deleted %d segments of %s-%d", deleted, part.topic, part.index)

    async def _clean_logs(self) -> None:
        compacted = [(f"{p.topic}-{p.index}", p.log) for p in self.cluster.partitions.values()
                     if "compact" in p.log.config.cleanup_policy]
        if not compacted:
            return
        if self._cleaner is None:
            from broker.storage.cleaner import LogCleaner  # only brokers with compacted topics need it

            self._cleaner = LogCleaner(producer_expiration_ms=self.config["producer.id.expiration.ms"])
        await self._cleaner.run_once(compacted, self.clock.now_ms())

    def _expire_producers(self) -> None:
        t = self.clock.now_ms()
        expiration = self.config["producer.id.expiration.ms"]
        for part in list(self.cluster.partitions.values()):
            expired = part.producer_state.remove_expired(t, expiration)
            if expired:
                log.info("expired %d idle producers of %s-%d", len(expired), part.topic, part.index)

    def _close_idle(self, idle_ms: int) -> None:
        for server in self.servers:
            server.close_idle(idle_ms / 1000)
