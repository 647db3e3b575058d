"""The group coordinator's writes are answered once the __consumer_offsets ISR has them,
as Kafka 4.4's coordinator runtime answers once the high watermark covers them:
`--nodes 3` with the group coordinator's node cut off from its followers.

While the followers are still in the ISR, a write waits and is answered
COORDINATOR_NOT_AVAILABLE when offsets.commit.timeout.ms passes (the write stays, as in
Kafka, where it commits when the followers catch up or leave the ISR). Once they have
left the ISR the coordinator's own copy is the high watermark and writes succeed again,
unless the ISR is then below min.insync.replicas: Kafka's coordinator appends with
acks=1, so nothing is refused, but the high watermark does not advance and the write
times out as before. After the heal the writes succeed, and a restart replays what the
live coordinator held."""

from __future__ import annotations

import asyncio
import threading

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.errors import CoordinatorNotAvailableError
from kafka.structs import OffsetAndMetadata

from broker.wire.client import KafkaConnection
from broker.testing.helpers import wait_until
from coordinator.partitioning import partition_for
from tests.integration.test_cluster import create

pytestmark = pytest.mark.timeout(180)
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 10, 42, 47
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 14, 15
OFFSETS_PARTITIONS = 50
LAG_MS = 150_000
TIMEOUT_STEP_MS = 6_000  # past offsets.commit.timeout.ms (5 s)


def _every_node(cluster) -> str:
    return ",".join(f"127.0.0.1:{port}" for port in cluster.node_ports.values())


async def _request(port: int, api_key: int, version: int, body: dict):
    async with await KafkaConnection.connect("127.0.0.1", port) as conn:
        return await conn.request(api_key, version, body)


async def _coordinator(cluster, group: str) -> int:
    answer = await _request(next(iter(cluster.node_ports.values())), FIND_COORDINATOR, 4,
                            {"key_type": 0, "coordinator_keys": [group]})
    return answer.coordinators[0].node_id


def _commit(group: str, topic: str, offset: int) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def _commit_error(answer) -> int:
    return answer.topics[0].partitions[0].error_code


async def _committed(port: int, group: str, topic: str) -> int:
    """The group's committed offset of the topic's partition 0, once its coordinator has loaded."""
    for _ in range(300):
        answer = await _request(port, OFFSET_FETCH, 8, {"groups": [
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}], "require_stable": False})
        if answer.groups[0].error_code != COORDINATOR_LOAD_IN_PROGRESS:
            assert answer.groups[0].error_code == 0
            return answer.groups[0].topics[0].partitions[0].committed_offset
        await asyncio.sleep(0.1)
    raise AssertionError(f"{group}'s coordinator never loaded")


def _cut_off(cluster, control, node: int) -> None:
    for other in cluster.node_ports:
        if other != node:
            control.network_cut(source=node, target=other)


def _isr(control, index: int) -> list[int]:
    return next(p["isr"] for p in control.cluster()["partitions"]
                if p["topic"] == "__consumer_offsets" and p["partition"] == index)


async def test_a_group_coordinator_cut_off_from_its_followers_times_writes_out_until_they_leave_the_isr(
        broker_factory, topic_name):
    """Raw OffsetCommit, a kafka-python member's commit and a confluent-kafka consumer's
    commit while the coordinator's followers cannot fetch: each is applied, waits, and
    is answered COORDINATOR_NOT_AVAILABLE (kafka-python's CoordinatorNotAvailableError,
    confluent-kafka's KafkaError) once offsets.commit.timeout.ms passes, the write
    staying; once the followers left the ISR, below min.insync.replicas, a commit still
    times out (the high watermark does not advance); after the heal commits succeed; a
    restart replays the offsets the live coordinator held."""
    # The followers stay in the ISR through the clock's steps below (each a commit's timeout).
    cluster = broker_factory({"min.insync.replicas": 2, "replica.lag.time.max.ms": LAG_MS}, nodes=3, admin=True)
    bootstrap = _every_node(cluster)
    create(bootstrap, topic_name, 1)
    control = cluster.control()
    simple = f"s-{topic_name}"
    coordinator = await _coordinator(cluster, simple)
    port = cluster.node_ports[coordinator]
    assert _commit_error(await _request(port, OFFSET_COMMIT, 8, _commit(simple, topic_name, 3))) == 0
    members = _group_coordinated_by(control, coordinator, f"m-{topic_name}")

    # A kafka-python member of a group on the same coordinator, and a confluent-kafka consumer.
    kp = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, group_id=members, enable_auto_commit=False,
                       session_timeout_ms=LAG_MS * 2, heartbeat_interval_ms=1000, max_poll_interval_ms=300000)
    ck = Consumer({"bootstrap.servers": bootstrap, "group.id": simple, "enable.auto.commit": False})
    try:
        wait_until(lambda: kp.poll(100) is not None and bool(kp.assignment()), timeout=30)
        kp.commit({KafkaPythonTopicPartition(topic_name, 0): OffsetAndMetadata(1, "", -1)})

        _cut_off(cluster, control, coordinator)
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            pending = conn.send(OFFSET_COMMIT, 8, _commit(simple, topic_name, 5))
            # Appended and applied while it waits for the followers, as Kafka's write is.
            await _until_committed(port, simple, topic_name, 5)
            control.clock_advance(by=f"{TIMEOUT_STEP_MS}ms")  # past offsets.commit.timeout.ms
            assert _commit_error(await asyncio.wait_for(pending, 30)) == COORDINATOR_NOT_AVAILABLE
        assert await _committed(port, simple, topic_name) == 5  # the write stays

        failures, refused = [], []

        def confluent_commit():
            try:
                ck.commit(offsets=[TopicPartition(topic_name, 0, 6)], asynchronous=False)
            except KafkaException as e:
                refused.append(e.args[0])

        committing = threading.Thread(target=confluent_commit)
        committing.start()
        kp.commit_async({KafkaPythonTopicPartition(topic_name, 0): OffsetAndMetadata(2, "", -1)},
                        callback=lambda _offsets, answer: failures.append(answer))
        for _ in range(600):  # kafka-python sends it from poll
            kp.poll(50)
            if await _committed(port, members, topic_name) == 2:
                break
        await _until_committed(port, simple, topic_name, 6)
        # librdkafka retries a few times (each waits its timeout) before it reports the error.
        for _ in range(LAG_MS // TIMEOUT_STEP_MS - 3):
            if not committing.is_alive():
                break
            control.clock_advance(by=f"{TIMEOUT_STEP_MS}ms")
            committing.join(0.5)
        committing.join(30)
        wait_until(lambda: kp.poll(50) is not None and bool(failures), timeout=30)
        assert isinstance(failures[0], CoordinatorNotAvailableError)
        assert [e.code() for e in refused] == [KafkaError.COORDINATOR_NOT_AVAILABLE]

        control.clock_advance(by=f"{LAG_MS}ms")  # past replica.lag.time.max.ms: the followers leave the ISR
        assert len(_isr(control, _offsets_partition(simple))) == 1
        # Below min.insync.replicas the high watermark stands still (Kafka 4.4's
        # Partition.maybeIncrementLeaderHW): the write is applied, held, and times out.
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            pending = conn.send(OFFSET_COMMIT, 8, _commit(simple, topic_name, 7))
            await _until_committed(port, simple, topic_name, 7)
            control.clock_advance(by=f"{TIMEOUT_STEP_MS}ms")
            assert _commit_error(await asyncio.wait_for(pending, 30)) == COORDINATOR_NOT_AVAILABLE

        control.network_heal()
        wait_until(lambda: len(_isr(control, _offsets_partition(simple))) == 3, timeout=30)
        assert _commit_error(await _request(port, OFFSET_COMMIT, 8, _commit(simple, topic_name, 8))) == 0
        kp.commit({KafkaPythonTopicPartition(topic_name, 0): OffsetAndMetadata(3, "", -1)})
        ck.commit(offsets=[TopicPartition(topic_name, 0, 9)], asynchronous=False)
    finally:
        kp.close()
        ck.close()
    live = (await _committed(port, simple, topic_name), await _committed(port, members, topic_name))
    assert live == (9, 3)
    cluster.restart()
    port = cluster.node_ports[await _coordinator(cluster, simple)]
    restarted = (await _committed(port, simple, topic_name), await _committed(port, members, topic_name))
    assert restarted == live


async def _until_committed(port: int, group: str, topic: str, offset: int) -> None:
    for _ in range(300):
        if await _committed(port, group, topic) == offset:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{group} never held offset {offset}")


def _offsets_partition(group: str) -> int:
    return partition_for(group, OFFSETS_PARTITIONS)


def _group_coordinated_by(control, node: int, prefix: str) -> str:
    leaders = {c["partition"]: c["node_id"] for c in control.cluster()["coordinators"] if c["kind"] == "group"}
    return next(f"{prefix}-{i}" for i in range(10_000) if leaders[_offsets_partition(f"{prefix}-{i}")] == node)



INIT_PRODUCER_ID, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 25, 26, 28
JOIN_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT = 11, 14, 68
MEMBER_ID_REQUIRED, UNSTABLE_OFFSET_COMMIT = 79, 88


async def _answer_past_timeouts(control, conn, api_key: int, version: int, body: dict):
    """Sends a request and moves the broker's clock a write timeout at a time until it is
    answered: its write waits for a follower that cannot fetch."""
    pending = conn.send(api_key, version, body)
    for _ in range(10):
        if (await asyncio.wait({pending}, timeout=0.5))[0]:
            return pending.result()
        control.clock_advance(by=f"{TIMEOUT_STEP_MS}ms")
    raise AssertionError(f"API {api_key} never answered")


def _txn_id_coordinated_by(control, node: int, prefix: str) -> str:
    leaders = {c["partition"]: c["node_id"] for c in control.cluster()["coordinators"] if c["kind"] == "transaction"}
    return next(f"{prefix}-{i}" for i in range(10_000) if leaders[partition_for(f"{prefix}-{i}", 50)] == node)


async def test_each_group_write_that_misses_a_follower_is_answered_as_kafka_maps_its_timeout(
        broker_factory, topic_name):
    """One follower of the group coordinator cannot fetch (the link between them is cut):
    OffsetDelete, DeleteGroups, the classic leader's SyncGroup, a KIP-848 member joining
    and TxnOffsetCommit each write, wait, and answer COORDINATOR_NOT_AVAILABLE in their
    own shape once offsets.commit.timeout.ms passes, the write kept. The COMMIT marker of a transaction's
    offsets, sent by the transaction coordinator on the third node, is written (the
    offsets complete) but answered only once the ISR has it, so the transaction stays
    PrepareCommit until the link heals. Afterwards a restart replays what was committed."""
    cluster = broker_factory({"replica.lag.time.max.ms": LAG_MS}, nodes=3, admin=True)
    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    probe = f"p-{topic_name}"
    coordinator = await _coordinator(cluster, probe)
    port = cluster.node_ports[coordinator]
    assert _commit_error(await _request(port, OFFSET_COMMIT, 8, _commit(probe, topic_name, 1))) == 0
    names = {kind: _group_coordinated_by(control, coordinator, f"{kind}-{topic_name}")
             for kind in ("emptied", "doomed", "classic", "consumer", "txn")}
    follower, txn_node = sorted(n for n in cluster.node_ports if n != coordinator)
    txn_probe = f"tp-{topic_name}"
    async with await KafkaConnection.connect("127.0.0.1", cluster.node_ports[txn_node]) as conn:
        await conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": txn_probe, "transaction_timeout_ms": 60000,
                                                 "producer_id": -1, "producer_epoch": -1})  # creates the topic
    wait_until(lambda: any(c["kind"] == "transaction" for c in control.cluster()["coordinators"]), timeout=30)
    txn_id = _txn_id_coordinated_by(control, txn_node, f"x-{topic_name}")

    async with await KafkaConnection.connect("127.0.0.1", port) as conn, \
            await KafkaConnection.connect("127.0.0.1", cluster.node_ports[txn_node]) as txn_conn:
        for group in (names["emptied"], names["doomed"]):
            assert _commit_error(await conn.request(OFFSET_COMMIT, 8, _commit(group, topic_name, 2))) == 0
        join = {"group_id": names["classic"], "session_timeout_ms": 60000, "rebalance_timeout_ms": 60000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        first = await conn.request(JOIN_GROUP, 5, join)
        assert first.error_code == MEMBER_ID_REQUIRED
        joined = await conn.request(JOIN_GROUP, 5, join | {"member_id": first.member_id})
        assert joined.error_code == 0
        for _ in range(100):
            init = await txn_conn.request(INIT_PRODUCER_ID, 4, {
                "transactional_id": txn_id, "transaction_timeout_ms": 120000, "producer_id": -1, "producer_epoch": -1})
            if init.error_code == 0:
                break
            await asyncio.sleep(0.1)
        txn = {"transactional_id": txn_id, "producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
        assert (await txn_conn.request(ADD_OFFSETS, 3, txn | {"group_id": names["txn"]})).error_code == 0
        txn_commit = txn | {"group_id": names["txn"], "generation_id": -1, "member_id": "", "group_instance_id": None}

        def txn_offsets(offset: int) -> dict:
            return txn_commit | {"topics": _commit(names["txn"], topic_name, offset)["topics"]}

        # the producer's transaction is now open on the offsets partition: no verification asked
        assert _commit_error(await conn.request(TXN_OFFSET_COMMIT, 3, txn_offsets(5))) == 0

        control.network_cut(source=coordinator, target=follower, both=True)
        deleted = await _answer_past_timeouts(control, conn, OFFSET_DELETE, 0, {"group_id": names["emptied"], "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0}]}]})
        assert deleted.error_code == COORDINATOR_NOT_AVAILABLE
        gone = await _answer_past_timeouts(control, conn, DELETE_GROUPS, 2, {"groups_names": [names["doomed"]]})
        assert [(r.group_id, r.error_code) for r in gone.results] == [(names["doomed"], COORDINATOR_NOT_AVAILABLE)]
        synced = await _answer_past_timeouts(control, conn, SYNC_GROUP, 3, {
            "group_id": names["classic"], "generation_id": joined.generation_id, "member_id": joined.member_id,
            "group_instance_id": None, "assignments": [{"member_id": joined.member_id, "assignment": b"a"}]})
        assert synced.error_code == COORDINATOR_NOT_AVAILABLE
        heartbeat = await _answer_past_timeouts(control, conn, CONSUMER_GROUP_HEARTBEAT, 0, {
            "group_id": names["consumer"], "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic_name], "server_assignor": None,
            "topic_partitions": []})
        assert heartbeat.error_code == COORDINATOR_NOT_AVAILABLE
        pending_offsets = await _answer_past_timeouts(control, conn, TXN_OFFSET_COMMIT, 3, txn_offsets(6))
        assert _commit_error(pending_offsets) == COORDINATOR_NOT_AVAILABLE

        assert (await txn_conn.request(END_TXN, 3, txn | {"committed": True})).error_code == 0
        await _until_committed(port, names["txn"], topic_name, 6)  # the marker was written: offsets complete
        control.clock_advance(by="31s")  # past request.timeout.ms: the marker's answer timed out, it is sent again
        assert _txn_state(cluster, txn_id) == "PrepareCommit"
        control.network_heal()
        wait_until(lambda: _txn_state(cluster, txn_id) == "CompleteCommit", timeout=30)

    live = {kind: await _committed(port, group, topic_name) for kind, group in names.items()
            if kind in ("emptied", "doomed", "txn")}
    # The timed-out deletes stay (Kafka keeps a write its runtime timed out); the commit holds.
    assert live == {"emptied": -1, "doomed": -1, "txn": 6}
    cluster.restart()
    port = cluster.node_ports[await _coordinator(cluster, probe)]
    assert {kind: await _committed(port, names[kind], topic_name) for kind in live} == live


def _txn_state(cluster, txn_id: str) -> str | None:
    return next((t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id), None)


async def test_a_stock_transactional_producer_sends_offsets_through_a_follower_outage(broker_factory, topic_name):
    """confluent-kafka's send_offsets_to_transaction while a follower of the group
    coordinator cannot fetch: each TxnOffsetCommit times out into
    COORDINATOR_NOT_AVAILABLE, which librdkafka retries; once the link heals it
    succeeds, the commit completes, and the offsets read back (after a restart too)."""
    cluster = broker_factory({"replica.lag.time.max.ms": LAG_MS}, nodes=3, admin=True)
    bootstrap = _every_node(cluster)
    create(bootstrap, topic_name, 1)
    control = cluster.control()
    probe = f"p-{topic_name}"
    coordinator = await _coordinator(cluster, probe)
    port = cluster.node_ports[coordinator]
    assert _commit_error(await _request(port, OFFSET_COMMIT, 8, _commit(probe, topic_name, 1))) == 0
    group = _group_coordinated_by(control, coordinator, f"g-{topic_name}")
    follower, txn_node = sorted(n for n in cluster.node_ports if n != coordinator)
    async with await KafkaConnection.connect("127.0.0.1", cluster.node_ports[txn_node]) as conn:
        await conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": f"tp-{topic_name}",
                                                 "transaction_timeout_ms": 60000, "producer_id": -1,
                                                 "producer_epoch": -1})  # creates __transaction_state
    wait_until(lambda: any(c["kind"] == "transaction" for c in control.cluster()["coordinators"]), timeout=30)
    txn_id = _txn_id_coordinated_by(control, txn_node, f"x-{topic_name}")

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        control.network_cut(source=coordinator, target=follower, both=True)
        outcome = []

        def send_offsets():
            try:
                producer.send_offsets_to_transaction([TopicPartition(topic_name, 0, 42)],
                                                     consumer.consumer_group_metadata(), 120)
                outcome.append("sent")
            except KafkaException as e:
                outcome.append(e.args[0])

        sending = threading.Thread(target=send_offsets)
        sending.start()
        await _until_committed_or_pending(port, group, topic_name)  # the first attempt waits for the follower
        for _ in range(4):  # each attempt times out and is retried
            control.clock_advance(by=f"{TIMEOUT_STEP_MS}ms")
            await asyncio.to_thread(sending.join, 0.5)
        assert sending.is_alive() and not outcome  # still retrying
        control.network_heal()
        await asyncio.to_thread(sending.join, 60)
        assert outcome == ["sent"]
        producer.commit_transaction(60)
    finally:
        consumer.close()
    wait_until(lambda: _txn_state(cluster, txn_id) == "CompleteCommit", timeout=30)
    assert await _committed(port, group, topic_name) == 42
    cluster.restart()
    port = cluster.node_ports[await _coordinator(cluster, probe)]
    assert await _committed(port, group, topic_name) == 42


async def _until_committed_or_pending(port: int, group: str, topic: str) -> None:
    """Until the group's partition 0 has a pending transactional offset (OffsetFetch
    with require_stable answers UNSTABLE_OFFSET_COMMIT)."""
    for _ in range(300):
        answer = await _request(port, OFFSET_FETCH, 8, {"groups": [
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}], "require_stable": True})
        partition = answer.groups[0].topics[0].partitions[0] if answer.groups[0].topics else None
        if partition is not None and partition.error_code == UNSTABLE_OFFSET_COMMIT:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{group} never had a pending offset")


async def test_a_group_timer_write_waits_for_the_isr_as_a_request_write_does(broker_factory, topic_name, caplog):
    """A KIP-848 member whose session ends while a follower of its coordinator cannot
    fetch: the timer's write (the member fenced out of the group) is applied at once
    and waits for the ISR like a request's write, ending REQUEST_TIMED_OUT once
    offsets.commit.timeout.ms passes (logged; nobody is answered), the write kept."""
    cluster = broker_factory({"replica.lag.time.max.ms": LAG_MS}, nodes=3, admin=True, in_process=True)
    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    probe = f"p-{topic_name}"
    coordinator = await _coordinator(cluster, probe)
    port = cluster.node_ports[coordinator]
    assert _commit_error(await _request(port, OFFSET_COMMIT, 8, _commit(probe, topic_name, 1))) == 0
    group = _group_coordinated_by(control, coordinator, f"timer-{topic_name}")
    heartbeat = await _request(port, CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic_name], "server_assignor": None,
        "topic_partitions": []})
    assert heartbeat.error_code == 0
    groups = cluster.broker.node(coordinator).groups
    assert heartbeat.member_id in groups.coordinator.consumer_group(group).members

    follower = min(n for n in cluster.node_ports if n != coordinator)
    control.network_cut(source=coordinator, target=follower)
    not_replicated = "a group coordinator write of a timer was not replicated (REQUEST_TIMED_OUT)"
    control.clock_advance(by="46s")  # past group.consumer.session.timeout.ms: the member is fenced
    wait_until(lambda: heartbeat.member_id not in groups.coordinator.consumer_group(group).members, timeout=30)
    assert not_replicated not in caplog.text  # the write waits for the follower
    control.clock_advance(by=f"{TIMEOUT_STEP_MS}ms")  # past offsets.commit.timeout.ms
    wait_until(lambda: not_replicated in caplog.text, timeout=30)
    assert heartbeat.member_id not in groups.coordinator.consumer_group(group).members  # the write stays
    assert len(_isr(control, _offsets_partition(group))) == 3  # the follower was still in the ISR
