"""A full disk: produce answers KAFKA_STORAGE_ERROR, nothing acknowledged is
lost, and producing works again once space returns. Needs a small tmpfs (root); skipped
where mounting is not allowed."""

from __future__ import annotations

import socket
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol import answer_wire
from protocol.request_wire import flexible_from, encode_request_frame
from protocol.records import NewRecord, build_batch

STORAGE_ERROR = 56


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _produce(s: socket.socket, topic: str, n: int) -> tuple[int, int]:
    """(error code, base offset) of one acks=1 produce of a 64 KiB record numbered ``n``."""
    batch = bytes(build_batch([NewRecord(b"%d" % n, b"v" * (64 << 10), (), 0)]))
    body = answer_wire.encode(answer_wire.build_request(0, 7, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}))
    s.sendall(encode_request_frame(0, 7, n, "disk", 7 >= flexible_from(0), body))
    size = int.from_bytes(_read(s, 4), "big")
    response = answer_wire.decode_response(0, 7, _read(s, size), 4)
    p = response.responses[0].partition_responses[0]
    return int(p.error_code), p.base_offset


def read_back(bootstrap: str, topic: str) -> dict[int, int]:
    """key (the record's number) -> offset of every record of partition 0, to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-back-{uuid.uuid4().hex[:6]}",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    seen: dict[int, int] = {}
    while True:
        m = c.poll(10)
        assert m is not None, "read back stalled"
        if m.error():
            break
        seen[int(m.key())] = m.offset()
    c.close()
    return seen


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "the broker closed the connection"
        out += chunk
    return out


def test_disk_full_answers_storage_error_and_recovers_when_space_returns(broker_factory, small_disk):
    broker = broker_factory({"log.segment.bytes": 1 << 20}, data_dir=small_disk / "data")
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    acked: dict[int, int] = {}
    s = socket.create_connection(("127.0.0.1", broker.port))
    s.settimeout(30)
    n, errors = 0, []
    while len(errors) < 3 and n < 500:  # fill the disk
        n += 1
        error, offset = _produce(s, topic, n)
        if error == 0:
            acked[n] = offset
        else:
            errors.append(error)
    assert errors == [STORAGE_ERROR] * 3 and len(acked) > 10
    # space returns: producing resumes on the same connection, no restart
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    for _ in range(5):
        n += 1
        error, offset = _produce(s, topic, n)
        assert error == 0
        acked[n] = offset
    s.close()
    # every acknowledged record where it was acknowledged, nothing else
    assert read_back(broker.bootstrap, topic) == acked
    assert "Traceback" not in broker.log_text()
    broker.stop()
