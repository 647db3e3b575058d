"""Connection and memory limits under Kafka's names: max.connections (new connections wait
unread), max.connections.per.ip and its overrides (refused with a log line),
queued.max.request.bytes and no read-ahead behind a peer that does not read its
responses (broker memory stays bounded), and 1,000 connections held at once."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol import answer_wire
from protocol.request_wire import flexible_from, encode_request_frame
from protocol.records import NewRecord, build_batch
from tests.broker_process import wait_until

HOST = "127.0.0.1"


def _request(key: int, version: int, data: dict, correlation_id: int = 1) -> bytes:
    body = answer_wire.encode(answer_wire.build_request(key, version, data))
    return encode_request_frame(key, version, correlation_id, "limits", version >= flexible_from(key), body)


API_VERSIONS = _request(18, 3, {"client_software_name": "t", "client_software_version": "1"})


def _connect(port: int) -> socket.socket:
    s = socket.create_connection((HOST, port))
    s.settimeout(20)
    return s


def _answered(s: socket.socket) -> bool:
    s.sendall(API_VERSIONS)
    try:
        return len(s.recv(65536)) > 8
    except (ConnectionError, socket.timeout):
        return False


def _closed_by_broker(s: socket.socket) -> bool:
    try:
        s.sendall(API_VERSIONS)
        return s.recv(65536) == b""
    except ConnectionError:
        return True


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_max_connections_per_ip_refuses_the_next_connection(broker_factory):
    broker = broker_factory({"max.connections.per.ip": 3})
    held = [_connect(broker.port) for _ in range(3)]
    assert all(_answered(s) for s in held)
    extra = _connect(broker.port)
    assert _closed_by_broker(extra)
    held.pop().close()
    wait_until(lambda: _answered(_connect(broker.port)), 20, message="a connection after one closed")
    assert "already has the configured maximum of 3 connections (max.connections.per.ip)" in broker.log_text()


def test_max_connections_per_ip_overrides(broker_factory):
    broker = broker_factory({"max.connections.per.ip.overrides": "127.0.0.1:2"})
    held = [_connect(broker.port) for _ in range(2)]
    assert all(_answered(s) for s in held)
    assert _closed_by_broker(_connect(broker.port))


def test_max_connections_holds_new_connections_unread_until_one_closes(broker_factory):
    broker = broker_factory({"max.connections": 2})
    held = [_connect(broker.port) for _ in range(2)]
    assert all(_answered(s) for s in held)
    waiting = _connect(broker.port)  # the TCP handshake completes, as with Kafka
    waiting.settimeout(1.0)
    assert not _answered(waiting)  # not refused: held
    held.pop().close()
    waiting.settimeout(20)
    assert len(waiting.recv(65536)) > 8  # its ApiVersions is answered once a slot is free


def test_peer_that_never_reads_responses_does_not_grow_broker_memory(broker_factory, topic_name):
    broker = broker_factory({"queued.max.request.bytes": 4 << 20})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for _ in range(256):
        p.produce(topic_name, b"x" * 4000, partition=0)
    assert p.flush(30) == 0
    before = _rss_kb(broker.proc.pid)
    fetch = _request(1, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                            "isolation_level": 0, "topics": [{"topic": topic_name, "partitions": [
                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    batch = bytes(build_batch([NewRecord(None, b"y" * (256 << 10), (), 0)]))
    produce = _request(0, 7, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}]})
    slow = socket.create_connection((HOST, broker.port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never read
    slow.settimeout(2.0)
    sent = 0
    try:  # ~1 GB of responses asked for and ~256 MB of requests offered; the broker stops reading
        for _ in range(1000):
            slow.sendall(fetch + produce)
            sent += 1
    except socket.timeout:
        pass
    assert sent < 1000, "the broker kept reading from a peer that reads nothing"
    # others are still served while the slow peer's responses wait
    assert _answered(_connect(broker.port))
    growth_mb = (_rss_kb(broker.proc.pid) - before) / 1024
    assert growth_mb < 64, f"broker RSS grew by {growth_mb:.0f} MB"
    slow.close()
    assert _answered(_connect(broker.port))


def test_a_thousand_connections_half_idle_half_producing(broker_factory, topic_name):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 4, 1)])[topic_name].result(30)
    idle = [_connect(broker.port) for _ in range(500)]
    assert all(_answered(s) for s in idle[::50])
    batch = bytes(build_batch([NewRecord(None, b"z" * 100, (), 0)]))
    produce = _request(0, 7, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}]})
    producers = [_connect(broker.port) for _ in range(500)]
    errors: list[str] = []

    def produce_from(conns: list[socket.socket]) -> None:
        for _ in range(3):
            for s in conns:
                try:
                    s.sendall(produce)
                except OSError as e:
                    errors.append(repr(e))
            for s in conns:
                try:
                    if len(s.recv(65536)) <= 8:
                        errors.append("short answer")
                except OSError as e:
                    errors.append(repr(e))

    threads = [threading.Thread(target=produce_from, args=(producers[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    assert all(_answered(s) for s in idle[::25])  # the idle half is still held open
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "limits"})
    assert c.get_watermark_offsets(TopicPartition(topic_name, 0), 20, cached=False)[1] == 1500  # every produce
    c.close()
    for s in idle + producers:
        s.close()
    assert "Traceback" not in broker.log_text()
