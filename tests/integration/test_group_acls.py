"""ACLs on the group APIs with the authorizer on, checked as Kafka checks them: READ on the
group for JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit,
AddOffsetsToTxn and ConsumerGroupHeartbeat; DESCRIBE for OffsetFetch, DescribeGroups,
ConsumerGroupDescribe and ListGroups; DELETE for DeleteGroups and OffsetDelete; WRITE on
the transactional id first for the transactional ones; READ/DESCRIBE on the topics."""

from __future__ import annotations

from confluent_kafka import Consumer
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.acl_setup import allow, broker_with_acls

HOST = "127.0.0.1"
GROUP_DENIED = code("GROUP_AUTHORIZATION_FAILED")
TOPIC_DENIED = code("TOPIC_AUTHORIZATION_FAILED")


def _partitions(topic):
    return [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]


def _first_error(response):
    return response.topics[0].partitions[0].error_code


async def test_group_apis_answer_group_authorization_failed(broker_factory, tmp_path, topic_name):
    hidden = f"hidden-{topic_name}"
    ok, no = f"ok-{topic_name}", f"no-{topic_name}"
    grants = [allow(ResourceType.TOPIC, topic_name, AclOperation.ALL),
              allow(ResourceType.GROUP, "ok-", AclOperation.ALL, ResourcePatternType.PREFIXED),
              allow(ResourceType.TRANSACTIONAL_ID, "tx-ok", AclOperation.ALL),
              allow(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)]
    broker = broker_with_acls(broker_factory, tmp_path / "data", [topic_name, hidden], grants)
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        join = {"group_id": no, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        joined = await conn.request(11, 9, join)
        assert (joined.error_code, joined.member_id, joined.generation_id) == (GROUP_DENIED, "", -1)
        assert (await conn.request(14, 5, {"group_id": no, "generation_id": 1, "member_id": "m",
                                           "group_instance_id": None, "protocol_type": "consumer",
                                           "protocol_name": "range", "assignments": []})).error_code == GROUP_DENIED
        assert (await conn.request(12, 4, {"group_id": no, "generation_id": 1, "member_id": "m",
                                           "group_instance_id": None})).error_code == GROUP_DENIED
        assert (await conn.request(13, 5, {"group_id": no, "members": [
            {"member_id": "m", "group_instance_id": None, "reason": None}]})).error_code == GROUP_DENIED
        commit = {"group_id": no, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                  "topics": _partitions(topic_name)}
        assert _first_error(await conn.request(8, 9, commit)) == GROUP_DENIED
        # The group may be used, the topic not (read): TOPIC_AUTHORIZATION_FAILED for its partitions,
        # listed first as Kafka lists what it refuses before asking the coordinator.
        committed = await conn.request(8, 9, commit | {"group_id": ok, "topics": _partitions(topic_name)
                                                       + _partitions(hidden)})
        assert [(t.name, t.partitions[0].error_code) for t in committed.topics] == [(hidden, TOPIC_DENIED),
                                                                                    (topic_name, 0)]

        fetch = {"groups": [{"group_id": no, "member_id": None, "member_epoch": -1, "topics": None},
                            {"group_id": ok, "member_id": None, "member_epoch": -1, "topics": [
                                {"name": topic_name, "partition_indexes": [0]},
                                {"name": hidden, "partition_indexes": [0]}]}],
                 "require_stable": True}
        fetched = await conn.request(9, 9, fetch)
        assert fetched.groups[0].error_code == GROUP_DENIED
        assert [(t.name, t.partitions[0].error_code, t.partitions[0].committed_offset)
                for t in fetched.groups[1].topics] == [(topic_name, 0, 1), (hidden, TOPIC_DENIED, -1)]
        old_fetch = await conn.request(9, 7, {"group_id": no, "topics": None, "require_stable": False})
        assert old_fetch.error_code == GROUP_DENIED

        txn = {"transactional_id": "tx-no", "group_id": ok, "producer_id": 1, "producer_epoch": 0,
               "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": _partitions(topic_name)}
        assert _first_error(await conn.request(28, 4, txn)) == code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        assert _first_error(await conn.request(28, 4, txn | {"transactional_id": "tx-ok", "group_id": no})) == \
            GROUP_DENIED
        add_offsets = {"transactional_id": "tx-ok", "producer_id": 1, "producer_epoch": 0, "group_id": no}
        assert (await conn.request(25, 4, add_offsets)).error_code == GROUP_DENIED
        assert (await conn.request(25, 4, add_offsets | {"transactional_id": "tx-no"})).error_code == \
            code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")

        heartbeat = {"group_id": no, "member_id": "m1", "member_epoch": 0, "instance_id": None, "rack_id": None,
                     "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic_name],
                     "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
        assert (await conn.request(68, 1, heartbeat)).error_code == GROUP_DENIED
        assert (await conn.request(68, 1, heartbeat | {"group_id": ok, "subscribed_topic_names": [hidden]})
                ).error_code == TOPIC_DENIED
        joined = await conn.request(68, 1, heartbeat | {"group_id": ok})
        assert (joined.error_code, joined.member_epoch > 0) == (0, True)

        described = await conn.request(69, 0, {"group_ids": [no, ok], "include_authorized_operations": False})
        assert [g.error_code for g in described.groups] == [GROUP_DENIED, 0]
        classic = await conn.request(15, 5, {"groups": [no], "include_authorized_operations": False})
        assert classic.groups[0].error_code == GROUP_DENIED
        listed = await conn.request(16, 5, {"states_filter": [], "types_filter": []})
        assert ok in [g.group_id for g in listed.groups] and no not in [g.group_id for g in listed.groups]
        deleted = await conn.request(42, 2, {"groups_names": [no]})
        assert deleted.results[0].error_code == GROUP_DENIED
        offset_delete = await conn.request(47, 0, {"group_id": no, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0}]}]})
        assert offset_delete.error_code == GROUP_DENIED

    # A stock consumer in a group it may not read is told so.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": no, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    errors = []
    for _ in range(80):
        msg = consumer.poll(0.25)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error().code())
            break
    consumer.close()
    assert errors == [GROUP_DENIED]
