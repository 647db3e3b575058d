"""The error codes a multi-node cluster answers where Kafka answers them, over the wire:
NOT_LEADER_OR_FOLLOWER (with KIP-951's current leader), FENCED_LEADER_EPOCH and
UNKNOWN_LEADER_EPOCH, OffsetForLeaderEpoch after leader changes, NOT_COORDINATOR on the
wrong node, COORDINATOR_LOAD_IN_PROGRESS while a moved coordinator loads, ElectLeaders
and partition reassignments."""

from __future__ import annotations

import asyncio

import pytest

from broker.wire.client import KafkaConnection
from broker.errors import code
from protocol.records import build_batch
from tests.broker_process import HOST

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(broker_factory):
    return broker_factory({"num.partitions": 3}, nodes=3, admin=True)


async def _conn(cluster, node_id: int) -> KafkaConnection:
    return await KafkaConnection.connect(HOST, cluster.node_ports[node_id])


async def _create(conn: KafkaConnection, topic: str, partitions: int = 3) -> None:
    r = await conn.request(19, 5, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": -1,
                                               "assignments": [], "configs": []}], "timeout_ms": 5000})
    assert r.topics[0].error_code == 0


async def _produce(conn: KafkaConnection, topic: str, partition: int, count: int, version: int = 12):
    batch = build_batch([(None, b"v%d" % i, (), 1000 + i) for i in range(count)])
    r = await conn.request(0, version, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}]})
    return r, r.responses[0].partition_responses[0]


async def _fetch(conn: KafkaConnection, topic: str, partition: int, current_leader_epoch: int = -1):
    r = await conn.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                   "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                       {"topic": topic, "partitions": [{
                                           "partition": partition, "current_leader_epoch": current_leader_epoch,
                                           "fetch_offset": 0, "last_fetched_epoch": -1, "log_start_offset": -1,
                                           "partition_max_bytes": 1 << 20}]}],
                                   "forgotten_topics_data": [], "rack_id": ""})
    return r.responses[0].partitions[0]


async def _offset_for_epoch(conn: KafkaConnection, topic: str, partition: int, epoch: int,
                            current_leader_epoch: int = -1):
    r = await conn.request(23, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": partition, "current_leader_epoch": current_leader_epoch, "leader_epoch": epoch}]}]})
    return r.topics[0].partitions[0]


def _leader(cluster, topic: str, partition: int) -> tuple[int, int]:
    p = next(p for p in cluster.control().cluster()["partitions"] if (p["topic"], p["partition"]) == (topic, partition))
    return p["leader"], p["leader_epoch"]


async def test_a_follower_answers_not_leader_with_the_current_leader(cluster, topic_name):
    async with await _conn(cluster, 1) as conn:
        await _create(conn, topic_name)
    leader, epoch = _leader(cluster, topic_name, 0)
    follower = next(n for n in (1, 2, 3) if n != leader)
    async with await _conn(cluster, follower) as conn:
        response, p = await _produce(conn, topic_name, 0, 1)
        assert p.error_code == code("NOT_LEADER_OR_FOLLOWER")
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, epoch)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(leader, cluster.node_ports[leader])]
        _, old = await _produce(conn, topic_name, 0, 1, version=9)  # before KIP-951: the error alone
        assert old.error_code == code("NOT_LEADER_OR_FOLLOWER")
        assert (await _fetch(conn, topic_name, 0)).error_code == code("NOT_LEADER_OR_FOLLOWER")
        r = await conn.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                  "timestamp": -1}]}]})
        assert r.topics[0].partitions[0].error_code == code("NOT_LEADER_OR_FOLLOWER")
    async with await _conn(cluster, leader) as conn:
        _, p = await _produce(conn, topic_name, 0, 1)
        assert p.error_code == 0


async def test_a_fetch_waiting_on_a_leader_that_loses_the_partition_is_not_leader(cluster, topic_name):
    # As Kafka's delayed fetch, which reads its partitions when it completes: the node that
    # no longer leads answers NOT_LEADER_OR_FOLLOWER, not what the new leader appended.
    async with await _conn(cluster, 1) as conn:
        await _create(conn, topic_name)
    leader, _ = _leader(cluster, topic_name, 0)
    new_leader = next(n for n in (1, 2, 3) if n != leader)
    async with await _conn(cluster, leader) as parked, await _conn(cluster, new_leader) as producer:
        fetch = asyncio.create_task(parked.request(1, 12, {
            "replica_id": -1, "max_wait_ms": 8000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic_name, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}))
        await asyncio.sleep(0.5)
        assert not fetch.done()  # waiting for data
        cluster.control().partition_move(topic=topic_name, partition=0, leader=new_leader)
        _, p = await _produce(producer, topic_name, 0, 1)
        assert p.error_code == 0
        answered = (await asyncio.wait_for(fetch, 5)).responses[0].partitions[0]
    assert (answered.error_code, answered.records) == (code("NOT_LEADER_OR_FOLLOWER"), b"")


async def test_stale_and_future_leader_epochs_are_fenced(cluster, topic_name):
    async with await _conn(cluster, 1) as conn:
        await _create(conn, topic_name)
    leader, epoch = _leader(cluster, topic_name, 0)
    new_leader = next(n for n in (1, 2, 3) if n != leader)
    cluster.control().partition_move(topic=topic_name, partition=0, leader=new_leader)
    assert _leader(cluster, topic_name, 0) == (new_leader, epoch + 1)
    async with await _conn(cluster, new_leader) as conn:
        assert (await _fetch(conn, topic_name, 0, epoch)).error_code == code("FENCED_LEADER_EPOCH")
        assert (await _fetch(conn, topic_name, 0, epoch + 5)).error_code == code("UNKNOWN_LEADER_EPOCH")
        assert (await _fetch(conn, topic_name, 0, epoch + 1)).error_code == 0
        assert (await _offset_for_epoch(conn, topic_name, 0, 0, epoch)).error_code == code("FENCED_LEADER_EPOCH")
    async with await _conn(cluster, leader) as conn:  # the old leader is a follower now
        assert (await _fetch(conn, topic_name, 0, epoch)).error_code == code("FENCED_LEADER_EPOCH")
        assert (await _fetch(conn, topic_name, 0, epoch + 1)).error_code == code("NOT_LEADER_OR_FOLLOWER")


async def test_offset_for_leader_epoch_follows_leader_changes(cluster, topic_name):
    async with await _conn(cluster, 1) as conn:
        await _create(conn, topic_name)
    leader, epoch = _leader(cluster, topic_name, 0)
    async with await _conn(cluster, leader) as conn:
        await _produce(conn, topic_name, 0, 3)
        fetched = await _fetch(conn, topic_name, 0)
        assert fetched.records  # batches carry the leader epoch they were written in
    other = next(n for n in (1, 2, 3) if n != leader)
    cluster.control().node_stop(node_id=leader)
    new_leader, new_epoch = _leader(cluster, topic_name, 0)
    assert new_leader != leader and new_epoch == epoch + 1
    async with await _conn(cluster, new_leader) as conn:
        await _produce(conn, topic_name, 0, 2)
        assert (await _offset_for_epoch(conn, topic_name, 0, epoch)).end_offset == 3
        latest = await _offset_for_epoch(conn, topic_name, 0, new_epoch, new_epoch)
        assert (latest.error_code, latest.leader_epoch, latest.end_offset) == (0, new_epoch, 5)
        future = await _offset_for_epoch(conn, topic_name, 0, new_epoch + 3)
        assert (future.leader_epoch, future.end_offset) == (-1, -1)
    assert other in (1, 2, 3)


async def test_coordinators_answer_only_on_their_node(cluster, topic_name):
    txn_id, group = topic_name + "-txn", topic_name + "-g"
    answers = set()
    join = {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    txn_offsets = {"transactional_id": txn_id, "group_id": "", "producer_id": 4242, "producer_epoch": 0,
                   "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                       {"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    async with await _conn(cluster, 1) as conn:
        await _create(conn, topic_name)
    for node in (1, 2, 3):
        async with await _conn(cluster, node) as conn:
            r = await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
            answers.add((r.coordinators[0].error_code, r.coordinators[0].node_id, r.coordinators[0].port))
            # An empty group id is refused by the request's checks on every node, the
            # coordinator of its partition or not, as on Kafka; a TxnOffsetCommit's before
            # its producer's transaction is verified (this producer id has none).
            assert (await conn.request(11, 5, dict(join, group_id=""))).error_code == code("INVALID_GROUP_ID")
            r = await conn.request(28, 3, txn_offsets)
            assert r.topics[0].partitions[0].error_code == code("INVALID_GROUP_ID")
    [(error, coordinator, port)] = answers
    assert error == 0 and port == cluster.node_ports[coordinator]
    wrong = next(n for n in (1, 2, 3) if n != coordinator)
    init = {"transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
    async with await _conn(cluster, wrong) as conn:
        assert (await conn.request(22, 4, init)).error_code == code("NOT_COORDINATOR")
        # What Kafka checks before it asks for the id's coordinator is answered by any node.
        too_long = dict(init, transaction_timeout_ms=900_001)
        assert (await conn.request(22, 4, too_long)).error_code == code("INVALID_TRANSACTION_TIMEOUT")
        end = {"transactional_id": "", "producer_id": 0, "producer_epoch": 0, "committed": True}
        assert (await conn.request(26, 3, end)).error_code == code("INVALID_REQUEST")
        r = await conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        group_coordinator = r.coordinators[0].node_id
    async with await _conn(cluster, coordinator) as conn:
        for _ in range(100):
            r = await conn.request(22, 4, init)
            if r.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                break
            await asyncio.sleep(0.05)
        assert r.error_code == 0
    wrong_group_node = next(n for n in (1, 2, 3) if n != group_coordinator)
    async with await _conn(cluster, wrong_group_node) as conn:
        r = await conn.request(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
        assert r.groups[0].error_code == code("NOT_COORDINATOR")
        assert (await conn.request(11, 5, join)).error_code == code("NOT_COORDINATOR")
        # A request's own checks come before the coordinator is asked, as on Kafka.
        too_short = dict(join, session_timeout_ms=1)
        assert (await conn.request(11, 5, too_short)).error_code == code("INVALID_SESSION_TIMEOUT")
        heartbeat = {"group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
                     "rebalance_timeout_ms": 30000, "subscribed_topic_names": [], "subscribed_topic_regex": None,
                     "server_assignor": None, "topic_partitions": []}
        refused = await conn.request(68, 1, heartbeat)
        assert (refused.error_code, refused.error_message) == (code("INVALID_REQUEST"), "MemberId can't be empty.")
        assert (await conn.request(68, 1, dict(heartbeat, member_id="m1"))).error_code == code("NOT_COORDINATOR")


async def test_a_moved_coordinator_loads_before_it_answers(broker_factory, topic_name):
    # Every load takes five minutes of the broker's clock, which the test jumps forward once
    # it has seen a loading coordinator (a short real-time load could end before it looked).
    # The jump stays under the idle-connection limit; the nodes' sessions outlast it and no
    # preferred-leader election moves the coordinator back meanwhile.
    cluster = broker_factory({"emulate.fault.coordinator.load.ms": 300_000, "broker.session.timeout.ms": 3_600_000,
                              "auto.leader.rebalance.enable": False}, nodes=3, admin=True)
    control = cluster.control()
    txn_id = topic_name + "-txn"
    init = {"transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}

    async def init_once_loaded(conn):
        for _ in range(200):
            r = await conn.request(22, 4, init)
            if r.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                return r
            await asyncio.to_thread(control.clock_advance, by="5m")
            await asyncio.sleep(0.05)
        return r

    async with await _conn(cluster, 1) as conn:
        r = await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        coordinator = r.coordinators[0].node_id
    async with await _conn(cluster, coordinator) as conn:
        first = await init_once_loaded(conn)
        assert first.error_code == 0
    target = next(n for n in (1, 2, 3) if n != coordinator)
    moved = await asyncio.to_thread(control.coordinator_move, transactional_id=txn_id, to=target)
    assert moved["leader"] == target
    async with await _conn(cluster, coordinator) as conn:
        assert (await conn.request(22, 4, init)).error_code == code("NOT_COORDINATOR")
    async with await _conn(cluster, target) as conn:
        assert (await conn.request(22, 4, init)).error_code == code("COORDINATOR_LOAD_IN_PROGRESS")
        again = await init_once_loaded(conn)
        # the new coordinator loaded the id's state: the same producer id, the next epoch
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id,
                                                                             first.producer_epoch + 1)


async def test_elect_leaders_and_reassignments(cluster, topic_name):
    async with await _conn(cluster, 1) as conn:
        await _create(conn, topic_name)
        leader, epoch = _leader(cluster, topic_name, 0)
        other = next(n for n in (1, 2, 3) if n != leader)
        cluster.control().partition_move(topic=topic_name, partition=0, leader=other)
        r = await conn.request(43, 2, {"election_type": 0, "timeout_ms": 5000, "topic_partitions": [
            {"topic": topic_name, "partitions": [0, 1, 7]}]})
        results = {p.partition_id: p.error_code for p in r.replica_election_results[0].partition_result}
        assert results == {0: code("NONE"), 1: code("ELECTION_NOT_NEEDED"), 7: code("UNKNOWN_TOPIC_OR_PARTITION")}
        assert _leader(cluster, topic_name, 0) == (leader, epoch + 2)
        r = await conn.request(45, 0, {"timeout_ms": 5000, "topics": [{"name": topic_name, "partitions": [
            {"partition_index": 1, "replicas": [3, 1]}, {"partition_index": 2, "replicas": [1, 9]},
            {"partition_index": 0, "replicas": None}]}]})
        errors = {p.partition_index: p.error_code for p in r.responses[0].partitions}
        assert errors == {1: code("NONE"), 2: code("INVALID_REPLICA_ASSIGNMENT"),
                          0: code("NO_REASSIGNMENT_IN_PROGRESS")}
        md = await conn.request(3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
        p1 = next(p for p in md.topics[0].partitions if p.partition_index == 1)
        assert list(p1.replica_nodes) == [3, 1] and p1.leader_id in (3, 1)
        r = await conn.request(46, 0, {"timeout_ms": 5000, "topics": None})
        assert r.error_code == 0 and r.topics == ()
