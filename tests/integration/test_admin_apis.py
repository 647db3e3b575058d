"""The admin APIs through the clients' own admin calls: AlterConfigs and
IncrementalAlterConfigs (topics, brokers, groups), DescribeConfigs for groups,
DescribeLogDirs, SCRAM credentials and ACLs."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.acl_setup import OPEN_AUTHORIZER, broker_with_acls


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _describe(admin, kind: str, name: str) -> dict:
    return next(iter(admin.describe_configs([ConfigResource(kind, name)]).values())).result(10)


def _incremental(admin, kind: str, name: str, *entries: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, v, op in entries])
    return next(iter(admin.incremental_alter_configs([resource]).values())).result(10)


def _error_code(future) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(10)
    return e.value.args[0].code()


# --- topic configs -------------------------------------------------------------------------------


def test_incremental_alter_topic_configs_set_append_subtract_delete(shared_broker, topic_name):
    admin = _admin(shared_broker)
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "1000"})])[topic_name].result(10)
    _incremental(admin, "topic", topic_name, ("retention.ms", "60000", AlterConfigOpType.SET),
                 ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                 ("leader.replication.throttled.replicas", "0:1", AlterConfigOpType.APPEND))
    entries = _describe(admin, "topic", topic_name)
    assert entries["retention.ms"].value == "60000"
    assert entries["cleanup.policy"].value == "delete,compact"  # appended to the default
    _incremental(admin, "topic", topic_name, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                 ("retention.ms", None, AlterConfigOpType.DELETE))
    entries = _describe(admin, "topic", topic_name)
    assert entries["cleanup.policy"].value == "compact"
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("604800000", 5)
    assert entries["leader.replication.throttled.replicas"].value == "0:1"


def test_incremental_alter_errors_are_kafkas(shared_broker, topic_name):
    admin = _admin(shared_broker)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)

    def alter(kind, name, *entries):
        resource = ConfigResource(kind, name, incremental_configs=[
            ConfigEntry(n, v, incremental_operation=op) for n, v, op in entries])
        return next(iter(admin.incremental_alter_configs([resource]).values()))

    assert _error_code(alter("topic", topic_name, ("retention.ms", "5", AlterConfigOpType.APPEND))) == code(
        "INVALID_CONFIG")
    assert _error_code(alter("topic", topic_name, ("no.such", "5", AlterConfigOpType.SET))) == code("INVALID_CONFIG")
    assert _error_code(alter("topic", topic_name + "-missing", ("retention.ms", "5", AlterConfigOpType.SET))) == code(
        "UNKNOWN_TOPIC_OR_PARTITION")
    assert _error_code(alter("broker", "1", ("num.partitions", "3", AlterConfigOpType.SET))) == code(
        "INVALID_REQUEST")


def test_alter_configs_replaces_the_overrides_and_takes_effect(shared_broker, topic_name):
    admin = _admin(shared_broker)
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "1000"})])[topic_name].result(10)
    resource = ConfigResource("topic", topic_name, set_config={"max.message.bytes": "2000"})
    next(iter(admin.alter_configs([resource]).values())).result(10)
    entries = _describe(admin, "topic", topic_name)
    assert (entries["max.message.bytes"].value, entries["max.message.bytes"].source) == ("2000", 1)
    assert entries["retention.ms"].source == 5  # no longer overridden: the whole set was replaced
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "retries": 0})
    reports = []
    producer.produce(topic_name, b"x" * 5000, partition=0, on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[0] is not None and reports[0].code() == code("MESSAGE_TOO_LARGE")


# --- broker and group configs --------------------------------------------------------------------


async def _set_cluster_default(port: int, name: str, value: str) -> None:
    """The cluster-wide default (broker resource ""), which librdkafka cannot name."""
    async with await KafkaConnection.connect("127.0.0.1", port) as conn:
        r = await conn.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": name, "config_operation": 0, "value": value}]}], "validate_only": False})
        assert r.responses[0].error_code == 0, r


def test_dynamic_broker_default_applies_to_topics_and_survives_restart(broker_factory, topic_name):
    broker = broker_factory()
    admin = _admin(broker)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    _incremental(admin, "broker", "1", ("log.retention.ms", "120000", AlterConfigOpType.SET))
    asyncio.run(_set_cluster_default(broker.port, "log.retention.bytes", "1048576"))
    described = _describe(admin, "broker", "1")
    assert (described["log.retention.ms"].value, described["log.retention.ms"].source) == ("120000", 2)
    assert (described["log.retention.bytes"].value, described["log.retention.bytes"].source) == ("1048576", 3)
    assert described["log.retention.ms"].is_read_only is False and described["num.partitions"].is_read_only
    broker.restart()
    admin = _admin(broker)
    topic = _describe(admin, "topic", topic_name)
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == ("120000", 2)
    assert (topic["retention.bytes"].value, topic["retention.bytes"].source) == ("1048576", 3)
    _incremental(admin, "broker", "1", ("log.retention.ms", None, AlterConfigOpType.DELETE))
    assert _describe(admin, "topic", topic_name)["retention.ms"].value == "604800000"


def test_group_configs_described_with_kafkas_sources(shared_broker, topic_name):
    admin = _admin(shared_broker)
    group = topic_name + "-g"
    defaults = _describe(admin, "group", group)
    assert (defaults["consumer.session.timeout.ms"].value, defaults["consumer.session.timeout.ms"].source) == (
        "45000", 5)
    assert defaults["share.auto.offset.reset"].value == "latest"
    _incremental(admin, "group", group, ("consumer.session.timeout.ms", "50000", AlterConfigOpType.SET))
    changed = _describe(admin, "group", group)
    assert (changed["consumer.session.timeout.ms"].value, changed["consumer.session.timeout.ms"].source) == (
        "50000", 8)  # GROUP_CONFIG
    too_short = ConfigResource("group", group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "4000", incremental_operation=AlterConfigOpType.SET)])
    assert _error_code(next(iter(admin.incremental_alter_configs([too_short]).values()))) == code("INVALID_CONFIG")


def test_kafka_python_admin_configs_and_log_dirs(shared_broker, topic_name):
    from kafka.admin import ConfigResource as KPConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic as KPNewTopic

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        admin.create_topics([KPNewTopic(topic_name, 2, 1)])
        assert admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic_name,
                                                     configs={"segment.jitter.ms": "5"})]) == {
            "topic": {topic_name: "OK"}}
        modified = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, topic_name)])
        assert {k: v["value"] for k, v in modified["topic"][topic_name].items()} == {"segment.jitter.ms": "5"}
        group = admin.describe_configs([KPConfigResource(ConfigResourceType.GROUP, topic_name)], config_filter="all")
        assert group["group"][topic_name]["consumer.heartbeat.interval.ms"]["config_source"] == "DEFAULT_CONFIG"
        [node] = admin.describe_log_dirs()
        [log_dir] = node["log_dirs"]
        sizes = {(t["name"], p["partition_index"]) for t in log_dir["topics"] for p in t["partitions"]}
        assert {(topic_name, 0), (topic_name, 1)} <= sizes
        assert log_dir["error_code"] == 0 and log_dir["total_bytes"] > 0
    finally:
        admin.close()


# --- SCRAM credentials ---------------------------------------------------------------------------


def test_scram_credentials_upsert_describe_delete(shared_broker, topic_name):
    admin = _admin(shared_broker)
    user = topic_name
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, b"secret", b"salt")])
    futures[user].result(10)
    described = admin.describe_user_scram_credentials([user])[user].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    few = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100)
    refused = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, few, b"secret", b"salt")])
    assert _error_code(refused[user]) == code("UNACCEPTABLE_CREDENTIAL")
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)])[
        user].result(10)
    assert _error_code(admin.describe_user_scram_credentials([user])[user]) == code("RESOURCE_NOT_FOUND")
    again = admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)])
    assert _error_code(again[user]) == code("RESOURCE_NOT_FOUND")


# --- ACLs --------------------------------------------------------------------------------------


def _acl(topic, operation, permission=AclPermissionType.ALLOW, principal="User:*",
         pattern=ResourcePatternType.LITERAL, rtype=ResourceType.TOPIC):
    return AclBinding(rtype, topic, pattern, principal, "*", operation, permission)


def test_acl_apis_need_an_authorizer(shared_broker, topic_name):
    admin = _admin(shared_broker)
    created = admin.create_acls([_acl(topic_name, AclOperation.READ)])
    assert _error_code(next(iter(created.values()))) == code("SECURITY_DISABLED")
    # DescribeAcls and DeleteAcls: tests/reference/test_parity_differences.py (wire, against Kafka)


def test_acls_create_describe_delete(broker_factory, topic_name):
    admin = _admin(broker_factory(OPEN_AUTHORIZER))
    bindings = [_acl(topic_name, AclOperation.READ), _acl(topic_name, AclOperation.WRITE, AclPermissionType.DENY),
                _acl(topic_name[:6], AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED)]
    for f in admin.create_acls(bindings).values():
        f.result(10)
    bad = admin.create_acls([AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                                        "User:*", "*", AclOperation.ALTER, AclPermissionType.ALLOW)])
    assert _error_code(next(iter(bad.values()))) == code("INVALID_REQUEST")
    exact = AclBindingFilter(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert sorted(str(b.operation) for b in admin.describe_acls(exact).result(10)) == [
        str(AclOperation.READ), str(AclOperation.WRITE)]
    matching = AclBindingFilter(ResourceType.TOPIC, topic_name, ResourcePatternType.MATCH, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.describe_acls(matching).result(10)) == 3  # the prefixed one applies too
    deleted = admin.delete_acls([matching])[matching].result(10)
    assert len(deleted) == 3
    assert admin.describe_acls(matching).result(10) == []


def _produce_error(bootstrap: str, topic: str):
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0, "message.timeout.ms": 10000})
    reports = []
    producer.produce(topic, b"v", on_delivery=lambda e, m: reports.append(e))
    producer.flush(15)
    return reports[0]


def test_acls_are_enforced_when_the_authorizer_is_on(broker_factory, tmp_path, topic_name):
    ok, denied = f"ok-{topic_name}", f"no-{topic_name}"
    grants = [_acl("ok-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
              _acl("ok-", AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
              _acl("kafka-cluster", AclOperation.ALTER, rtype=ResourceType.BROKER),
              _acl("kafka-cluster", AclOperation.DESCRIBE, rtype=ResourceType.BROKER),
              # the consumer below looks up its group's coordinator (DESCRIBE on the group)
              _acl(topic_name, AclOperation.READ, rtype=ResourceType.GROUP)]
    broker = broker_with_acls(broker_factory, tmp_path / "acl-data", [ok, denied], grants)
    admin = _admin(broker)
    assert _produce_error(broker.bootstrap, ok) is None
    assert _produce_error(broker.bootstrap, denied).code() == code("TOPIC_AUTHORIZATION_FAILED")
    # auto-creation needs CREATE: refused, and nothing is created
    assert _produce_error(broker.bootstrap, f"ok-new-{topic_name}").code() == code("TOPIC_AUTHORIZATION_FAILED")
    listed = admin.list_topics(timeout=10).topics
    assert ok in listed and denied not in listed and f"ok-new-{topic_name}" not in listed
    # consuming needs READ
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name, "enable.auto.commit": False})
    consumer.assign([TopicPartition(ok, 0, 0)])
    errors = []
    for _ in range(40):
        msg = consumer.poll(0.25)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error().code())
            break
    assert errors == [code("TOPIC_AUTHORIZATION_FAILED")]
    next(iter(admin.create_acls([_acl(ok, AclOperation.READ)]).values())).result(10)
    consumer.assign([TopicPartition(ok, 0, 0)])
    values = []
    for _ in range(80):
        msg = consumer.poll(0.25)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
            break
    consumer.close()
    assert values == [b"v"]
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert sorted(str(op) for op in cluster.authorized_operations) == sorted(
        str(op) for op in (AclOperation.ALTER, AclOperation.DESCRIBE))


# --- CreatePartitions --------------------------------------------------------------------------


def test_create_partitions_keeps_the_replica_order_given(broker_factory, topic_name):
    """librdkafka's admin test asks for replicas [3,2,1]: Metadata shows them in that order,
    the first one leads, and a restart keeps them; a list of the wrong size is refused."""
    cluster = broker_factory(nodes=3)
    admin = _admin(cluster)
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(10)
    wrong = admin.create_partitions([NewPartitions(topic_name, 2, replica_assignment=[[1, 2]])])[topic_name]
    with pytest.raises(KafkaException) as refused:
        wrong.result(10)
    assert refused.value.args[0].code() == code("INVALID_REPLICA_ASSIGNMENT")
    assert refused.value.args[0].str() == ("The manual partition assignment includes a partition with 2 replica(s), "
                                           "but this is not consistent with previous partitions, which have 3 "
                                           "replica(s).")
    admin.create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[3, 2, 1], [2, 1, 3]])])[
        topic_name].result(10)

    def placement(broker) -> dict[int, tuple[int, list[int]]]:
        partitions = _admin(broker).list_topics(topic_name, timeout=10).topics[topic_name].partitions
        return {i: (p.leader, p.replicas) for i, p in partitions.items()}

    assert placement(cluster) == {0: (1, [1, 2, 3]), 1: (3, [3, 2, 1]), 2: (2, [2, 1, 3])}
    del admin
    cluster.restart()
    assert placement(cluster) == {0: (1, [1, 2, 3]), 1: (3, [3, 2, 1]), 2: (2, [2, 1, 3])}
