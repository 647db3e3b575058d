"""What the scenario tests share: a broker running a catalogue scenario, the
exactly-once read-back, and the client-side observations they assert on."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration import test_cluster as cluster_tests

HOST = "127.0.0.1"


def bootstrap(broker) -> str:
    """Every node's address, so a client starts even when one node is down."""
    ports = getattr(broker, "node_ports", None) or {1: broker.port}
    return ",".join(f"{HOST}:{port}" for port in ports.values())


def create_topic(broker, partitions: int = 1, name: str | None = None, config: dict | None = None) -> str:
    name = name or f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(broker)})
    admin.create_topics([NewTopic(name, partitions, -1, config={k: str(v) for k, v in (config or {}).items()})])[
        name].result(20)
    return name


def read_committed(broker, topic: str, partitions: int, expected: int, timeout: float = 30) -> list[bytes]:
    return cluster_tests.read_committed(bootstrap(broker), topic, partitions, expected, timeout)


def assert_exactly_once(broker, topic: str, partitions: int, committed: list[bytes]) -> None:
    """Every committed record once; nothing aborted, lost or duplicated."""
    cluster_tests.assert_exactly_once(read_committed(broker, topic, partitions, len(committed)), committed)


def kafka_error(call, *args) -> KafkaError:
    """The KafkaError a client call raises (AssertionError when it succeeds)."""
    try:
        call(*args)
    except KafkaException as e:
        return e.args[0]
    raise AssertionError(f"{getattr(call, '__name__', call)} succeeded")


def fired(broker, trigger_or_rule: str = "triggers") -> list[int]:
    """How often each trigger of the loaded scenario fired."""
    return [t["fired"] for t in broker.scenario_state()[trigger_or_rule]]
