"""/metrics, the console's state and events, and the control API's transaction_abort,
on a real broker with its admin server, driven by real clients."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from click.testing import CliRunner

from broker.control.api_client import ControlRefused
from broker.commands import main
from broker.control.metrics import error_codes
from broker.testing import wait_until
from protocol import answer_wire


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory):
    from broker.testing import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("admin") / "data", admin=True).start()
    yield b
    b.stop()


def _get(broker, path: str) -> str:
    with urllib.request.urlopen(broker.admin_url + path, timeout=30) as answer:
        return answer.read().decode()


def _metric(text: str, name: str, **labels) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))) == want:
            return float(m.group(3))
    return None


def _state(broker) -> dict:
    return json.loads(_get(broker, "/console/state"))


def _open_transaction(broker, topic: str, transactional_id: str, n: int = 3) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 600_000})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(10) == 0
    return p


def test_error_codes_are_counted_per_partition():
    response = answer_wire.build_response(0, 9, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0}, {"index": 1, "error_code": 6}, {"index": 2, "error_code": 6}]}]})
    assert error_codes(response) == {0: 1, 6: 2}


def test_metrics_follow_requests_and_the_partition_state(admin_broker, topic_name):
    b = admin_broker
    b.create_topic(topic_name)
    refused = CliRunner().invoke(main, ["topics", "--bootstrap-server", b.bootstrap_servers, "create",
                                        "--topic", topic_name])
    assert "TOPIC_ALREADY_EXISTS" in refused.output
    producer = _open_transaction(b, topic_name, "metrics-" + topic_name)
    text = _get(b, "/metrics")
    assert _metric(text, "kafka_network_requestmetrics_errors_total", request="CreateTopics",
                   error="TOPIC_ALREADY_EXISTS") == 1
    assert _metric(text, "kafka_network_requestmetrics_requests_total", request="CreateTopics", version="7") >= 1
    assert any(line.startswith('kafka_network_requestmetrics_totaltime_seconds_bucket{le="+Inf",request="Produce"}')
               for line in text.splitlines())
    assert _metric(text, "eosbroker_partition_high_watermark", topic=topic_name, partition="0") == 3
    assert _metric(text, "eosbroker_partition_last_stable_offset", topic=topic_name, partition="0") == 0
    assert _metric(text, "eosbroker_partition_lso_lag", topic=topic_name, partition="0") == 3
    assert _metric(text, "eosbroker_partition_open_transactions", topic=topic_name, partition="0") == 1
    assert _metric(text, "eosbroker_transactions", state="Ongoing") >= 1
    assert _metric(text, "kafka_server_replicamanager_produceridcount") >= 1
    assert _metric(text, "kafka_server_socket_server_metrics_incoming_byte_total") > 0
    assert _metric(text, "eosbroker_asyncio_tasks") >= 2  # at least the broker's timers and this request's
    producer.commit_transaction(10)
    wait_until(lambda: _metric(_get(b, "/metrics"), "eosbroker_partition_lso_lag", topic=topic_name,
                               partition="0") == 0, 15, message="the commit marker")


def test_console_state_and_events(admin_broker, topic_name):
    b = admin_broker
    b.create_topic(topic_name)
    transactional_id = "console-" + topic_name
    producer = _open_transaction(b, topic_name, transactional_id)
    (txn,) = [t for t in _state(b)["transactions"] if t["transactional_id"] == transactional_id]
    assert txn["state"] == "Ongoing" and txn["partitions"] == [f"{topic_name}-0"] and txn["open"]
    assert txn["coordinator"] == 1 and txn["timeout_ms"] == 600_000 and txn["age_ms"] >= 0
    (part,) = [p for p in _state(b)["partitions"] if p["topic"] == topic_name]
    assert (part["last_stable_offset"], part["high_watermark"], part["open_transactions"]) == (0, 3, 1)
    assert any(p["topic"] == topic_name and p["current_txn_start_offset"] == 0 for p in _state(b)["producers"])
    with urllib.request.urlopen(b.admin_url + "/console/events", timeout=30) as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"
        line = stream.readline()
        while not line.startswith(b"data: "):
            line = stream.readline()
        event = json.loads(line[len(b"data: "):])
    assert transactional_id in {t["transactional_id"] for t in event["transactions"]}
    assert event["actions"]["abort_transaction"] == "/transactions/{transactional_id}/abort"
    producer.abort_transaction(10)

    # a group with committed offsets
    consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": topic_name + "-g",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic_name, 0, 2)], asynchronous=False)
    consumer.close()
    (group,) = [g for g in _state(b)["groups"] if g["group_id"] == topic_name + "-g"]
    assert group["offsets"] == [{"topic": topic_name, "partition": 0, "offset": 2, "pending": False,
                                 "last_stable_offset": 4, "high_watermark": 4, "lag_lso": 2, "lag_hw": 2}]


def test_transaction_abort_through_the_control_api(admin_broker, topic_name):
    b = admin_broker
    b.create_topic(topic_name)
    transactional_id = "abort-" + topic_name
    producer = _open_transaction(b, topic_name, transactional_id)
    answer = b.control().call("transaction_abort", transactional_id=transactional_id)
    assert answer["transactional_id"] == transactional_id and answer["producer_epoch"] == 1  # fenced
    wait_until(lambda: [(p["last_stable_offset"], p["high_watermark"]) for p in _state(b)["partitions"]
                        if p["topic"] == topic_name] == [(4, 4)], 15, message="the abort marker")
    b.assert_topic_holds(topic_name, [])
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)
    # not ongoing any more, and unknown ids, are refused with the field named
    with pytest.raises(ControlRefused) as refused:
        b.control().call("transaction_abort", transactional_id=transactional_id)
    assert refused.value.status == 409 and refused.value.field == "transactional_id"
    assert "has no ongoing transaction" in refused.value.message
    with pytest.raises(ControlRefused) as unknown:
        b.control().call("transaction_abort", transactional_id="never-used-" + topic_name)
    assert unknown.value.status == 404 and "has no transaction state" in unknown.value.message


def test_metrics_of_transaction_durations_and_coordinator_loads(broker_factory, topic_name):
    b = broker_factory(nodes=3, admin=True)
    b.create_topic(topic_name)
    transactional_id = "durations-" + topic_name
    producer = _open_transaction(b, topic_name, transactional_id)
    b.advance_clock("5s")  # the broker's clock: this transaction lasts at least 5 s
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"x", partition=0)
    producer.flush(10)
    producer.abort_transaction(30)

    def durations():
        text = _get(b, "/metrics")
        return (_metric(text, "eosbroker_transaction_duration_seconds_count", outcome="commit"),
                _metric(text, "eosbroker_transaction_duration_seconds_count", outcome="abort"), text)

    wait_until(lambda: durations()[:2] == (1, 1), 15, message="both transactions' markers written")
    text = durations()[2]
    assert _metric(text, "eosbroker_transaction_duration_seconds_sum", outcome="commit") >= 5
    assert _metric(text, "eosbroker_transaction_duration_seconds_bucket", outcome="commit", le="2.5") == 0
    assert _metric(text, "eosbroker_transaction_duration_seconds_bucket", outcome="commit", le="10.0") == 1

    # moving the coordinator loads its partition on the new node, with the load timed
    loads = _metric(text, "eosbroker_coordinator_partition_loads_total", coordinator="transaction") or 0
    coordinator = next(t["coordinator"] for t in b.transactions() if t["transactional_id"] == transactional_id)
    b.control().coordinator_move(transactional_id=transactional_id, to=coordinator % 3 + 1)
    wait_until(lambda: (_metric(_get(b, "/metrics"), "eosbroker_coordinator_partition_loads_total",
                                coordinator="transaction") or 0) > loads, 15, message="the coordinator load")
    text = _get(b, "/metrics")
    assert _metric(text, "kafka_server_transaction_coordinator_metrics_partition_load_time_max") >= \
        _metric(text, "kafka_server_transaction_coordinator_metrics_partition_load_time_avg") >= 0
    assert _metric(text, "kafka_server_group_coordinator_metrics_partition_load_time_max") is not None
    assert _metric(text, "eosbroker_transactions", state="CompleteAbort") == 1


def test_metrics_without_the_internal_topics(admin_broker, topic_name):
    b = admin_broker
    b.create_topic(topic_name)
    _open_transaction(b, topic_name, "internal-" + topic_name).abort_transaction(10)  # __transaction_state made
    everything = _get(b, "/metrics")
    trimmed = _get(b, "/metrics?internal=false")
    assert 'topic="__transaction_state"' in everything
    assert "__transaction_state" not in trimmed and "__consumer_offsets" not in trimmed
    assert _metric(trimmed, "eosbroker_partition_high_watermark", topic=topic_name, partition="0") == 4
    assert _metric(trimmed, "kafka_server_replicamanager_partitioncount") == _metric(
        everything, "kafka_server_replicamanager_partitioncount")  # totals still count them
    assert len(trimmed.splitlines()) < len(everything.splitlines())
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(b, "/metrics?internal=no")
    assert refused.value.code == 400 and json.loads(refused.value.read())["field"] == "internal"


def test_openapi_lists_the_metrics_and_console_routes(admin_broker):
    paths = json.loads(_get(admin_broker, "/openapi.json"))["paths"]
    assert {"/metrics", "/", "/console/state", "/console/events", "/transactions"} <= set(paths)
    assert paths["/metrics"]["get"]["parameters"][0]["name"] == "internal"
    # served without the bearer token: exempt from the document's security requirement
    assert paths["/"]["get"]["security"] == [] and paths["/openapi.json"]["get"]["security"] == []
    assert "security" not in paths["/console/state"]["get"]


def test_admin_routes_are_registered_without_deprecated_usage(tmp_path):
    import asyncio
    import warnings

    from broker.control.http_server import AdminServer
    from broker.process import Broker
    from broker.config import BrokerConfig

    async def build():
        broker = Broker(BrokerConfig(), tmp_path / "data", "127.0.0.1", 0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            AdminServer(broker)
        broker.data_dir_lock.release()

    asyncio.run(build())


def test_ctl_lists_and_aborts_transactions(admin_broker, topic_name):
    b = admin_broker
    b.create_topic(topic_name)
    transactional_id = "ctl-" + topic_name
    producer = _open_transaction(b, topic_name, transactional_id)
    ctl = ["ctl", "--admin", b.admin_url, "transactions"]
    listed = CliRunner().invoke(main, [*ctl, "list"])
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.output.splitlines()
    assert header.split() == ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "AGE-MS", "PARTITIONS"]
    (row,) = [r.split() for r in rows if r.split()[0] == transactional_id]
    assert row[1] == "Ongoing" and row[4] == "600000" and row[6] == f"{topic_name}-0"
    aborted = CliRunner().invoke(main, [*ctl, "abort", transactional_id])
    assert aborted.exit_code == 0, aborted.output
    assert f"aborted: {transactional_id} is " in aborted.output and "fenced at epoch 1" in aborted.output
    b.assert_topic_holds(topic_name, [])
    again = CliRunner().invoke(main, [*ctl, "abort", transactional_id])
    assert again.exit_code == 1 and "refused (409)" in again.output and "has no ongoing transaction" in again.output
    missing = CliRunner().invoke(main, [*ctl, "abort"])
    assert missing.exit_code == 2 and "needs the transactional id" in missing.output
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)
