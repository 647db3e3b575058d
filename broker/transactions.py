"""The transaction coordinator in the broker: its runtime over __transaction_state, the
marker sender, and the timers that abort timed-out transactions and expire idle ids."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from broker.cluster import Cluster, now_ms
from broker.config import BrokerConfig
from broker.coordinator_runtime import CoordinatorRuntime
from broker.markers import MarkerSender
from coordinator.transaction import log_codec
from coordinator.transaction.coordinator import TransactionConfig, TransactionCoordinator
from coordinator.transaction.messages import SendMarkers

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
# What a producer gets when verification fails (TRANSACTION_ABORTABLE is newer than
# the clients we serve); coordinator trouble is retriable for a producer.
MARKER_WAIT_S = 1.0
_PRODUCE_VERIFY_ERRORS = {
    ErrorCode.producer_fenced: "INVALID_PRODUCER_EPOCH",
    ErrorCode.invalid_producer_epoch: "INVALID_PRODUCER_EPOCH",
    ErrorCode.coordinator_load_in_progress: "NOT_ENOUGH_REPLICAS",
    ErrorCode.not_coordinator: "NOT_ENOUGH_REPLICAS",
    ErrorCode.concurrent_transactions: "NOT_ENOUGH_REPLICAS",
}


class TransactionService:
    def __init__(self, config: BrokerConfig, cluster: Cluster, node_id: int, producer_ids, network) -> None:
        self.config = config
        self.coordinator = TransactionCoordinator(
            TransactionConfig(
                transaction_max_timeout_ms=config["transaction.max.timeout.ms"],
                transaction_state_log_num_partitions=config["transaction.state.log.num.partitions"],
                transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
                offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
            ),
            producer_ids,
        )
        self.markers = MarkerSender(network, cluster, node_id, self._markers_written)
        self.markers.hold = config["emulate.fault.hold.txn.markers"]
        self._completions: dict[str, asyncio.Event] = {}
        self.runtime = CoordinatorRuntime(
            "transaction coordinator", TOPIC, config["transaction.state.log.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": str(config["transaction.state.log.segment.bytes"])},
            self.coordinator, cluster, node_id, self._perform,
        )
        # A partition moving away takes its marker deliveries along: the new leader
        # resends them with its coordinator epoch.
        self.runtime.on_unload = lambda p: self.markers.cancel(
            lambda m: self.coordinator.partition_for(m.transactional_id) == p)

    def ensure_ready(self) -> None:
        """Creates and loads __transaction_state on first use: a broker that never sees a
        transaction never pays for its 50 partitions."""
        self.runtime.start()

    def _perform(self, effect) -> None:
        if isinstance(effect, SendMarkers):
            self.markers.send(effect)
        else:
            raise TypeError(f"unknown transaction coordinator effect {effect!r}")

    async def _markers_written(self, m: SendMarkers) -> None:
        partition = self.coordinator.partition_for(m.transactional_id)
        await self.runtime.run(partition, lambda: self.coordinator.markers_written(
            m.transactional_id, m.producer_id, m.producer_epoch, m.commit, now_ms(), m.coordinator_epoch))
        completed = self._completions.pop(m.transactional_id, None)
        if completed is not None:
            completed.set()

    async def run(self, transactional_id: str | None, handler):
        """Runs a coordinator handler under the lock of the id's partition.

        An answer of CONCURRENT_TRANSACTIONS while the id's markers are being written
        is held until they are (at most MARKER_WAIT_S) and the request is then run
        again: the client would retry anyway, and librdkafka and the Java client back
        off 20 ms or more before they do, which is most of a commit's latency.
        """
        self.runtime.start()
        partition = self.coordinator.partition_for(transactional_id or "")
        response = await self.runtime.run(partition, handler)
        if getattr(response, "error", None) is not ErrorCode.concurrent_transactions:
            return response
        completed = self._completions.setdefault(transactional_id, asyncio.Event())
        if self._markers_pending(transactional_id):
            try:
                await asyncio.wait_for(completed.wait(), MARKER_WAIT_S)
            except asyncio.TimeoutError:
                return response
        return await self.runtime.run(partition, handler)

    def _markers_pending(self, transactional_id: str) -> bool:
        md = self.coordinator.transaction_metadata(transactional_id)
        return md is not None and md.state.is_prepare and not self.markers.hold

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       topic: str, partition: int) -> str | None:
        """KIP-890 verification of a transaction's first batch on a partition: the
        coordinator must list the partition in the producer's ongoing transaction.
        Returns the error a producer gets, or None."""
        if transactional_id is None:
            return "INVALID_TXN_STATE"
        self.ensure_ready()
        errors = self.coordinator.verify_partitions_in_txn(
            transactional_id, producer_id, producer_epoch, [(topic, partition)]).response.errors
        error = errors.get((topic, partition), ErrorCode.none)
        if error is ErrorCode.none:
            return None
        return _PRODUCE_VERIFY_ERRORS.get(error, "INVALID_TXN_STATE")

    # -- timers ------------------------------------------------------------------------
    async def abort_timed_out(self) -> None:
        for p, result in await self._run_timer(self.coordinator.abort_timed_out_transactions):
            log.info("aborting timed-out transaction %s", log_codec.decode_key(result.records[0].key))
            for effect in result.effects:
                self._perform(effect)

    async def expire_ids(self) -> None:
        await self._run_timer(self.coordinator.expire_transactional_ids)

    async def _run_timer(self, handler) -> list[tuple[int, object]]:
        """Runs a timer handler partition by partition, each under its lock, and appends
        its records; returns the results so the caller can act on their effects."""
        done = []
        for p in sorted(self.coordinator.owned_partitions()):
            async with self.runtime.lock(p):
                results = handler(now_ms(), partition=p)
                for r in results:
                    self.runtime.append(p, r.records)
            done += [(p, r) for r in results]
        return done

    async def close(self) -> None:
        self.runtime.stop_loading()
        await self.markers.close()

