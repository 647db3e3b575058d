"""StreamsGroupHeartbeat and StreamsGroupDescribe on the wire (the 4.4 profile), as a
Kafka Streams client's first heartbeats send them: the topology sets the group up, the
missing repartition and changelog topics are created by the broker (sized from the
input), the next heartbeat gets every task, DescribeStreamsGroups shows it; the errors a
client can get for a bad epoch, an unknown group or a join without its topology.
tests/reference/test_streams_groups.py runs a real Kafka Streams application."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import HOST
from broker.wire.client import KafkaConnection

STATUS_MISSING_INTERNAL_TOPICS = 3
FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND, INVALID_REQUEST = 110, 69, 42


def _topology(app: str) -> dict:
    return {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [f"{app}-input"], "repartition_sink_topics": [f"{app}-rep"],
         "source_topic_regex": [], "state_changelog_topics": [], "repartition_source_topics": [],
         "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [], "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": f"{app}-rep", "partitions": 0, "replication_factor": 0,
                                        "topic_configs": [{"key": "cleanup.policy", "value": "delete"}]}],
         "state_changelog_topics": [{"name": f"{app}-store-changelog", "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "copartition_groups": []},
    ]}


def _beat(app: str, member: str, epoch: int, **fields) -> dict:
    return {"group_id": app, "member_id": member, "member_epoch": epoch, "endpoint_information_epoch": -1,
            "rebalance_timeout": 30_000, "process_id": "process-1", "active_tasks": [], "standby_tasks": [],
            "warmup_tasks": [], "client_tags": [], **fields}


async def test_a_streams_member_joins_gets_its_internal_topics_and_tasks(broker_factory):
    broker = broker_factory({"emulate.kafka.version": "4.4", "group.streams.initial.rebalance.delay.ms": 0,
                             "group.streams.assignment.interval.ms": 0})
    app = f"app-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(f"{app}-input", 3, 1)])[f"{app}-input"].result(30)
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        joined = await conn.request(88, 0, _beat(app, "m1", 0, topology=_topology(app)))
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        assert [s.status_code for s in joined.status] == [STATUS_MISSING_INTERNAL_TOPICS]
        topics = admin.list_topics(timeout=10).topics
        assert {len(topics[f"{app}-rep"].partitions), len(topics[f"{app}-store-changelog"].partitions)} == {3}

        ready = await conn.request(88, 0, _beat(app, "m1", 1))
        assert (ready.error_code, ready.member_epoch, ready.status) == (0, 2, ())
        assert {(t.subtopology_id, t.partitions) for t in ready.active_tasks} == {("0", (0, 1, 2)), ("1", (0, 1, 2))}

        (described,) = (await conn.request(89, 0, {"group_ids": [app], "include_authorized_operations": False})).groups
        assert (described.error_code, described.group_state, described.group_epoch) == (0, "Stable", 2)
        assert [s.subtopology_id for s in described.topology.subtopologies] == ["0", "1"]
        assert described.topology.subtopologies[1].state_changelog_topics[0].partitions == 3
        (member,) = described.members
        assert (member.member_id, member.process_id, member.member_epoch) == ("m1", "process-1", 2)
        assert {t.subtopology_id for t in member.assignment.active_tasks} == {"0", "1"}

        assert (await conn.request(88, 0, _beat(app, "m1", 7))).error_code == FENCED_MEMBER_EPOCH
        assert (await conn.request(88, 0, _beat(f"{app}-x", "m1", 1))).error_code == GROUP_ID_NOT_FOUND
        assert (await conn.request(88, 0, _beat(app, "m2", 0))).error_code == INVALID_REQUEST  # no topology
        (unknown,) = (await conn.request(89, 0, {"group_ids": [f"{app}-x"],
                                                 "include_authorized_operations": False})).groups
        assert (unknown.error_code, unknown.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
        left = await conn.request(88, 0, _beat(app, "m1", -1, active_tasks=None, standby_tasks=None,
                                               warmup_tasks=None))
        assert (left.error_code, left.member_epoch) == (0, -1)


async def test_streams_group_acls(broker_factory, tmp_path):
    """READ on the group and DESCRIBE on every topic the topology names, as Kafka checks
    them; without CREATE the internal topics are not made and the status says why."""
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    from tests.acl_setup import allow, broker_with_acls

    app = "ok-app"
    grants = [allow(ResourceType.GROUP, "ok-", AclOperation.ALL, ResourcePatternType.PREFIXED),
              allow(ResourceType.TOPIC, "ok-", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED)]
    broker = broker_with_acls(broker_factory, tmp_path / "data", [f"{app}-input", "hidden"], grants,
                              {"emulate.kafka.version": "4.4", "group.streams.initial.rebalance.delay.ms": 0})
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        denied = await conn.request(88, 0, _beat("no-app", "m1", 0, topology=_topology("no-app")))
        assert denied.error_code == 30  # GROUP_AUTHORIZATION_FAILED
        hidden = _topology(app)
        hidden["subtopologies"][0]["source_topics"] = ["hidden"]
        assert (await conn.request(88, 0, _beat(app, "m1", 0, topology=hidden))).error_code == 29  # TOPIC_...
        joined = await conn.request(88, 0, _beat(app, "m1", 0, topology=_topology(app)))
        assert joined.error_code == 0
        (status,) = joined.status
        assert status.status_code == STATUS_MISSING_INTERNAL_TOPICS
        assert f"Unauthorized to CREATE on topics {app}-rep, {app}-store-changelog." in status.status_detail
        (described,) = (await conn.request(89, 0, {"group_ids": ["no-app"],
                                                   "include_authorized_operations": False})).groups
        assert described.error_code == 30
    topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    assert f"{app}-rep" not in topics and f"{app}-store-changelog" not in topics


async def test_streams_groups_in_metrics_the_console_and_the_history(broker_factory):
    """A streams group's rebalance and membership are on the history, the console lists it
    and /metrics counts it by protocol and state, as consumer and share groups are."""
    import json
    import urllib.request

    from tests.integration.test_admin_metrics_console import _metric

    broker = broker_factory({"emulate.kafka.version": "4.4", "group.streams.initial.rebalance.delay.ms": 0,
                             "group.streams.assignment.interval.ms": 0}, admin=True)
    app = f"app-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(f"{app}-input", 2, 1)])[f"{app}-input"].result(30)

    def get(path: str) -> str:
        with urllib.request.urlopen(broker.admin_url + path, timeout=30) as answer:
            return answer.read().decode()

    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        joined = await conn.request(88, 0, _beat(app, "m1", 0, topology=_topology(app)))
        ready = await conn.request(88, 0, _beat(app, "m1", joined.member_epoch))
        assert ready.active_tasks
        second = await conn.request(88, 0, _beat(app, "m2", 0, topology=_topology(app), process_id="process-2"))
        assert second.error_code == 0
        text = get("/metrics")
        assert _metric(text, "kafka_server_group_coordinator_metrics_group_count", protocol="streams") == 1
        # m1 has yet to give up tasks for m2
        assert _metric(text, "kafka_server_group_coordinator_metrics_streams_group_count", state="Reconciling") == 1
        assert _metric(text, "kafka_server_group_coordinator_metrics_streams_group_count", state="Stable") == 0
        (shown,) = [g for g in json.loads(get("/console/state"))["groups"] if g["group_id"] == app]
        assert (shown["protocol"], shown["state"], shown["members"]) == ("streams", "Reconciling", ["m1", "m2"])
        for member in ("m1", "m2"):
            await conn.request(88, 0, _beat(app, member, -1, active_tasks=None, standby_tasks=None,
                                            warmup_tasks=None))
    events = [e for e in json.loads(get("/events"))["events"] if e["kind"] == "group" and e["group_id"] == app]
    assert {e["protocol"] for e in events} == {"streams"}
    assert [e.get("rebalance") for e in events if e.get("rebalance")] == ["started", "ended"]
    assert events[0]["joined"] == ["m1"] and events[-1]["members"] == 0
    assert sorted(m for e in events for m in e["left"]) == ["m1", "m2"]
