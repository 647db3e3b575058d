"""Bad frames against a live broker: each costs only its own connection, with a log
line, while a transactional client keeps working. `make fuzz` runs a million frames."""

from __future__ import annotations

import gc
import socket
import struct

from torture import fuzz

from protocol import answer_wire
from protocol.request_wire import encode_request_frame


def _api_versions_frame() -> bytes:
    return encode_request_frame(18, 3, 1, "t", True, answer_wire.encode(answer_wire.build_request(18, 3, {
        "client_software_name": "t", "client_software_version": "1"})))


def test_reader_does_not_outlive_a_connection_closed_with_requests_queued(broker_factory):
    # One read-ahead slot: the reader had to wait for room behind a bad frame whose
    # handling closed the connection, and waited forever (its task was later destroyed
    # pending, with a stack trace in the log).
    broker = broker_factory({"queued.max.requests": 1})
    bad = struct.pack(">i", 3) + b"\x00\x01\x02"
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", broker.port)) as s:
            s.sendall(bad + _api_versions_frame() * 20)
            s.settimeout(10)
            while s.recv(65536):
                pass  # the broker closes the connection
    gc.collect()
    with socket.create_connection(("127.0.0.1", broker.port)) as s:  # still serving
        s.sendall(_api_versions_frame())
        s.settimeout(10)
        assert len(s.recv(65536)) > 8
    broker.stop()
    log = broker.log_text()
    assert log.count("closing connection") >= 50
    assert "Traceback" not in log and "Task was destroyed" not in log, log[-3000:]


def test_mutated_frames_while_a_transactional_client_works(tmp_path):
    code, summary = fuzz.run(frames_total=5000, seed=17, connections=8, workdir=tmp_path)
    assert code == 0, summary
    assert " OK" in summary and "client_errors=0" in summary and "tracebacks=0" in summary


def test_mutated_frames_while_a_three_node_cluster_fails(tmp_path):
    # Nodes stopped, killed and paused, links cut, lossy and slow, among the frames: after
    # each fault every node answers well-formed, and the client's commits read back once.
    code, summary = fuzz.run(frames_total=1000, seed=5, connections=8, workdir=tmp_path, nodes=3)
    assert code == 0, summary
    assert "faults=4 " in summary and "malformed=0" in summary and "tracebacks=0" in summary, summary
