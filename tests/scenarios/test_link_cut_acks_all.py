"""Scenario link-cut-acks-all with confluent-kafka on three nodes: the leader is cut off
from its followers as the first transactional write arrives; the acks=all write is
answered REQUEST_TIMED_OUT (the ISR has not shrunk), the record times out in the client
(_MSG_TIMED_OUT) and the transaction can only be aborted; after the link heals the
abort completes and the next transaction commits: nothing of the timed-out transaction
is visible, the committed record is read once."""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(120)


def _produce_errors(broker) -> dict[str, float]:
    with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_errors_total{") and 'request="Produce"' in line:
            out[line.split('error="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return out


def test_the_acks_all_write_times_out_and_the_transaction_is_aborted(broker_factory):
    broker = broker_factory(scenario="link-cut-acks-all")
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "ledger",
                         "request.timeout.ms": 1500, "message.timeout.ms": 4000})
    producer.init_transactions(30)
    # the write's KIP-890 verification stays on the node: only the replication is cut off
    control = broker.control()
    [coordinator] = [t["coordinator"] for t in broker.transactions() if t["transactional_id"] == "ledger"]
    if next(p for p in control.cluster()["partitions"] if p["topic"] == topic)["leader"] != coordinator:
        control.partition_move(topic=topic, partition=0, leader=coordinator)
    producer.begin_transaction()
    reports: list[str] = []
    producer.produce(topic, b"timed-out", partition=0, on_delivery=lambda err, msg: reports.append(err.name()))
    with pytest.raises(KafkaException) as failed:
        producer.flush(30)
        producer.commit_transaction(30)
    error = failed.value.args[0]
    assert (error.code(), error.fatal(), error.txn_requires_abort()) == (KafkaError._TIMED_OUT, False, True)
    assert reports == ["_MSG_TIMED_OUT"]
    assert _produce_errors(broker).get("REQUEST_TIMED_OUT", 0) >= 1  # what the broker answered
    links = control.cluster()["links"]
    assert len(links) == 2 and all(link["cut"] for link in links)  # the leader's links, both ways

    control.network_heal()  # the abort's marker can reach the leader again
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(30)
    assert_exactly_once(broker, topic, 1, [b"committed"])
