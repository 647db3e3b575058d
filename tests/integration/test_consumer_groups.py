"""Consumer groups with stock clients against a real broker: join, consume, commit, a
second member takes half the partitions, a leaving member hands them back; committed
offsets survive a restart; a new group's first rebalance waits the initial delay. Then the group APIs
over the raw wire, with the exact errors Kafka answers."""

from __future__ import annotations

import asyncio
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from broker.wire.client import KafkaConnection
from broker.errors import code
from protocol.request_wire import encode_request_frame
from tests.broker_process import wait_until

HOST = "127.0.0.1"
PARTITIONS = 4


def _create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        p.produce(topic, b"%04d" % i, partition=i % PARTITIONS)
    assert p.flush(10) == 0


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)]
    finally:
        consumer.close()


# --- one member per thread (or task), whatever the client -------------------------------


class Member:
    """Polls in its own thread, commits after every batch, records what it was given."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.values: list[bytes] = []
        self.assigned: frozenset[int] = frozenset()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Member":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)
        assert not self._thread.is_alive()
        assert self.errors == []

    def _run(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as e:
            self.errors.append(e)

    def _assigned(self, partitions: frozenset[int]) -> None:
        self.assigned = partitions


class ConfluentMember(Member):
    def run(self, stop: threading.Event) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "heartbeat.interval.ms": 100})
        consumer.subscribe([self.topic], on_assign=lambda c, ps: self._assigned(frozenset(p.partition for p in ps)))
        while not stop.is_set():
            msgs = [m for m in consumer.consume(100, 0.05) if m.error() is None]
            self.assigned = frozenset(p.partition for p in consumer.assignment())
            if msgs:
                self.values += [m.value() for m in msgs]
                consumer.commit(asynchronous=False)
        consumer.close()


class KafkaPythonMember(Member):
    def run(self, stop: threading.Event) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                member._assigned(frozenset(p.partition for p in assigned))

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 heartbeat_interval_ms=100)
        consumer.subscribe([self.topic], listener=Listener())
        while not stop.is_set():
            batches = consumer.poll(50)
            self.assigned = frozenset(p.partition for p in consumer.assignment())
            if batches:
                self.values += [r.value for records in batches.values() for r in records]
                consumer.commit()
        consumer.close()


class AiokafkaMember(Member):
    def run(self, stop: threading.Event) -> None:
        asyncio.run(self._run_async(stop))

    async def _run_async(self, stop: threading.Event) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                pass

            async def on_partitions_assigned(self, assigned):
                member._assigned(frozenset(p.partition for p in assigned))

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    heartbeat_interval_ms=100)
        await consumer.start()
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=50)
                self.assigned = frozenset(p.partition for p in consumer.assignment())
                if batches:
                    self.values += [r.value for records in batches.values() for r in records]
                    await consumer.commit()
        finally:
            await consumer.stop()


MEMBERS = [ConfluentMember, KafkaPythonMember, AiokafkaMember]
MEMBER_IDS = ["confluent", "kafka-python", "aiokafka"]


@pytest.mark.parametrize("member_class", MEMBERS, ids=MEMBER_IDS)
def test_group_join_commit_split_and_leave(shared_broker, topic_name, member_class):
    bootstrap, group = shared_broker.bootstrap, topic_name + "-g"
    _create(bootstrap, topic_name)
    _produce(bootstrap, topic_name, 0, 40)
    a = member_class(bootstrap, topic_name, group).start()
    try:
        wait_until(lambda: len(a.values) == 40, 15, message="the first member to consume everything")
        assert a.assigned == frozenset(range(PARTITIONS))
        wait_until(lambda: _committed(bootstrap, group, topic_name) == [10] * PARTITIONS, 10,
                   message="the commits")

        b = member_class(bootstrap, topic_name, group).start()
        try:
            wait_until(lambda: len(a.assigned) == len(b.assigned) == PARTITIONS // 2
                       and a.assigned | b.assigned == frozenset(range(PARTITIONS)), 15,
                       message="the partitions to be split between the members")
            _produce(bootstrap, topic_name, 40, 40)
            wait_until(lambda: len(a.values) + len(b.values) == 80, 15, message="both members to consume")
            assert len(b.values) == 20, "the second member reads its partitions from the committed offsets"
        finally:
            b.stop()  # leaves the group
        wait_until(lambda: a.assigned == frozenset(range(PARTITIONS)), 15,
                   message="the remaining member to get every partition back")
        _produce(bootstrap, topic_name, 80, 40)
        wait_until(lambda: len(a.values) + len(b.values) == 120, 15, message="the last records")
    finally:
        a.stop()
    assert sorted(a.values + b.values) == [b"%04d" % i for i in range(120)], "each record exactly once"
    assert _committed(bootstrap, group, topic_name) == [30] * PARTITIONS


def test_the_initial_rebalance_delay_is_100_ms_by_default(shared_broker):
    # Kafka's default is 3 s: a test suite's every new group would wait that long.
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    [described] = admin.describe_configs([ConfigResource("broker", "1")]).values()
    delay = described.result(10)["group.initial.rebalance.delay.ms"]
    assert (delay.value, delay.is_default) == ("100", True)


def test_first_rebalance_waits_the_initial_delay_on_the_broker_clock(broker_factory, topic_name):
    """A new group's first rebalance (on a fresh broker: __consumer_offsets is created on
    the way) is held for group.initial.rebalance.delay.ms of the broker's clock, and ends
    when that time has passed. The test jumps the clock rather than timing the wait."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": 90_000}, admin=True)
    _create(broker.bootstrap, topic_name)
    group = topic_name + "-g"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "session.timeout.ms": 120_000})  # outlasts the jump
    assigned = threading.Event()
    consumer.subscribe([topic_name], on_assign=lambda c, ps: assigned.set())
    try:
        deadline = time.monotonic() + 30
        while (state := asyncio.run(_describe(broker.port, group))[0].group_state) != "PreparingRebalance":
            assert time.monotonic() < deadline, f"the member never joined: {state}"
            consumer.poll(0.05)
        for _ in range(10):  # held by the delay, not by a slow join
            consumer.poll(0.05)
        assert not assigned.is_set()
        broker.control().clock_advance(by="90s")
        deadline = time.monotonic() + 30
        while not assigned.is_set():
            assert time.monotonic() < deadline, "no assignment after the delay"
            consumer.poll(0.05)
        assert asyncio.run(_describe(broker.port, group))[0].group_state == "Stable"
    finally:
        consumer.close()


async def _group_lookup_then_offsets_topic(port: int) -> tuple:
    async with await KafkaConnection.connect(HOST, port) as conn:
        found = (await conn.request(10, 6, {"key_type": 0, "coordinator_keys": ["a-group"]})).coordinators[0]
        t = (await conn.request(3, 12, {"topics": [{"name": "__consumer_offsets", "topic_id": None}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})).topics[0]
        return found.error_code, found.node_id, t.error_code, t.is_internal, len(t.partitions)


def test_finding_a_groups_coordinator_creates_the_offsets_topic(broker_factory):
    # As Kafka's FindCoordinator (KafkaApis.getCoordinator), before any group request:
    # franz-go's tests wait for __consumer_offsets after looking up a coordinator.
    broker = broker_factory({"offsets.topic.num.partitions": 5})
    assert asyncio.run(_group_lookup_then_offsets_topic(broker.port)) == (0, 1, 0, True, 5)


def test_committed_offsets_and_groups_survive_a_restart(broker_factory, topic_name):
    broker = broker_factory()
    group = topic_name + "-g"
    _create(broker.bootstrap, topic_name)
    _produce(broker.bootstrap, topic_name, 0, 20)
    a = ConfluentMember(broker.bootstrap, topic_name, group).start()
    wait_until(lambda: len(a.values) == 20, 15, message="the first member to consume")
    wait_until(lambda: _committed(broker.bootstrap, group, topic_name) == [5] * PARTITIONS, 10, message="commits")
    a.stop()
    broker.kill()
    broker.start()
    assert _committed(broker.bootstrap, group, topic_name) == [5] * PARTITIONS
    _produce(broker.bootstrap, topic_name, 20, 20)
    b = ConfluentMember(broker.bootstrap, topic_name, group).start()
    wait_until(lambda: len(b.values) == 20, 15, message="the next member to consume")
    time.sleep(0.3)
    b.stop()
    assert sorted(b.values) == [b"%04d" % i for i in range(20, 40)], "it resumes at the committed offsets"
    broker.restart()
    assert _committed(broker.bootstrap, group, topic_name) == [10] * PARTITIONS
    groups = asyncio.run(_describe(broker.port, group))
    assert (groups[0].group_state, groups[0].protocol_type) == ("Empty", "consumer")


async def _describe(port: int, *groups: str):
    async with await KafkaConnection.connect(HOST, port) as conn:
        deadline = time.monotonic() + 10
        while True:
            r = await conn.request(15, 5, {"groups": list(groups), "include_authorized_operations": False})
            if r.groups[0].error_code != code("COORDINATOR_LOAD_IN_PROGRESS") or time.monotonic() > deadline:
                return r.groups
            await asyncio.sleep(0.05)


# --- the group APIs over the raw wire ----------------------------------------------------


def _subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def _join(group: str, member_id: str = "", session_ms: int = 10_000, rebalance_ms: int = 10_000,
          metadata: bytes = b"", instance: str | None = None) -> dict:
    return {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": metadata}]}


async def _joined_member(conn, group: str, **kwargs):
    r = await conn.request(11, 9, _join(group, **kwargs))
    assert r.error_code == code("MEMBER_ID_REQUIRED") and r.member_id
    r = await conn.request(11, 9, _join(group, member_id=r.member_id, **kwargs))
    assert r.error_code == 0
    s = await conn.request(14, 5, {"group_id": group, "generation_id": r.generation_id, "member_id": r.member_id,
                                   "protocol_type": "consumer", "protocol_name": "range",
                                   "assignments": [{"member_id": r.member_id, "assignment": b"A"}]})
    assert (s.error_code, s.assignment, s.protocol_name) == (0, b"A", "range")
    return r


def _commit(group: str, topic: str, offset: int, generation: int = -1, member_id: str = "", partition: int = 0):
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset, "committed_metadata": "m"}]}]}


async def test_join_sync_heartbeat_and_their_errors(shared_broker, topic_name):
    group = topic_name
    async with await KafkaConnection.connect(HOST, shared_broker.port) as a, \
            await KafkaConnection.connect(HOST, shared_broker.port) as b, \
            await KafkaConnection.connect(HOST, shared_broker.port) as other:
        assert (await a.request(11, 9, _join(group, session_ms=1000))).error_code == code("INVALID_SESSION_TIMEOUT")
        assert (await a.request(11, 9, _join(""))).error_code == code("INVALID_GROUP_ID")
        assert (await a.request(11, 9, _join(group, member_id="nobody"))).error_code == code("UNKNOWN_MEMBER_ID")
        first = await _joined_member(a, group)
        hb = {"group_id": group, "generation_id": first.generation_id, "member_id": first.member_id}
        assert (await a.request(12, 4, hb)).error_code == 0
        assert (await a.request(12, 4, hb | {"generation_id": 99})).error_code == code("ILLEGAL_GENERATION")
        assert (await a.request(12, 4, hb | {"member_id": "x"})).error_code == code("UNKNOWN_MEMBER_ID")
        other_protocol = _join(group) | {"protocols": [{"name": "roundrobin", "metadata": b""}]}
        assert (await b.request(11, 9, other_protocol)).error_code == code("INCONSISTENT_GROUP_PROTOCOL")

        # v3 has no MEMBER_ID_REQUIRED step: the newcomer is parked until the first
        # member rejoins. Other connections are served meanwhile.
        parked = b.send(11, 3, _join(group))
        deadline = time.monotonic() + 30
        while group not in [g.group_id for g in (await asyncio.wait_for(
                other.request(16, 4, {"states_filter": ["PreparingRebalance"]}), 10)).groups]:
            assert time.monotonic() < deadline, "the newcomer's join never started a rebalance"
            await asyncio.sleep(0.02)
        assert not parked.done()
        assert (await a.request(12, 4, hb)).error_code == code("REBALANCE_IN_PROGRESS")
        sync_early = {"group_id": group, "generation_id": first.generation_id, "member_id": first.member_id,
                      "assignments": []}
        assert (await a.request(14, 5, sync_early)).error_code == code("REBALANCE_IN_PROGRESS")
        rejoined = await a.request(11, 9, _join(group, member_id=first.member_id))
        second = await asyncio.wait_for(parked, 5)
        assert rejoined.generation_id == second.generation_id == first.generation_id + 1
        assert rejoined.leader == first.member_id and len(rejoined.members) == 2 and second.members == ()
        # The follower's SyncGroup waits for the leader's.
        follower_sync = b.send(14, 3, {"group_id": group, "generation_id": second.generation_id,
                                       "member_id": second.member_id, "assignments": []})
        await asyncio.sleep(0.1)
        assert not follower_sync.done()
        leader_sync = await a.request(14, 5, {
            "group_id": group, "generation_id": rejoined.generation_id, "member_id": rejoined.member_id,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": rejoined.member_id, "assignment": b"L"},
                            {"member_id": second.member_id, "assignment": b"F"}]})
        assert leader_sync.assignment == b"L"
        assert (await asyncio.wait_for(follower_sync, 5)).assignment == b"F"
        assert (await a.request(14, 5, sync_early | {"generation_id": 1})).error_code == code("ILLEGAL_GENERATION")

        described = (await other.request(15, 5, {"groups": [group, "no-such-group"]})).groups
        assert (described[0].group_state, described[0].protocol_data) == ("Stable", "range")
        assert sorted(m.member_assignment for m in described[0].members) == [b"F", b"L"]
        assert described[0].members[0].client_host == "/127.0.0.1"
        assert (described[1].error_code, described[1].group_state) == (0, "Dead")

        # LeaveGroup v0 names one member: its error is the answer.
        assert (await b.request(13, 0, {"group_id": group, "member_id": "nobody"})).error_code == code(
            "UNKNOWN_MEMBER_ID")
        left = await b.request(13, 3, {"group_id": group, "members": [
            {"member_id": second.member_id}, {"member_id": "nobody"}]})
        assert (left.error_code, [m.error_code for m in left.members]) == (0, [0, code("UNKNOWN_MEMBER_ID")])
        assert (await a.request(12, 4, hb | {"generation_id": rejoined.generation_id})).error_code == code(
            "REBALANCE_IN_PROGRESS")


async def test_join_group_v0_uses_the_session_timeout_for_rebalances(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        r = await conn.request(11, 0, {"group_id": topic_name, "session_timeout_ms": 6000, "member_id": "",
                                       "protocol_type": "consumer",
                                       "protocols": [{"name": "range", "metadata": b"x"}]})
        assert (r.error_code, r.generation_id, r.leader) == (0, 1, r.member_id)
        assert [m.metadata for m in r.members] == [b"x"]


async def test_offset_commit_fetch_delete_and_their_errors(shared_broker, topic_name):
    group, other_topic = topic_name + "-g", topic_name + "-other"
    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    await asyncio.to_thread(_create, shared_broker.bootstrap, other_topic)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        member = await _joined_member(conn, group, metadata=_subscription(topic_name))
        ok = await conn.request(8, 9, _commit(group, topic_name, 5, member.generation_id, member.member_id))
        assert ok.topics[0].partitions[0].error_code == 0
        stale = await conn.request(8, 9, _commit(group, topic_name, 6, member.generation_id - 1, member.member_id))
        assert stale.topics[0].partitions[0].error_code == code("ILLEGAL_GENERATION")
        stranger = await conn.request(8, 9, _commit(group, topic_name, 6, member.generation_id, "x"))
        assert stranger.topics[0].partitions[0].error_code == code("UNKNOWN_MEMBER_ID")
        unknown = await conn.request(8, 9, _commit(group, "no-such-topic", 1, member.generation_id,
                                                   member.member_id))
        assert unknown.topics[0].partitions[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")
        too_large = _commit(group, other_topic, 1, member.generation_id, member.member_id)
        too_large["topics"][0]["partitions"][0]["committed_metadata"] = "m" * 4097
        r = await conn.request(8, 9, too_large)
        assert r.topics[0].partitions[0].error_code == code("OFFSET_METADATA_TOO_LARGE")
        # OffsetCommit v2 (retention time) from a member.
        v2 = _commit(group, other_topic, 7, member.generation_id, member.member_id) | {"retention_time_ms": -1}
        assert (await conn.request(8, 2, v2)).topics[0].partitions[0].error_code == 0

        fetched = await conn.request(9, 8, {"groups": [
            {"group_id": group, "topics": None},
            {"group_id": "no-such-group", "topics": [{"name": topic_name, "partition_indexes": [0]}]}],
            "require_stable": True})
        mine, unknown_group = fetched.groups
        offsets = {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                   for t in mine.topics for p in t.partitions}
        assert offsets == {(topic_name, 0): (5, "m"), (other_topic, 0): (7, "m")}
        assert unknown_group.topics[0].partitions[0].committed_offset == -1
        v1 = await conn.request(9, 1, {"group_id": group, "topics": [{"name": topic_name, "partition_indexes": [0]}]})
        assert v1.topics[0].partitions[0].committed_offset == 5
        # The empty group id is a group like any other to OffsetFetch (Kafka keeps it for old clients).
        empty = await conn.request(9, 1, {"group_id": "", "topics": [
            {"name": topic_name, "partition_indexes": [0, 1]}]})
        assert [(p.error_code, p.committed_offset) for p in empty.topics[0].partitions] == [(0, -1)] * 2

        def delete(*topics: str) -> dict:
            return {"group_id": group, "topics": [{"name": t, "partitions": [{"partition_index": 0}]}
                                                  for t in topics]}

        r = await conn.request(47, 0, delete(topic_name, other_topic, "no-such-topic"))
        errors = [(t.name, t.partitions[0].error_code) for t in r.topics]  # what is refused first, as Kafka
        assert (r.error_code, errors) == (0, [("no-such-topic", code("UNKNOWN_TOPIC_OR_PARTITION")),
                                              (topic_name, code("GROUP_SUBSCRIBED_TO_TOPIC")), (other_topic, 0)])
        r = await conn.request(47, 0, {"group_id": "no-such-group", "topics": []})
        assert r.error_code == code("GROUP_ID_NOT_FOUND")

        deleted = await conn.request(42, 2, {"groups_names": [group, "no-such-group"]})
        assert [r.error_code for r in deleted.results] == [code("NON_EMPTY_GROUP"), code("GROUP_ID_NOT_FOUND")]
        left = await conn.request(13, 4, {"group_id": group, "members": [{"member_id": member.member_id}]})
        assert left.members[0].error_code == 0
        # The member left, so an empty group's plain commit (generation -1) is fine.
        assert (await conn.request(8, 9, _commit(group, other_topic, 9))).topics[0].partitions[0].error_code == 0
        deleted = await conn.request(42, 2, {"groups_names": [group]})
        assert deleted.results[0].error_code == 0
        gone = await conn.request(9, 7, {"group_id": group, "topics": None, "require_stable": False})
        assert gone.topics == ()


async def test_offset_commit_v1_is_refused(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        # kio has no v1 schema; the body does not matter, the version is refused first.
        conn.send_raw(encode_request_frame(8, 1, 1, "old-client", False, b""))
        assert await conn.closed(5)


def test_session_expiry_removes_a_silent_member(broker_factory, topic_name):
    broker = broker_factory(admin=True)

    async def scenario() -> None:
        async with await KafkaConnection.connect(HOST, broker.port) as conn:
            await _joined_member(conn, topic_name, session_ms=60_000)
            assert (await _describe(broker.port, topic_name))[0].group_state == "Stable"
            # No heartbeats: the broker's clock jumps past the session and the group empties.
            # (A short real session could end before the first look on a loaded machine.)
            await asyncio.to_thread(broker.control().clock_advance, by="2m")
            for _ in range(200):
                await asyncio.sleep(0.05)
                if (await _describe(broker.port, topic_name))[0].group_state == "Empty":
                    break
            assert (await _describe(broker.port, topic_name))[0].group_state == "Empty"

    asyncio.run(scenario())
