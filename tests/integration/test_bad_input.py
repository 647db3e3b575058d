"""Bad input costs only the offending connection: garbage, truncation, absurd sizes,
unknown APIs, corrupt batches, control batches from a client."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.wire.client import KafkaConnection
from broker.errors import code
from protocol.records import build_batch, build_control_batch
from protocol.request_wire import encode_request_frame

HOST = "127.0.0.1"


async def _connect(broker) -> KafkaConnection:
    return await KafkaConnection.connect(HOST, broker.port)


async def _metadata_ok(broker) -> None:
    async with await _connect(broker) as conn:
        r = await conn.request(3, 1, {"topics": None})
        assert r.brokers[0].port == broker.port


async def _produce(conn, topic: str, records: bytes, version: int = 9, transactional_id: str | None = None):
    return await conn.request(0, version, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    })


async def _create(conn, topic: str):
    r = await conn.request(19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": []}], "timeout_ms": 5000})
    assert r.topics[0].error_code == 0


def _partition(response):
    return response.responses[0].partition_responses[0]


async def _closed_and_others_fine(broker, conn: KafkaConnection, reason: str) -> None:
    assert await conn.closed(10), "broker kept a connection that sent " + reason
    await _metadata_ok(broker)


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x10" + b"\xde\xad\xbe\xef" * 4,              # header garbage: unknown api key 57005
    b"\x00\x00\x00\x02\x00\x01",                                 # frame too short for a header
    b"\x00\x00\x00\x0a\x00\x03\x00\x01\x00\x00\x00\x01\x7f\xff",  # client id length past the frame
], ids=["garbage", "short-header", "client-id-overrun"])
async def test_garbage_frames_close_only_that_connection(shared_broker, payload):
    bystander = await _connect(shared_broker)
    conn = await _connect(shared_broker)
    conn.send_raw(payload)
    await _closed_and_others_fine(shared_broker, conn, "garbage")
    assert (await bystander.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})).error_code == 0
    await bystander.close()
    assert "closing connection" in shared_broker.log_text()


async def test_absurd_length_prefix_is_refused_before_reading_the_body(shared_broker):
    conn = await _connect(shared_broker)
    conn.send_raw(struct.pack(">i", 2_000_000_000))  # 2 GB announced, nothing sent
    await _closed_and_others_fine(shared_broker, conn, "an absurd frame size")
    assert "socket.request.max.bytes" in shared_broker.log_text()


async def test_negative_length_prefix(shared_broker):
    conn = await _connect(shared_broker)
    conn.send_raw(struct.pack(">i", -5))
    await _closed_and_others_fine(shared_broker, conn, "a negative frame size")


async def test_truncated_frame_then_disconnect_leaves_broker_serving(shared_broker):
    reader, writer = await asyncio.open_connection(HOST, shared_broker.port)
    frame = encode_request_frame(3, 1, 7, "t", False, b"\xff\xff\xff\xff")
    writer.write(frame[: len(frame) // 2])
    await writer.drain()
    writer.close()
    await _metadata_ok(shared_broker)


async def test_undecodable_body_closes_connection(shared_broker):
    conn = await _connect(shared_broker)
    conn.send_raw(encode_request_frame(3, 1, 1, "t", False, b"\x00\x00\x00\x05\x00"))  # 5 topics, then nothing
    await _closed_and_others_fine(shared_broker, conn, "an undecodable body")


async def test_unknown_api_key_closes_connection(shared_broker):
    conn = await _connect(shared_broker)
    conn.send_raw(encode_request_frame(999, 0, 1, "t", False, b""))
    await _closed_and_others_fine(shared_broker, conn, "an unknown api key")
    assert "unknown or unsupported API key 999" in shared_broker.log_text()


async def test_unsupported_api_versions_version_gets_v0_answer_with_range(shared_broker):
    async with await _connect(shared_broker) as conn:
        conn.send_raw(encode_request_frame(18, 99, 42, "t", True, b"\x00"))
        # the raw frame has no future: its reply is dropped; read on with a v0 request
        r = await conn.request(18, 0, {})
        assert r.error_code == 0 and any(k.api_key == 0 for k in r.api_keys)
    # the reply to the v99 request itself, read over a bare socket
    reader, writer = await asyncio.open_connection(HOST, shared_broker.port)
    writer.write(encode_request_frame(18, 99, 42, "t", True, b"\x00"))
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    body = await reader.readexactly(size)
    writer.close()
    correlation, error, count = struct.unpack_from(">ihi", body, 0)
    assert (correlation, error, count) == (42, 35, 1)
    assert struct.unpack_from(">hhh", body, 10) == (18, 0, 4)


async def test_removed_produce_v2_is_refused_with_unsupported_version(shared_broker, topic_name):
    async with await _connect(shared_broker) as conn:
        await _create(conn, topic_name)
        v3 = await conn.request(3, 1, {"topics": [{"name": topic_name}]})
        assert v3.topics[0].error_code == 0
        # Produce v2 = v3 without the leading transactional id
        from protocol import answer_wire

        body = answer_wire.encode(answer_wire.build_request(0, 3, {
            "transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": topic_name, "partition_data": [{"index": 0, "records": bytes(build_batch([(None, b"v", (), 1)]))}]}],
        }))[2:]
        reader, writer = await asyncio.open_connection(HOST, shared_broker.port)
        writer.write(encode_request_frame(0, 2, 5, "t", False, body))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        reply = answer_wire.decode_response(0, 3, await reader.readexactly(size), 4)
        writer.close()
        assert _partition(reply).error_code == code("UNSUPPORTED_VERSION")
        end = await conn.request(2, 1, {"replica_id": -1, "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert end.topics[0].partitions[0].offset == 0


async def test_corrupt_crc_is_rejected_and_nothing_appended(shared_broker, topic_name):
    async with await _connect(shared_broker) as conn:
        await _create(conn, topic_name)
        good = build_batch([(None, b"hello", (), 1)])
        bad = bytearray(good)
        bad[-1] ^= 0xFF
        r = await _produce(conn, topic_name, bytes(bad))
        assert _partition(r).error_code == code("CORRUPT_MESSAGE")
        assert _partition(r).log_start_offset == -1
        r = await _produce(conn, topic_name, bytes(good))
        assert _partition(r).error_code == 0 and _partition(r).base_offset == 0


async def test_control_batch_from_a_client_is_invalid_record(shared_broker, topic_name):
    async with await _connect(shared_broker) as conn:
        await _create(conn, topic_name)
        marker = build_control_batch(producer_id=5, producer_epoch=0, commit=True, coordinator_epoch=0, timestamp_ms=1)
        r = await _produce(conn, topic_name, bytes(marker), transactional_id="tx")
        assert _partition(r).error_code == code("INVALID_RECORD")
        assert "control" in (_partition(r).error_message or "")
        # without a transactional id, Kafka refuses the (transactional) batch before looking at it
        r = await _produce(conn, topic_name, bytes(marker))
        assert _partition(r).error_code == code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        r = await _produce(conn, topic_name, bytes(build_batch([(None, b"x", (), 1)])))
        assert _partition(r).base_offset == 0


async def test_two_batches_in_one_partition_is_invalid_record(shared_broker, topic_name):
    async with await _connect(shared_broker) as conn:
        await _create(conn, topic_name)
        one = bytes(build_batch([(None, b"x", (), 1)]))
        r = await _produce(conn, topic_name, one + one)
        assert _partition(r).error_code == code("INVALID_RECORD")


async def test_message_too_large(broker_factory, topic_name):
    broker = broker_factory({"message.max.bytes": 1000})
    async with await _connect(broker) as conn:
        await _create(conn, topic_name)
        r = await _produce(conn, topic_name, bytes(build_batch([(None, b"x" * 2000, (), 1)])))
        assert _partition(r).error_code == code("MESSAGE_TOO_LARGE")


async def test_unknown_topic_and_internal_topic_produce(shared_broker):
    async with await _connect(shared_broker) as conn:
        r = await _produce(conn, "no-such-topic-here", bytes(build_batch([(None, b"x", (), 1)])))
        assert _partition(r).error_code == code("UNKNOWN_TOPIC_OR_PARTITION")


async def test_acks_zero_failure_closes_the_connection(shared_broker, topic_name):
    conn = await _connect(shared_broker)
    await _create(conn, topic_name)
    bad = bytearray(build_batch([(None, b"x", (), 1)]))
    bad[-1] ^= 1
    conn.send(0, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 1000,
                     "topic_data": [{"name": topic_name, "partition_data": [{"index": 0, "records": bytes(bad)}]}]},
              expect_response=False)
    await _closed_and_others_fine(shared_broker, conn, "a failed acks=0 produce")


async def test_pipelined_requests_are_answered_in_order(shared_broker, topic_name):
    async with await _connect(shared_broker) as conn:
        await _create(conn, topic_name)
        futures = [conn.send(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(build_batch([(None, b"%d" % i, (), 1)]))}]}]})
            for i in range(50)]
        results = await asyncio.gather(*futures)
        assert [_partition(r).base_offset for r in results] == list(range(50))


async def test_pipelined_requests_wait_for_queue_room_and_request_memory_in_order(broker_factory, topic_name):
    # one request queued per connection, and request memory for about one request
    # broker-wide: every frame behind the first stalls (reading pauses) until there is room
    broker = broker_factory({"queued.max.requests": 1, "queued.max.request.bytes": 200})
    async with await _connect(broker) as admin:
        await _create(admin, topic_name)
    conns = [await _connect(broker) for _ in range(3)]
    try:
        sends = [[c.send(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(
                build_batch([(None, b"%d-%d" % (n, i), (), 1)]))}]}]}) for i in range(30)]
            for n, c in enumerate(conns)]
        results = [await asyncio.gather(*futures) for futures in sends]
    finally:
        for c in conns:
            await c.close()
    offsets = [[_partition(r).base_offset for r in rs] for rs in results]
    assert all(rs == sorted(rs) for rs in offsets)  # each connection's requests in the order sent
    assert sorted(o for rs in offsets for o in rs) == list(range(90))


async def test_idle_connections_are_closed(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": 300})
    conn = await _connect(broker)
    await conn.request(3, 1, {"topics": None})
    assert await conn.closed(5)
