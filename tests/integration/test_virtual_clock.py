"""The virtual clock (`ctl clock advance`): a transaction's timeout and a transactional
id's expiration happen at once when the broker's clock jumps, with stock clients."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from broker.control.api_client import ControlRefused
from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(120)


def test_clock_advance_times_out_an_open_transaction(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    before = control.clock()
    assert before["virtual"] and before["offset_ms"] == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"timed-out", partition=0)
    producer.flush(30)
    moved = control.clock_advance(by="2m")  # past transaction.timeout.ms and the abort check interval
    assert moved["offset_ms"] == 120_000 and moved["timers_fired"] >= 1
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)  # the coordinator aborted it and fenced the epoch
    assert "aborting timed-out transaction" in broker.log_text()
    fresh = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    fresh.init_transactions(30)
    fresh.begin_transaction()
    fresh.produce(topic_name, b"committed", partition=0)
    fresh.commit_transaction(30)
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 1), [b"committed"])


def test_clock_advance_refuses_bad_durations(broker_factory):
    control = broker_factory(admin=True).control()
    for bad in ("soon", "-5s", "7y", "99999999d"):
        with pytest.raises(ControlRefused) as refused:
            control.clock_advance(by=bad)
        assert (refused.value.status, refused.value.field) == (400, "by")
    assert control.clock()["offset_ms"] == 0
    assert control.clock_advance(by="1500ms")["offset_ms"] == 1500
