"""The Java client (kafka-clients 4.4.0) against three nodes: a transactional producer
over partitions led by different nodes while the transaction coordinator's node is
stopped with a transaction open, then killed after PREPARE_COMMIT while its markers
cannot leave it; ends with the exactly-once check, read by the Java client itself
(read_committed) and by confluent-kafka. And transaction version 2's implicit add
(Produce v12) while the partition leaders cannot reach the coordinator's node."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

import pytest

from broker.wire.client import KafkaConnection
from broker.testing.helpers import wait_until
from tests.integration.test_cluster import assert_exactly_once, read_committed
from tests.reference import java_driver

pytestmark = pytest.mark.timeout(400)


def test_java_transactions_while_the_coordinator_node_fails(broker_factory, topic_name):
    # Transaction 5's markers are held, not cut off: a cut would keep the coordinator's
    # followers from fetching its PREPARE_COMMIT too, and with them out of the ISR its
    # death leaves __transaction_state offline (no clean leader), on Kafka as here.
    cluster = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500},
                             nodes=3, admin=True)
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in cluster.node_ports.values())
    r = java_driver.run("cluster-failover", bootstrap, topic_name, cluster.admin_url)
    coordinators = r["coordinators"]
    # the coordinator moved when its node stopped (transaction 2) and when it was killed (5)
    assert coordinators[3] != coordinators[2] and coordinators[6] != coordinators[5]
    assert len(r["committed"]) == 7 * 3
    assert r["read_committed"] == r["committed"]  # every committed record once, nothing aborted
    assert r["read_uncommitted_count"] == 8 * 3  # the aborted transaction's records are in the log
    nodes = cluster.control().cluster()["nodes"]
    assert [n["state"] for n in nodes].count("stopped") == 1  # the killed one
    assert_exactly_once(read_committed(bootstrap, f"{topic_name}-t", 3, len(r["committed"])),
                        [v.encode() for v in r["committed"]])


def _produce_errors(cluster) -> dict[str, float]:
    with urllib.request.urlopen(cluster.admin_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return {line.split('error="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("kafka_network_requestmetrics_errors_total{") and 'request="Produce"' in line}


async def _coordinator(port: int, transactional_id: str) -> int:
    """The id's coordinator node (FindCoordinator also creates __transaction_state)."""
    async with await KafkaConnection.connect("127.0.0.1", port) as conn:
        while True:
            found = (await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [transactional_id]})).coordinators[0]
            if found.error_code == 0:
                return found.node_id
            await asyncio.sleep(0.05)


def test_java_implicit_add_waits_while_the_coordinator_is_cut_off(broker_factory, topic_name):
    """The Java producer's transactions (Produce v12: the leader adds the partition to the
    transaction) while no other node can reach the coordinator's node: the add fails
    with NOT_ENOUGH_REPLICAS, which the producer retries; after the heal its three
    transactions (commit, abort, commit) end as they should, read exactly once. The cut
    stops the coordinator's followers fetching from it too: they leave its ISR within
    replica.lag.time.max.ms, and with a minimum ISR of 1 its own writes go on."""
    cluster = broker_factory({"transaction.state.log.min.isr": 1, "replica.lag.time.max.ms": 2000},
                             nodes=3, admin=True)
    control = cluster.control()
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in cluster.node_ports.values())
    coordinator = asyncio.run(_coordinator(cluster.port, f"{topic_name}-txn"))
    for node in cluster.node_ports:
        if node != coordinator:
            control.network_cut(source=node, target=coordinator)
    result: dict = {}
    driver = threading.Thread(target=lambda: result.update(java_driver.run("transactional", bootstrap, topic_name)))
    driver.start()
    try:
        # the topic's two partitions have two leaders: at least one is not the coordinator's node
        wait_until(lambda: _produce_errors(cluster).get("NOT_ENOUGH_REPLICAS", 0) >= 1, timeout=120)
        assert driver.is_alive()  # its first commit waits for the retried sends
    finally:
        control.network_heal()
        driver.join(240)
    assert result["read_committed"] == sorted([f"committed-{i}" for i in range(6)] + ["committed-last"])
    assert result["read_uncommitted_count"] == 13 and result["epoch_after_three_transactions"] == 3
