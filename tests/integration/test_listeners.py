"""Kafka's listener settings and Kafka's own configuration, over real TCP with real
clients: Kafka 4's combined-mode server.properties and the apache/kafka image's
docker-compose environment start eosbroker unchanged; each listener answers with its
own addresses; a listener that is not advertised gets Kafka's LISTENER_NOT_FOUND."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.helpers import free_port_block

KAFKA_SERVER_PROPERTIES = Path(__file__).parent / "kafka_config" / "server.properties"


class Served:
    def __init__(self, args: list[str], env: dict[str, str], nodes: int = 1) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.program", "serve", *args],
                                     env={**os.environ, **env}, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = [self.proc.stdout.readline() for _ in range(nodes)]
        if not all("listening on" in line for line in self.lines):
            self.proc.kill()
            raise AssertionError(f"broker did not start: {self.lines} {self.proc.stderr.read()}")

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


def transaction_round_trip(bootstrap: str) -> None:
    """A transaction committed, then read back read_committed by a consumer group."""
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
                if len(got) == 3:
                    consumer.commit(asynchronous=False)
                    break
    finally:
        consumer.close()
    assert sorted(got) == [b"v0", b"v1", b"v2"]


def test_kafkas_combined_mode_server_properties_starts_eosbroker(tmp_path):
    """The file as Kafka ships it; only its fixed ports are moved to free ones (listeners
    and advertised.listeners given again, the way a second broker on one machine would)."""
    port = free_port_block(2)
    served = Served(["--config", str(KAFKA_SERVER_PROPERTIES), "--data-dir", str(tmp_path / "data"),
                     "--override", f"listeners=PLAINTEXT://:{port},CONTROLLER://:{port + 1}",
                     "--override", f"advertised.listeners=PLAINTEXT://localhost:{port},"
                                   f"CONTROLLER://localhost:{port + 1}"], {})
    try:
        assert served.lines == [f"eosbroker listening on PLAINTEXT://:{port}\n"]
        transaction_round_trip(f"localhost:{port}")
        brokers = AdminClient({"bootstrap.servers": f"localhost:{port}"}).list_topics(timeout=10).brokers
        assert [(b.id, b.host, b.port) for b in brokers.values()] == [(1, "localhost", port)]
    finally:
        err = served.stop()
    assert ("accepted, no effect in eosbroker: controller.quorum.voters, log.dirs, num.io.threads, "
            "num.network.threads, num.recovery.threads.per.data.dir, share.coordinator.state.topic.min.isr, "
            "socket.receive.buffer.bytes, socket.send.buffer.bytes\n") in err
    # transaction.state.log.min.isr and share.coordinator.state.topic.replication.factor take effect
    assert f"controller listener CONTROLLER://:{port + 1} accepted, not served" in err


def test_the_apache_kafka_images_compose_environment_starts_eosbroker(tmp_path):
    """The variables of the apache/kafka image's documented single-node compose example."""
    port = free_port_block(2)
    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://localhost:{port},CONTROLLER://localhost:{port + 1}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@localhost:{port + 1}",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_NUM_PARTITIONS": "3",
        "KAFKA_HEAP_OPTS": "-Xmx512m",  # the JVM's, not a setting: left alone
        "CLUSTER_ID": "4L6g3nShT-eMCtK--X86sw",
        "EOSBROKER_DATA_DIR": str(tmp_path / "data"),
    }
    served = Served([], env)
    try:
        transaction_round_trip(f"localhost:{port}")
        metadata = AdminClient({"bootstrap.servers": f"localhost:{port}"}).list_topics(timeout=10)
        assert metadata.cluster_id == "4L6g3nShT-eMCtK--X86sw"
    finally:
        served.stop()


def test_each_listener_answers_with_its_own_addresses_on_consecutive_ports(tmp_path):
    """Two nodes, two listeners: Metadata, FindCoordinator (through the group and the
    transaction) and DescribeCluster on each listener name only that listener's ports."""
    internal, external = free_port_block(2), free_port_block(2)
    served = Served(["--nodes", "2", "--data-dir", str(tmp_path / "data"),
                     "--override", f"listeners=INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
                     "--override", f"advertised.listeners=INTERNAL://127.0.0.1:{internal},"
                                   f"EXTERNAL://localhost:{external}",
                     "--override", "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                     "--override", "inter.broker.listener.name=INTERNAL"], {}, nodes=2)
    try:
        for host, port in (("127.0.0.1", internal), ("localhost", external)):
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            brokers = admin.list_topics(timeout=10).brokers
            assert sorted((b.id, b.host, b.port) for b in brokers.values()) == [(1, host, port), (2, host, port + 1)]
            cluster = admin.describe_cluster().result(10)
            assert sorted((n.id, n.host, n.port) for n in cluster.nodes) == [(1, host, port), (2, host, port + 1)]
            transaction_round_trip(f"{host}:{port}")
    finally:
        served.stop()


def test_a_listener_not_advertised_gets_kafkas_listener_not_found(tmp_path):
    """Bound but left out of advertised.listeners: its clients are told of no broker, and
    each partition is LISTENER_NOT_FOUND (Metadata v6+), as Kafka answers them."""
    port = free_port_block(2)
    served = Served(["--data-dir", str(tmp_path / "data"),
                     "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},HIDDEN://127.0.0.1:{port + 1}",
                     "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                     "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,HIDDEN:PLAINTEXT"], {})
    try:
        visible = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        visible.create_topics([NewTopic("t", 2)])["t"].result(10)
        hidden = AdminClient({"bootstrap.servers": f"127.0.0.1:{port + 1}"}).list_topics("t", timeout=10)
        assert hidden.brokers == {}
        errors = {p.id: p.error.code() for p in hidden.topics["t"].partitions.values()}
        assert errors == {0: KafkaError.LISTENER_NOT_FOUND, 1: KafkaError.LISTENER_NOT_FOUND}
    finally:
        served.stop()


@pytest.mark.parametrize("args, message", [
    (["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--port", "0"],
     "--host/--port are the short form of listeners=PLAINTEXT://HOST:PORT; give either them or the listeners setting"),
    (["--override", "advertised.listeners=EXTERNAL://localhost:9092"],
     "Error creating broker listeners from '[EXTERNAL://localhost:9092]': No security protocol defined for "
     "listener EXTERNAL"),
])
def test_refused_at_start_with_a_clear_message(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "broker.program", "serve", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()
