"""Request faults from the control API with a stock client: a lost Produce answer is
retried by the idempotent producer and deduplicated by the broker (the record is
stored once); delays and closed connections are survived; bad rules are refused."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Producer

from broker.admin.client import ControlRefused
from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(120)


def test_a_lost_produce_answer_is_deduplicated_on_retry(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    rule = control.fault_add(action="drop_response", api_key=0, count=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "socket.timeout.ms": 2000, "message.timeout.ms": 60000})
    delivered = []
    values = [b"r%d" % i for i in range(5)]
    for v in values:
        producer.produce(topic_name, v, partition=0, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * 5
    [state] = control.faults()["rules"]
    assert state["id"] == rule["id"] and state["fired"] == 1 and state["matched"] >= 2
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 5), values)


def test_delay_and_close_rules_are_survived(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    control.fault_add(action="delay", api_key=0, delay_ms=300, count=2)
    control.fault_add(action="close_after", api_key=0, skip=2, count=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 60000})
    values = [b"d%d" % i for i in range(6)]
    for v in values:
        producer.produce(topic_name, v, partition=0)
        producer.flush(30)
    assert [r["fired"] for r in control.faults()["rules"]] == [2, 1]
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 6), values)
    ctl = [sys.executable, "-m", "broker.cli", "ctl", "--admin", broker.admin_url, "fault"]
    listed = subprocess.run([*ctl, "list"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and '"close_after"' in listed.stdout
    assert subprocess.run([*ctl, "clear"], capture_output=True, text=True, timeout=30).returncode == 0
    assert control.faults()["rules"] == []


def test_bad_fault_rules_are_refused(broker_factory):
    control = broker_factory(admin=True).control()
    for args, field in [({"action": "explode"}, "action"), ({"action": "delay"}, "delay_ms"),
                        ({"action": "drop_response", "api_key": 999}, "api_key"),
                        ({"action": "drop_response", "node_id": 7}, "node_id"),
                        ({"action": "drop_response", "count": 0}, "count")]:
        with pytest.raises(ControlRefused) as refused:
            control.fault_add(**args)
        assert refused.value.field == field
    with pytest.raises(ControlRefused) as missing:
        control.fault_remove(rule_id=42)
    assert (missing.value.status, missing.value.field) == (404, "rule_id")
    assert control.faults()["rules"] == []
