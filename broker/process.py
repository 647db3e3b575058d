"""The broker process: settings, cluster state, listeners and background duties."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

from broker.security.acls import Authorizer
from broker.clock import SYSTEM_CLOCK, Clock
from broker.cluster import PAUSED, RUNNING
from broker.cluster.cluster import Cluster, NodeRegistration
from broker.config import BrokerConfig
from broker.cluster.dynamic_configs import DynamicConfigs
from broker.wire.server import HANDLERS
from broker.cluster.producer_ids import ProducerIdAllocator
from broker.faults.requests import FaultRules
from broker.cluster.replication import Replication
from broker.cluster.network import Network
from broker.cluster.node import BrokerNode
from broker.security.scram_credentials import ScramCredentials
from broker.log.data_dir_lock import DataDirLock
from broker.timers import every

from coordinator.partitioning import partition_for
from protocol.request_wire import ApiTable
from protocol.names import (
    CONSUMER_OFFSETS, GROUP_KEY_TYPE, SHARE_GROUP_STATE, SHARE_KEY_TYPE, TRANSACTION_KEY_TYPE, TRANSACTION_STATE,
)

log = logging.getLogger(__name__)

_COORDINATOR_TOPICS = {
    GROUP_KEY_TYPE: (CONSUMER_OFFSETS, "offsets.topic.num.partitions"),
    TRANSACTION_KEY_TYPE: (TRANSACTION_STATE, "transaction.state.log.num.partitions"),
    SHARE_KEY_TYPE: (SHARE_GROUP_STATE, "share.coordinator.state.topic.num.partitions"),
}
_COORDINATOR_TOPIC_NAMES = frozenset(topic for topic, _ in _COORDINATOR_TOPICS.values())


class Broker:
    """The process: settings, shared storage, the nodes, the network between them."""

    def __init__(self, config: BrokerConfig, data_dir: Path, host: str = "127.0.0.1", port: int = 9092,
                 clock: Clock = SYSTEM_CLOCK, history: bool = False, listening=None) -> None:
        """``history``: keep the event history from the start, for a control API to serve
        (its timeline, ``GET /events``); without one nothing could read it, so none is kept.
        ``listening``: sockets already listening (``broker.wire.listeners.listen_early``),
        which the nodes' first start serves instead of binding their own; ``start``
        closes those no node took."""
        self._early_sockets = listening or {}
        self.config = config
        self.clock = clock
        self.data_dir = Path(data_dir)
        self.data_dir_lock = DataDirLock(self.data_dir).acquire()  # before anything reads the files
        level = config["emulate.transaction.version"]
        self.apis = ApiTable(set(HANDLERS), config["emulate.kafka.version"], None if level < 0 else level)
        meta = self.data_dir / "meta"
        self.dynamic_configs = DynamicConfigs(meta, config)  # before any log config is computed
        self.authorizer = Authorizer(meta, bool(config["authorizer.class.name"]), config["super.users"],
                                     config["allow.everyone.if.no.acl.found"])
        self.scram_credentials = ScramCredentials(meta)
        self.cluster = Cluster(config, self.data_dir, clock, config["emulate.event.history.size"] if history else 0)
        self._cleaner = None
        self.producer_ids = ProducerIdAllocator(self.data_dir / "meta" / "producer-id-block")
        self.host = host
        self.network = Network(self)
        self._transaction_verifier = None
        self.faults = FaultRules()
        history = self.cluster.history
        self.faults.on_fire = lambda rule, seen: history.record(
            "fault", rule_id=rule.id, action=rule.action, node=seen.node_id, request=seen.describe())
        # The loaded scenario (broker.faults.scenarios) and its triggers, consulted per request.
        self.scenario = None
        self.triggers = None
        self.replication = Replication(self)
        # Each listener on consecutive ports; port 0 lets every node pick free ones.
        self.listeners = config.listener_plan(host, port)
        self.tls = config.tls_listeners(self.listeners)  # TLS contexts of the SSL listeners, by name
        # SASL set-up of each SASL listener, by name (broker.security.sasl_settings.ListenerSasl)
        self.sasl_listeners = config.sasl_listeners(self.listeners, self.scram_credentials)
        self.nodes = [BrokerNode(self, info, self.listeners.binds(i), i) for i, info in enumerate(self.cluster.nodes)]
        for node in self.nodes:
            self.network.join(node)
        self.cluster.replicas.listeners.append(self._leader_changed)
        self._tasks: list[asyncio.Task] = []
        # Told of every answered request (api key, version, seconds, bytes in, bytes out,
        # response): the admin server's /metrics sets it.
        self.request_observer = None
        # Told of each SASL login's end (listener, mechanism, principal or None when it
        # failed, whether it re-authenticated): the admin server's /metrics sets it.
        self.authentication_observer = None
        # Told of each node that starts listening after start-up (the CLI prints its line).
        self.node_listening = None
        # Paused nodes' session timers: a node that stops heartbeating is fenced.
        self._session_timers: dict[int, object] = {}

    def early_socket(self, bind):  # -> socket.socket | None
        """A socket listening since before the broker was made for a node's listener
        ``bind`` (taken once), or None."""
        sockets = self._early_sockets.get((bind.name, bind.host, bind.port))
        return sockets.pop(0) if sockets else None

    def _close_early_sockets(self) -> None:
        from broker.wire.listeners import close_sockets

        close_sockets(self._early_sockets)
        self._early_sockets = {}

    def node(self, node_id: int) -> BrokerNode | None:
        return self.network.hosts.get(node_id)

    @property
    def port(self) -> int:
        return self.nodes[0].server.port

    async def start(self) -> None:
        from broker.log.descriptors import POOL, capacity_for, raise_descriptor_limit

        POOL.resize(capacity_for(self.config["log.open.files.max"], raise_descriptor_limit()))
        log.info("storage files kept open: at most %d (log.open.files.max)", POOL.capacity)
        self.cluster.open_all()
        try:
            for node in self.nodes:
                await node.start(coordinators=False)
        finally:
            self._close_early_sockets()
        self._tasks.append(asyncio.create_task(self._background_start()))
        self._tasks.append(asyncio.create_task(every(self.clock, self.config["log.retention.check.interval.ms"], self._retention)))
        self._tasks.append(asyncio.create_task(every(self.clock, self.config["log.cleaner.backoff.ms"], self._clean_logs)))
        self._tasks.append(asyncio.create_task(every(
            self.clock, self.config["log.flush.offset.checkpoint.interval.ms"], self.cluster.checkpoint_recovery_points)))
        self._tasks.append(asyncio.create_task(
            every(self.clock, self.config["producer.id.expiration.check.interval.ms"], self._expire_producers)))
        idle_ms = self.config["connections.max.idle.ms"]
        if idle_ms > 0:
            self._tasks.append(asyncio.create_task(every(self.clock, min(idle_ms / 4, 10_000), lambda: self._close_idle(idle_ms))))
        if len(self.nodes) > 1 and self.config["auto.leader.rebalance.enable"]:
            self._tasks.append(asyncio.create_task(every(
                self.clock, self.config["leader.imbalance.check.interval.seconds"] * 1000, self.cluster.replicas.elect_preferred)))

    async def _background_start(self) -> None:
        """What a start leaves to the background: the coordinator topics' loads, then,
        after an unclean shutdown, validating the partitions no request opened, each step
        in a loop turn of its own, so the requests that arrive meanwhile are answered
        between them. A request that needs a coordinator meanwhile starts its topic itself
        (BrokerNode._made)."""
        await asyncio.sleep(0)  # the listeners' first turn: clients waiting in the backlog come first
        for node in self.nodes:
            await node.start_coordinators()
        if not self.cluster.clean_start:
            await self.cluster.open_remaining()

    def coordinator_partition(self, key: str, key_type: int) -> int:
        return partition_for(key, self.config[_COORDINATOR_TOPICS[key_type][1]])

    def coordinator_node(self, key: str, key_type: int):
        """The node leading the coordinator partition of a group (0), transactional id (1) or
        share-partition (2)."""
        topic = _COORDINATOR_TOPICS[key_type][0]
        partition = self.coordinator_partition(key, key_type)
        if topic not in self.cluster.topics.by_name:  # the leader its partition will get
            return self.cluster.node(self.cluster.replicas.first_leader(partition))
        return self.cluster.node(self.cluster.leader_of(topic, partition))

    @property
    def transaction_verifier(self):
        """KIP-890 verification from a partition leader's node to the coordinator's
        (broker/coordinators/txn_verification.py); loads with the first transaction."""
        if self._transaction_verifier is None:
            from broker.coordinators.txn_verification import TransactionVerifier

            self._transaction_verifier = TransactionVerifier(self)
        return self._transaction_verifier

    def start_coordinators(self, topic: str) -> None:
        """Starts the coordinator of ``topic`` on every node that is up, so each loads the
        partitions it leads before its first request arrives."""
        for node in self.nodes:
            if node.is_up:
                node.coordinator_service(topic).ensure_ready()

    def _leader_changed(self, topic: str, index: int, before: int, state) -> None:
        part = self.cluster.partitions.get((topic, index))  # one not opened yet gets the epoch at open
        if part is not None:
            part.set_leader_epoch(state.leader_epoch)
        if topic not in _COORDINATOR_TOPIC_NAMES:
            return
        if before is not None and before >= 0 and before != state.leader:  # a move, not a first election
            self.cluster.history.record("coordinator", topic=topic, partition=index, node_from=before,
                                        node_to=state.leader, coordinator_epoch=state.leader_epoch)
        old, new = self.node(before), self.node(state.leader)
        if old is not None:  # a stopped node has nothing loaded: no-op there
            old.coordinator_partition_moved(topic, index, state.leader_epoch, leads=False)
        if new is not None:
            new.coordinator_partition_moved(topic, index, state.leader_epoch, leads=True)

    # -- what can happen to a node (the control service's node operations) -------------

    async def stop_node(self, node_id: int, crash: bool = False) -> list[tuple[str, int]]:
        """Stops (or, with ``crash``, kills) a node: its partitions fail over to the next
        ISR member with a new leader epoch, its coordinator partitions are loaded by
        their new leaders, its listener and connections close. Returns the partitions
        whose leader changed.

        The node falls silent first, in the same event-loop turn as the failover: its
        connections close and its requests in flight are abandoned unanswered, its
        coordinators' state is dropped, and only then do its partitions move. So no
        handler of the node runs once another node leads what it led."""
        node = self.node(node_id)
        self._end_session_timer(node_id)
        node.info.fenced = False
        self.cluster.history.record("node", node=node_id, change="killed" if crash else "stopped")
        node.halt(crash=crash)
        moved = self.cluster.replicas.node_down(node_id)
        await node.stop(crash=crash)
        return moved

    async def start_node(self, node_id: int) -> list[tuple[str, int]]:
        """Starts a stopped node on its old port: it rejoins the ISR of its replicas
        (storage is shared, so it is caught up) and leads partitions that had none."""
        node = self.node(node_id)
        self._end_session_timer(node_id)
        node.info.fenced = False
        self.cluster.history.record("node", node=node_id, change="started")
        await node.start()
        return self.cluster.replicas.node_up(node_id)

    def pause_node(self, node_id: int) -> None:
        """A hung node: requests are read, not answered. Like a broker that stops
        heartbeating, it is fenced after ``broker.session.timeout.ms`` of the broker's
        clock: it leaves every ISR and its leaderships and coordinators move (it stays
        paused, off Metadata's broker list, until resumed)."""
        node = self.node(node_id)
        self.cluster.history.record("node", node=node_id, change="paused")
        node.pause()
        if node_id not in self._session_timers:
            self._session_timers[node_id] = self.clock.call_later(
                self.config["broker.session.timeout.ms"] / 1000, lambda: self._fence(node_id))

    def resume_node(self, node_id: int) -> list[tuple[str, int]]:
        """A paused node answers again; fenced meanwhile, it rejoins the ISRs first (its
        parked requests then meet the leaders and coordinators as they are now)."""
        node = self.node(node_id)
        self._end_session_timer(node_id)
        self.cluster.history.record("node", node=node_id, change="resumed")
        moved = []
        if node.info.fenced:
            node.info.fenced = False
            moved = self.cluster.replicas.node_up(node_id)
            log.info("node %d resumed: unfenced, back in the ISR of its replicas", node_id)
        node.resume()
        return moved

    def _fence(self, node_id: int) -> None:
        self._session_timers.pop(node_id, None)
        node = self.node(node_id)
        if node is None or node.info.state != PAUSED:
            return
        node.info.fenced = True
        moved = self.cluster.replicas.node_down(node_id)
        log.warning("node %d answered nothing for broker.session.timeout.ms (%d ms): fenced; %d partitions got a "
                    "new leader", node_id, self.config["broker.session.timeout.ms"], len(moved))

    def _end_session_timer(self, node_id: int) -> None:
        timer = self._session_timers.pop(node_id, None)
        if timer is not None:
            timer.cancel()

    async def add_node(self, node_id: int | None = None, port: int = 0) -> BrokerNode:
        """A new node with its own listener; Metadata lists it at once. It holds no
        partition until one is moved to it or a new topic is spread over it."""
        if node_id is None:
            node_id = max(n.node_id for n in self.cluster.nodes) + 1
        info = NodeRegistration(node_id, "", 0)
        binds = [replace(e, port=port if i == 0 else 0) for i, e in enumerate(self.listeners.served)]
        node = BrokerNode(self, info, binds)
        await node.start()  # before it is registered: a port in use leaves no trace
        self.cluster.nodes.append(info)
        self.nodes.append(node)
        self.network.join(node)
        self.cluster.replicas.add_node(node_id)
        if self.node_listening is not None:
            self.node_listening(node)
        return node

    async def remove_node(self, node_id: int, plan: dict) -> list[tuple[str, int]]:
        """Moves a node's replicas, leaderships and coordinators by ``plan``
        (``ReplicaState.plan_removal``), then stops it and forgets it."""
        node = self.node(node_id)
        self._end_session_timer(node_id)
        moved = self.cluster.replicas.remove_node(node_id, plan)
        if node.is_up:
            await node.stop()
        self.nodes.remove(node)
        self.cluster.nodes.remove(node.info)
        self.network.forget(node_id)
        return moved

    async def stop(self) -> None:
        for node_id in list(self._session_timers):
            self._end_session_timer(node_id)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._transaction_verifier is not None:
            await self._transaction_verifier.close()
        await self.replication.close()
        for node in self.nodes:
            if node.is_up:
                await node.stop()
        await self.cluster.wait_for_file_threads()
        self.cluster.close()
        self.data_dir_lock.release()


    async def _retention(self) -> None:
        t = self.clock.now_ms()
        async for part in self.cluster.partitions_with_data(lambda cfg: cfg.deletes):
            deleted = part.log.enforce_retention(t)
            if deleted:
                part.log_start_moved()
                log.info("retention deleted %d segments of %s-%d", deleted, part.topic, part.index)

    async def _clean_logs(self) -> None:
        compacted = [(f"{p.topic}-{p.index}", p.log)
                     async for p in self.cluster.partitions_with_data(lambda cfg: cfg.compacts)]
        if not compacted:
            return
        if self._cleaner is None:
            from broker.log.cleaner import LogCleaner  # only brokers with compacted topics need it

            self._cleaner = LogCleaner(producer_expiration_ms=self.config["producer.id.expiration.ms"])
        await self._cleaner.run_once(compacted, self.clock.now_ms())

    def _expire_producers(self) -> None:
        t = self.clock.now_ms()
        expiration = self.config["producer.id.expiration.ms"]
        for part in list(self.cluster.partitions.values()):
            expired = part.producer_state.remove_expired(t, expiration)
            if expired:
                log.info("expired %d idle producers of %s-%d", len(expired), part.topic, part.index)

    # A paused node is a hung machine: its own timers do not run either (its coordinators'
    # wait for it in broker/coordinators/coordinator_topic.py; they act again when it
    # resumes, or their partitions move when it is fenced).
    def _close_idle(self, idle_ms: int) -> None:
        for node in self.nodes:
            if node.info.state == RUNNING:
                node.server.close_idle(idle_ms / 1000)
