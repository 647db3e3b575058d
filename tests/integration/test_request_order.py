"""A connection's requests are answered strictly in the order sent, whether the broker
answers a request the moment it is read or a request has to wait (a fault's delay, a
paused node) and those read behind it queue up: pipelined Produce requests get
consecutive offsets in the order sent, and their answers arrive in that order."""

from __future__ import annotations

import asyncio

import pytest

from broker.wire.client import KafkaConnection
from protocol.records import build_batch

pytestmark = pytest.mark.timeout(120)

HOST = "127.0.0.1"


async def _create(conn, topic: str) -> None:
    r = await conn.request(19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": []}], "timeout_ms": 5000})
    assert r.topics[0].error_code == 0


def _send_produce(conn, topic: str, value: bytes) -> asyncio.Future:
    return conn.send(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": bytes(build_batch([(None, value, (), 1)]))}]}]})


async def _pipelined(conn, topic: str, values: list[bytes]) -> tuple[list[int], list[int]]:
    """Sends the produces back to back; (the order their answers arrived in, their offsets)."""
    arrived: list[int] = []
    futures = [_send_produce(conn, topic, v) for v in values]
    for i, fut in enumerate(futures):
        fut.add_done_callback(lambda _f, i=i: arrived.append(i))
    responses = await asyncio.gather(*futures)
    for r in responses:
        assert r.responses[0].partition_responses[0].error_code == 0
    return arrived, [r.responses[0].partition_responses[0].base_offset for r in responses]


async def test_requests_behind_a_delayed_one_are_answered_after_it_in_order(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    control = broker.control()
    # the third Produce waits: the two before it are answered as they are read, the ones
    # behind it queue up until it is answered
    control.fault_add(action="delay", api_key=0, skip=2, delay_ms=300, count=1)
    conn = await KafkaConnection.connect(HOST, broker.port)
    try:
        await _create(conn, topic_name)
        arrived, offsets = await _pipelined(conn, topic_name, [b"a%d" % i for i in range(12)])
        assert arrived == list(range(12))
        assert offsets == list(range(12))
        # the connection is idle again: what comes next is answered in order too
        arrived, offsets = await _pipelined(conn, topic_name, [b"b%d" % i for i in range(5)])
        assert arrived == list(range(5))
        assert offsets == list(range(12, 17))
    finally:
        await conn.close()
    [rule] = control.faults()["rules"]
    assert rule["fired"] == 1


async def test_requests_read_while_the_node_is_paused_are_answered_after_resume_in_order(broker_factory,
                                                                                         topic_name):
    broker = broker_factory(admin=True)
    control = broker.control()
    conn = await KafkaConnection.connect(HOST, broker.port)
    try:
        await _create(conn, topic_name)
        [node] = control.cluster()["nodes"]
        await asyncio.to_thread(control.node_pause, node_id=node["node_id"])
        sent = asyncio.ensure_future(_pipelined(conn, topic_name, [b"p%d" % i for i in range(6)]))
        await asyncio.sleep(0.3)
        assert not sent.done()  # read, but nothing answered while paused
        await asyncio.to_thread(control.node_resume, node_id=node["node_id"])
        arrived, offsets = await sent
        assert arrived == list(range(6))
        assert offsets == list(range(6))
    finally:
        await conn.close()
