"""``eosbroker topics`` against a real broker: create (with configs), list, describe,
delete, and every way the input can be wrong."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, ConfigResource

from broker.commands import main


def topics(bootstrap: str, *args: str):
    return CliRunner().invoke(main, ["topics", "--bootstrap-server", bootstrap, *args])


def test_create_list_describe_delete(shared_broker, topic_name):
    b = shared_broker.bootstrap_servers
    r = topics(b, "create", "--topic", topic_name, "--partitions", "3",
               "--config", "cleanup.policy=compact", "--config", "retention.ms=60000")
    assert r.exit_code == 0, r.output
    assert r.output == f"Created topic {topic_name}.\n"

    # another client sees what the tool made
    admin = AdminClient({"bootstrap.servers": b})
    (future,) = admin.describe_configs([ConfigResource("topic", topic_name)]).values()
    configs = {name: entry.value for name, entry in future.result(10).items()}
    assert configs["cleanup.policy"] == "compact" and configs["retention.ms"] == "60000"
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 3

    listed = topics(b, "list")
    assert listed.exit_code == 0 and topic_name in listed.output.split()

    d = topics(b, "describe", "--topic", topic_name)
    assert d.exit_code == 0, d.output
    head, *parts = d.output.splitlines()
    assert head.startswith(f"Topic: {topic_name}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\t" in head
    assert head.endswith("Configs: cleanup.policy=compact,retention.ms=60000")
    assert [p.split("\t")[2] for p in parts] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert all("Leader: " in p and "Replicas: " in p and "Isr: " in p for p in parts)

    r = topics(b, "delete", "--topic", topic_name)
    assert r.exit_code == 0 and r.output == f"Deleted topic {topic_name}.\n"
    assert topic_name not in topics(b, "list").output.split()


def test_list_excludes_internal_topics_when_asked(shared_broker, topic_name):
    from confluent_kafka import Producer

    b = shared_broker.bootstrap_servers
    shared_broker.create_topic(topic_name)
    p = Producer({"bootstrap.servers": b, "transactional.id": topic_name})
    p.init_transactions(10)  # makes __transaction_state
    assert "__transaction_state" in topics(b, "list").output.split()
    names = topics(b, "list", "--exclude-internal").output.split()
    assert topic_name in names and not any(n.startswith("__") for n in names)


def test_existing_and_missing_topics(shared_broker, topic_name):
    b = shared_broker.bootstrap_servers
    assert topics(b, "create", "--topic", topic_name).exit_code == 0
    again = topics(b, "create", "--topic", topic_name)
    assert again.exit_code == 1
    assert f"cannot create topic {topic_name}: TOPIC_ALREADY_EXISTS" in again.output
    tolerated = topics(b, "create", "--topic", topic_name, "--if-not-exists")
    assert tolerated.exit_code == 0 and "already exists" in tolerated.output

    missing = topic_name + "-missing"
    d = topics(b, "describe", "--topic", missing)
    assert d.exit_code == 1 and f"cannot describe topic {missing}: UNKNOWN_TOPIC_OR_PARTITION" in d.output
    gone = topics(b, "delete", "--topic", missing)
    assert gone.exit_code == 1 and f"cannot delete topic {missing}: UNKNOWN_TOPIC_OR_PARTITION" in gone.output
    assert topics(b, "delete", "--topic", missing, "--if-exists").exit_code == 0


@pytest.mark.parametrize("args, message", [
    (["create", "--topic", "x", "--config", "novalue"], "expected KEY=VALUE, got 'novalue'"),
    (["create", "--topic", "x", "--partitions", "0"], "0 is not in the range x>=1"),
    (["create", "--topic", "x", "--config", "no.such.config=1"], "cannot create topic x: INVALID_CONFIG"),
    (["create", "--topic", "bad/name"], "cannot create topic bad/name: INVALID_TOPIC_EXCEPTION"),
    (["create"], "Missing option '--topic'"),
    (["frobnicate"], "No such command 'frobnicate'"),
])
def test_bad_input_is_a_clear_error(shared_broker, args, message):
    r = topics(shared_broker.bootstrap_servers, *args)
    assert r.exit_code in (1, 2)
    assert message in r.output


def test_unreachable_or_malformed_bootstrap():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = topics(f"127.0.0.1:{port}", "list")
    assert r.exit_code == 1 and "cannot reach any bootstrap server" in r.output
    r = topics("no-port-here", "list")
    assert r.exit_code == 1 and "invalid --bootstrap-server entry 'no-port-here'" in r.output
