"""Admin answers the clients' own test suites compare with Apache Kafka's: CreatePartitions
with replica assignments, DescribeUserScramCredentials of all users, the topic configs
Kafka 4.x describes and accepts, and AlterConfigs on the broker resource. Each scenario
runs against eosbroker and Kafka 4.4 and the answers must be equal."""

from __future__ import annotations

import asyncio
import time

from broker.client import KafkaConnection

HOST = "127.0.0.1"


async def _create(conn: KafkaConnection, topic: str, partitions: int = 1, configs: dict | None = None) -> int:
    r = await conn.request(19, 7, {"topics": [{
        "name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 10000, "validate_only": False})
    return r.topics[0].error_code


async def _partition_count(conn: KafkaConnection, topic: str) -> int:
    r = await conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
    return len(r.topics[0].partitions)


async def _settled_count(conn: KafkaConnection, topic: str, count: int) -> int:
    """The topic's partition count once it reaches ``count`` (Kafka's metadata reaches the
    broker a little after the controller answers), or what it is after a while."""
    deadline = time.monotonic() + 15
    while (seen := await _partition_count(conn, topic)) != count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return seen


# --- CreatePartitions --------------------------------------------------------------------------

# (label, count, assignments): each refused, the topic (one partition) left as it was
CREATE_PARTITIONS_REFUSED = [
    ("fewer assignments than partitions", 3, [[1]]),
    ("more assignments than partitions", 2, [[1], [1]]),
    ("a broker twice", 2, [[1, 1]]),
    ("an unknown broker", 2, [[7]]),
    ("an empty replica list", 2, [[]]),
    ("no increase", 1, None),
    ("a decrease", 0, None),
]


async def _create_partitions(port: int, topic: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        assert await _create(conn, topic) == 0
        answers = {}

        async def ask(name, count, assignments, validate_only):
            r = await conn.request(37, 3, {"topics": [{"name": name, "count": count, "assignments": None if assignments
                                                       is None else [{"broker_ids": a} for a in assignments]}],
                                           "timeout_ms": 10000, "validate_only": validate_only})
            result = r.results[0]
            return result.error_code, result.error_message and result.error_message.replace(topic, "T")

        for validate_only in (True, False):
            for label, count, assignments in CREATE_PARTITIONS_REFUSED:
                answers[label, validate_only] = await ask(topic, count, assignments, validate_only)
            answers["unknown topic", validate_only] = await ask(topic + "-none", 2, None, validate_only)
        answers["still one partition"] = await _partition_count(conn, topic)
        answers["valid assignment"] = await ask(topic, 3, [[1], [1]], False)
        answers["now three"] = await _settled_count(conn, topic, 3)
        return answers


async def test_create_partitions_checks_assignments_as_kafka(brokers, topic_name):
    answers = {name: await _create_partitions(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"]
    assert answers["kafka"]["a broker twice", False] == (
        39, "The manual partition assignment includes the broker 1 more than once.")
    assert answers["kafka"]["now three"] == 3


# --- DescribeUserScramCredentials --------------------------------------------------------------


async def _scram_users(port: int, user: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        r = await conn.request(51, 0, {"deletions": [], "upsertions": [{
            "name": user, "mechanism": 2, "iterations": 8192, "salt": b"salt", "salted_password": b"x" * 64}]})
        assert r.results[0].error_code == 0
        described = {}
        for label, users in (("empty list", []), ("null", None), ("named", [{"name": user}])):
            r = await conn.request(50, 0, {"users": users})
            described[label] = (r.error_code, [(u.user, u.error_code, [(c.mechanism, c.iterations) for c in
                                                                        u.credential_infos])
                                               for u in r.results if u.user == user])
        return described


async def test_describe_scram_credentials_of_all_users(brokers, topic_name):
    answers = {name: await _scram_users(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    for name, described in answers.items():
        assert described["empty list"] == described["null"] == described["named"] == (
            0, [(f"{topic_name}-{name}", 0, [(2, 8192)])]), name
