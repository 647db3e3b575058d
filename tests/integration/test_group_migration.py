"""KIP-848 online migration with librdkafka: a classic member (JoinGroup, SyncGroup,
Heartbeat, group.protocol=classic) joins a consumer group whose first member uses
ConsumerGroupHeartbeat (group.protocol=consumer). The server-side assignor splits the
partitions between them, both consume and commit, nothing is read twice or lost, and
when the classic member leaves the other gets every partition back. The same scenario
runs against Apache Kafka in tests/reference/test_group_migration_kafka.py.

The other way round: when the consumer-protocol member leaves and only classic members
remain, the group becomes a classic group (group.consumer.migration.policy, default
bidirectional): the classic member rejoins, leads, and owns every partition."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.test_consumer_group_protocol import PARTITIONS, _assigned, _create, _poll_until, _produce


def _member(bootstrap: str, group: str, protocol: str) -> Consumer:
    classic = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 500} if protocol == "classic" else {}
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **classic})


def _split_between(a: Consumer, b: Consumer) -> bool:
    """Each member holds partitions, none held twice, every one held."""
    held_a, held_b = _assigned(a), _assigned(b)
    return bool(held_a) and bool(held_b) and held_a.isdisjoint(held_b) and held_a | held_b == set(range(PARTITIONS))


def _read_the_rest_exactly_once(bootstrap: str, topic: str, members: list[Consumer], seen: dict) -> None:
    """Writes records 40-79 and polls until the members have read all 80: nothing lost,
    nothing twice."""
    _produce(bootstrap, topic, 40, start=40)
    _poll_until(members, lambda: sum(len(v) for v in seen.values()) >= 80, seen)
    assert sorted(v for vs in seen.values() for v in vs) == [b"%04d" % i for i in range(80)]


def classic_member_joins_consumer_group(bootstrap: str, topic: str) -> None:
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 40)
    group = f"g-{uuid.uuid4().hex[:8]}"
    modern = _member(bootstrap, group, "consumer")
    modern.subscribe([topic])
    seen: dict = {}
    _poll_until([modern], lambda: len(seen.get(0, [])) >= 20 and _assigned(modern) == set(range(PARTITIONS)), seen)

    classic = _member(bootstrap, group, "classic")
    classic.subscribe([topic])
    members = [modern, classic]
    _poll_until(members, lambda: _split_between(modern, classic), seen)
    _read_the_rest_exactly_once(bootstrap, topic, members, seen)
    assert seen.get(1), "the classic member consumed nothing"

    classic.close()  # LeaveGroup: the consumer-protocol member gets everything back
    _poll_until([modern], lambda: _assigned(modern) == set(range(PARTITIONS)), seen)
    committed = modern.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
    assert sum(tp.offset for tp in committed) == 80
    modern.close()


def _group_type(bootstrap: str, group: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer is in
    listed = admin.list_consumer_groups().result(10)
    return next(g.type.name for g in listed.valid if g.group_id == group)


def last_consumer_member_leaves(bootstrap: str, topic: str) -> list[str]:
    """Returns the group's type while both members are in, then after the KIP-848 member left."""
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 40)
    group = f"g-{uuid.uuid4().hex[:8]}"
    modern = _member(bootstrap, group, "consumer")
    modern.subscribe([topic])
    seen: dict = {}
    _poll_until([modern], lambda: _assigned(modern) == set(range(PARTITIONS)), seen)
    classic = _member(bootstrap, group, "classic")
    classic.subscribe([topic])
    _poll_until([modern, classic], lambda: bool(_assigned(classic)) and bool(_assigned(modern))
                and len(_assigned(modern) | _assigned(classic)) == PARTITIONS, seen)
    types = [_group_type(bootstrap, group)]
    modern.close()
    _poll_until([classic], lambda: _assigned(classic) == set(range(PARTITIONS)), {})
    types.append(_group_type(bootstrap, group))
    _produce(bootstrap, topic, 4, start=40)
    after: dict = {}
    _poll_until([classic], lambda: any(v >= b"0040" for v in after.get(0, [])), after)
    classic.close()
    return types


def consumer_member_joins_classic_group(bootstrap: str, topic: str) -> list[str]:
    """A KIP-848 member joins a classic group that has a member: the group is upgraded,
    the partitions are split, and nothing is read twice or lost. Returns the group's type
    before and after."""
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 40)
    group = f"g-{uuid.uuid4().hex[:8]}"
    classic = _member(bootstrap, group, "classic")
    classic.subscribe([topic])
    seen: dict = {}
    _poll_until([classic], lambda: len(seen.get(0, [])) >= 20 and _assigned(classic) == set(range(PARTITIONS)),
                seen)
    types = [_group_type(bootstrap, group)]
    modern = _member(bootstrap, group, "consumer")
    modern.subscribe([topic])
    members = [classic, modern]
    _poll_until(members, lambda: _split_between(modern, classic), seen)
    types.append(_group_type(bootstrap, group))
    _read_the_rest_exactly_once(bootstrap, topic, members, seen)
    assert seen.get(1), "the consumer-protocol member consumed nothing"
    modern.close()
    classic.close()
    return types


def test_classic_group_upgraded_when_a_consumer_member_joins(shared_broker, topic_name):
    assert consumer_member_joins_classic_group(shared_broker.bootstrap, topic_name) == ["CLASSIC", "CONSUMER"]


def test_group_becomes_classic_when_the_last_consumer_member_leaves(shared_broker, topic_name):
    assert last_consumer_member_leaves(shared_broker.bootstrap, topic_name) == ["CONSUMER", "CLASSIC"]


def test_classic_member_joins_consumer_group(shared_broker, topic_name):
    classic_member_joins_consumer_group(shared_broker.bootstrap, topic_name)
