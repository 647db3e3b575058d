"""Listeners, against Apache Kafka: a listener that is bound but not advertised.

Both brokers get a PLAINTEXT listener (advertised) and a HIDDEN one (bound only). A
client on HIDDEN asks Metadata (v12 and v5), FindCoordinator and DescribeCluster, and
both brokers must answer alike: no broker on that listener, partitions without a
leader (LISTENER_NOT_FOUND from v6 on, LEADER_NOT_AVAILABLE before), the coordinator
not available. The same questions on PLAINTEXT get its address."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.testing.helpers import free_port_block
from tests.reference.kafka_broker import HOST, KafkaBroker, free_port
from tests.reference.wire import Wire, err


class KafkaWithHiddenListener(KafkaBroker):
    def _write_config(self, port: int = 0):
        config = super()._write_config(port)
        self.hidden_port = free_port()
        with config.open("a") as f:  # later keys win in a properties file
            f.write(f"listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port},"
                    f"HIDDEN://{HOST}:{self.hidden_port}\n")
            f.write("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,HIDDEN:PLAINTEXT\n")
        return config


pytestmark = pytest.mark.reference_extended  # a Kafka of its own, with a listener it does not advertise

@pytest.fixture
def kafka_with_hidden_listener(tmp_path):
    broker = KafkaWithHiddenListener(tmp_path / "kafka").start()
    yield broker.port, broker.hidden_port
    broker.stop()


@pytest.fixture
def eosbroker_with_hidden_listener(tmp_path):
    port = free_port_block(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.program", "serve", "--data-dir", str(tmp_path / "eos"),
         "--override", f"listeners=PLAINTEXT://{HOST}:{port},HIDDEN://{HOST}:{port + 1}",
         "--override", f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
         "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,HIDDEN:PLAINTEXT"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "listening on" in proc.stdout.readline()
    yield port, port + 1
    proc.terminate()
    proc.wait(30)


async def _answers(port: int, hidden_port: int) -> dict:
    visible = await Wire.connect(port)
    try:
        assert await visible.create_topic("orders", 2) == "NONE"
        assert (await visible.find_coordinator("g", 0))[0] == "NONE"  # the group's coordinator loaded
    finally:
        await visible.close()
    out = {}
    for name, listener_port in (("visible", port), ("hidden", hidden_port)):
        wire = await Wire.connect(listener_port)
        try:
            for version in (12, 5):
                topics = [{"name": "orders", "topic_id": None}] if version >= 10 else [{"name": "orders"}]
                r = await wire.request("metadata", {"topics": topics, "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False}, version=version)
                out[name, "metadata", version] = {
                    "brokers": [(b.host, b.port) for b in r.brokers],
                    "partitions": sorted((p.partition_index, err(p.error_code), p.leader_id >= 0)
                                         for p in r.topics[0].partitions)}
            r = await wire.request("find_coordinator", {"key_type": 0, "coordinator_keys": ["g"]})
            c = r.coordinators[0]
            out[name, "find_coordinator"] = (err(c.error_code), c.host, c.port)
            r = await wire.request("describe_cluster", {"include_cluster_authorized_operations": False},
                                   version=0, key=60)
            out[name, "describe_cluster"] = [(b.host, b.port) for b in r.brokers]
        finally:
            await wire.close()
    # the visible listener's port differs between the brokers: named, not compared
    return {k: _named(v, port) for k, v in out.items()}


def _named(value, port: int):
    if isinstance(value, dict):
        return {k: _named(v, port) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_named(v, port) for v in value)
    return "PORT" if value == port else value


async def test_a_listener_not_advertised_is_answered_as_kafka_answers(kafka_with_hidden_listener,
                                                                      eosbroker_with_hidden_listener):
    kafka = await _answers(*kafka_with_hidden_listener)
    eos = await _answers(*eosbroker_with_hidden_listener)
    assert eos == kafka
    assert eos["hidden", "metadata", 12] == {"brokers": [], "partitions": [(0, "LISTENER_NOT_FOUND", False),
                                                                          (1, "LISTENER_NOT_FOUND", False)]}
    assert eos["hidden", "metadata", 5]["partitions"] == [(0, "LEADER_NOT_AVAILABLE", False),
                                                          (1, "LEADER_NOT_AVAILABLE", False)]
    assert eos["hidden", "find_coordinator"] == ("COORDINATOR_NOT_AVAILABLE", "", -1)
    assert eos["hidden", "describe_cluster"] == []
    assert eos["visible", "describe_cluster"] == [(HOST, "PORT")]
