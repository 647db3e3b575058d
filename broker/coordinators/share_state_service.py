"""The share coordinator in the broker: its runtime over __share_group_state, where the
share-partition leaders keep their state (Kafka's share coordinator and persister).

The leader of a share-partition reads its snapshot when the share-partition starts and
writes one whenever records are acknowledged, released or their locks end (acquisitions
are not written, as on Kafka: after a failover, records acquired then are available
again). Calls go to the service of the node leading the key's __share_group_state
partition, in process.
"""

from __future__ import annotations

import asyncio
import logging

from broker.cluster.cluster import Cluster
from broker.config import BrokerConfig
from broker.coordinators.coordinator_topic import CoordinatorTopic
from coordinator.runtime import CoordinatorRefused
from coordinator.share.coordinator import ShareCoordinator, StateAnswer
from protocol.names import SHARE_GROUP_STATE

log = logging.getLogger(__name__)


class ShareStateService:
    def __init__(self, config: BrokerConfig, cluster: Cluster, node_id: int,
                 serving: asyncio.Event | None = None) -> None:
        self.cluster = cluster
        self.clock = cluster.clock
        partitions = config["share.coordinator.state.topic.num.partitions"]
        self.coordinator = ShareCoordinator(partitions)
        self.topic = CoordinatorTopic(
            "share coordinator", SHARE_GROUP_STATE, partitions,
            {"cleanup.policy": "compact",
             "segment.bytes": str(config["share.coordinator.state.topic.segment.bytes"])},
            self.coordinator, cluster, node_id, self._perform)
        self.topic.serving = serving
        self.runtime = self.topic.runtime

    def ensure_ready(self) -> None:
        self.topic.start()

    async def ready(self) -> None:
        await self.topic.started()

    def halt(self) -> None:
        self.topic.halt()

    def run(self, key, handler):
        """Runs a handler through the runtime on the key's partition, now; a partition
        not served here is answered the runtime's refusal (NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS)."""
        try:
            return self.runtime.run(self.coordinator.partition_for(key), handler, self.clock.now_ms())
        except CoordinatorRefused as refused:
            return StateAnswer(refused.error)

    @staticmethod
    def _perform(effect) -> None:
        raise TypeError(f"unknown share coordinator effect {effect!r}")
