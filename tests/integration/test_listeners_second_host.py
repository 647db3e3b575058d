"""A second host, made of a network namespace: a client there reaches the broker
through the INTERNAL listener's advertised address, while one on 127.0.0.1 uses
EXTERNAL; each writes a transaction the other reads in a consumer group. One
transactional id and one group serve both: the second host's producer fences this
host's, and this host's consumer resumes the second host's group where it committed.

The test makes a namespace and a veth pair with addresses of its own (10.200.X.1/30 in
this namespace, .2 in the other) and removes them; traffic stays between the two. It
is skipped where namespaces cannot be made (no root, no ip, a container without
CAP_SYS_ADMIN)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.helpers import free_port_block

ROOT = Path(__file__).parents[2]

# run inside the namespace: the broker it sees, then a transaction and a group
SECOND_HOST_CLIENT = r"""
import json, sys
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

bootstrap, write_topic, read_topic, group, transactional_id = sys.argv[1:6]
brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).brokers
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(3):
    producer.produce(write_topic, f"from-second-host-{i}".encode())
producer.commit_transaction(30)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
consumer.subscribe([read_topic])
got = []
for _ in range(120):
    msg = consumer.poll(0.5)
    if msg is not None and not msg.error():
        got.append(msg.value().decode())
        if len(got) == 3:
            consumer.commit(asynchronous=False)
            break
consumer.close()
print(json.dumps({"brokers": sorted([b.id, b.host, b.port] for b in brokers.values()), "read": sorted(got)}))
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def second_host():
    """(namespace name, this side's address, the other side's address)."""
    if shutil.which("ip") is None:
        pytest.skip("no ip command")
    name = f"eosb-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    if _ip("netns", "add", name, check=False).returncode != 0:
        pytest.skip("ip netns is not permitted here")
    used = _ip("-4", "addr").stdout
    subnet = next(f"10.200.{x}" for x in random.sample(range(256), 256) if f"10.200.{x}." not in used)
    here, there = f"{subnet}.1", f"{subnet}.2"
    veth = f"ve{uuid.uuid4().hex[:8]}"
    try:
        _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        _ip("link", "set", f"{veth}p", "netns", name)
        _ip("addr", "add", f"{here}/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{there}/30", "dev", f"{veth}p")
        _ip("netns", "exec", name, "ip", "link", "set", f"{veth}p", "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name, here, there
    finally:
        _ip("link", "del", veth, check=False)  # also removes its peer
        _ip("netns", "del", name, check=False)


def test_a_client_on_a_second_host_uses_internal_and_one_here_uses_external(second_host, tmp_path):
    namespace, here, _ = second_host
    internal, external = free_port_block(2), free_port_block(2)
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker.program", "serve", "--nodes", "2", "--data-dir", str(tmp_path / "data"),
         "--override", f"listeners=INTERNAL://{here}:{internal},EXTERNAL://127.0.0.1:{external}",
         "--override", "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
         "--override", "inter.broker.listener.name=INTERNAL",
         "--override", "group.initial.rebalance.delay.ms=0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [broker.stdout.readline() for _ in range(2)]
        assert all("listening on" in line for line in lines), (lines, broker.stderr.read())
        suffix = uuid.uuid4().hex[:6]
        from_there, from_here = f"from-there-{suffix}", f"from-here-{suffix}"
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{external}"})
        for future in admin.create_topics([NewTopic(t, 2) for t in (from_there, from_here)]).values():
            future.result(10)
        transactional_id, group_there = f"shared-{suffix}", f"second-host-{suffix}"
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{external}", "transactional.id": transactional_id})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(from_here, f"from-this-host-{i}".encode())
        producer.commit_transaction(30)

        client = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, "-c", SECOND_HOST_CLIENT, f"{here}:{internal}",
             from_there, from_here, group_there, transactional_id],
            capture_output=True, text=True, timeout=180, cwd=ROOT)
        assert client.returncode == 0, client.stderr
        seen_there = json.loads(client.stdout.splitlines()[-1])
        assert seen_there == {"brokers": [[1, here, internal], [2, here, internal + 1]],
                              "read": [f"from-this-host-{i}" for i in range(3)]}

        brokers = admin.list_topics(timeout=10).brokers
        assert sorted((b.id, b.host, b.port) for b in brokers.values()) == [
            (1, "127.0.0.1", external), (2, "127.0.0.1", external + 1)]
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{external}", "group.id": f"this-host-{suffix}",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe([from_there])
        got = []
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value().decode())
                if len(got) == 3:
                    break
        consumer.close()
        assert sorted(got) == [f"from-second-host-{i}" for i in range(3)]
        # the second host's group committed through INTERNAL; seen here through EXTERNAL
        # (at least past the 3 records: a position may also be past a commit marker)
        committed = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_there)])[group_there].result(10)
        assert sum(tp.offset for tp in committed.topic_partitions if tp.topic == from_here) >= 3

        # the transactional id's coordinator saw the second host's producer (INTERNAL) take it over
        producer.begin_transaction()
        producer.produce(from_here, b"from-a-fenced-producer")
        with pytest.raises(KafkaException) as fenced:
            producer.commit_transaction(30)
        assert fenced.value.args[0].code() == KafkaError._FENCED, fenced.value
        del producer
        # the second host's group, joined here: it resumes past what was committed there
        successor = Producer({"bootstrap.servers": f"127.0.0.1:{external}", "transactional.id": transactional_id})
        successor.init_transactions(30)
        successor.begin_transaction()
        for partition in range(2):
            successor.produce(from_here, f"after-the-commit-{partition}".encode(), partition=partition)
        successor.commit_transaction(30)
        resumed = Consumer({"bootstrap.servers": f"127.0.0.1:{external}", "group.id": group_there,
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        resumed.subscribe([from_here])
        got = []
        for _ in range(120):
            msg = resumed.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value().decode())
                if len(got) == 2:
                    break
        resumed.close()
        assert sorted(got) == ["after-the-commit-0", "after-the-commit-1"]
    finally:
        broker.terminate()
        broker.wait(30)
