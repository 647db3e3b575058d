"""Several nodes in one process (`serve --nodes 3`) and the control API that drives
them: metadata with leaders, replicas and epochs, failover when a node stops, the
HTTP API's answers to bad input, the OpenAPI document and `eosbroker ctl`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.control.api_client import ControlRefused
from broker.control.operations import OPERATIONS

HOST = "127.0.0.1"


@pytest.fixture
def cluster(broker_factory):
    return broker_factory(nodes=3, admin=True)


def create(bootstrap: str, topic: str, partitions: int = 3, replication: int = -1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(10)


def leaders(broker, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) as the control API reports them."""
    return {p["partition"]: (p["leader"], p["leader_epoch"]) for p in broker.control().cluster()["partitions"]
            if p["topic"] == topic}


def read_committed(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30) -> list[bytes]:
    """Every committed record of the topic from its log start, read until ``expected`` arrived
    and a quiet second passed (so a duplicate would be seen)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline and (len(out) < expected or time.monotonic() - quiet_since < 1.0):
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            out.append(msg.value())
            quiet_since = time.monotonic()
    consumer.close()
    return out


def assert_exactly_once(got: list[bytes], committed: list[bytes]) -> None:
    """Every committed record once, nothing else (nothing aborted, nothing lost)."""
    assert sorted(got) == sorted(committed), (
        f"missing {sorted(set(committed) - set(got))[:5]}, unexpected {sorted(set(got) - set(committed))[:5]}, "
        f"duplicated {len(got) - len(set(got))}")


# -- metadata -------------------------------------------------------------------------------


def test_three_nodes_each_listen_and_lead_a_share(cluster, topic_name):
    assert sorted(cluster.node_ports) == [1, 2, 3]
    create(cluster.bootstrap, topic_name)
    for node_id, port in cluster.node_ports.items():  # every node answers Metadata with every node
        md = AdminClient({"bootstrap.servers": f"{HOST}:{port}"}).list_topics(topic_name, timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        parts = md.topics[topic_name].partitions
        assert sorted(p.leader for p in parts.values()) == [1, 2, 3]
        assert all(sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] for p in parts.values())


def test_stop_moves_leaders_with_a_new_epoch_and_start_rejoins(cluster, topic_name):
    create(cluster.bootstrap, topic_name)
    before = leaders(cluster, topic_name)
    control = cluster.control()
    answer = control.node_stop(node_id=2)
    assert answer["node"]["state"] == "stopped"
    after = leaders(cluster, topic_name)
    for p, (leader, epoch) in before.items():
        if leader == 2:
            assert after[p][0] in (1, 3) and after[p][1] == epoch + 1
        else:
            assert after[p] == (leader, epoch)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic_name, timeout=10)
    assert sorted(md.brokers) == [1, 3]
    assert all(2 not in p.isrs for p in md.topics[topic_name].partitions.values())
    control.node_start(node_id=2)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic_name, timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert all(sorted(p.isrs) == [1, 2, 3] for p in md.topics[topic_name].partitions.values())
    control.leaders_elect()
    assert {p: l for p, (l, _) in leaders(cluster, topic_name).items()} == {p: l for p, (l, _) in before.items()}


# -- exactly once across nodes ---------------------------------------------------------------


def test_transactions_across_nodes_survive_a_leader_stop(cluster, topic_name):
    create(cluster.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"x-{topic_name}",
                         "transaction.timeout.ms": 20000})
    producer.init_transactions(20)
    committed: list[bytes] = []

    def transaction(n: int, commit: bool) -> None:
        producer.begin_transaction()
        values = [f"{n}-{p}".encode() for p in range(3)]
        for p, v in enumerate(values):
            producer.produce(topic_name, v, partition=p)
        if commit:
            producer.commit_transaction(30)
            committed.extend(values)
        else:
            producer.abort_transaction(30)

    transaction(0, True)
    transaction(1, False)
    cluster.control().node_stop(node_id=2)  # leads one of the partitions
    transaction(2, True)
    transaction(3, False)
    cluster.control().node_start(node_id=2)
    cluster.control().leaders_elect()
    transaction(4, True)
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 3, len(committed)), committed)


# -- the control API -------------------------------------------------------------------------


def test_control_api_refuses_bad_input_naming_the_field(cluster, topic_name):
    create(cluster.bootstrap, topic_name)
    control = cluster.control()
    cases = [
        (lambda: control.request("POST", "/nodes/x/stop"), 400, "node_id"),
        (lambda: control.request("POST", "/nodes/-1/stop"), 400, "node_id"),
        (lambda: control.node_stop(node_id=9), 404, "node_id"),
        (lambda: control.request("POST", "/nodes/1/stop", {"force": True}), 400, "force"),
        (lambda: control.partition_move(topic="nope", partition=0, leader=1), 404, "topic"),
        (lambda: control.partition_move(topic=topic_name, partition=7, leader=1), 404, "partition"),
        (lambda: control.partition_move(topic=topic_name, partition=0, leader=9), 404, "leader"),
        (lambda: control.partition_move(topic=topic_name, partition=0, replicas=[1, 1]), 400, "replicas"),
        (lambda: control.request("POST", f"/partitions/{topic_name}/0/move", {"leader": "2"}), 400, "leader"),
        (lambda: control.coordinator_move(to=1), 400, "transactional_id"),
        (lambda: control.coordinator_move(group_id="g", transactional_id="t", to=1), 400, "group_id"),
        (lambda: control.request("POST", "/coordinators/move", {"group_id": "g"}), 400, "to"),
        (lambda: control.node_resume(node_id=2) and control.node_start(node_id=2), 409, "node_id"),
    ]
    for call, status, field in cases:
        with pytest.raises(ControlRefused) as refused:
            call()
        assert (refused.value.status, refused.value.field) == (status, field), refused.value
    req = urllib.request.Request(cluster.admin_url + "/nodes/1/stop", data=b"[1", method="POST")
    with pytest.raises(urllib.error.HTTPError) as bad_json:
        urllib.request.urlopen(req, timeout=10)
    assert bad_json.value.code == 400 and json.loads(bad_json.value.read())["field"] == "body"
    control.node_stop(node_id=1)
    control.node_kill(node_id=2)
    with pytest.raises(ControlRefused) as last:
        control.node_stop(node_id=3)
    assert (last.value.status, last.value.field) == (409, "node_id")
    assert "last live node" in last.value.message
    assert "stopped node 1" in cluster.log_text() and "killed node 2" in cluster.log_text()


def test_openapi_document_describes_every_operation(cluster):
    with urllib.request.urlopen(cluster.admin_url + "/openapi.json", timeout=10) as r:
        document = json.loads(r.read())
    ids = {op["operationId"] for methods in document["paths"].values() for op in methods.values()}
    assert {op.name for op in OPERATIONS} <= ids
    assert document["paths"]["/nodes/{node_id}/stop"]["post"]["parameters"][0]["schema"]["type"] == "integer"


def test_admin_token_is_required_when_set(broker_factory, monkeypatch):
    monkeypatch.setenv("EOSBROKER_ADMIN_TOKEN", "s3cret")
    broker = broker_factory(nodes=2, admin=True)
    with pytest.raises(ControlRefused) as refused:
        broker.control().cluster()
    assert (refused.value.status, refused.value.field) == (401, "Authorization")
    from broker.control.api_client import ControlClient

    assert len(ControlClient(broker.admin_url, token="s3cret").cluster()["nodes"]) == 2


def test_ctl_prints_the_cluster_and_moves_a_partition(cluster, topic_name):
    create(cluster.bootstrap, topic_name)
    ctl = [sys.executable, "-m", "broker.program", "ctl", "--admin", cluster.admin_url]
    moved = subprocess.run([*ctl, "partition", "move", topic_name, "0", "--leader", "3"],
                           capture_output=True, text=True, timeout=30)
    assert moved.returncode == 0, moved.stderr
    assert f"{topic_name}-0: leader 3 epoch 1" in moved.stdout
    table = subprocess.run([*ctl, "cluster"], capture_output=True, text=True, timeout=30)
    assert table.returncode == 0, table.stderr
    assert "NODE" in table.stdout and "running" in table.stdout
    row = next(line.split() for line in table.stdout.splitlines() if line.startswith(topic_name + " "))
    assert row[1:4] == ["0", "3", "1"]
    refused = subprocess.run([*ctl, "node", "stop", "7"], capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "node_id" in refused.stderr
