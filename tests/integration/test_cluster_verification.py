"""KIP-890 verification across the network between the nodes (three nodes in one process):
the partition leader asks the transaction coordinator's node with AddPartitionsToTxn,
a request that meets the link faults and a paused node like any other between nodes.

With the link from the leader to the coordinator cut, losing every message, or the
coordinator's node paused, a transaction's first batch is not verified: Produce answers
NOT_ENOUGH_REPLICAS (the client retries), Produce v12's implicit add writes nothing to
__transaction_state, TxnOffsetCommit answers COORDINATOR_LOAD_IN_PROGRESS; once the link
heals or the node resumes, everything commits exactly once."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker.wire.client import KafkaConnection
from broker.errors import code
from broker.testing.helpers import wait_until
from coordinator.partitioning import partition_for
from protocol.records import build_batch
from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(180)

HOST = "127.0.0.1"
NUM_PARTITIONS = 50  # of __transaction_state and __consumer_offsets (the defaults)
# The coordinator's node stays paused across ``clock_advance``: not fenced meanwhile.
SETTINGS = {"broker.session.timeout.ms": 3_600_000}


@pytest.fixture
def cluster(broker_factory):
    return broker_factory(SETTINGS, nodes=3, admin=True)


def _errors(cluster, request: str) -> dict[str, float]:
    """The broker's answers to ``request`` by error, from its metrics."""
    with urllib.request.urlopen(cluster.admin_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_errors_total{") and f'request="{request}"' in line:
            out[line.split('error="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return out


def _partition(control, topic: str, index: int = 0) -> dict:
    return next(p for p in control.cluster()["partitions"] if p["topic"] == topic and p["partition"] == index)


def _coordinator_of(control, kind: str, key: str) -> int:
    index = partition_for(key, NUM_PARTITIONS)
    return next(c["node_id"] for c in control.cluster()["coordinators"]
                if c["kind"] == kind and c["partition"] == index)


def _lead_apart(control, topic: str, coordinator: int) -> int:
    """Moves the topic's partition 0 off the coordinator's node; returns its leader."""
    state = _partition(control, topic)
    if state["leader"] == coordinator:
        control.partition_move(topic=topic, partition=0, leader=next(r for r in state["replicas"] if r != coordinator))
    return _partition(control, topic)["leader"]


def _arrived(control, api_key: int, client_id: str):
    """A rule that only counts (a 1 ms delay): tells when a client's request reached a node."""
    rule = control.fault_add(action="delay", delay_ms=1, api_key=api_key, client_id=client_id)

    def matched() -> int:
        return next(r for r in control.faults()["rules"] if r["id"] == rule["id"])["matched"]
    return lambda n=1: wait_until(lambda: matched() >= n, timeout=30)


def _state(cluster, txn_id: str) -> dict:
    return next(t for t in cluster.transactions() if t["transactional_id"] == txn_id)


def _transaction_log_end(cluster, txn_id: str) -> int:
    """The high watermark of the id's __transaction_state partition."""
    with urllib.request.urlopen(cluster.admin_url + "/console/state", timeout=30) as answer:
        partitions = json.load(answer)["partitions"]
    index = partition_for(txn_id, NUM_PARTITIONS)
    return next(p["high_watermark"] for p in partitions if p["topic"] == "__transaction_state" and p["partition"] == index)


def _high_watermark(cluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def _producer(cluster, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 0,
                         "transaction.timeout.ms": 600_000, "message.timeout.ms": 300_000})
    producer.init_transactions(30)
    return producer


# --- stock clients ----------------------------------------------------------------------------


def test_a_cut_link_to_the_coordinator_leaves_the_first_batch_unverified_until_it_heals(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"cut-{topic_name}"
    producer = _producer(cluster, txn_id)
    leader = _lead_apart(control, topic_name, _state(cluster, txn_id)["coordinator"])
    coordinator = _state(cluster, txn_id)["coordinator"]
    control.network_cut(source=leader, target=coordinator)  # the verification's way only

    producer.begin_transaction()
    reports: list = []
    producer.produce(topic_name, b"verified-late", partition=0, on_delivery=lambda err, msg: reports.append(err))
    # AddPartitionsToTxn reached the coordinator from the client; the leader cannot ask it
    wait_until(lambda: producer.poll(0.1) >= 0 and _errors(cluster, "Produce").get("NOT_ENOUGH_REPLICAS", 0) >= 2,
               timeout=60)  # answered, and retried by the client
    assert reports == [] and _high_watermark(cluster, topic_name) == 0  # nothing appended

    control.network_heal()
    assert producer.flush(60) == 0 and reports == [None]
    producer.commit_transaction(30)
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 1), [b"verified-late"])


def test_a_link_losing_every_message_times_the_verification_out(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"lossy-{topic_name}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 0,
                         "client.id": "lossy", "transaction.timeout.ms": 600_000, "message.timeout.ms": 300_000})
    producer.init_transactions(30)
    coordinator = _state(cluster, txn_id)["coordinator"]
    leader = _lead_apart(control, topic_name, coordinator)
    control.network_link(source=leader, target=coordinator, loss=1.0, seed=7)
    arrived = _arrived(control, 0, "lossy")

    producer.begin_transaction()
    reports: list = []
    producer.produce(topic_name, b"after-timeout", partition=0, on_delivery=lambda err, msg: reports.append(err))
    arrived(1)
    assert producer.poll(0.5) == 0 and reports == []  # the verification waits for its answer
    control.clock_advance(by="31s")  # past request.timeout.ms: NETWORK_EXCEPTION, answered NOT_ENOUGH_REPLICAS
    wait_until(lambda: _errors(cluster, "Produce").get("NOT_ENOUGH_REPLICAS", 0) >= 1, timeout=30)
    assert reports == [] and _high_watermark(cluster, topic_name) == 0

    control.network_heal()
    control.clock_advance(by="31s")  # a retry lost before the heal times out too; the next one passes
    assert producer.flush(60) == 0 and reports == [None]
    producer.commit_transaction(30)
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 1), [b"after-timeout"])


def test_send_offsets_to_transaction_fails_while_the_group_coordinator_is_cut_off(cluster, topic_name):
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"offsets-{topic_name}"
    producer = _producer(cluster, txn_id)
    coordinator = _state(cluster, txn_id)["coordinator"]
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe"})
    probe.list_topics(timeout=30)
    probe.committed([TopicPartition(topic_name, 0)], timeout=30)  # creates __consumer_offsets
    probe.close()
    group = next(g for g in (f"g{i}-{topic_name}" for i in range(100))
                 if _coordinator_of(control, "group", g) != coordinator)
    group_coordinator = _coordinator_of(control, "group", group)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False})

    producer.begin_transaction()
    producer.produce(topic_name, b"aborted", partition=0)
    assert producer.flush(30) == 0
    control.network_cut(source=group_coordinator, target=coordinator)
    # The cut stops the group coordinator's node following __transaction_state too: once it
    # has left the ISR, AddOffsetsToTxn's write no longer waits for it.
    control.clock_advance(by="31s")
    offsets = [TopicPartition(topic_name, 0, 42)]
    with pytest.raises(KafkaException) as failed:
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 5)
    error = failed.value.args[0]  # librdkafka makes the transaction abort on this answer
    assert (error.code(), error.fatal(), error.txn_requires_abort()) == (KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                                                         False, True)
    assert _errors(cluster, "TxnOffsetCommit").get("COORDINATOR_LOAD_IN_PROGRESS", 0) >= 1

    control.network_heal()
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"with-offsets", partition=0)
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    [committed] = consumer.committed([TopicPartition(topic_name, 0)], timeout=30)
    consumer.close()
    assert committed.offset == 42
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 1), [b"with-offsets"])


# --- raw requests against a paused coordinator --------------------------------------------------


def _port(control, node_id: int) -> int:
    return next(n["port"] for n in control.cluster()["nodes"] if n["node_id"] == node_id)


async def _init(conn: KafkaConnection, txn_id: str) -> tuple[int, int]:
    """InitProducerId, retried while the coordinator loads __transaction_state."""
    while True:
        init = await conn.request(22, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 600_000,
                                          "producer_id": -1, "producer_epoch": -1})
        if init.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
            break
        await asyncio.sleep(0.05)
    assert init.error_code == 0
    return init.producer_id, init.producer_epoch


def _produce(conn: KafkaConnection, version: int, txn_id: str, topic: str, pid: int, epoch: int, value: bytes):
    batch = bytes(build_batch([(None, value, (), 1)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                              transactional=True))
    return conn.send(0, version, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


async def _end(conn: KafkaConnection, txn_id: str, pid: int, epoch: int) -> int:
    r = await conn.request(26, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                   "committed": True})
    return r.error_code


@pytest.mark.parametrize("version", [9, 12])
async def test_a_paused_coordinator_verifies_nothing_and_writes_nothing(cluster, topic_name, version):
    """Produce v9 (verify-only) and v12 (implicit add) while the coordinator's node is
    paused: NOT_ENOUGH_REPLICAS once request.timeout.ms passes; the v12 add left no trace
    in __transaction_state; after the resume the retry is appended and commits once."""
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"paused-{version}-{topic_name}"
    coordinator = None
    async with await KafkaConnection.connect(HOST, cluster.port) as bootstrap:
        found = await bootstrap.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        coordinator = found.coordinators[0].node_id
    leader = _lead_apart(control, topic_name, coordinator)
    async with await KafkaConnection.connect(HOST, _port(control, coordinator), "raw") as to_coordinator, \
            await KafkaConnection.connect(HOST, _port(control, leader), "raw-producer") as to_leader:
        pid, epoch = await _init(to_coordinator, txn_id)
        if version < 12:  # the client adds the partition itself
            added = await to_coordinator.request(24, 3, {
                "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        before, logged = _state(cluster, txn_id), _transaction_log_end(cluster, txn_id)
        arrived = _arrived(control, 0, "raw-producer")
        control.node_pause(node_id=coordinator)
        answer = _produce(to_leader, version, txn_id, topic_name, pid, epoch, b"once")
        arrived(1)
        await asyncio.sleep(0.5)
        assert not answer.done()  # waiting for the paused coordinator's answer
        control.clock_advance(by="31s")  # request.timeout.ms passes: NETWORK_EXCEPTION
        response = (await asyncio.wait_for(answer, 30)).responses[0].partition_responses[0]
        assert response.error_code == code("NOT_ENOUGH_REPLICAS")
        assert response.error_message.endswith("Underlying error: NETWORK_EXCEPTION")
        control.node_resume(node_id=coordinator)
        after = _state(cluster, txn_id)
        assert (after["state"], after["partitions"]) == (before["state"], before["partitions"])  # nothing written
        assert _transaction_log_end(cluster, txn_id) == logged and _high_watermark(cluster, topic_name) == 0

        response = (await _produce(to_leader, version, txn_id, topic_name, pid, epoch, b"once")).responses[0]
        assert response.partition_responses[0].error_code == 0
        assert await _end(to_coordinator, txn_id, pid, epoch) == 0
    assert_exactly_once(read_committed(cluster.bootstrap, topic_name, 1, 1), [b"once"])


@pytest.mark.parametrize("version", [3, 5])
async def test_txn_offset_commit_to_a_paused_coordinator_is_retriable_and_writes_nothing(
        cluster, topic_name, version):
    """TxnOffsetCommit v3 (after AddOffsetsToTxn) and v5 (implicit add) while the
    transaction coordinator's node is paused: COORDINATOR_LOAD_IN_PROGRESS once
    request.timeout.ms passes, nothing added to the transaction; after the resume the
    offsets commit with the transaction."""
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"paused-offsets-{version}-{topic_name}"
    async with await KafkaConnection.connect(HOST, cluster.port) as bootstrap:
        found = await bootstrap.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        coordinator = found.coordinators[0].node_id
        group = None
        for candidate in (f"g{i}-{topic_name}" for i in range(100)):
            found = await bootstrap.request(10, 4, {"key_type": 0, "coordinator_keys": [candidate]})
            if found.coordinators[0].error_code == 0 and found.coordinators[0].node_id != coordinator:
                group, group_coordinator = candidate, found.coordinators[0].node_id
                break
    assert group is not None
    async with await KafkaConnection.connect(HOST, _port(control, coordinator), "raw") as to_coordinator, \
            await KafkaConnection.connect(HOST, _port(control, group_coordinator), "raw-offsets") as to_group:
        pid, epoch = await _init(to_coordinator, txn_id)
        if version < 5:
            added = await to_coordinator.request(25, 3, {"transactional_id": txn_id, "producer_id": pid,
                                                         "producer_epoch": epoch, "group_id": group})
            assert added.error_code == 0
        before, logged = _state(cluster, txn_id), _transaction_log_end(cluster, txn_id)

        def commit_offsets():
            return to_group.send(28, version, {
                "transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": ""}]}]})

        while True:  # the group coordinator loads its partition first
            fetched = await to_group.request(9, 7, {"group_id": group, "require_stable": True, "topics": [
                {"name": topic_name, "partition_indexes": [0]}]})
            if fetched.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                break
            await asyncio.sleep(0.05)
        arrived = _arrived(control, 28, "raw-offsets")
        control.node_pause(node_id=coordinator)
        answer = commit_offsets()
        arrived(1)
        await asyncio.sleep(0.5)
        assert not answer.done()  # waiting for the paused coordinator's answer
        control.clock_advance(by="31s")  # request.timeout.ms passes: NETWORK_EXCEPTION
        error = (await asyncio.wait_for(answer, 30)).topics[0].partitions[0].error_code
        assert error == code("COORDINATOR_LOAD_IN_PROGRESS")
        control.node_resume(node_id=coordinator)
        after = _state(cluster, txn_id)
        assert (after["state"], after["partitions"]) == (before["state"], before["partitions"])  # nothing written
        assert _transaction_log_end(cluster, txn_id) == logged

        assert (await commit_offsets()).topics[0].partitions[0].error_code == 0
        assert await _end(to_coordinator, txn_id, pid, epoch) == 0
        while True:
            fetched = await to_group.request(9, 7, {"group_id": group, "require_stable": True, "topics": [
                {"name": topic_name, "partition_indexes": [0]}]})
            p = fetched.topics[0].partitions[0]
            if p.error_code != code("UNSTABLE_OFFSET_COMMIT"):
                break
            await asyncio.sleep(0.05)
        assert (p.error_code, p.committed_offset) == (0, 7)


# --- batching per coordinator node, as Kafka's AddPartitionsToTxnManager ---------------------


async def test_verifications_for_one_coordinator_node_wait_and_leave_together(cluster, topic_name):
    """While one AddPartitionsToTxn from the leader's node is in flight (held by a request
    fault rule matching the node's client id), the verifications that arrive wait and leave
    in one request; a second verification of a transactional id already waiting replaces
    it, the first answered NETWORK_EXCEPTION (NOT_ENOUGH_REPLICAS to its producer), and of
    two epochs of one id the older is refused INVALID_PRODUCER_EPOCH."""
    create(cluster.bootstrap, topic_name, 2)
    control = cluster.control()
    async with await KafkaConnection.connect(HOST, cluster.port) as bootstrap:
        by_coordinator: dict[int, list[str]] = {}
        for candidate in (f"batch{i}-{topic_name}" for i in range(200)):
            found = await bootstrap.request(10, 4, {"key_type": 1, "coordinator_keys": [candidate]})
            by_coordinator.setdefault(found.coordinators[0].node_id, []).append(candidate)
            coordinator, ids = max(by_coordinator.items(), key=lambda kv: len(kv[1]))
            if len(ids) == 3:
                break
    held, waiting, replaced = ids
    leader = _lead_apart(control, topic_name, coordinator)
    other = _partition(control, topic_name, 1)
    if other["leader"] != leader:
        control.partition_move(topic=topic_name, partition=1, leader=leader)
    producers = {}
    async with await KafkaConnection.connect(HOST, _port(control, coordinator), "raw") as to_coordinator:
        for txn_id in ids:
            pid, epoch = producers[txn_id] = await _init(to_coordinator, txn_id)
            if txn_id == waiting:  # a second instance fenced the first: epoch 1
                pid, epoch = producers[txn_id] = await _init(to_coordinator, txn_id)
            added = await to_coordinator.request(24, 3, {
                "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": topic_name, "partitions": [0, 1]}]})
            assert all(p.partition_error_code == 0
                       for p in added.results_by_topic_v3_and_below[0].results_by_partition)
        rule = control.fault_add(action="delay", delay_ms=20_000, api_key=24, client_id=f"eosbroker-node-{leader}")

        def requests_sent() -> int:
            return next(r for r in control.faults()["rules"] if r["id"] == rule["id"])["matched"]

        connections = [await KafkaConnection.connect(HOST, _port(control, leader), f"p{i}") for i in range(5)]
        try:
            def produce(conn, txn_id, partition, epoch=None):
                pid, newest = producers[txn_id]
                epoch = newest if epoch is None else epoch
                batch = bytes(build_batch([(None, txn_id.encode(), (), 1)], producer_id=pid, producer_epoch=epoch,
                                          base_sequence=0, transactional=True))
                return conn.send(0, 9, {"transactional_id": txn_id, "acks": 1, "timeout_ms": 30000, "topic_data": [
                    {"name": topic_name, "partition_data": [{"index": partition, "records": batch}]}]})

            first = produce(connections[0], held, 0)
            wait_until(lambda: requests_sent() == 1, timeout=30)  # in flight, held
            second = produce(connections[1], waiting, 0)
            # the same producer twice (a retry, say): whichever arrives second replaces the first
            twice = [produce(connections[2], replaced, 0), produce(connections[3], replaced, 1)]
            done, _ = await asyncio.wait(twice, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            [superseded] = done
            latest = next(f for f in twice if f is not superseded)
            answer = superseded.result().responses[0].partition_responses[0]
            assert answer.error_code == code("NOT_ENOUGH_REPLICAS")
            # the fenced instance (epoch 0) of a waiting id is refused, whichever came first
            zombie = produce(connections[4], waiting, 1, epoch=0)
            answer = (await asyncio.wait_for(zombie, 30)).responses[0].partition_responses[0]
            assert answer.error_code == code("INVALID_PRODUCER_EPOCH")
            assert not first.done() and not second.done() and not latest.done()
            control.clock_advance(by="21s")  # within request.timeout.ms: the held request is answered
            await asyncio.wait_for(first, 30)  # and the waiting ones leave together
            wait_until(lambda: requests_sent() == 2, timeout=30)
            control.clock_advance(by="21s")
            answers = [(await asyncio.wait_for(f, 30)).responses[0].partition_responses[0].error_code
                       for f in (first, second, latest)]
            assert answers == [0, 0, 0] and requests_sent() == 2
        finally:
            for conn in connections:
                await conn.close()


# --- a node that stops or dies mid-request answers nothing -------------------------------------


async def _coordinators_apart(bootstrap: KafkaConnection, txn_id: str, topic_name: str) -> tuple[int, str, int]:
    """The transactional id's coordinator, and a group coordinated on another node."""
    found = await bootstrap.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
    coordinator = found.coordinators[0].node_id
    for candidate in (f"g{i}-{topic_name}" for i in range(100)):
        found = await bootstrap.request(10, 4, {"key_type": 0, "coordinator_keys": [candidate]})
        if found.coordinators[0].error_code == 0 and found.coordinators[0].node_id != coordinator:
            return coordinator, candidate, found.coordinators[0].node_id
    raise AssertionError("no group coordinated apart from the transaction coordinator")


@pytest.mark.parametrize("action", ["stop", "kill"])
async def test_a_verification_held_at_a_coordinator_that_then_stops_is_never_answered(cluster, topic_name, action):
    """TxnOffsetCommit v5's implicit add reaches the transaction coordinator's node and is
    held there (a ``hold`` rule) while that node stops or dies. Released, it is not
    handled and not answered, as on a dead host: the group coordinator sees the
    connection go (NETWORK_EXCEPTION) and answers COORDINATOR_LOAD_IN_PROGRESS, and
    nothing was added to the transaction."""
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"held-{action}-{topic_name}"
    async with await KafkaConnection.connect(HOST, cluster.port) as bootstrap:
        coordinator, group, group_coordinator = await _coordinators_apart(bootstrap, txn_id, topic_name)
    async with await KafkaConnection.connect(HOST, _port(control, coordinator), "raw") as to_coordinator, \
            await KafkaConnection.connect(HOST, _port(control, group_coordinator), "raw-offsets") as to_group:
        pid, epoch = await _init(to_coordinator, txn_id)
        logged = _transaction_log_end(cluster, txn_id)
        while True:  # the group coordinator loads its partition first
            fetched = await to_group.request(9, 7, {"group_id": group, "topics": [
                {"name": topic_name, "partition_indexes": [0]}]})
            if fetched.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                break
            await asyncio.sleep(0.05)
        held = control.fault_add(action="hold", api_key=24, client_id=f"eosbroker-node-{group_coordinator}")
        answer = to_group.send(28, 5, {
            "transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]})
        wait_until(lambda: next(r for r in control.faults()["rules"] if r["id"] == held["id"])["matched"] >= 1,
                   timeout=30)
        getattr(control, f"node_{action}")(node_id=coordinator)
        control.fault_release(rule_id=held["id"])
        error = (await asyncio.wait_for(answer, 30)).topics[0].partitions[0].error_code
        assert error == code("COORDINATOR_LOAD_IN_PROGRESS")
    assert _transaction_log_end(cluster, txn_id) == logged  # the add was never handled


async def test_a_verification_from_a_node_stopped_before_it_landed_adds_nothing(cluster, topic_name):
    """Produce v12's implicit add leaves the partition leader's node and is held on its
    way (a ``hold`` rule at the coordinator) while the leader's node stops: released, it
    never lands, so nothing is written to __transaction_state for it."""
    create(cluster.bootstrap, topic_name, 1)
    control = cluster.control()
    txn_id = f"lost-{topic_name}"
    async with await KafkaConnection.connect(HOST, cluster.port) as bootstrap:
        found = await bootstrap.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        coordinator = found.coordinators[0].node_id
    leader = _lead_apart(control, topic_name, coordinator)
    async with await KafkaConnection.connect(HOST, _port(control, coordinator), "raw") as to_coordinator, \
            await KafkaConnection.connect(HOST, _port(control, leader), "raw-producer") as to_leader:
        pid, epoch = await _init(to_coordinator, txn_id)
        logged = _transaction_log_end(cluster, txn_id)
        held = control.fault_add(action="hold", api_key=24, client_id=f"eosbroker-node-{leader}")
        answer = _produce(to_leader, 12, txn_id, topic_name, pid, epoch, b"never")
        wait_until(lambda: next(r for r in control.faults()["rules"] if r["id"] == held["id"])["matched"] >= 1,
                   timeout=30)
        control.node_stop(node_id=leader)
        assert control.fault_release(rule_id=held["id"])["released"] == 1
        with pytest.raises(Exception):
            await asyncio.wait_for(answer, 30)  # the stopped leader answers nothing
        state = _state(cluster, txn_id)
        assert _transaction_log_end(cluster, txn_id) == logged and state["partitions"] == []
