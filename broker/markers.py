"""The WriteTxnMarkers sender: delivers COMMIT/ABORT markers to each partition's leader
over TCP (also when the leader is this process) and retries until every partition
has acknowledged, as Kafka's TransactionMarkerChannelManager does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable

from broker.client import KafkaConnection
from broker.cluster import Cluster
from coordinator.transaction.messages import SendMarkers

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
VERSION = 1
# Partitions that no longer exist cannot take a marker: Kafka drops those too.
_DONE = {0, 3}  # NONE, UNKNOWN_TOPIC_OR_PARTITION
_RETRY_BACKOFF_S = 0.05


class MarkerSender:
    def __init__(self, cluster: Cluster, on_done: Callable[[SendMarkers], Awaitable[None]]) -> None:
        self.cluster = cluster
        self._on_done = on_done
        self._connections: dict[int, KafkaConnection] = {}
        self._tasks: set[asyncio.Task] = set()
        self.hold = False  # fault injection: leave prepared transactions without markers

    def send(self, markers: SendMarkers) -> None:
        if self.hold:
            log.warning("holding markers for %s (emulate.fault.hold.txn.markers)", markers.transactional_id)
            return
        task = asyncio.get_running_loop().create_task(self._deliver(markers))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, markers: SendMarkers) -> None:
        pending = set(markers.topic_partitions)
        while pending:
            by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for topic, partition in sorted(pending):
                by_leader[self.cluster.leader_of(topic, partition)].append((topic, partition))
            for node_id, partitions in by_leader.items():
                try:
                    acked = await self._write(node_id, markers, partitions)
                except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                    log.info("marker delivery to node %d failed (%s); retrying", node_id, e)
                    self._drop(node_id)
                    continue
                pending -= acked
            if pending:
                await self.cluster.clock.sleep(_RETRY_BACKOFF_S)
        await self._on_done(markers)

    async def _write(self, node_id: int, markers: SendMarkers, partitions: list[tuple[str, int]]) -> set:
        conn = await self._connection(node_id)
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            topics[topic].append(partition)
        response = await conn.request(WRITE_TXN_MARKERS, VERSION, {"markers": [{
            "producer_id": markers.producer_id,
            "producer_epoch": markers.producer_epoch,
            "transaction_result": markers.commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            "coordinator_epoch": markers.coordinator_epoch,
        }]}, timeout=30)
        acked = set()
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    if int(p.error_code) in _DONE:
                        acked.add((topic.name, p.partition_index))
                    else:
                        log.info("marker for %s-%d of %s: %s; retrying", topic.name, p.partition_index,
                                 markers.transactional_id, p.error_code.name)
        return acked

    async def _connection(self, node_id: int) -> KafkaConnection:
        conn = self._connections.get(node_id)
        if conn is None or conn.is_closed:
            node = self.cluster.node(node_id)
            if node is None:
                raise ConnectionError(f"no node {node_id}")
            conn = await KafkaConnection.connect(node.host, node.port, client_id="eosbroker-txn-markers",
                                                clock=self.cluster.clock)
            self._connections[node_id] = conn
        return conn

    def _drop(self, node_id: int) -> None:
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            conn.abort()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()
