"""Admin answers the clients' own test suites compare with Apache Kafka's: CreatePartitions
with replica assignments, DescribeUserScramCredentials of all users, the topic configs
Kafka 4.x describes and accepts, and AlterConfigs on the broker resource. Each scenario
runs against eosbroker and Kafka 4.4 and the answers must be equal."""

from __future__ import annotations

import asyncio
import time

from broker.wire.client import KafkaConnection

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


# --- topic configs: Kafka 4.x ------------------------------------------------------------------

# The broker settings of Kafka's reference broker that are topic defaults, for eosbroker too,
# and the 4.4 profile (eligible leader replicas on, as in every new Kafka 4.1+ cluster)
KAFKA_4_4_TOPIC_DEFAULTS = {"emulate.kafka.version": "4.4", "min.insync.replicas": "1",
                            "log.flush.interval.messages": str(2**63 - 1)}
EMPTY_ITEM = (40, "Configuration 'cleanup.policy' values must not be empty.")


async def _describe_topic(conn: KafkaConnection, topic: str) -> dict[str, tuple]:
    r = await conn.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
                                   "include_synonyms": False, "include_documentation": False})
    return {c.name: (c.value, c.config_source, c.read_only, c.config_type, c.is_sensitive) for c in r.results[0].configs}


async def _settled_description(conn: KafkaConnection, topic: str, policy: str) -> dict[str, tuple]:
    """The description once it shows cleanup.policy ``policy`` (Kafka's brokers learn a
    change a little after the controller accepts it)."""
    deadline = time.monotonic() + 15
    while (described := await _describe_topic(conn, topic))["cleanup.policy"][0] != policy:
        assert time.monotonic() < deadline, described["cleanup.policy"]
        await asyncio.sleep(0.1)
    return described


async def _cleanup_policy_changes(port: int, topic: str):
    """confluent-kafka-python's incremental-alter test, then the edges of an empty policy."""
    async with await KafkaConnection.connect(HOST, port) as conn:
        assert await _create(conn, topic, configs={"compression.type": "gzip"}) == 0
        assert await _create(conn, topic + "-empty", configs={"cleanup.policy": ""}) == 0
        answers = {}

        async def alter(op: int, value: str | None, name="cleanup.policy", api=44):
            body = {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [
                {"name": name, "config_operation": op, "value": value} if api == 44 else {"name": name, "value": value}]}],
                "validate_only": False}
            r = await conn.request(api, 1, body)
            return r.responses[0].error_code, r.responses[0].error_message

        answers["subtract the last policy"] = await alter(3, "delete")
        answers["retention.ms"] = await alter(0, "5000", "retention.ms")
        answers["described"] = await _settled_description(conn, topic, "")
        answers["append an empty item to none"] = await alter(2, "")
        answers["set an empty item"] = await alter(0, "delete,,compact")
        answers["subtract nothing"] = await alter(3, "")
        answers["append compact"] = await alter(2, "compact,")
        answers["compact"] = (await _settled_description(conn, topic, "compact"))["cleanup.policy"]
        answers["append an empty item"] = await alter(2, "")
        answers["AlterConfigs to empty"] = await alter(0, "", api=33)
        answers["empty again"] = (await _settled_description(conn, topic, ""))["cleanup.policy"]
        answers["created empty"] = (await _settled_description(conn, topic + "-empty", ""))["cleanup.policy"]
        return answers


async def test_empty_cleanup_policy_and_the_described_topic_configs(broker_factory, kafka_broker, topic_name):
    eos = broker_factory(KAFKA_4_4_TOPIC_DEFAULTS)
    answers = {name: await _cleanup_policy_changes(b.port, f"{topic_name}-{name}")
               for name, b in (("eosbroker", eos), ("kafka", kafka_broker))}
    assert answers["eosbroker"] == answers["kafka"]
    kafka = answers["kafka"]
    assert kafka["subtract the last policy"] == (0, None)
    assert kafka["append an empty item"] == kafka["set an empty item"] == EMPTY_ITEM
    # confluent-kafka-python expects these among the non-default entries (4.1+)
    assert {n for n, (_, source, *_) in kafka["described"].items() if source != 5} == {
        "cleanup.policy", "compression.type", "flush.messages", "min.insync.replicas", "retention.ms"}


async def test_cluster_level_min_insync_replicas_stays(broker_factory, kafka_broker):
    """Kafka 4.1+ writes min.insync.replicas as a cluster-wide dynamic default and refuses
    to remove it while eligible leader replicas are on."""
    eos = broker_factory(KAFKA_4_4_TOPIC_DEFAULTS)
    answers = {}
    for name, b in (("eosbroker", eos), ("kafka", kafka_broker)):
        async with await KafkaConnection.connect(HOST, b.port) as conn:
            r = await conn.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
                {"name": "min.insync.replicas", "config_operation": 1, "value": None}]}], "validate_only": False})
            removed = (r.responses[0].error_code, r.responses[0].error_message)
            r = await conn.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "",
                                                          "configuration_keys": ["min.insync.replicas"]}],
                                           "include_synonyms": False, "include_documentation": False})
            answers[name] = removed, [(c.name, c.value, c.config_source) for c in r.results[0].configs]
    assert answers["eosbroker"] == answers["kafka"] == (
        (40, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."),
        [("min.insync.replicas", "1", 3)])


# --- broker resource: every setting Kafka knows -----------------------------------------------

# These depend on the listeners a broker runs with (Kafka checks the new value against them)
LISTENER_DEPENDENT = {"listeners", "listener.security.protocol.map"}
# (resource name, setting, value): accepted, refused as read-only, per-listener only, cluster
# level refused, badly typed or out of range, an unknown name (which Kafka accepts)
BROKER_CHANGES = [
    ("1", "sasl.kerberos.min.time.before.relogin", "58000"), ("", "sasl.kerberos.min.time.before.relogin", "58000"),
    ("1", "listener.name.plaintext.sasl.kerberos.min.time.before.relogin", "58000"),
    ("", "listener.name.plaintext.sasl.kerberos.min.time.before.relogin", "58000"),
    ("1", "log.dirs", "/tmp/x"), ("1", "node.id", "3"), ("1", "auto.create.topics.enable", "false"),
    ("1", "ssl.keystore.location", "/x"), ("", "ssl.truststore.password", "x"),
    ("1", "num.io.threads", "4"), ("", "num.io.threads", "0"), ("1", "log.retention.ms", "abc"),
    ("1", "sasl.kerberos.ticket.renew.jitter", "abc"), ("1", "log.cleanup.policy", "bogus"),
    ("1", "compression.type", "lz9"), ("1", "message.max.bytes", "-5"), ("1", "ssl.engine.factory.class", " "),
    ("1", "log.cleanup.policy", "delete,,compact"), ("1", "log.cleanup.policy", ""),
    ("1", "no.such.setting", "1"), ("2", "log.retention.ms", "1"), ("1", "min.insync.replicas", "2"),
]


async def _broker_changes(port: int, changes: list[tuple[str, str, str]], validate_only: bool = True) -> list:
    out = []
    async with await KafkaConnection.connect(HOST, port) as conn:
        for resource, name, value in changes:
            for api, version, entry in ((33, 2, {"name": name, "value": value}),
                                        (44, 1, {"name": name, "config_operation": 0, "value": value})):
                r = await conn.request(api, version, {"resources": [{"resource_type": 4, "resource_name": resource,
                                                                     "configs": [entry]}], "validate_only": validate_only})
                out.append((api, resource, name, r.responses[0].error_code, r.responses[0].error_message))
    return out


async def test_broker_resource_takes_kafkas_setting_names_as_kafka(broker_factory, kafka_broker):
    eos = broker_factory(KAFKA_4_4_TOPIC_DEFAULTS)
    answers = {name: await _broker_changes(b.port, BROKER_CHANGES) for name, b in (("eosbroker", eos),
                                                                                  ("kafka", kafka_broker))}
    assert answers["eosbroker"] == answers["kafka"]
    assert answers["kafka"][0] == (33, "1", "sasl.kerberos.min.time.before.relogin", 0, None)
    # librdkafka's admin test sets it for real; described, then removed
    described = {name: await _set_describe_remove(b.port) for name, b in (("eosbroker", eos), ("kafka", kafka_broker))}
    assert described["eosbroker"] == described["kafka"]
    assert described["kafka"]["1"] == [("num.io.threads", "4", 3, False, 3, [("num.io.threads", "4", 3),
                                                                            ("num.io.threads", "8", 5)]),
                                       ("sasl.kerberos.min.time.before.relogin", "58000", 2, False, 5, [
                                           ("sasl.kerberos.min.time.before.relogin", "58000", 2),
                                           ("sasl.kerberos.min.time.before.relogin", "60000", 5)])]


async def _set_describe_remove(port: int) -> dict:
    """A setting without an effect here on the broker, another at the cluster level: how
    DescribeConfigs shows them on each resource; both removed again."""
    changes = {"1": ("sasl.kerberos.min.time.before.relogin", "58000"), "": ("num.io.threads", "4")}
    keys = [name for name, _ in changes.values()]
    out = {}
    async with await KafkaConnection.connect(HOST, port) as conn:
        async def alter(resource: str, op: int, value: str | None):
            r = await conn.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": resource, "configs": [
                {"name": changes[resource][0], "config_operation": op, "value": value}]}], "validate_only": False})
            assert (r.responses[0].error_code, r.responses[0].error_message) == (0, None)

        async def describe(resource: str):
            r = await conn.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": resource,
                                                          "configuration_keys": keys}],
                                           "include_synonyms": True, "include_documentation": False})
            return sorted((c.name, c.value, c.config_source, c.read_only, c.config_type,
                           [(s.name, s.value, s.source) for s in c.synonyms]) for c in r.results[0].configs)

        for resource, (_, value) in changes.items():
            await alter(resource, 0, value)
        deadline = time.monotonic() + 15  # Kafka's broker learns the cluster-level change a little later
        while len(out.setdefault("1", await describe("1"))) < 2 or out["1"][0][1:3] != ("4", 3):
            assert time.monotonic() < deadline, out
            await asyncio.sleep(0.1)
            out["1"] = await describe("1")
        out[""] = await describe("")
        for resource in changes:
            await alter(resource, 1, None)
    return out


async def test_every_kafka_broker_setting_at_its_default(broker_factory, kafka_broker):
    """Each setting Kafka 4.4 knows, set to its own default on the broker and at the
    cluster level (validate only): accepted or refused as Kafka does."""
    from broker.kafka_settings import KAFKA_BROKER_SETTINGS, REQUIRED

    changes = [(resource, s.name, s.default if s.default not in (None, REQUIRED) else "")
               for s in KAFKA_BROKER_SETTINGS.values() if not s.internal and s.name not in LISTENER_DEPENDENT
               for resource in ("1", "")]
    eos = broker_factory(KAFKA_4_4_TOPIC_DEFAULTS)
    kafka, ours = await _broker_changes(kafka_broker.port, changes), await _broker_changes(eos.port, changes)
    assert [a for a, b in zip(ours, kafka) if a != b] == []
    assert sum(1 for a in kafka if a[3] == 0) > 150  # the dynamic ones are accepted
