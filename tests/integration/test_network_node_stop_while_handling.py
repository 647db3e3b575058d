"""A request between nodes whose handler is waiting when its target node stops: the
sender sees Unreachable (the connection going), and its own task goes on uncancelled."""

from __future__ import annotations

import asyncio

import pytest

from broker.cluster.network import Unreachable
from broker.config import BrokerConfig
from broker.process import Broker
from protocol.answer_wire import request_type

FETCH = 1


def _long_poll(topic: str):
    """A Fetch at the log end that waits up to a minute for a byte."""
    fetch = request_type(FETCH)
    return fetch(replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                 topics=(fetch.FetchTopic(topic=topic, topic_id=None, partitions=(fetch.FetchPartition(
                     partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                     log_start_offset=-1, partition_max_bytes=1 << 20),)),))


async def _fetch_waiting_on_the_leader(tmp_path):
    """Two nodes; one sends the other, leader of an empty partition, a long-polling Fetch."""
    broker = Broker(BrokerConfig({"node.count": 2}), tmp_path, "127.0.0.1", 0)
    await broker.start()
    broker.cluster.create_topic("waited-on", 1, 1)
    leader = broker.cluster.leader_of("waited-on", 0)
    sender = 1 if leader == 2 else 2
    fetch = asyncio.ensure_future(broker.network.request(sender, leader, FETCH, 12, _long_poll("waited-on")))
    return broker, leader, fetch


async def test_a_node_stopping_abandons_the_request_it_is_handling(tmp_path):
    broker, leader, fetch = await _fetch_waiting_on_the_leader(tmp_path)
    try:
        for _ in range(10):  # until its handler waits on the leader
            await asyncio.sleep(0)
        assert not fetch.done() and broker.node(leader).handling
        await broker.stop_node(leader)
        with pytest.raises(Unreachable, match=f"node {leader} stopped"):
            await fetch
        assert not broker.node(leader).handling
        assert fetch.cancelling() == 0  # the node's cancel was taken back: the sender's task goes on
    finally:
        await broker.stop()


async def test_the_sender_cancelled_meanwhile_stays_cancelled(tmp_path):
    """A cancel of the sender's own (its caller giving up) is not taken for the node's."""
    broker, leader, fetch = await _fetch_waiting_on_the_leader(tmp_path)
    try:
        for _ in range(10):
            await asyncio.sleep(0)
        fetch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await fetch
        assert not broker.node(leader).handling
    finally:
        await broker.stop()
