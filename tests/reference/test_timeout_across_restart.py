"""A transaction whose timeout passes while the broker is down (kill -9, restart), with
the timer that aborts timed-out transactions set an hour off on both brokers, so only
what the restart itself does decides.

Apache Kafka 4.4 does not abort it while loading __transaction_state: the producer's
commit after the restart succeeds (only the abort timer, whose first run comes one
interval after start-up, would have aborted it, if it ran before the client's EndTxn).
eosbroker fences and aborts it at load, before any request is served, so the outcome
does not depend on that race: README "Differences from Apache Kafka"."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.broker_process import BrokerProcess
from tests.integration.test_cluster import create, read_committed
from tests.reference.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.timeout(600), pytest.mark.reference_extended]  # a Kafka of its own, killed and restarted
TIMER_OFF = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000}


def _commit_after_outage(broker, restart) -> tuple[str, list[bytes]]:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"r-{topic}",
                         "transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"outlived", partition=0)
    assert producer.flush(30) == 0
    restart(lambda: time.sleep(3.0))  # down past the transaction's timeout
    try:
        producer.commit_transaction(60)
        outcome = "committed"
    except KafkaException as e:
        error = e.args[0]
        fenced = error.code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.PRODUCER_FENCED)
        outcome = "fenced" if fenced else error.name()
    return outcome, read_committed(broker.bootstrap, topic, 1, 1, timeout=5)


def test_the_producer_of_a_transaction_timed_out_while_the_broker_was_down_is_fenced(tmp_path):
    outcomes = {}
    kafka = KafkaBroker(tmp_path / "kafka", TIMER_OFF).start()
    try:
        def restart_kafka(down):
            kafka.kill()
            down()
            kafka.start(port=kafka.port)
        outcomes["kafka"] = _commit_after_outage(kafka, restart_kafka)
    finally:
        kafka.stop()
    eos = BrokerProcess(tmp_path / "eos" / "data", TIMER_OFF).start()
    try:
        def restart_eos(down):
            eos.kill()
            down()
            eos.start()
        outcomes["eosbroker"] = _commit_after_outage(eos, restart_eos)
    finally:
        eos.stop()
    assert outcomes == {"kafka": ("committed", [b"outlived"]), "eosbroker": ("fenced", [])}, outcomes
