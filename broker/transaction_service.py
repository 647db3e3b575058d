"""The transaction coordinator in the broker: its runtime over __transaction_state, the
marker sender, and the timers that abort timed-out transactions and expire idle ids."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from broker.cluster import Cluster
from broker.config import BrokerConfig
from broker.coordinator_topic import CoordinatorTopic
from broker.markers import MarkerSender
from coordinator.transaction import log_codec
from coordinator.transaction.coordinator import TransactionConfig, TransactionCoordinator
from coordinator.transaction.messages import ProducerIdTaken, SendMarkers
from protocol.names import TRANSACTION_STATE

log = logging.getLogger(__name__)

TOPIC = TRANSACTION_STATE


class TransactionService:
    def __init__(self, config: BrokerConfig, cluster: Cluster, node_id: int, producer_ids, network) -> None:
        self.config = config
        self.cluster = cluster
        self.clock = cluster.clock
        self.coordinator = TransactionCoordinator(
            TransactionConfig(
                transaction_max_timeout_ms=config["transaction.max.timeout.ms"],
                transaction_state_log_num_partitions=config["transaction.state.log.num.partitions"],
                transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
                offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
            ),
        )
        self.producer_ids = producer_ids
        self.markers = MarkerSender(network, cluster, node_id, self._markers_written)
        self.markers.hold = config["emulate.fault.hold.txn.markers"]
        self._completions: dict[str, asyncio.Event] = {}
        self._hold_s = config["emulate.concurrent.transactions.hold.ms"] / 1000
        self.topic = CoordinatorTopic(
            "transaction coordinator", TOPIC, config["transaction.state.log.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["transaction.state.log.segment.bytes"])},
            self.coordinator, cluster, node_id, self._perform,
        )
        self.topic.load_delay_s = config["emulate.fault.coordinator.load.ms"] / 1000
        self.runtime = self.topic.runtime
        # A partition moving away takes its marker deliveries along: the new leader
        # resends them with its coordinator epoch.
        self.topic.on_unload = lambda p: self.markers.cancel(
            lambda m: self.coordinator.partition_for(m.transactional_id) == p)

    def ensure_ready(self) -> None:
        """Creates and loads __transaction_state on first use: a broker that never sees a
        transaction never pays for its 50 partitions."""
        self.topic.start()

    def _perform(self, effect) -> None:
        if isinstance(effect, SendMarkers):
            self.markers.send(effect)
        elif isinstance(effect, ProducerIdTaken):
            self.producer_ids.taken(effect.producer_id)
        else:
            raise TypeError(f"unknown transaction coordinator effect {effect!r}")

    async def _markers_written(self, m: SendMarkers) -> None:
        """The marker sender's completion: an event for the runtime like any request."""
        coordinator = self.coordinator
        observe = self.cluster.on_transaction_completed
        started_ms = -1
        if observe is not None:  # metrics on: when did the transaction start?
            md = coordinator.transaction_metadata(m.transactional_id)
            started_ms = md.txn_start_timestamp_ms if md is not None and md.state.is_prepare else -1
        now_ms = self.clock.now_ms()
        self.runtime.run(coordinator.partition_for(m.transactional_id), lambda: coordinator.markers_written(
            m.transactional_id, m.producer_id, m.producer_epoch, m.commit, now_ms, m.coordinator_epoch), now_ms)
        if observe is not None and started_ms >= 0:  # was the transaction completed?
            md = self.coordinator.transaction_metadata(m.transactional_id)
            if md is not None and md.state.state_name.startswith("Complete"):
                observe("commit" if m.commit else "abort", max(0, self.clock.now_ms() - started_ms) / 1000)
        completed = self._completions.pop(m.transactional_id, None)
        if completed is not None:
            completed.set()

    async def run(self, transactional_id: str | None, handler):
        """Runs a coordinator handler through the runtime on the id's partition.

        CONCURRENT_TRANSACTIONS is answered at once, as Kafka does. With
        emulate.concurrent.transactions.hold.ms set, that answer is instead held while
        the id's markers are being written (up to that long) and the request is then
        run again: it saves the client's retry back-off, at the price of never
        exercising the client's retry path.
        """
        self.topic.start()
        partition = self.coordinator.partition_for(transactional_id or "")
        response = self.runtime.run(partition, handler, self.clock.now_ms())
        if self._hold_s <= 0 or getattr(response, "error", None) is not ErrorCode.concurrent_transactions:
            return response
        completed = self._completions.setdefault(transactional_id, asyncio.Event())
        if self._markers_pending(transactional_id):
            try:
                await self.clock.wait_for(completed.wait(), self._hold_s)
            except asyncio.TimeoutError:
                return response
        return self.runtime.run(partition, handler, self.clock.now_ms())

    def _markers_pending(self, transactional_id: str) -> bool:
        md = self.coordinator.transaction_metadata(transactional_id)
        return md is not None and md.state.is_prepare and not self.markers.hold

    # -- timers: events for the runtime ------------------------------------------------

    def abort_timed_out(self) -> None:
        now = self.clock.now_ms()
        for _, result in self.runtime.run_timers(
                lambda p: self.coordinator.abort_timed_out_transactions(now, partition=p), now):
            log.info("aborting timed-out transaction %s", log_codec.decode_key(result.records[0].key))

    def expire_ids(self) -> None:
        now = self.clock.now_ms()
        self.runtime.run_timers(lambda p: self.coordinator.expire_transactional_ids(now, partition=p), now)

    async def close(self) -> None:
        self.topic.stop_loading()
        await self.markers.close()
