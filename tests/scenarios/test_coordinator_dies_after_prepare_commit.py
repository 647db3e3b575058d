"""Scenario coordinator-dies-after-prepare-commit with confluent-kafka on three nodes:
the coordinator's node is killed after PREPARE_COMMIT with its markers unsent and its
answer lost; the client retries EndTxn at the new coordinator and the commit succeeds;
every record of the transaction is committed once (rolled forward), the next
transaction commits too."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(120)


def test_the_new_coordinator_rolls_the_commit_forward(broker_factory):
    broker = broker_factory(scenario="coordinator-dies-after-prepare-commit")
    topic = create_topic(broker, 3)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "payments",
                         "socket.timeout.ms": 5000})
    producer.init_transactions(30)
    producer.begin_transaction()
    first = [b"a%d" % p for p in range(3)]
    for p, value in enumerate(first):
        producer.produce(topic, value, partition=p)
    producer.commit_transaction(60)  # answered by the next coordinator, after a retry

    cut, kill = broker.scenario_state()["triggers"]
    assert (cut["fired"], kill["fired"], kill["errors"]) == (1, 1, [])
    assert kill["matched"] >= 2  # the answer never came: the client sent EndTxn again
    nodes = {n["node_id"]: n["state"] for n in broker.control().cluster()["nodes"]}
    assert sorted(nodes.values()) == ["running", "running", "stopped"]
    assert broker.control().cluster()["links"] == []  # healed after the kill

    producer.begin_transaction()
    producer.produce(topic, b"b", partition=0)
    producer.commit_transaction(60)
    assert_exactly_once(broker, topic, 3, [*first, b"b"])
