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
broker's clock after the backoff of coordinator/share/persister_policy.py, each
share-partition on its own.

As Kafka's persister combines the calls waiting for one coordinator node, the calls of one
API for one group to one node made in the same event-loop turn go as one request (a
group's initialization or deletion of all its share-partitions, the writes of a fetch's
partitions).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.share.persister_policy import retry_after_ms
from coordinator.share.state_log_codec import ShareSnapshot, StateBatch, StateKey
from kio.schema.errors import ErrorCode
from protocol.answer_wire import nested_type, request_type
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
        # (api key, group, coordinator node) -> the share-partitions' calls to send together
        self._gathering: dict[tuple[int, str, int], list[_Waiting]] = {}
        self._sending: set[asyncio.Task] = set()

    # -- the calls ---------------------------------------------------------------------------

    async def initialize(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]], state_epoch: int,
                         start_offset: int = -1) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Each partition's error (E.none when initialized)."""
        keys = [StateKey(group_id, t, p) for t, p in partitions]
        answers = await asyncio.gather(*(self._call(INITIALIZE, key, _partition_type(INITIALIZE)(
            partition=key.partition, state_epoch=state_epoch, start_offset=start_offset)) for key in keys))
        return {(k.topic_id, k.partition): a[0] for k, a in zip(keys, answers)}

    async def delete(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]]
                     ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        keys = [StateKey(group_id, t, p) for t, p in partitions]
        answers = await asyncio.gather(*(self._call(DELETE, key, _partition_type(DELETE)(partition=key.partition))
                                         for key in keys))
        return {(k.topic_id, k.partition): a[0] for k, a in zip(keys, answers)}

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, str | None, ShareSnapshot | None]:
        error, message, p = await self._call(READ, key, _partition_type(READ)(partition=key.partition,
                                                                              leader_epoch=leader_epoch))
        if error:
            return error, message, None
        return E.none, None, ShareSnapshot(0, p.state_epoch, leader_epoch, p.start_offset, 0, 0, tuple(
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches))

    async def write(self, key: StateKey, snapshot: ShareSnapshot) -> tuple[ErrorCode, str | None]:
        partition = _partition_type(WRITE)
        batch = nested_type(partition, "state_batches")
        error, message, _ = await self._call(WRITE, key, partition(
            partition=key.partition, state_epoch=snapshot.state_epoch, leader_epoch=snapshot.leader_epoch,
            start_offset=snapshot.start_offset, delivery_complete_count=snapshot.delivery_complete_count,
            state_batches=tuple(batch(first_offset=b.first_offset, last_offset=b.last_offset,
                                      delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                                for b in snapshot.state_batches)))
        return error, message

    async def summary(self, key: StateKey) -> tuple[ErrorCode, ShareSnapshot | None]:
        """The share-partition's start offset and epochs (None: never initialized)."""
        error, _, p = await self._call(SUMMARY, key, _partition_type(SUMMARY)(partition=key.partition, leader_epoch=0))
        if error or p.start_offset < 0:
            return error, None
        return E.none, ShareSnapshot(0, p.state_epoch, p.leader_epoch, p.start_offset, 0, 0, (),
                                     p.delivery_complete_count)

    # -- sending -----------------------------------------------------------------------------

    async def _call(self, api_key: int, key: StateKey, partition: tuple) -> tuple[ErrorCode, str | None, object]:
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

    async def _send(self, api_key: int, key: StateKey, partition: tuple) -> tuple[ErrorCode, str | None, object]:
        """One share-partition's call, sent with the others for the same group and node
        made in this event-loop turn."""
        target = await self._coordinator_node(key)
        if target is None:
            return E.coordinator_not_available, "The share coordinator is not available.", None
        bucket = (api_key, key.group_id, target)
        gathered = self._gathering.get(bucket)
        if gathered is None or any((w.key.topic_id, w.key.partition) == (key.topic_id, key.partition)
                                   for w in gathered):
            if gathered is not None:  # one share-partition appears once in a request
                self._flush(bucket)
            gathered = self._gathering[bucket] = []
            asyncio.get_running_loop().call_soon(self._flush, bucket, gathered)
        waiting = _Waiting(key, partition, asyncio.get_running_loop().create_future())
        gathered.append(waiting)
        return await waiting.answer

    def _flush(self, bucket: tuple[int, str, int], gathered: list[_Waiting] | None = None) -> None:
        """Sends the calls gathered for ``bucket`` (unless already sent)."""
        if gathered is not None and self._gathering.get(bucket) is not gathered:
            return
        gathered = self._gathering.pop(bucket)
        task = asyncio.ensure_future(self._send_together(bucket, gathered))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_together(self, bucket: tuple[int, str, int], gathered: list[_Waiting]) -> None:
        api_key, group_id, target = bucket
        topics: dict[uuid.UUID, list[tuple]] = {}
        for w in gathered:
            topics.setdefault(w.key.topic_id, []).append(w.partition)
        request = request_type(api_key)
        topic = nested_type(request, "topics")
        body = request(group_id=group_id, topics=tuple(topic(topic_id=t, partitions=tuple(ps))
                                                       for t, ps in topics.items()))
        answers: dict = {}
        failed = (E.unknown_server_error, "The answer does not name the share-partition.", None)
        try:
            response = await self.broker.network.request(self.node.node_id, target, api_key, _VERSIONS[api_key],
                                                         body)
            answers = {(t.topic_id, p.partition): (E(p.error_code), p.error_message, p)
                       for t in response.results for p in t.partitions}
        except asyncio.TimeoutError:
            failed = (E.request_timed_out, f"No answer from node {target}.", None)
        except (ConnectionError, OSError) as e:
            failed = (E.network_exception, str(e), None)
        finally:  # every caller gets an answer, even when this task is cancelled
            for w in gathered:
                if not w.answer.done():
                    w.answer.set_result(answers.get((w.key.topic_id, w.key.partition), failed))

    async def _coordinator_node(self, key: StateKey) -> int | None:
        """The node leading the key's __share_group_state partition (the topic is created
        on first use), as Kafka's persister finds it in its metadata cache."""
        states = self.node.share_states
        states.ensure_ready()
        await states.ready()
        node = self.broker.coordinator_node(key.coordinator_key(), SHARE_KEY_TYPE)
        return None if node is None else node.node_id


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A share-partition's call waiting to be sent with others, and its answer."""

    key: StateKey
    partition: tuple  # the partition's entry, of its API's request_type
    answer: asyncio.Future


def _partition_type(api_key: int) -> type:
    """The type of a share-partition's entry in ``api_key``'s request."""
    return nested_type(nested_type(request_type(api_key), "topics"), "partitions")


_NAMES = {INITIALIZE: "InitializeShareGroupState", READ: "ReadShareGroupState", WRITE: "WriteShareGroupState",
          DELETE: "DeleteShareGroupState", SUMMARY: "ReadShareGroupStateSummary"}
