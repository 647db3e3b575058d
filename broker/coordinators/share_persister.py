"""The share-state calls one node makes to the share coordinator (Kafka's persister:
DefaultStatePersister over PersisterStateManager): InitializeShareGroupState and
DeleteShareGroupState from the group coordinator, ReadShareGroupState and
WriteShareGroupState from a share-partition's leader, ReadShareGroupStateSummary for
DescribeShareGroupOffsets.

Each is a request from this node to the node leading the key's __share_group_state
partition through the process's network (broker/cluster/network.py): link cuts, delays,
losses, stopped or paused nodes and the request fault rules (client id
``eosbroker-node-N``) act on it. An unreachable coordinator is NETWORK_EXCEPTION, no
answer within the request timeout REQUEST_TIMED_OUT; retriable errors are retried on the
broker's clock after the backoff of coordinator/share/persister_policy.py.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from coordinator.share.persister_policy import retry_after_ms
from coordinator.share.state_log_codec import ShareSnapshot, StateBatch, StateKey
from kio.schema.errors import ErrorCode
from protocol.names import SHARE_KEY_TYPE

log = logging.getLogger(__name__)
E = ErrorCode
INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
_VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0, SUMMARY: 1}


class SharePersister:
    def __init__(self, broker, node) -> None:
        self.broker = broker
        self.node = node
        self.clock = broker.cluster.clock

    # -- the calls ---------------------------------------------------------------------------

    async def initialize(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]], state_epoch: int,
                         start_offset: int = -1) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Each partition's error (E.none when initialized)."""
        keys = [StateKey(group_id, t, p) for t, p in partitions]
        answers = await asyncio.gather(*(self._call(INITIALIZE, key, {
            "partition": key.partition, "state_epoch": state_epoch, "start_offset": start_offset}) for key in keys))
        return {(k.topic_id, k.partition): a[0] for k, a in zip(keys, answers)}

    async def delete(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]]
                     ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        keys = [StateKey(group_id, t, p) for t, p in partitions]
        answers = await asyncio.gather(*(self._call(DELETE, key, {"partition": key.partition}) for key in keys))
        return {(k.topic_id, k.partition): a[0] for k, a in zip(keys, answers)}

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, str | None, ShareSnapshot | None]:
        error, message, p = await self._call(READ, key, {"partition": key.partition, "leader_epoch": leader_epoch})
        if error:
            return error, message, None
        return E.none, None, ShareSnapshot(0, p.state_epoch, leader_epoch, p.start_offset, 0, 0, tuple(
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches))

    async def write(self, key: StateKey, snapshot: ShareSnapshot) -> tuple[ErrorCode, str | None]:
        error, message, _ = await self._call(WRITE, key, {
            "partition": key.partition, "state_epoch": snapshot.state_epoch, "leader_epoch": snapshot.leader_epoch,
            "start_offset": snapshot.start_offset, "delivery_complete_count": snapshot.delivery_complete_count,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in snapshot.state_batches]})
        return error, message

    async def summary(self, key: StateKey) -> tuple[ErrorCode, ShareSnapshot | None]:
        """The share-partition's start offset and epochs (None: never initialized)."""
        error, _, p = await self._call(SUMMARY, key, {"partition": key.partition, "leader_epoch": 0})
        if error or p.start_offset < 0:
            return error, None
        return E.none, ShareSnapshot(0, p.state_epoch, p.leader_epoch, p.start_offset, 0, 0, (),
                                     p.delivery_complete_count)

    # -- sending -----------------------------------------------------------------------------

    async def _call(self, api_key: int, key: StateKey, partition: dict) -> tuple[ErrorCode, str | None, object]:
        """(error, message, the partition's answer) of one share-partition's call, retried
        as Kafka's persister retries it."""
        attempts = 0
        while True:
            attempts += 1
            error, message, answered = await self._send(api_key, key, partition)
            wait_ms = retry_after_ms(error, attempts)
            if wait_ms is None:
                if error:
                    log.warning("%s for %s on node %d failed after %d attempt(s): %s%s", _NAMES[api_key],
                                key.coordinator_key(), self.node.node_id, attempts, error.name.upper(),
                                f" ({message})" if message else "")
                return error, message, answered
            log.info("%s for %s: %s, sent again in %d ms", _NAMES[api_key], key.coordinator_key(),
                     error.name.upper(), wait_ms)
            await self.clock.sleep(wait_ms / 1000)

    async def _send(self, api_key: int, key: StateKey, partition: dict) -> tuple[ErrorCode, str | None, object]:
        target = await self._coordinator_node(key)
        if target is None:
            return E.coordinator_not_available, "The share coordinator is not available.", None
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [partition]}]}
        try:
            response = await self.broker.network.request(self.node.node_id, target, api_key, _VERSIONS[api_key],
                                                         body)
        except asyncio.TimeoutError:
            return E.request_timed_out, f"No answer from node {target}.", None
        except (ConnectionError, OSError) as e:
            return E.network_exception, str(e), None
        for topic in response.results:
            for answered in topic.partitions:
                if topic.topic_id == key.topic_id and answered.partition == key.partition:
                    return E(answered.error_code), answered.error_message, answered
        return E.unknown_server_error, "The answer does not name the share-partition.", None

    async def _coordinator_node(self, key: StateKey) -> int | None:
        """The node leading the key's __share_group_state partition (the topic is created
        on first use), as Kafka's persister finds it in its metadata cache."""
        states = self.node.share_states
        states.ensure_ready()
        await states.ready()
        node = self.broker.coordinator_node(key.coordinator_key(), SHARE_KEY_TYPE)
        return None if node is None else node.node_id


_NAMES = {INITIALIZE: "InitializeShareGroupState", READ: "ReadShareGroupState", WRITE: "WriteShareGroupState",
          DELETE: "DeleteShareGroupState", SUMMARY: "ReadShareGroupStateSummary"}
