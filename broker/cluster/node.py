"""One emulated node: its listener and the coordinators it runs.

Every node of the process shares the partitions' storage, but each has its own view
of what it leads: its transaction and group coordinators load only the coordinator
partitions this node leads, so a request on the wrong node is answered
NOT_COORDINATOR by the coordinator itself, and a node that stops or crashes takes
its coordinators' in-memory state with it (the new leader reloads from the log).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from functools import cached_property

from broker.cluster import PAUSED, RUNNING, STOPPED
from broker.cluster.cluster import NodeRegistration
from broker.wire.server import Server
from protocol.names import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE

log = logging.getLogger(__name__)

# The coordinator services a node makes on first use, each a cached property of the node.
_SERVICES = ("transactions", "groups", "shares", "share_states")
# The coordinator topics a start loads, in this order.
_COORDINATOR_TOPICS = (TRANSACTION_STATE, CONSUMER_OFFSETS, SHARE_GROUP_STATE)


class BrokerNode:
    def __init__(self, broker, info: NodeRegistration, binds, index: int | None = None) -> None:
        """``binds``: its listeners (broker.wire.listeners.Endpoint); ``index``: its place among
        the nodes started together (advertised ports are counted from it), None for one
        added later (advertised on the ports it binds)."""
        self.broker = broker
        self.info = info
        self.node_id = info.node_id
        self.index = index
        # Whether the node runs (paused counts: it is there, only silent); asked by every
        # request its listener or the network hands it, so kept as the state changes.
        self.is_up = info.state != STOPPED
        self.server = Server(broker, self, binds)
        # Cleared while paused: requests are read but not answered.
        self.serving = asyncio.Event()
        self.serving.set()
        # Counts the node's stops: a request from or to an earlier run of the node finds a
        # machine that is gone (broker.cluster.network).
        self.incarnation = 0
        # Other nodes' requests being handled here (broker.cluster.network): abandoned at a stop.
        self.handling: set = set()  # requests from other nodes being handled (cancel() abandons one)
        # The coordinator topics a process start left to start_coordinators, not started yet:
        # the first request that makes one's service starts it (``_made``).
        self._deferred: set[str] = set()

    # The coordinators load on first use (or at start-up when their topic exists), so a
    # broker that never sees a group or a transaction never imports them. Once made, each
    # is a plain attribute of the node: a request's handler reads it without a call.
    @cached_property
    def transactions(self):
        from broker.coordinators.transaction_service import TransactionService

        b = self.broker
        return self._made(TRANSACTION_STATE, TransactionService(
            b.config, b.cluster, self.node_id, b.producer_ids, b.network, self.serving, b.replication))

    @cached_property
    def groups(self):
        from broker.coordinators.group_service import GroupService

        b = self.broker
        groups = GroupService(b.config, b.cluster, self.node_id, self.serving, b.replication)
        groups.share_persister = lambda: self.shares.persister
        groups.coordinator.group_timeouts = self._group_timeouts
        groups.coordinator.share_assignment_interval = self._share_assignment_interval
        groups.coordinator.streams_group_config = self._streams_group_config
        return self._made(CONSUMER_OFFSETS, groups)

    def _group_timeouts(self, group_type: str, group_id: str) -> tuple[int, int]:
        """A share or streams group's session timeout and heartbeat interval (its group configs)."""
        from broker.coordinators.share_service import group_setting

        return (int(group_setting(self.broker, group_id, f"{group_type}.session.timeout.ms")),
                int(group_setting(self.broker, group_id, f"{group_type}.heartbeat.interval.ms")))

    def _share_assignment_interval(self, group_id: str) -> int:
        from broker.coordinators.share_service import group_setting

        return int(group_setting(self.broker, group_id, "share.assignment.interval.ms"))

    def _streams_group_config(self, group_id: str):
        """A streams group's settings with its group configs."""
        from broker.coordinators.share_service import group_setting
        from coordinator.group.group_types import tag_list

        def setting(key: str) -> int:
            return int(group_setting(self.broker, group_id, key))

        return replace(self.groups.coordinator.config.streams,
                       num_standby_replicas=setting("streams.num.standby.replicas"),
                       initial_rebalance_delay_ms=setting("streams.initial.rebalance.delay.ms"),
                       assignment_interval_ms=setting("streams.assignment.interval.ms"),
                       rack_aware_assignment_tags=tag_list(group_setting(
                           self.broker, group_id, "streams.rack.aware.assignment.tags")))

    @cached_property
    def shares(self):
        """The share partitions this node leads and their share sessions."""
        from broker.coordinators.share_service import ShareService

        shares = ShareService(self.broker, self)
        shares.start()
        return shares

    @cached_property
    def share_states(self):
        """The share coordinator: share-partition state in __share_group_state."""
        from broker.coordinators.share_state_service import ShareStateService

        return self._made(SHARE_GROUP_STATE,
                          ShareStateService(self.broker.config, self.broker.cluster, self.node_id, self.serving))

    def _made(self, topic: str, service):
        """A coordinator service just made: if the start left its topic to
        start_coordinators, it starts now (a request then finds its partitions loading)."""
        if topic in self._deferred:
            self._deferred.discard(topic)
            service.ensure_ready()
        return service

    def made(self, service: str):
        """The coordinator service named ``service`` (one of ``_SERVICES``) if this node
        has made it since it started, else None."""
        return self.__dict__.get(service)

    def coordinator_service(self, topic: str, create: bool = True):
        name = {SHARE_GROUP_STATE: "share_states", TRANSACTION_STATE: "transactions"}.get(topic, "groups")
        return getattr(self, name) if create else self.made(name)

    async def start(self, coordinators: bool = True) -> None:
        """Listens; with ``coordinators``, starts loading the coordinator topics that exist,
        else leaves them to ``start_coordinators`` (a process start)."""
        await self.server.start()
        plan = self.broker.listeners
        self.info.endpoints = plan.advertised_for(self.index, self.server.bound_ports)
        self.info.host, self.info.port = self.info.endpoints.get(
            plan.inter_broker, (self.server.host, self.server.port))
        self._enter(RUNNING)
        self.serving.set()
        existing = [t for t in _COORDINATOR_TOPICS if t in self.broker.cluster.topics.by_name]
        if coordinators:
            for topic in existing:
                self.coordinator_service(topic).ensure_ready()
        else:
            self._deferred = set(existing)

    async def start_coordinators(self) -> None:
        """The coordinator topics ``start`` left, each started in a loop turn of its own
        (its service's imports, the leaderships read, its loads begun), unless a request
        has started it already."""
        for topic in _COORDINATOR_TOPICS:
            await asyncio.sleep(0)
            if topic in self._deferred and topic in self.broker.cluster.topics.by_name:  # not deleted meanwhile
                self.coordinator_service(topic)  # made, so started (``_made``)

    def halt(self, crash: bool = False) -> None:
        """The instant a node stops or dies, in one event-loop turn: nothing of it runs
        after this returns. Its listener and every connection close (``crash``: reset),
        requests being handled are abandoned unanswered, marker deliveries end and the
        coordinators' in-memory state is dropped (the log keeps what was appended), all
        before its partitions get new leaders: a handler of this node never sees them
        move, and so never writes after they have."""
        self._enter(STOPPED)
        self.incarnation += 1
        self._deferred = set()  # a start loads them again
        self.serving.set()  # parked requests wake only to find their connections gone
        self.server.halt(abort=crash)
        for handling in self.handling:
            handling.cancel()
        self.handling.clear()
        for service in [self.made(name) for name in _SERVICES]:
            if service is not None:
                service.halt()
        for name in _SERVICES:
            self.__dict__.pop(name, None)

    async def stop(self, crash: bool = False) -> None:
        """``halt``, then waits for what it cancelled to end, so nothing touches the logs
        after the broker closes them."""
        self.halt(crash)
        await self.server.stop(abort=crash)

    def pause(self) -> None:
        self._enter(PAUSED)
        self.serving.clear()

    def resume(self) -> None:
        self._enter(RUNNING)
        self.serving.set()

    def _enter(self, state: str) -> None:
        self.info.state = state
        self.is_up = state != STOPPED

    # -- coordinator partitions moving in and out ---------------------------------------

    def coordinator_partition_moved(self, topic: str, index: int, leader_epoch: int, leads: bool) -> None:
        """This node gained (``leads``) or lost a coordinator partition: load it with the
        new coordinator epoch, or drop it."""
        service = self.coordinator_service(topic, create=leads)
        if service is None:
            return
        if leads:
            service.topic.load_partition(index, leader_epoch)
        else:
            service.topic.unload_partition(index)
