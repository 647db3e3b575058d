"""Frames against the nodes of an in-process `--nodes 3` broker while the cluster fails
between them: nodes stopped, killed, paused, resumed and started again, links cut,
lossy or slow, healed, the clock moved. Every frame is answered, or refused with a
ProtocolViolation, within a bound; no stack trace is logged; and after every example
each running node answers ApiVersions and Metadata well-formed."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.process import Broker
from broker.cluster import RUNNING
from broker.config import BrokerConfig
from broker.control.service import ControlError, ControlService
from broker.wire.server import Connection, ProtocolViolation
from broker.virtual_clock import VirtualClock
from protocol import answer_wire, request_wire
from protocol.request_wire import KAFKA_4_0, ApiTable
from tests.unit.test_fuzz_handlers import (
    API_VERSIONS,
    HANDLER_BOUND_S,
    LONGEST_TIMEOUT_MS,
    PATIENCE_S,
    SCALE,
    TOPIC,
    _StackTraces,
    _frame,
)
from tests.unit.test_fuzz_wire import mutated

NODES = (1, 2, 3)
_NODE = st.sampled_from(NODES)
_FAULT = st.one_of(
    st.tuples(st.sampled_from(["stop", "kill", "pause", "resume", "start"]), _NODE),
    st.tuples(st.sampled_from(["cut", "lossy", "slow"]), _NODE, _NODE),
    st.tuples(st.just("heal")),
    st.tuples(st.just("clock"), st.integers(1, 60_000)),
)


class _Cluster:
    """A three-node broker on its own event loop, with its control operations."""

    def __init__(self, tmp_path) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = VirtualClock()
        self.broker = Broker(BrokerConfig({
            "node.count": 3, "group.initial.rebalance.delay.ms": 0, "num.partitions": 2,
            "default.replication.factor": 3, "transaction.state.log.num.partitions": 2,
            "offsets.topic.num.partitions": 2}), tmp_path / "data", "127.0.0.1", 0, clock=self.clock)
        self.control = ControlService(self.broker)
        self.loop.run_until_complete(self.broker.start())
        self.connections = 0

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def serving(self) -> list[int]:
        return [n.node_id for n in self.broker.nodes if n.info.state == RUNNING]

    def fault(self, fault: tuple) -> None:
        """One control operation; those the control API refuses (stopping the last live
        node, resuming a running one) are refused here too and change nothing."""
        kind, *args = fault
        operation = {"stop": "node_stop", "kill": "node_kill", "pause": "node_pause", "resume": "node_resume",
                     "start": "node_start", "cut": "network_cut", "heal": "network_heal",
                     "lossy": "network_link", "slow": "network_link", "clock": "clock_advance"}[kind]
        if kind in ("stop", "kill", "pause", "resume", "start"):
            body = {"node_id": args[0]}
        elif kind in ("cut", "lossy", "slow"):
            if args[0] == args[1]:
                return
            body = {"source": args[0], "target": args[1]}
            body |= {"loss": 0.5, "seed": 1} if kind == "lossy" else {"delay_ms": 200} if kind == "slow" else {}
        elif kind == "clock":
            body = {"by": f"{args[0]}ms"}
        else:
            body = {}
        try:
            self.run(self.control.call(operation, body))
        except ControlError:
            pass

    def send(self, node_id: int, frame: bytes):
        """The node's answer to one frame; the clock jumps past any timeout the frame
        asked for (or the cluster's faults impose) once it has waited a while."""
        node = self.broker.node(node_id)
        self.connections += 1
        conn = Connection(self.connections, "127.0.0.1:1", node_id, 0.0, None)

        async def answer():
            handling = asyncio.ensure_future(node.server.handle_frame(frame, conn))
            give_up = self.loop.time() + HANDLER_BOUND_S
            while not (await asyncio.wait({handling}, timeout=PATIENCE_S))[0]:
                if self.loop.time() > give_up:
                    handling.cancel()
                    raise AssertionError(f"node {node_id}: no answer within {HANDLER_BOUND_S} s")
                self.clock.advance(LONGEST_TIMEOUT_MS)
            return handling.result()

        return self.run(answer())

    def close(self) -> None:
        self.run(self.broker.stop())
        self.loop.close()


@pytest.fixture
def cluster(tmp_path):
    cluster = _Cluster(tmp_path)
    traces = _StackTraces()
    logging.getLogger().addHandler(traces)
    cluster.send(1, _frame(19, 7, answer_wire.encode(answer_wire.build_request(19, 7, {
        "topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 3}], "timeout_ms": 1000}))))
    yield cluster, traces
    logging.getLogger().removeHandler(traces)
    cluster.close()


def _decoded(cluster: _Cluster, node_id: int, key: int, version: int, body: dict):
    frame = cluster.send(node_id, _frame(key, version, answer_wire.encode(answer_wire.build_request(key, version, body))))
    # size, correlation id, and tagged fields in a flexible response header (never ApiVersions')
    head = 4 + 4 + (1 if key != 18 and ApiTable(set(KAFKA_4_0)).get(key).flexible(version) else 0)
    assert int.from_bytes(frame[4:8], "big") == 7  # the correlation id _frame gives
    return answer_wire.decode_response(key, version, bytes(frame[head:]))


def _assert_serving_nodes_answer_well_formed(cluster: _Cluster) -> None:
    for node_id in cluster.serving():
        versions = _decoded(cluster, node_id, 18, 3, {"client_software_name": "check", "client_software_version": "1"})
        assert versions.error_code == 0 and versions.api_keys
        metadata = _decoded(cluster, node_id, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations": False})
        assert node_id in {b.node_id for b in metadata.brokers}


@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_handler_answers_while_the_cluster_fails_between_frames(cluster, data):
    cluster, traces = cluster
    for _ in range(data.draw(st.integers(1, 8))):
        if data.draw(st.booleans()):
            cluster.fault(data.draw(_FAULT))
            continue
        key, version = data.draw(st.sampled_from(API_VERSIONS))
        frame = _frame(key, version, answer_wire.encode(data.draw(st.from_type(request_wire.request_class(key, version)))))
        if data.draw(st.booleans()):
            frame = data.draw(mutated(frame))
        serving = cluster.serving()
        if not serving:  # every live node paused (the control API keeps one node live): wake them
            for node_id in NODES:
                cluster.fault(("resume", node_id))
            serving = cluster.serving()
        target = serving[data.draw(st.integers(0, len(NODES) - 1)) % len(serving)]  # same draws every time
        try:
            answer = cluster.send(target, frame)
        except ProtocolViolation:
            continue
        assert answer is None or isinstance(answer, (bytes, bytearray))
    _assert_serving_nodes_answer_well_formed(cluster)
    assert not traces.records, [r.getMessage() for r in traces.records]
