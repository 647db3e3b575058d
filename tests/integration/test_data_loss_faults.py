"""Data-loss faults with confluent-kafka: an unclean leader election truncating a
partition (acknowledged acks=1 records lost, the leader epoch bumped; an idempotent
producer then gets OUT_OF_ORDER_SEQUENCE_NUMBER), and a producer's state deleted on a
partition (UNKNOWN_PRODUCER_ID under the 2.4 profile; accepted under 4.x, KIP-360)."""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from broker.control.api_client import ControlRefused
from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(180)


def _partition(control, topic: str) -> dict:
    return next(p for p in control.cluster()["partitions"] if p["topic"] == topic and p["partition"] == 0)


def _one_by_one(producer: Producer, topic: str, values: list[bytes]) -> list:
    errors: list = []
    for v in values:  # one batch each: offsets and sequences follow the values
        producer.produce(topic, v, partition=0, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
    assert producer.flush(30) == 0
    return errors


def test_an_unclean_election_loses_acknowledged_acks_1_records(broker_factory, topic_name):
    broker = broker_factory(nodes=3, admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    before = _partition(control, topic_name)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0})
    acked = [b"a%d" % i for i in range(5)]
    assert _one_by_one(producer, topic_name, acked) == [None] * 5
    new_leader = next(r for r in before["replicas"] if r != before["leader"])
    answer = control.partition_truncate(topic=topic_name, partition=0, offset=3, leader=new_leader)
    assert (answer["log_end_offset"], answer["lost_until"]) == (3, 5)
    after = _partition(control, topic_name)
    assert after["leader"] == new_leader and after["leader_epoch"] == before["leader_epoch"] + 1
    assert _one_by_one(producer, topic_name, [b"b0"]) == [None]  # the producer follows the new leader
    # exactly what was lost: the two acknowledged records from offset 3
    assert read_committed(broker.bootstrap, topic_name, 1, 4) == [b"a0", b"a1", b"a2", b"b0"]


def test_an_idempotent_producer_whose_acknowledged_batches_were_lost_gets_out_of_order_sequence(
        broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 30000})
    assert _one_by_one(producer, topic_name, [b"i%d" % i for i in range(5)]) == [None] * 5
    epoch = _partition(control, topic_name)["leader_epoch"]
    control.partition_truncate(topic=topic_name, partition=0, offset=3)
    assert _partition(control, topic_name)["leader_epoch"] == epoch + 1
    [state] = control.producers(topic=topic_name, partition=0)["producers"]
    assert state["last_sequence"] == 2  # rebuilt from what is left: sequences 3 and 4 are gone
    errors: list = []
    producer.produce(topic_name, b"i5", partition=0, on_delivery=lambda err, msg: errors.append(err))
    # sequence 5 after 2: the broker sees the gap; librdkafka fails the record and raises the
    # error as fatal (acknowledged data was lost)
    # confluent-kafka raises the fatal error out of flush (as a SystemError when it
    # surfaces inside the delivery callback)
    with pytest.raises((KafkaException, SystemError)):
        producer.flush(30)
    with pytest.raises(KafkaException) as fatal:
        producer.produce(topic_name, b"i6", partition=0)
    assert fatal.value.args[0].code() == KafkaError._FATAL
    assert [e.code() for e in errors] == [KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER]
    # The error raised out of the callback leaks a reference to the producer, so it would
    # never be destroyed and would reconnect to the stopped broker for the rest of the run.
    producer.close()
    assert read_committed(broker.bootstrap, topic_name, 1, 3) == [b"i0", b"i1", b"i2"]


@pytest.mark.parametrize("profile", ["2.4", "4.0"])
def test_a_deleted_producer_state_is_unknown_producer_id_before_kip_360_and_accepted_after(
        broker_factory, topic_name, profile):
    broker = broker_factory({"emulate.kafka.version": profile}, admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 30000})
    assert _one_by_one(producer, topic_name, [b"k0", b"k1"]) == [None, None]
    [state] = control.producers(topic=topic_name, partition=0)["producers"]
    control.producer_state_delete(topic=topic_name, partition=0, producer_id=state["producer_id"])
    assert control.producers(topic=topic_name, partition=0)["producers"] == []
    with pytest.raises(ControlRefused) as gone:
        control.producer_state_delete(topic=topic_name, partition=0, producer_id=state["producer_id"])
    assert (gone.value.status, gone.value.field) == (404, "producer_id")
    errors = _one_by_one(producer, topic_name, [b"k2"])
    assert errors == [None]  # librdkafka recovers either way
    [after] = control.producers(topic=topic_name, partition=0)["producers"]
    with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=10) as answer:
        unknown = 'kafka_network_requestmetrics_errors_total{error="UNKNOWN_PRODUCER_ID",request="Produce"}'
        answered = [line for line in answer.read().decode().splitlines() if line.startswith(unknown)]
    if profile == "2.4":
        # the broker answered UNKNOWN_PRODUCER_ID (sequence 2 from a producer it does not
        # know); librdkafka bumped its epoch and sent the batch again from sequence 0
        assert answered == [unknown + " 1.0"]
        assert (after["producer_epoch"], after["last_sequence"]) == (state["producer_epoch"] + 1, 0)
    else:
        # KIP-360: an unknown producer may resume at any sequence; nothing is answered
        assert answered == []
        assert (after["producer_epoch"], after["last_sequence"]) == (state["producer_epoch"], 2)
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 3), [b"k0", b"k1", b"k2"])


def test_bad_data_loss_faults_are_refused(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    for call, args, field, status in [
        ("partition_truncate", {"topic": topic_name, "partition": 0, "offset": 0}, "offset", 400),
        ("partition_truncate", {"topic": "nope", "partition": 0, "offset": 0}, "topic", 404),
        ("partition_truncate", {"topic": topic_name, "partition": 5, "offset": 0}, "partition", 404),
        ("partition_truncate", {"topic": "__transaction_state", "partition": 0, "offset": 0}, "topic", 400),
        ("producer_state_delete", {"topic": topic_name, "partition": 0, "producer_id": 77}, "producer_id", 404),
    ]:
        with pytest.raises(ControlRefused) as refused:
            control.call(call, **args)
        assert (refused.value.status, refused.value.field) == (status, field), (call, args)


def test_data_loss_faults_from_the_command_line(broker_factory, topic_name):
    import json
    import subprocess
    import sys

    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    assert _one_by_one(producer, topic_name, [b"c0", b"c1"]) == [None, None]
    ctl = [sys.executable, "-m", "broker.program", "ctl", "--admin", broker.admin_url, "--json", "partition"]

    def run(*args):
        done = subprocess.run([*ctl, *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    [state] = run("producers", topic_name, "0")["producers"]
    assert state["last_sequence"] == 1
    assert run("truncate", topic_name, "0", "1")["log_end_offset"] == 1
    assert run("forget-producer", topic_name, "0", str(state["producer_id"]))["producer_id"] == state["producer_id"]
    assert run("producers", topic_name, "0")["producers"] == []
    assert read_committed(broker.bootstrap, topic_name, 1, 1) == [b"c0"]
