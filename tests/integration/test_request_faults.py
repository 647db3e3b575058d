"""Request faults from the control API with a stock client: a lost Produce answer is
retried by the idempotent producer and deduplicated by the broker (the record is
stored once); delays and closed connections are survived; bad rules are refused."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Producer

from broker.control.api_client import ControlRefused
from broker.testing.helpers import wait_until
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
    ctl = [sys.executable, "-m", "broker.program", "ctl", "--admin", broker.admin_url, "fault"]
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


# -- matching and the error / hold actions ------------------------------------------------------


def _idempotent(bootstrap: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
                     "message.timeout.ms": 60000, "retry.backoff.ms": 50} | extra)


def _produce_all(producer: Producer, topic: str, values: list[bytes], partition: int = 0) -> list:
    errors = []
    for v in values:
        producer.produce(topic, v, partition=partition, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
    assert producer.flush(30) == 0
    return errors


def test_a_retriable_error_answer_on_one_topic_partition_is_retried_and_stored_once(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 2)
    create(broker.bootstrap, topic_name + "-other", 1)
    control = broker.control()
    rule = control.fault_add(action="error", api_key=0, topic=topic_name, partition=1, error="NOT_ENOUGH_REPLICAS",
                             count=2)
    assert rule["error"] == "NOT_ENOUGH_REPLICAS" and rule["partition"] == 1
    producer = _idempotent(broker.bootstrap)
    other = [b"o%d" % i for i in range(3)]
    assert _produce_all(producer, topic_name + "-other", other) == [None] * 3
    assert _produce_all(producer, topic_name, [b"p0"], partition=0) == [None]
    assert control.faults()["rules"][0]["matched"] == 0  # neither another topic nor another partition matched
    values = [b"v%d" % i for i in range(4)]
    assert _produce_all(producer, topic_name, values, partition=1) == [None] * 4
    [state] = control.faults()["rules"]
    assert state["fired"] == 2 and state["matched"] >= 3
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 2, 5), [b"p0", *values])
    assert_exactly_once(read_committed(broker.bootstrap, topic_name + "-other", 1, 3), other)


def test_a_fatal_error_answer_reaches_the_client_and_nothing_is_written(broker_factory, topic_name):
    from confluent_kafka import KafkaError

    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    control.fault_add(action="error", api_key=0, topic=topic_name, error="TOPIC_AUTHORIZATION_FAILED", nth=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.timeout.ms": 30000})
    errors = _produce_all(producer, topic_name, [b"refused"])
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # nth=1: only the first (a new producer: librdkafka remembers the topic's error)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.timeout.ms": 30000})
    assert _produce_all(producer, topic_name, [b"kept"]) == [None]
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 1), [b"kept"])


def test_error_answers_matched_on_transactional_id_producer_id_and_group_id(broker_factory, topic_name):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    control.fault_add(action="error", api_key=22, transactional_id="tx-faulted", error="COORDINATOR_LOAD_IN_PROGRESS",
                      count=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-faulted"})
    producer.init_transactions(30)  # retriable: retried until the rule stops firing
    [init_rule] = control.faults()["rules"]
    assert init_rule["fired"] == 2
    [txn] = [t for t in broker.transactions() if t["transactional_id"] == "tx-faulted"]
    pid_rule = control.fault_add(action="error", api_key=0, producer_id=txn["producer_id"],
                                 error="NOT_ENOUGH_REPLICAS", count=1)
    producer.begin_transaction()
    producer.produce(topic_name, b"t1", partition=0)
    producer.commit_transaction(30)
    assert [r["fired"] for r in control.faults()["rules"] if r["id"] == pid_rule["id"]] == [1]

    group = f"g-{topic_name}"
    control.fault_add(action="error", api_key=8, group_id=group, error="GROUP_AUTHORIZATION_FAILED", count=1)
    control.fault_add(action="error", api_key=8, group_id="another-group", error="GROUP_AUTHORIZATION_FAILED")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    offsets = [TopicPartition(topic_name, 0, 1)]
    with pytest.raises(KafkaException) as refused:
        consumer.commit(offsets=offsets, asynchronous=False)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    consumer.commit(offsets=offsets, asynchronous=False)
    assert consumer.committed([TopicPartition(topic_name, 0)], 10)[0].offset == 1
    consumer.close()
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 1), [b"t1"])


def test_a_held_request_waits_for_release_while_other_connections_go_on(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    rule = control.fault_add(action="hold", api_key=0, client_id="held-producer")
    held = _idempotent(broker.bootstrap, **{"client.id": "held-producer"})
    delivered = []
    held.produce(topic_name, b"held", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    wait_until(lambda: held.poll(0.05) >= 0 and control.faults()["rules"][0]["held"] == 1, timeout=30)
    free = _idempotent(broker.bootstrap, **{"client.id": "free-producer"})
    assert _produce_all(free, topic_name, [b"free"]) == [None]  # not blocked by the held request
    assert delivered == []
    released = control.fault_release(rule_id=rule["id"])
    assert released["released"] == 1
    assert held.flush(30) == 0 and delivered == [None]
    # a later match is held again until the rule is removed, which lets it go on
    held.produce(topic_name, b"held-2", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    wait_until(lambda: held.poll(0.05) >= 0 and control.faults()["rules"][0]["held"] == 1, timeout=30)
    control.fault_remove(rule_id=rule["id"])
    assert held.flush(30) == 0 and delivered == [None, None]
    with pytest.raises(ControlRefused) as gone:
        control.fault_release(rule_id=rule["id"])
    assert gone.value.status == 404
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 3), [b"held", b"free", b"held-2"])


def test_probability_with_a_seed_fires_as_the_seeded_draws_say(broker_factory, topic_name):
    import random

    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    rule = control.fault_add(action="error", api_key=0, topic=topic_name, error="NOT_ENOUGH_REPLICAS",
                             probability=0.5, seed=1234)
    assert rule["seed"] == 1234
    values = [b"s%d" % i for i in range(8)]
    assert _produce_all(_idempotent(broker.bootstrap), topic_name, values) == [None] * 8
    [state] = control.faults()["rules"]
    draws = random.Random(1234)
    assert state["fired"] == sum(draws.random() < 0.5 for _ in range(state["matched"]))
    assert state["fired"] > 0 and state["matched"] == state["fired"] + 8
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 8), values)
    unseeded = control.fault_add(action="close_before", api_key=3, probability=0.1)
    assert isinstance(unseeded["seed"], int)  # chosen and shown, so the run can be repeated


def test_firings_are_counted_on_metrics(broker_factory, topic_name):
    import urllib.request

    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    rule = control.fault_add(action="error", api_key=0, error="NOT_ENOUGH_REPLICAS", count=1)
    assert _produce_all(_idempotent(broker.bootstrap), topic_name, [b"m"]) == [None]
    control.fault_remove(rule_id=rule["id"])
    with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert f'eosbroker_fault_firings_total{{action="error",rule="{rule["id"]}"}} 1.0' in text


def test_impossible_or_malformed_rules_are_refused_naming_the_field(broker_factory):
    broker = broker_factory(admin=True)
    control = broker.control()
    cases = [
        ({"action": "error", "api_key": 22, "topic": "t", "error": "NOT_ENOUGH_REPLICAS"}, "topic"),
        ({"action": "close_before", "api_key": 0, "group_id": "g"}, "group_id"),
        ({"action": "close_before", "api_key": 18, "transactional_id": "x"}, "transactional_id"),
        ({"action": "close_before", "api_key": 0, "min_version": 40}, "min_version"),
        ({"action": "close_before", "min_version": 3}, "min_version"),
        ({"action": "close_before", "api_key": 0, "min_version": 9, "max_version": 5}, "min_version"),
        ({"action": "delay", "delay_ms": "soon"}, "delay_ms"),
        ({"action": "delay", "delay_ms": -5}, "delay_ms"),
        ({"action": "close_before", "delay_ms": "2s"}, "delay_ms"),
        ({"action": "error"}, "error"),
        ({"action": "error", "error": "NO_SUCH_ERROR"}, "error"),
        ({"action": "error", "error": "NONE"}, "error"),
        ({"action": "hold", "error": "NOT_ENOUGH_REPLICAS"}, "error"),
        ({"action": "hold", "nth": 2, "count": 1}, "nth"),
        ({"action": "hold", "probability": 1.5}, "probability"),
        ({"action": "hold", "probability": 0}, "probability"),
        ({"action": "hold", "seed": 3}, "seed"),
        ({"action": "hold", "topic_name": "t"}, "topic_name"),
        ({"action": "hold", "partition": -1}, "partition"),
    ]
    for args, field in cases:
        with pytest.raises(ControlRefused) as refused:
            control.fault_add(**args)
        assert (refused.value.status, refused.value.field) == (400, field), args
    assert control.faults()["rules"] == []
    ok = control.fault_add(action="delay", delay_ms="2s", api_key=0, max_version=9, topic="t", partition=0)
    assert ok["delay_ms"] == 2000
    ctl = [sys.executable, "-m", "broker.program", "ctl", "--admin", broker.admin_url, "fault"]
    refused = subprocess.run([*ctl, "add", "--do", "error", "--api-key", "22", "--topic", "t", "--error", "19"],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    assert "refused (400): InitProducerId" in refused.stderr and "never name a topic" in refused.stderr
    assert "[field: topic]" in refused.stderr
    assert [r["id"] for r in control.faults()["rules"]] == [ok["id"]]


def test_close_before_processing_on_a_node_and_version_range_is_retried_and_stored_once(broker_factory, topic_name):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    node_id = control.cluster()["nodes"][0]["node_id"]
    never = control.fault_add(action="close_before", api_key=0, max_version=3)  # librdkafka speaks newer
    rule = control.fault_add(action="close_before", api_key=0, min_version=4, node_id=node_id, topic=topic_name,
                             count=2)
    values = [b"c%d" % i for i in range(3)]
    assert _produce_all(_idempotent(broker.bootstrap), topic_name, values) == [None] * 3
    states = {r["id"]: r for r in control.faults()["rules"]}
    assert states[never["id"]]["matched"] == 0
    assert states[rule["id"]]["fired"] == 2 and states[rule["id"]]["matched"] >= 5
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 1, 3), values)


@pytest.mark.parametrize("action", ["drop_response", "delay"])
def test_a_marker_request_dropped_or_delayed_by_a_rule_added_later_times_out_and_is_sent_again(
        broker_factory, topic_name, action):
    """Markers between nodes of one process meet the rules added after earlier markers
    went through: the lost or late answer times out on the broker's clock and the
    marker is sent again."""
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 2)
    control = broker.control()
    node_id = control.cluster()["nodes"][0]["node_id"]
    txn_id = f"m-{topic_name}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)

    def commit(value: bytes) -> None:
        producer.begin_transaction()
        for p in (0, 1):
            producer.produce(topic_name, value, partition=p)
        assert producer.flush(30) == 0
        producer.commit_transaction(30)

    def state() -> str:
        return next(t["state"] for t in broker.transactions() if t["transactional_id"] == txn_id)

    commit(b"before")  # no rule yet
    wait_until(lambda: state() == "CompleteCommit", timeout=30)
    rule = control.fault_add(action=action, api_key=27, client_id=f"eosbroker-node-{node_id}", count=1,
                             **({"delay_ms": "60s"} if action == "delay" else {}))
    commit(b"after")
    wait_until(lambda: _rule(control, rule["id"])["fired"] == 1, timeout=30)
    assert state() == "PrepareCommit"
    control.clock_advance(by="31s")  # past the marker request's timeout, not the delay
    wait_until(lambda: state() == "CompleteCommit", timeout=30)
    assert _rule(control, rule["id"])["matched"] == 2  # the marker request was sent again
    assert_exactly_once(read_committed(broker.bootstrap, topic_name, 2, 4), [b"before", b"after"] * 2)


def _rule(control, rule_id: int) -> dict:
    return next(r for r in control.faults()["rules"] if r["id"] == rule_id)


async def test_an_abort_while_the_commit_markers_are_held_is_concurrent_not_invalid(broker_factory, topic_name):
    """librdkafka sends EndTxn(abort) right after a commit when the next transaction's
    AddPartitionsToTxn met CONCURRENT_TRANSACTIONS (it counts that request as possibly
    received). While the commit's markers are out (held by a rule here) Kafka answers
    CONCURRENT_TRANSACTIONS, which the client retries; INVALID_TXN_STATE, fatal to it,
    comes only once the commit has completed. Nothing of the commit is undone."""
    from broker.errors import code
    from broker.wire.client import KafkaConnection

    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    node_id = control.cluster()["nodes"][0]["node_id"]
    txn_id = f"held-{topic_name}"

    def state() -> str:
        return next(t["state"] for t in broker.transactions() if t["transactional_id"] == txn_id)

    async with await KafkaConnection.connect("127.0.0.1", broker.port) as conn:
        while (init := await conn.request(22, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60000,
                                                   "producer_id": -1, "producer_epoch": -1})).error_code:
            assert init.error_code == code("COORDINATOR_LOAD_IN_PROGRESS")
        pid, epoch = init.producer_id, init.producer_epoch

        async def add() -> int:
            answer = await conn.request(24, 3, {"v3_and_below_transactional_id": txn_id,
                                                "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
                                                "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
            return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

        def end(commit: bool):
            return conn.request(26, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": commit})

        assert await add() == 0
        held = control.fault_add(action="hold", api_key=27, client_id=f"eosbroker-node-{node_id}", count=1)
        assert (await end(True)).error_code == 0
        wait_until(lambda: _rule(control, held["id"])["matched"] >= 1, timeout=30)
        assert await add() == code("CONCURRENT_TRANSACTIONS")
        assert (await end(False)).error_code == code("CONCURRENT_TRANSACTIONS")
        assert state() == "PrepareCommit"
        control.fault_release(rule_id=held["id"])
        wait_until(lambda: state() == "CompleteCommit", timeout=30)
        assert (await end(False)).error_code == code("INVALID_TXN_STATE")
        assert (await end(True)).error_code == 0  # a retry of the finished commit
    assert state() == "CompleteCommit"
