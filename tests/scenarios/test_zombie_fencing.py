"""Scenario zombie-fencing with confluent-kafka: the zombie's held Produce is refused
with the old epoch once the successor took over (fatal _FENCED), the zombie's
transaction is aborted, the successor's committed record is read once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from broker.testing import wait_until
from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic, kafka_error

pytestmark = pytest.mark.timeout(90)


def test_the_zombie_is_fenced_and_only_the_successor_commits(broker_factory):
    broker = broker_factory(scenario="zombie-fencing")
    topic = create_topic(broker)
    zombie = Producer({"bootstrap.servers": bootstrap(broker), "client.id": "zombie", "transactional.id": "zombie-app"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.poll(0)
    control = broker.control()
    wait_until(lambda: control.faults()["rules"][0]["fired"] == 1, 30, message="the zombie's Produce held")

    successor = Producer({"bootstrap.servers": bootstrap(broker), "client.id": "successor",
                          "transactional.id": "zombie-app"})
    successor.init_transactions(30)  # fences the zombie; the trigger then releases its Produce
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(30)

    # The held Produce is answered INVALID_PRODUCER_EPOCH: librdkafka raises its fatal _FENCED.
    with pytest.raises(KafkaException) as fenced:
        zombie.flush(30)
    error = fenced.value.args[0]
    assert (error.code(), error.fatal()) == (KafkaError._FENCED, True)
    assert "old epoch" in error.str()
    commit = kafka_error(zombie.commit_transaction, 30)
    assert (commit.code(), commit.fatal()) == (KafkaError._FENCED, True)

    state = broker.scenario_state()
    assert [(t["matched"] >= 1, t["fired"]) for t in state["triggers"]] == [(True, 1)]
    assert control.clock()["offset_ms"] == 20_000
    assert_exactly_once(broker, topic, 1, [b"successor"])
