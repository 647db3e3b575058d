"""The share-state requests between nodes (share-partition leader -> share coordinator)
under a cut link, DeleteGroups deleting a share group's state, and a share-state API's
error codes as a client sending it gets them."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.test_share_groups import (
    QUICK, _request, _start_offsets, consumer, create, new_group, poll_until, produce,
)

pytestmark = pytest.mark.timeout(180)
SHARE_STATE = "__share_group_state"
READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE = 84, 85


def _leader(control, topic: str, partition: int = 0) -> int:
    return next(p["leader"] for p in control.cluster()["partitions"]
                if (p["topic"], p["partition"]) == (topic, partition))


def test_state_requests_across_a_cut_link_fail_with_kafkas_error_and_nothing_is_lost(broker_factory, topic_name):
    cluster = broker_factory({**QUICK, "share.coordinator.state.topic.num.partitions": 1}, nodes=3,
                             admin=True)
    control = cluster.control()
    bootstrap = cluster.bootstrap
    # The share coordinator's topic, made by a first state call (a summary of nothing).
    assert _request(cluster, 87, 1, {"group_id": "probe", "topics": []}).results == ()
    coordinator = _leader(control, SHARE_STATE)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(30)
    leader = next(n for n in (1, 2, 3) if n != coordinator)
    if _leader(control, topic_name) != leader:
        control.partition_move(topic=topic_name, partition=0, leader=leader)
    group = new_group(bootstrap)
    produce(bootstrap, topic_name, [b"r%d" % i for i in range(6)])
    c = consumer(bootstrap, group, topic_name, explicit=True)
    got = poll_until(c, lambda ms: len(ms) >= 6,
                     explicit_ack=lambda m: AcknowledgeType.ACCEPT if m.offset() < 3 else AcknowledgeType.RELEASE)
    assert all(e is None for e in c.commit_sync().values())
    again = poll_until(c, lambda ms: len(ms) >= 3, explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert [(m.value(), m.delivery_count()) for m in again] == [(b"r3", 2), (b"r4", 2), (b"r5", 2)]

    control.network_cut(source=leader, target=coordinator, both=True)
    committed = {}
    commit = threading.Thread(target=lambda: committed.update(c.commit_sync()))
    commit.start()
    _advance_while(control, commit)
    [(_partition, error)] = committed.items()
    assert error is not None and error.args[0].code() == KafkaError.UNKNOWN, error  # UNKNOWN_SERVER_ERROR
    control.network_heal()
    # Rolled back: the locks ended meanwhile, the records come again (a third delivery).
    rest = poll_until(c, lambda ms: len(ms) >= 3, explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert [(m.value(), m.delivery_count()) for m in rest] == [(b"r3", 3), (b"r4", 3), (b"r5", 3)]
    assert all(e is None for e in c.commit_sync().values())
    c.close()
    # Durable: the share coordinator has the start offset past every record.
    coordinator_port = cluster.node_ports[_leader(control, "__consumer_offsets", _group_partition(group))]
    assert _start_offsets(_At(coordinator_port), group, topic_name) == [(0, 0, 6, 0)]

    # A new leader cut off from the share coordinator cannot read the state: its ShareFetch
    # answers UNKNOWN_SERVER_ERROR once the persister's retries are spent; healed, it goes
    # on from the state (offset 6): nothing acknowledged comes again, nothing is lost.
    produce(bootstrap, topic_name, [b"r6"])
    other = next(n for n in (1, 2, 3) if n not in (leader, coordinator))
    control.network_cut(source=other, target=coordinator, both=True)
    control.partition_move(topic=topic_name, partition=0, leader=other)
    topic_id = _request(cluster, 3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False}).topics[0].topic_id
    fetch = {"group_id": group, "member_id": uuid.uuid4().hex[:22], "share_session_epoch": 0, "max_wait": 0,
             "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
             "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}
    answered = {}
    fetching = threading.Thread(target=lambda: answered.update(r=_request(_At(cluster.node_ports[other]), 78, 1,
                                                                          fetch)))
    fetching.start()
    _advance_while(control, fetching)
    assert answered["r"].responses[0].partitions[0].error_code == ErrorCode.unknown_server_error
    control.network_heal()
    healed = _request(_At(cluster.node_ports[other]), 78, 1, fetch | {"member_id": uuid.uuid4().hex[:22]})
    acquired = healed.responses[0].partitions[0]
    assert (acquired.error_code, [(a.first_offset, a.last_offset, a.delivery_count)
                                  for a in acquired.acquired_records]) == (0, [(6, 6, 1)])


def _advance_while(control, thread: threading.Thread) -> None:
    """Lets the persister's backoffs pass on the broker's clock while ``thread`` waits."""
    for _ in range(60):
        if not thread.is_alive():
            return
        control.clock_advance(by="5s")
        thread.join(0.5)
    assert not thread.is_alive()


class _At:
    """A node to send a request to (what _request reads of a broker)."""

    def __init__(self, port: int) -> None:
        self.port = port


def _group_partition(group: str) -> int:
    from coordinator.partitioning import partition_for

    return partition_for(group, 50)


def test_delete_groups_deletes_the_share_state_and_a_new_group_starts_afresh(broker_factory, topic_name):
    broker = broker_factory(QUICK, admin=True)
    bootstrap = broker.bootstrap
    create(bootstrap, topic_name)
    group = new_group(bootstrap)
    produce(bootstrap, topic_name, [b"r%d" % i for i in range(4)])
    c = consumer(bootstrap, group, topic_name)
    assert len(poll_until(c, lambda ms: len(ms) >= 4)) == 4
    c.commit_sync()
    c.close()
    assert _start_offsets(broker, group, topic_name) == [(0, 0, 4, 0)]
    # The first DeleteShareGroupState (node to node) meets a request fault rule: retried.
    control = broker.control()
    control.fault_add(action="error", api_key=86, group_id=group, error="COORDINATOR_LOAD_IN_PROGRESS", count=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups([group])[group].result(30)
    assert [(r["fired"], r["matched"]) for r in control.faults()["rules"]] == [(1, 2)]
    described = _request(broker, 90, 1, {"groups": [{"group_id": group, "topics": None}]})
    assert described.groups[0].error_code == ErrorCode.group_id_not_found
    new_group(bootstrap, group)  # earliest again
    fresh = consumer(bootstrap, group, topic_name)
    got = poll_until(fresh, lambda ms: len(ms) >= 4)
    assert [(m.value(), m.delivery_count()) for m in got] == [(b"r%d" % i, 1) for i in range(4)]
    fresh.close()


def test_a_groups_share_partitions_are_initialized_and_deleted_in_one_request_per_coordinator(broker_factory,
                                                                                             topic_name):
    """The share-state calls for one group to one share coordinator made together go as
    one request, as Kafka's persister combines them: a rule on each API counts them."""
    broker = broker_factory({**QUICK, "share.coordinator.state.topic.num.partitions": 1}, admin=True)
    control = broker.control()
    create(broker.bootstrap, topic_name, partitions=6)
    group = new_group(broker.bootstrap)
    for api_key in (83, 86):  # InitializeShareGroupState, DeleteShareGroupState
        control.fault_add(action="delay", delay_ms=1, api_key=api_key, group_id=group)
    produce(broker.bootstrap, topic_name, [b"r"])
    c = consumer(broker.bootstrap, group, topic_name)
    assert len(poll_until(c, lambda ms: len(ms) >= 1)) == 1  # assigned once all six are initialized
    c.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_consumer_groups([group])[group].result(30)
    assert [r["matched"] for r in control.faults()["rules"]] == [1, 1]


def test_share_state_requests_answer_kafkas_error_codes(broker_factory, topic_name):
    """A share-partition the group coordinator never initialized is neither read nor
    written (INVALID_REQUEST, Kafka 4.4's message); an unknown topic is
    UNKNOWN_TOPIC_OR_PARTITION."""
    broker = broker_factory(QUICK)
    create(broker.bootstrap, topic_name)
    metadata = _request(broker, 3, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
    topic_id = metadata.topics[0].topic_id

    def read(topic) -> tuple:
        for _ in range(100):  # the first call makes __share_group_state: loading, for a moment
            answer = _request(broker, READ_SHARE_GROUP_STATE, 0, {"group_id": "g", "topics": [
                {"topic_id": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
            p = answer.results[0].partitions[0]
            if p.error_code != ErrorCode.coordinator_load_in_progress:
                return p.error_code, p.error_message
            time.sleep(0.1)
        raise AssertionError("__share_group_state did not load")

    assert read(topic_id) == (ErrorCode.invalid_request,
                              "Read operation on uninitialized share partition not allowed.")
    written = _request(broker, WRITE_SHARE_GROUP_STATE, 1, {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
        {"partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1,
         "state_batches": []}]}]})
    assert written.results[0].partitions[0].error_code == ErrorCode.invalid_request
    assert read(uuid.uuid4())[0] == ErrorCode.invalid_request  # a read checks no topic, as Kafka's
    summary = _request(broker, 87, 1, {"group_id": "g", "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
    assert summary.results[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_a_state_read_or_write_of_a_bad_key_on_a_node_not_coordinating_it_is_not_coordinator(broker_factory):
    """As Kafka 4.4, whose share coordinator shard checks a key's topic id and partition
    inside the scheduled operation: a read or write of a key no state can have (a zero
    topic id, a negative partition) sent to a node that is not the key's share
    coordinator is NOT_COORDINATOR (the client looks the coordinator up again); the
    coordinator itself answers INVALID_REQUEST."""
    cluster = broker_factory({**QUICK, "share.coordinator.state.topic.num.partitions": 1}, nodes=2)
    assert _request(cluster, 87, 1, {"group_id": "probe", "topics": []}).results == ()  # makes the topic
    metadata = _request(cluster, 3, 12, {"topics": [{"name": SHARE_STATE, "topic_id": None}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    coordinator = metadata.topics[0].partitions[0].leader_id
    other = next(n for n in cluster.node_ports if n != coordinator)
    read = {"leader_epoch": 0}
    write = {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1,
             "state_batches": []}

    def answered(node: int, api_key: int, version: int, topic_id, partition: int, fields: dict) -> tuple:
        for _ in range(100):  # the coordinator loads __share_group_state for a moment
            answer = _request(_At(cluster.node_ports[node]), api_key, version, {"group_id": "g", "topics": [
                {"topic_id": topic_id, "partitions": [{"partition": partition, **fields}]}]})
            p = answer.results[0].partitions[0]
            if p.error_code != ErrorCode.coordinator_load_in_progress:
                return p.error_code, p.error_message
            time.sleep(0.1)
        raise AssertionError("__share_group_state did not load")

    for api_key, version, fields in ((READ_SHARE_GROUP_STATE, 0, read), (WRITE_SHARE_GROUP_STATE, 1, write)):
        for topic_id, partition, message in ((None, 0, "The topic id cannot be null."),
                                             (uuid.uuid4(), -1, "The partition id cannot be a negative number.")):
            assert answered(other, api_key, version, topic_id, partition, fields)[0] == ErrorCode.not_coordinator
            assert answered(coordinator, api_key, version, topic_id, partition, fields) == (
                ErrorCode.invalid_request, message)
