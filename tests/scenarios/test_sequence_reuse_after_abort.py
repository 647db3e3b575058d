"""Scenario sequence-reuse-after-abort with confluent-kafka: the lost batch times out
(an abortable _TIMED_OUT), the transaction is aborted, librdkafka bumps its epoch
before the next transaction (KIP-360), so no sequence is reused: the next transaction
commits whole, the aborted one is invisible. (A client that did reuse the sequence is
reproduced at the wire level in tests/reference/test_sequence_reuse_after_abort.py.)"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.scenarios.helpers import assert_exactly_once, bootstrap, create_topic

pytestmark = pytest.mark.timeout(90)


def test_the_next_transaction_is_whole_after_the_abort(broker_factory):
    broker = broker_factory(scenario="sequence-reuse-after-abort")
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": bootstrap(broker), "transactional.id": "reuse-app",
                         "socket.timeout.ms": 10000, "message.timeout.ms": 2000, "linger.ms": 0})
    producer.init_transactions(30)
    [before] = [t for t in broker.transactions() if t["transactional_id"] == "reuse-app"]
    producer.begin_transaction()
    reports: list[tuple[str | None, bytes]] = []
    on_delivery = lambda err, msg: reports.append((err and err.name(), msg.value()))  # noqa: E731
    producer.produce(topic, b"a0", partition=0, on_delivery=on_delivery)
    producer.flush(30)
    producer.produce(topic, b"a1", partition=0, on_delivery=on_delivery)  # appended, its answer lost
    with pytest.raises(KafkaException) as timed_out:
        producer.flush(30)
        producer.commit_transaction(30)
    error = timed_out.value.args[0]
    assert (error.code(), error.fatal(), error.txn_requires_abort()) == (KafkaError._TIMED_OUT, False, True)
    assert reports == [(None, b"a0"), ("_MSG_TIMED_OUT", b"a1")]
    producer.abort_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, b"b0", partition=0)
    producer.produce(topic, b"b1", partition=0)
    producer.commit_transaction(30)
    [after] = [t for t in broker.transactions() if t["transactional_id"] == "reuse-app"]
    assert after["producer_id"] == before["producer_id"]
    assert after["producer_epoch"] > before["producer_epoch"]  # bumped: sequences start again at 0
    assert "reused sequences" not in broker.log_text()
    [rule] = broker.control().faults()["rules"]
    assert rule["fired"] == 1
    assert_exactly_once(broker, topic, 1, [b"b0", b"b1"])
