"""Consume-transform-produce exactly once (KIP-447) with stock clients against a real
broker: transactional offsets move the group only when the transaction commits, a new
owner waits for pending offsets (UNSTABLE_OFFSET_COMMIT), zombies are fenced by their
generation, and pending offsets survive a restart."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.broker_process import wait_until
from tests.read_to_end import read_to_end

HOST = "127.0.0.1"
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 100}


def _create(bootstrap: str, *topics: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(10)


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 1, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        p.produce(topic, b"%04d" % i, partition=i % partitions)
    assert p.flush(10) == 0


def _read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    return read_to_end(bootstrap, [topic], partitions)


def _committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)]
    finally:
        consumer.close()


async def _offset_fetch(port: int, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(committed offset, error code) of partition 0 through OffsetFetch v7."""
    async with await KafkaConnection.connect(HOST, port) as conn:
        r = await conn.request(9, 7, {"group_id": group, "require_stable": require_stable,
                                      "topics": [{"name": topic, "partition_indexes": [0]}]})
        p = r.topics[0].partitions[0]
        return p.committed_offset, p.error_code


# --- a committed transaction moves the group, an aborted one does not ----------------------


def test_confluent_ctp_commit_moves_offsets_abort_does_not(shared_broker, topic_name):
    src, dst, group = topic_name, topic_name + "-out", topic_name + "-g"
    _create(shared_broker.bootstrap, src, dst)
    _produce(shared_broker.bootstrap, src, 20)
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", **FAST_GROUP})
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": topic_name})
    producer.init_transactions(10)
    consumer.subscribe([src])

    def transform(count: int) -> None:
        producer.begin_transaction()
        taken = 0
        while taken < count:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            producer.produce(dst, b"out-" + msg.value(), partition=0)
            taken += 1
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 10)

    transform(10)
    producer.abort_transaction(10)
    assert _committed(shared_broker.bootstrap, group, src) == [-1001]
    # Back to the committed position (none: the start) and do it again, for real.
    consumer.seek(TopicPartition(src, 0, 0))
    transform(20)
    producer.commit_transaction(10)
    assert _committed(shared_broker.bootstrap, group, src) == [20]
    consumer.close()
    assert _read_committed(shared_broker.bootstrap, dst) == [b"out-%04d" % i for i in range(20)]


def test_kafka_python_ctp_commit_moves_offsets_abort_does_not(shared_broker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    src, dst, group = topic_name, topic_name + "-out", topic_name + "-g"
    _create(shared_broker.bootstrap, src, dst)
    _produce(shared_broker.bootstrap, src, 20)
    consumer = KafkaConsumer(src, bootstrap_servers=shared_broker.bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level="read_committed", heartbeat_interval_ms=100)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
    producer.init_transactions()

    def transform(count: int) -> dict:
        producer.begin_transaction()
        taken = 0
        deadline = time.monotonic() + 15
        while taken < count and time.monotonic() < deadline:
            for records in consumer.poll(200, max_records=count - taken).values():
                for r in records:
                    producer.send(dst, b"out-" + r.value, partition=0)
                    taken += 1
        assert taken == count
        offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        return offsets

    transform(10)
    producer.abort_transaction()
    assert _committed(shared_broker.bootstrap, group, src) == [-1001]
    consumer.seek(KTP(src, 0), 0)
    transform(20)
    producer.commit_transaction()
    assert _committed(shared_broker.bootstrap, group, src) == [20]
    consumer.close()
    producer.close()
    assert _read_committed(shared_broker.bootstrap, dst) == [b"out-%04d" % i for i in range(20)]


async def test_aiokafka_ctp_commit_moves_offsets_abort_does_not(shared_broker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    src, dst, group = topic_name, topic_name + "-out", topic_name + "-g"
    await asyncio.to_thread(_create, shared_broker.bootstrap, src, dst)
    await asyncio.to_thread(_produce, shared_broker.bootstrap, src, 20)
    consumer = AIOKafkaConsumer(src, bootstrap_servers=shared_broker.bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed", heartbeat_interval_ms=100)
    producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
    await consumer.start()
    await producer.start()
    try:
        async def transform(count: int) -> None:
            await producer.begin_transaction()
            taken = 0
            while taken < count:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=200, max_records=count - taken), 15)
                for records in batches.values():
                    for r in records:
                        await producer.send(dst, b"out-" + r.value, partition=0)
                        taken += 1
            tp = ATP(src, 0)
            # aiokafka sends TxnOffsetCommit v0: no generation or member.
            await producer.send_offsets_to_transaction({tp: await consumer.position(tp)}, group)

        await transform(10)
        await producer.abort_transaction()
        assert await asyncio.to_thread(_committed, shared_broker.bootstrap, group, src) == [-1001]
        consumer.seek(ATP(src, 0), 0)
        await transform(20)
        await producer.commit_transaction()
        assert await asyncio.to_thread(_committed, shared_broker.bootstrap, group, src) == [20]
    finally:
        await consumer.stop()
        await producer.stop()
    assert await asyncio.to_thread(_read_committed, shared_broker.bootstrap, dst) == [
        b"out-%04d" % i for i in range(20)]


# --- a new owner waits for the previous owner's transaction -----------------------------


def _confluent_takeover(bootstrap: str, src: str, group: str, started: threading.Event, out: list) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed", **FAST_GROUP})
    consumer.subscribe([src])
    started.set()
    deadline = time.monotonic() + 15
    while not out and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            out.append((time.monotonic(), msg.offset()))
    consumer.close()


def _kafka_python_takeover(bootstrap: str, src: str, group: str, started: threading.Event, out: list) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             heartbeat_interval_ms=100)
    started.set()
    deadline = time.monotonic() + 15
    while not out and time.monotonic() < deadline:
        for records in consumer.poll(100, max_records=1).values():
            out.append((time.monotonic(), records[0].offset))
    consumer.close()


@pytest.mark.parametrize("takeover", [_confluent_takeover, _kafka_python_takeover], ids=["confluent", "kafka-python"])
def test_new_owner_waits_for_pending_offsets_then_starts_at_committed(shared_broker, topic_name, takeover):
    src, dst, group = topic_name, topic_name + "-out", topic_name + "-g"
    _create(shared_broker.bootstrap, src, dst)
    _produce(shared_broker.bootstrap, src, 20)
    first = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed", **FAST_GROUP})
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": topic_name})
    producer.init_transactions(10)
    first.subscribe([src])
    producer.begin_transaction()
    taken = 0
    while taken < 12:
        msg = first.poll(0.2)
        if msg is not None and msg.error() is None:
            producer.produce(dst, msg.value(), partition=0)
            taken += 1
    producer.send_offsets_to_transaction(first.position(first.assignment()), first.consumer_group_metadata(), 10)
    first.close()  # leaves the group with its offsets pending in the open transaction

    port = shared_broker.port
    assert asyncio.run(_offset_fetch(port, group, src, require_stable=True)) == (-1, code("UNSTABLE_OFFSET_COMMIT"))
    assert asyncio.run(_offset_fetch(port, group, src, require_stable=False)) == (-1, 0)
    started, out = threading.Event(), []
    thread = threading.Thread(target=takeover, args=(shared_broker.bootstrap, src, group, started, out))
    thread.start()
    started.wait(10)
    time.sleep(1.0)  # the new owner is in the group by now, held back by the pending offsets
    assert out == []
    committed_at = time.monotonic()
    producer.commit_transaction(10)
    thread.join(20)
    assert out, "the new owner never started"
    (when, offset), = out
    assert offset == 12, "it must start exactly where the transaction committed"
    assert when >= committed_at
    assert _read_committed(shared_broker.bootstrap, dst) == sorted(b"%04d" % i for i in range(12))


# --- zombie fencing by generation (KIP-447) ----------------------------------------------


async def _join_and_sync(conn, group: str, member_id: str = "", instance: str | None = None,
                         rebalance_timeout_ms: int = 10_000):
    join = {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": rebalance_timeout_ms,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    r = await conn.request(11, 7, join)
    if r.error_code == code("MEMBER_ID_REQUIRED"):
        r = await conn.request(11, 7, join | {"member_id": r.member_id})
    assert r.error_code == 0, r
    return r


async def _sync(conn, group: str, joined) -> None:
    assignments = [{"member_id": m.member_id, "assignment": b""} for m in joined.members]
    s = await conn.request(14, 5, {"group_id": group, "generation_id": joined.generation_id,
                                   "member_id": joined.member_id, "protocol_type": "consumer",
                                   "protocol_name": "range", "assignments": assignments})
    assert s.error_code == 0, s


async def _txn_offset_commit(conn, txn_id: str, group: str, pid: int, epoch: int, topic: str, offset: int,
                             generation: int, member_id: str, instance: str | None = None, version: int = 3):
    r = await conn.request(28, version, {
        "transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": member_id, "group_instance_id": instance,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return r.topics[0].partitions[0].error_code


async def _retried(conn, api_key: int, version: int, body: dict):
    """The request, sent again while the coordinator is loading or a transaction ends,
    as a client retries it."""
    deadline = time.monotonic() + 10
    while (r := await conn.request(api_key, version, body)).error_code in (
            code("COORDINATOR_LOAD_IN_PROGRESS"), code("CONCURRENT_TRANSACTIONS")) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return r


async def _wait_group_state(conn, group: str, state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (r := await conn.request(15, 5, {"groups": [group]})).groups[0].group_state != state:
        assert time.monotonic() < deadline, f"group {group} never reached {state}: {r.groups[0]}"
        await asyncio.sleep(0.02)


async def _begin_offsets_txn(conn, txn_id: str, group: str) -> tuple[int, int]:
    init = await _retried(conn, 22, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60_000,
                                        "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == 0
    add = await _retried(conn, 25, 3, {"transactional_id": txn_id, "producer_id": init.producer_id,
                                       "producer_epoch": init.producer_epoch, "group_id": group})
    assert add.error_code == 0
    return init.producer_id, init.producer_epoch


async def _end_txn(conn, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
    request = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    r = await _retried(conn, 26, 3, request)
    assert r.error_code == 0, r


async def test_zombie_with_old_generation_is_fenced(shared_broker, topic_name):
    group, txn_id = topic_name + "-g", topic_name
    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as a, \
            await KafkaConnection.connect(HOST, shared_broker.port) as b, \
            await KafkaConnection.connect(HOST, shared_broker.port) as producer:
        first = await _join_and_sync(a, group)
        await _sync(a, group, first)
        # A second member arrives; the first rejoins: generation 2. The first member's
        # producer still carries generation 1: it is a zombie.
        b_join = asyncio.ensure_future(_join_and_sync(b, group))
        # b's join is held in the rebalance it started; a's rejoin must come after it, or
        # the rebalance would end with a alone and b start a third generation.
        await _wait_group_state(producer, group, "PreparingRebalance")
        a_again = await _join_and_sync(a, group, member_id=first.member_id)
        b_joined = await b_join
        assert a_again.generation_id == b_joined.generation_id == first.generation_id + 1
        pid, epoch = await _begin_offsets_txn(producer, txn_id, group)
        stale = await _txn_offset_commit(producer, txn_id, group, pid, epoch, topic_name, 5,
                                         first.generation_id, first.member_id)
        assert stale == code("ILLEGAL_GENERATION")
        unknown = await _txn_offset_commit(producer, txn_id, group, pid, epoch, topic_name, 5,
                                           a_again.generation_id, "no-such-member")
        assert unknown == code("UNKNOWN_MEMBER_ID")
        current = await _txn_offset_commit(producer, txn_id, group, pid, epoch, topic_name, 5,
                                           a_again.generation_id, a_again.member_id)
        assert current == 0
        # v0-v2 carry no generation: the group cannot fence them (aiokafka's way).
        assert await _txn_offset_commit(producer, txn_id, group, pid, epoch, topic_name, 6, -1, "",
                                        version=2) == 0
        await _end_txn(producer, txn_id, pid, epoch, commit=True)
        assert await wait_offset(shared_broker.port, group, topic_name, 6) == 6


async def wait_offset(port: int, group: str, topic: str, expected: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        offset, error = await _offset_fetch(port, group, topic, require_stable=True)
        if (offset, error) == (expected, 0) or time.monotonic() > deadline:
            return offset
        await asyncio.sleep(0.05)


async def test_static_member_replaced_fences_its_old_producer(shared_broker, topic_name):
    group, txn_id = topic_name + "-g", topic_name
    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as a, \
            await KafkaConnection.connect(HOST, shared_broker.port) as producer:
        old = await _join_and_sync(a, group, instance="worker-1")
        await _sync(a, group, old)
        new = await _join_and_sync(a, group, instance="worker-1")  # the instance restarted
        assert new.member_id != old.member_id
        pid, epoch = await _begin_offsets_txn(producer, txn_id, group)
        fenced = await _txn_offset_commit(producer, txn_id, group, pid, epoch, topic_name, 3,
                                          new.generation_id, old.member_id, instance="worker-1")
        assert fenced == code("FENCED_INSTANCE_ID")
        await _end_txn(producer, txn_id, pid, epoch, commit=False)


async def test_txn_offset_commit_from_an_older_producer_epoch_is_refused(shared_broker, topic_name):
    group, txn_id = topic_name + "-g", topic_name
    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        pid, epoch = await _begin_offsets_txn(conn, txn_id, group)
        assert await _txn_offset_commit(conn, txn_id, group, pid, epoch, topic_name, 1, -1, "") == 0
        await _end_txn(conn, txn_id, pid, epoch, commit=True)
        pid2, epoch2 = await _begin_offsets_txn(conn, txn_id, group)  # a new instance: epoch bumped
        assert (pid2, epoch2) == (pid, epoch + 1)
        assert await _txn_offset_commit(conn, txn_id, group, pid, epoch2, topic_name, 2, -1, "") == 0
        # The old instance, fenced by InitProducerId, still tries to commit offsets.
        stale = await _txn_offset_commit(conn, txn_id, group, pid, epoch, topic_name, 99, -1, "")
        assert stale == code("INVALID_PRODUCER_EPOCH")
        assert await _txn_offset_commit(conn, txn_id, group, pid, epoch2, "no-such-topic", 1, -1, "") == code(
            "UNKNOWN_TOPIC_OR_PARTITION")
        await _end_txn(conn, txn_id, pid, epoch2, commit=True)
        assert await wait_offset(shared_broker.port, group, topic_name, 2) == 2


# --- restarts around the transaction -----------------------------------------------------


async def test_pending_and_committed_offsets_survive_restarts(broker_factory, topic_name):
    broker = broker_factory()
    group, txn_id = topic_name + "-g", topic_name
    await asyncio.to_thread(_create, broker.bootstrap, topic_name)
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        pid, epoch = await _begin_offsets_txn(conn, txn_id, group)
        assert await _txn_offset_commit(conn, txn_id, group, pid, epoch, topic_name, 7, -1, "") == 0
        await _end_txn(conn, txn_id, pid, epoch, commit=True)
        assert await wait_offset(broker.port, group, topic_name, 7) == 7
        # A second transaction commits offsets, then the broker dies before EndTxn.
        pid, epoch = await _begin_offsets_txn(conn, txn_id, group)
        assert await _txn_offset_commit(conn, txn_id, group, pid, epoch, topic_name, 15, -1, "") == 0
    await asyncio.to_thread(broker.kill)
    await asyncio.to_thread(broker.start)
    assert await _fetch_when_loaded(broker.port, group, topic_name, True) == (-1, code("UNSTABLE_OFFSET_COMMIT"))
    assert await _fetch_when_loaded(broker.port, group, topic_name, False) == (7, 0)
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        await _end_txn(conn, txn_id, pid, epoch, commit=True)
        assert await wait_offset(broker.port, group, topic_name, 15) == 15
        # A third transaction aborts across a clean restart.
        pid, epoch = await _begin_offsets_txn(conn, txn_id, group)
        assert await _txn_offset_commit(conn, txn_id, group, pid, epoch, topic_name, 30, -1, "") == 0
    await asyncio.to_thread(broker.restart)
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        await _end_txn(conn, txn_id, pid, epoch, commit=False)
    assert await _fetch_when_stable(broker.port, group, topic_name) == (15, 0)
    await asyncio.to_thread(broker.restart)
    assert await _fetch_when_loaded(broker.port, group, topic_name, True) == (15, 0)


async def _fetch_when_loaded(port: int, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    deadline = time.monotonic() + 10
    while True:
        async with await KafkaConnection.connect(HOST, port) as conn:
            r = await conn.request(9, 7, {"group_id": group, "require_stable": require_stable,
                                          "topics": [{"name": topic, "partition_indexes": [0]}]})
        if r.error_code != code("COORDINATOR_LOAD_IN_PROGRESS") or time.monotonic() > deadline:
            p = r.topics[0].partitions[0] if r.topics else None
            return (p.committed_offset, p.error_code) if p else (-1, r.error_code)
        await asyncio.sleep(0.05)


async def _fetch_when_stable(port: int, group: str, topic: str) -> tuple[int, int]:
    """OffsetFetch(require_stable) once the abort marker reached the offsets partition:
    EndTxn is answered before its markers are written."""
    deadline = time.monotonic() + 30
    while (r := await _fetch_when_loaded(port, group, topic, True))[1] == code("UNSTABLE_OFFSET_COMMIT") \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return r


# --- two members, rebalancing while transactions are in flight ---------------------------


def _worker(bootstrap: str, src: str, dst: str, group: str, txn_id: str, stop: threading.Event,
            errors: list, committed_by: dict, assigned: dict) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed", **FAST_GROUP})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 1})
    try:
        producer.init_transactions(10)
        consumer.subscribe([src])
        while not stop.is_set():
            msgs = [m for m in consumer.consume(5, 0.1) if m.error() is None]
            assigned[txn_id] = {tp.partition for tp in consumer.assignment()}
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, b"out-" + m.value(), partition=m.partition())
            time.sleep(0.02)  # keep transactions open long enough to meet a rebalance
            try:
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 10)
                producer.commit_transaction(10)
                committed_by[txn_id] = committed_by.get(txn_id, 0) + len(msgs)
            except KafkaException as e:
                # Fenced by a rebalance (ILLEGAL_GENERATION...): abort and rewind to the
                # group's committed offsets, which the new generation also starts from.
                if e.args[0].fatal():
                    raise
                producer.abort_transaction(10)
                committed = consumer.committed(consumer.assignment(), 10)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
    except Exception as e:  # surfaced by the test
        errors.append(e)
    finally:
        consumer.close()


def test_two_members_rebalance_with_transactions_in_flight(shared_broker, topic_name):
    src, dst, group = topic_name, topic_name + "-out", topic_name + "-g"
    partitions, first, second = 4, 400, 200
    count = first + second
    _create(shared_broker.bootstrap, src, dst, partitions=partitions)
    _produce(shared_broker.bootstrap, src, first, partitions)
    stop, errors, committed_by, assigned = threading.Event(), [], {}, {}
    workers = [threading.Thread(target=_worker, args=(shared_broker.bootstrap, src, dst, group, f"{topic_name}-{i}",
                                                      stop, errors, committed_by, assigned))
               for i in range(2)]
    workers[0].start()
    wait_until(lambda: sum(max(o, 0) for o in _committed(shared_broker.bootstrap, group, src, partitions)) > 40,
               60, 0.1, "the first member to make progress")
    workers[1].start()  # joins while the first member has transactions in flight
    # The second half of the input is written only once the rebalance has split the
    # partitions, so the second member gets records however fast the first one is.
    members = [f"{topic_name}-{i}" for i in range(2)]
    wait_until(lambda: all(assigned.get(m) for m in members)
               and sorted(p for m in members for p in assigned[m]) == list(range(partitions)),
               60, 0.1, "both members to hold a share of the partitions")
    _produce(shared_broker.bootstrap, src, second, partitions, start=first)
    wait_until(lambda: sum(max(o, 0) for o in _committed(shared_broker.bootstrap, group, src, partitions)) == count,
               90, 0.2, "every input record to be processed")
    stop.set()
    for w in workers:
        w.join(20)
    assert errors == []
    assert len(committed_by) == 2, f"both members must have had partitions: {committed_by}"
    outputs = _read_committed(shared_broker.bootstrap, dst, partitions)
    assert outputs == sorted(b"out-%04d" % i for i in range(count)), "each input exactly once"
