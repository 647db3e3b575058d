"""The differences issue 13 lists, run against eosbroker and Apache Kafka alike: both
must answer the same codes, messages and offsets."""

from __future__ import annotations

import asyncio
import time

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.integration.test_kafka_parity import _begin, _create, _end, _offsets, _produce

HOST = "127.0.0.1"
BROKERS = ["eosbroker", "kafka"]


async def _ready(conn: KafkaConnection, topic: str) -> None:
    """Until the new topic's partition has a leader that serves it (Kafka's metadata reaches
    the broker a little after CreateTopics answers, and its replica manager becomes leader a
    little after Metadata names one: a Produce in between gets NOT_LEADER_OR_FOLLOWER)."""
    deadline = time.monotonic() + 30
    while True:
        r = await conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        t = r.topics[0]
        if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
            listed = await conn.request(2, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
            if listed.topics[0].partitions[0].error_code == 0:
                return
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)


async def _keyless_on_compacted(port: int, topic: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        assert (await _create(conn, topic, {"cleanup.policy": "compact"})).error_code == 0
        await _ready(conn, topic)
        refused = await _produce(conn, topic, [(b"k", b"v", (), 1), (None, b"v", (), 2)])
        return (refused.error_code, [(e.batch_index, e.batch_index_error_message) for e in refused.record_errors],
                (refused.error_message or "").replace(topic, "T"), await _offsets(conn, topic))


async def test_keyless_record_on_compacted_topic(brokers, topic_name):
    answers = {name: await _keyless_on_compacted(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    assert answers["eosbroker"][0] == code("INVALID_RECORD")
    normalised = {n: (a[0], [(i, m.replace(f"{topic_name}-{n}", "T")) for i, m in a[1]],
                      a[2].replace(f"{topic_name}-{n}", "T"), a[3]) for n, a in answers.items()}
    assert normalised["eosbroker"] == normalised["kafka"]


async def _topic_configs(port: int, topic: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        unknown = await _create(conn, topic, {"no.such.config": "1"})
        created = await _create(conn, topic, {"file.delete.delay.ms": "1000", "max.compaction.lag.ms": "5000"})
        r = await conn.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                      "configuration_keys": None}],
                                       "include_synonyms": False, "include_documentation": False})
        described = {c.name: (c.value, c.config_source) for c in r.results[0].configs}
        return (unknown.error_code, unknown.error_message), created.error_code, described


async def test_topic_config_names_and_overrides(brokers, topic_name):
    answers = {name: await _topic_configs(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    ours, kafkas = answers["eosbroker"], answers["kafka"]
    assert ours[0] == kafkas[0] == (code("INVALID_CONFIG"), "Unknown topic config name: no.such.config")
    assert ours[1] == kafkas[1] == 0
    assert sorted(ours[2]) == sorted(kafkas[2])
    for name in ("file.delete.delay.ms", "max.compaction.lag.ms"):
        assert ours[2][name] == kafkas[2][name]
    # defaults that do not depend on the broker's own settings are Kafka's
    for name, (value, source) in kafkas[2].items():
        if source == 5 and name not in ("segment.bytes",):
            assert ours[2][name] == (value, source), name


async def _lso_after_delete_records(port: int, topic: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        await _create(conn, topic)
        await _ready(conn, topic)
        await _produce(conn, topic, [(None, b"plain", (), 1)])
        pid, epoch = await _begin(conn, topic, topic)
        await _produce(conn, topic, [(None, b"open", (), 1)], transactional_id=topic, producer_id=pid,
                       producer_epoch=epoch, base_sequence=0, transactional=True)
        await _produce(conn, topic, [(None, b"after", (), 1), (None, b"after", (), 2)])
        seen = [await _offsets(conn, topic)]
        await conn.request(21, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 3}]}],
                                   "timeout_ms": 5000})
        seen.append(await _offsets(conn, topic))
        await _end(conn, topic, pid, epoch, commit=False)
        return seen


async def test_lso_clamped_to_log_start_after_delete_records(brokers, topic_name):
    answers = {name: await _lso_after_delete_records(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"] == [(1, 4), (2, 4)]


async def test_txn_offset_commit_without_add_offsets(brokers, topic_name):
    from tests.integration.test_kafka_parity import txn_offset_commit_without_add_offsets

    answers = {}
    for name, b in brokers.items():
        async with await KafkaConnection.connect(HOST, b.port) as conn:
            answers[name] = await txn_offset_commit_without_add_offsets(conn, f"{topic_name}-{name}")
    assert answers["eosbroker"] == answers["kafka"]


async def test_produce_without_add_partitions(brokers, topic_name):
    from tests.integration.test_kafka_parity import produce_without_add_partitions

    answers = {}
    for name, b in brokers.items():
        async with await KafkaConnection.connect(HOST, b.port) as conn:
            await _create(conn, f"{topic_name}-{name}")
            await _ready(conn, f"{topic_name}-{name}")
            answers[name] = await produce_without_add_partitions(conn, f"{topic_name}-{name}")
    assert answers["eosbroker"] == answers["kafka"]



async def _add_internal_topic(port: int, topic: str):
    from tests.integration.test_kafka_parity import _init

    async with await KafkaConnection.connect(HOST, port) as conn:
        await _create(conn, topic)
        await _ready(conn, topic)
        init = await _init(conn, topic)
        r = await conn.request(24, 3, {"v3_and_below_transactional_id": topic,
                                       "v3_and_below_producer_id": init.producer_id,
                                       "v3_and_below_producer_epoch": init.producer_epoch,
                                       "v3_and_below_topics": [{"name": topic, "partitions": [0]},
                                                               {"name": "__consumer_offsets", "partitions": [0]}]})
        return sorted((t.name.replace(topic, "T"), p.partition_error_code)
                      for t in r.results_by_topic_v3_and_below for p in t.results_by_partition)


async def test_add_partitions_to_txn_refuses_internal_topics(brokers, topic_name):
    # A client may never add an internal topic itself (authorizer off too): Kafka leaves
    # internal topics out of the WRITE check, so they count as not authorized.
    answers = {name: await _add_internal_topic(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"] == [
        ("T", code("OPERATION_NOT_ATTEMPTED")), ("__consumer_offsets", code("TOPIC_AUTHORIZATION_FAILED"))]


async def _authorized_operations(port: int, topic: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        await _create(conn, topic)
        await _ready(conn, topic)
        meta = await conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": True})
        cluster = await conn.request(60, 1, {"include_cluster_authorized_operations": True,
                                             "endpoint_type": 1})
        # a group with committed offsets (an empty classic group)
        await conn.request(10, 4, {"key_type": 0, "coordinator_keys": [topic]})
        for _ in range(100):
            committed = await conn.request(8, 9, {
                "group_id": topic, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                           "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
            if committed.topics[0].partitions[0].error_code == 0:
                break
            await asyncio.sleep(0.1)
        groups = await conn.request(15, 5, {"groups": [topic], "include_authorized_operations": True})
        not_asked = await conn.request(15, 5, {"groups": [topic], "include_authorized_operations": False})
        # ConsumerGroupDescribe of a consumer group (one member), asked and not
        await conn.request(10, 4, {"key_type": 0, "coordinator_keys": [topic + "-c"]})
        for _ in range(100):
            joined = await conn.request(68, 0, {
                "group_id": topic + "-c", "member_id": "", "member_epoch": 0, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                "server_assignor": None, "topic_partitions": []})
            if joined.error_code == 0:
                break
            await asyncio.sleep(0.1)
        described = [(await conn.request(69, 0, {"group_ids": [topic + "-c"], "include_authorized_operations": asked})
                      ).groups[0].authorized_operations for asked in (True, False)]
        return (meta.topics[0].topic_authorized_operations, cluster.cluster_authorized_operations,
                groups.groups[0].authorized_operations, not_asked.groups[0].authorized_operations, described)


async def test_authorized_operations_when_asked(brokers, topic_name):
    # No authorizer: every operation of the resource type (KIP-430 bit sets).
    answers = {name: await _authorized_operations(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"]


async def test_transaction_version_2_markers_without_a_transaction(brokers, topic_name):
    from tests.integration.test_kafka_parity import markers_by_transaction_version

    answers = {}
    for name, b in brokers.items():
        async with await KafkaConnection.connect(HOST, b.port) as conn:
            await _create(conn, f"{topic_name}-{name}")
            await _ready(conn, f"{topic_name}-{name}")
            answers[name] = await markers_by_transaction_version(conn, f"{topic_name}-{name}")
    assert answers["eosbroker"] == answers["kafka"]


async def _acl_apis_without_authorizer(port: int, topic: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        binding = {"resource_type": 2, "resource_name": topic, "resource_pattern_type": 3, "principal": "User:*",
                   "host": "*", "operation": 3, "permission_type": 3}
        created = await conn.request(30, 3, {"creations": [binding]})
        filt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        described = await conn.request(29, 3, filt)
        deleted = await conn.request(31, 3, {"filters": [filt]})
        return ([(r.error_code, r.error_message) for r in created.results],
                (described.error_code, described.error_message, list(described.resources)),
                [(r.error_code, r.error_message, list(r.matching_acls)) for r in deleted.filter_results])


async def test_acl_apis_without_an_authorizer(brokers, topic_name):
    answers = {name: await _acl_apis_without_authorizer(b.port, f"{topic_name}-{name}") for name, b in brokers.items()}
    assert answers["eosbroker"] == answers["kafka"]
    assert answers["kafka"][1][0] == code("SECURITY_DISABLED")
