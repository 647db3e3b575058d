"""The Java client (kafka-clients 4.4.0) against three nodes: a transactional producer
over partitions led by different nodes while the transaction coordinator's node is
stopped with a transaction open, then killed after PREPARE_COMMIT while its markers
cannot leave it; ends with the exactly-once check, read by the Java client itself
(read_committed) and by confluent-kafka."""

from __future__ import annotations

import pytest

from tests.integration.test_cluster import assert_exactly_once, read_committed
from tests.reference import java_driver

pytestmark = pytest.mark.timeout(400)


def test_java_transactions_while_the_coordinator_node_fails(broker_factory, topic_name):
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
