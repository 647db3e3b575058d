"""Followers replicate with Fetch requests between nodes (client id broker-N-fetcher-0),
so a request fault rule on one follower's fetches acts as a cut link does, with a stock
client (confluent-kafka): its acks=all write waits (the high watermark holds), the
follower leaves the ISR after replica.lag.time.max.ms, acks=all is then refused
NOT_ENOUGH_REPLICAS under min.insync.replicas=3, and removing the rule brings the
follower back into the ISR, after which acks=all succeeds. Nothing acknowledged is lost
or written twice."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_cluster import assert_exactly_once, read_committed

pytestmark = pytest.mark.timeout(120)
FETCH = 1


def _partition(control, topic: str) -> dict:
    return next(p for p in control.cluster()["partitions"] if p["topic"] == topic)


RULES = ({"action": "drop_response"}, {"action": "error", "error": "UNKNOWN_SERVER_ERROR"},
         {"action": "delay", "delay_ms": 120_000})


def test_a_fault_rule_on_a_followers_fetches_shrinks_the_isr_until_it_is_removed(broker_factory, topic_name):
    cluster = broker_factory({}, nodes=3, admin=True)
    control = cluster.control()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3, config={"min.insync.replicas": "3"})])[topic_name].result(10)
    state = _partition(control, topic_name)
    leader, follower = state["leader"], next(r for r in state["replicas"] if r != state["leader"])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False,
                         "retries": 0, "linger.ms": 0, "request.timeout.ms": 5000, "message.timeout.ms": 60000})
    results: dict[bytes, list] = {}

    def send(value: bytes) -> None:
        results[value] = []
        producer.produce(topic_name, value, partition=0, on_delivery=lambda err, msg: results[value].append(err))
        producer.poll(0)

    written = []
    for rule in RULES:  # each acts on replication as a cut link would
        action = rule["action"]
        added = control.fault_add(api_key=FETCH, client_id=f"broker-{follower}-fetcher-0", **rule)
        send(b"held-" + action.encode())
        assert producer.poll(1) == 0 and results[b"held-" + action.encode()] == []  # the high watermark holds
        control.clock_advance(by="31s")  # unable to fetch for longer than replica.lag.time.max.ms
        assert producer.flush(30) == 0
        assert [e.code() for e in results[b"held-" + action.encode()]] == [KafkaError.REQUEST_TIMED_OUT], action
        assert _partition(control, topic_name)["isr"] == [r for r in state["replicas"] if r != follower], action
        assert _rule_fired(control, added["id"])

        send(b"refused-" + action.encode())  # two in sync of min.insync.replicas=3: refused before the append
        assert producer.flush(30) == 0
        assert [e.code() for e in results[b"refused-" + action.encode()]] == [KafkaError.NOT_ENOUGH_REPLICAS]

        control.fault_remove(rule_id=added["id"])
        assert follower in _partition(control, topic_name)["isr"], action  # fetching again: back in the ISR
        send(b"after-" + action.encode())
        assert producer.flush(30) == 0 and results[b"after-" + action.encode()] == [None], action
        # the timed-out record was appended before the wait, as in Kafka: in the log once
        written += [b"held-" + action.encode(), b"after-" + action.encode()]
    assert leader == _partition(control, topic_name)["leader"]
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, len(written)), written)


def _rule_fired(control, rule_id: int) -> bool:
    return next(r for r in control.faults()["rules"] if r["id"] == rule_id)["fired"] > 0
