"""Transactions with stock clients against a real broker: commit and abort across topics,
isolation levels, the LSO, zombie fencing, timeouts and crash consistency."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.read_to_end import read_to_end

HOST = "127.0.0.1"


def _create(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(10)


def _read(bootstrap: str, topics: list[str], isolation: str, partitions: int = 2) -> list[bytes]:
    return read_to_end(bootstrap, topics, partitions, isolation, settle=1.5)


async def _lso(port: int, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) through ListOffsets with both isolation levels."""
    async with await KafkaConnection.connect(HOST, port) as conn:
        out = []
        for isolation in (1, 0):
            r = await conn.request(2, 2, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
            out.append(r.topics[0].partitions[0].offset)
        return out[0], out[1]


# --- confluent-kafka ------------------------------------------------------------------------


def test_confluent_commit_and_abort_across_two_topics(shared_broker, topic_name):
    a, b = topic_name + "-a", topic_name + "-b"
    _create(shared_broker.bootstrap, a, b)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": topic_name})
    p.init_transactions(10)
    for round_, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        for i in range(4):
            p.produce(a, b"a-%d-%d" % (round_, i), partition=i % 2)
            p.produce(b, b"b-%d-%d" % (round_, i), partition=i % 2)
        p.flush(10)  # the records reach the broker before an abort, so aborted data exists
        (p.commit_transaction if commit else p.abort_transaction)(10)
    committed = sorted(b"%s-%d-%d" % (t, r, i) for t in (b"a", b"b") for r in (0, 2, 4) for i in range(4))
    everything = sorted(b"%s-%d-%d" % (t, r, i) for t in (b"a", b"b") for r in range(5) for i in range(4))
    assert _read(shared_broker.bootstrap, [a, b], "read_committed") == committed
    assert _read(shared_broker.bootstrap, [a, b], "read_uncommitted") == everything


def test_open_transaction_holds_read_committed_at_the_lso(shared_broker, topic_name):
    _create(shared_broker.bootstrap, topic_name, partitions=1)
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap})
    plain.produce(topic_name, b"before", partition=0)
    plain.flush(10)
    txn = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": topic_name})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic_name, b"in-txn", partition=0)
    txn.flush(10)
    plain.produce(topic_name, b"after", partition=0)
    plain.flush(10)
    lso, hw = asyncio.run(_lso(shared_broker.port, topic_name))
    assert (lso, hw) == (1, 3)
    assert _read(shared_broker.bootstrap, [topic_name], "read_committed", partitions=1) == [b"before"]
    txn.commit_transaction(10)
    deadline = time.monotonic() + 10
    while asyncio.run(_lso(shared_broker.port, topic_name))[0] != 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asyncio.run(_lso(shared_broker.port, topic_name)) == (4, 4)  # marker at offset 3
    assert _read(shared_broker.bootstrap, [topic_name], "read_committed", partitions=1) == sorted(
        [b"before", b"in-txn", b"after"])


def test_confluent_zombie_is_fenced_and_its_transaction_never_visible(shared_broker, topic_name):
    _create(shared_broker.bootstrap, topic_name)
    zombie = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": topic_name})
    zombie.init_transactions(10)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie", partition=0)
    zombie.flush(10)

    successor = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": topic_name})
    successor.init_transactions(20)  # fences the zombie and aborts its open transaction
    successor.begin_transaction()
    successor.produce(topic_name, b"successor", partition=1)
    successor.commit_transaction(10)

    with pytest.raises(KafkaException) as info:
        zombie.produce(topic_name, b"late", partition=0)
        zombie.commit_transaction(10)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    assert _read(shared_broker.bootstrap, [topic_name], "read_committed") == [b"successor"]


def test_transaction_timeout_aborts_and_fences(broker_factory, topic_name):
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    _create(broker.bootstrap, topic_name, partitions=1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name,
                  "transaction.timeout.ms": 1000})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic_name, b"expires", partition=0)
    p.flush(10)
    assert asyncio.run(_lso(broker.port, topic_name)) == (0, 1)
    deadline = time.monotonic() + 15
    while asyncio.run(_lso(broker.port, topic_name))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert asyncio.run(_lso(broker.port, topic_name)) == (2, 2)  # aborted: LSO released past the marker
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert _read(broker.bootstrap, [topic_name], "read_committed", partitions=1) == []
    assert _read(broker.bootstrap, [topic_name], "read_uncommitted", partitions=1) == [b"expires"]


# --- kafka-python -----------------------------------------------------------------------------


def test_kafka_python_commit_abort_and_fencing(shared_broker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    _create(shared_broker.bootstrap, topic_name)
    p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic_name, b"kept", partition=0)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic_name, b"dropped", partition=1)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    p.send(topic_name, b"zombie", partition=0)
    p.flush()

    successor = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
    successor.init_transactions()
    successor.begin_transaction()
    successor.send(topic_name, b"successor", partition=1)
    successor.commit_transaction()
    with pytest.raises(KafkaError):
        p.commit_transaction()
    successor.close()
    p.close(timeout=1)
    assert _read(shared_broker.bootstrap, [topic_name], "read_committed") == [b"kept", b"successor"]


# --- aiokafka (v0 of every transactional API) -------------------------------------------------


async def test_aiokafka_commit_abort_and_fencing(shared_broker, topic_name):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    p = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
    await p.start()
    async with p.transaction():
        await p.send_and_wait(topic_name, b"kept", partition=0)
    await p.begin_transaction()
    await p.send_and_wait(topic_name, b"dropped", partition=1)
    await p.abort_transaction()
    await p.begin_transaction()
    await p.send_and_wait(topic_name, b"zombie", partition=0)

    successor = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
    await successor.start()
    async with successor.transaction():
        await successor.send_and_wait(topic_name, b"successor", partition=1)
    with pytest.raises(KafkaError):
        await p.commit_transaction()
    await successor.stop()
    try:
        await p.stop()
    except KafkaError:
        pass
    got = await asyncio.to_thread(_read, shared_broker.bootstrap, [topic_name], "read_committed")
    assert got == [b"kept", b"successor"]


# --- the wire: exact coordinator answers ------------------------------------------------------


async def test_coordinator_errors_over_the_wire(shared_broker, topic_name):
    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        init = {"transactional_id": topic_name, "transaction_timeout_ms": 60000, "producer_id": -1,
                "producer_epoch": -1}
        too_long = await conn.request(22, 4, init | {"transaction_timeout_ms": 900_001})
        assert too_long.error_code == code("INVALID_TRANSACTION_TIMEOUT")
        empty = await conn.request(22, 4, init | {"transactional_id": ""})
        assert empty.error_code == code("INVALID_REQUEST")
        first = await conn.request(22, 4, init)
        for _ in range(200):  # the broker's first transactional id: __transaction_state is made and loaded
            if first.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                break
            await asyncio.sleep(0.05)
            first = await conn.request(22, 4, init)
        assert (first.error_code, first.producer_epoch) == (0, 0)
        second = await conn.request(22, 4, init)
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)

        def add(epoch, version=3):
            return conn.request(24, version, {"v3_and_below_transactional_id": topic_name,
                                              "v3_and_below_producer_id": first.producer_id,
                                              "v3_and_below_producer_epoch": epoch,
                                              "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})

        stale = await add(0)
        assert stale.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == code(
            "PRODUCER_FENCED")
        stale_v1 = await add(0, version=1)
        assert stale_v1.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == code(
            "INVALID_PRODUCER_EPOCH")
        end_empty = await conn.request(26, 3, {"transactional_id": topic_name, "producer_id": first.producer_id,
                                               "producer_epoch": 1, "committed": True})
        assert end_empty.error_code == code("INVALID_TXN_STATE")
        ok = await add(1)
        assert ok.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        unknown = await conn.request(24, 3, {"v3_and_below_transactional_id": topic_name,
                                             "v3_and_below_producer_id": first.producer_id,
                                             "v3_and_below_producer_epoch": 1,
                                             "v3_and_below_topics": [{"name": "no-such-topic", "partitions": [0]},
                                                                     {"name": topic_name, "partitions": [1]}]})
        errors = {t.name: t.results_by_partition[0].partition_error_code
                  for t in unknown.results_by_topic_v3_and_below}
        assert errors == {"no-such-topic": code("UNKNOWN_TOPIC_OR_PARTITION"),
                          topic_name: code("OPERATION_NOT_ATTEMPTED")}
        commit = {"transactional_id": topic_name, "producer_id": first.producer_id, "producer_epoch": 1,
                  "committed": True}
        assert (await conn.request(26, 3, commit)).error_code == 0
        # a retry of the completed commit succeeds; aborting it instead is refused
        deadline = time.monotonic() + 5
        while (retry := await conn.request(26, 3, commit)).error_code == code("CONCURRENT_TRANSACTIONS"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert retry.error_code == 0
        assert (await conn.request(26, 3, commit | {"committed": False})).error_code == code("INVALID_TXN_STATE")
        wrong_pid = await conn.request(26, 3, commit | {"producer_id": first.producer_id + 999})
        assert wrong_pid.error_code == code("INVALID_PRODUCER_ID_MAPPING")


async def test_transactional_produce_to_a_partition_not_in_the_transaction(shared_broker, topic_name):
    from protocol.records import build_batch

    await asyncio.to_thread(_create, shared_broker.bootstrap, topic_name)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        while True:  # a coordinator partition nobody used yet answers LOAD_IN_PROGRESS while it loads
            init = await conn.request(22, 4, {"transactional_id": topic_name, "transaction_timeout_ms": 60000,
                                              "producer_id": -1, "producer_epoch": -1})
            if init.error_code != code("COORDINATOR_LOAD_IN_PROGRESS"):
                break
            await asyncio.sleep(0.05)
        assert init.error_code == 0
        batch = build_batch([(None, b"sneaky", (), 1)], producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch, base_sequence=0, transactional=True)
        r = await conn.request(0, 9, {"transactional_id": topic_name, "acks": -1, "timeout_ms": 5000,
                                      "topic_data": [{"name": topic_name, "partition_data": [
                                          {"index": 0, "records": bytes(batch)}]}]})
        part = r.responses[0].partition_responses[0]
        assert part.error_code == code("INVALID_TXN_STATE")
        lso, hw = await _lso(shared_broker.port, topic_name)
        assert (lso, hw) == (0, 0)


# --- crash consistency ------------------------------------------------------------------------


def test_kill_9_after_prepare_commit_completes_on_restart(broker_factory, topic_name):
    broker = broker_factory({"emulate.fault.hold.txn.markers": "true"})
    _create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic_name, b"v%d" % i, partition=i % 2)
    p.flush(10)
    # EndTxn is answered once PREPARE_COMMIT is persisted; the markers are held back
    p.commit_transaction(10)
    assert asyncio.run(_lso(broker.port, topic_name, 0))[0] == 0
    broker.kill()
    broker.overrides["emulate.fault.hold.txn.markers"] = "false"
    broker.start()
    deadline = time.monotonic() + 15
    while asyncio.run(_lso(broker.port, topic_name, 0))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _read(broker.bootstrap, [topic_name], "read_committed") == sorted(b"v%d" % i for i in range(6))
    # exactly once: one commit marker per partition, nothing doubled
    assert asyncio.run(_lso(broker.port, topic_name, 0)) == (4, 4)
    assert asyncio.run(_lso(broker.port, topic_name, 1)) == (4, 4)


def test_kill_9_with_an_ongoing_transaction_aborts_it_at_its_timeout(broker_factory, topic_name):
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    _create(broker.bootstrap, topic_name, partitions=1)
    # The timeout leaves room for the restart (slow on a loaded machine) before the abort.
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name,
                  "transaction.timeout.ms": 8000})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic_name, b"never", partition=0)
    p.flush(10)
    broker.kill()
    broker.start()
    assert asyncio.run(_lso(broker.port, topic_name)) == (0, 1)
    deadline = time.monotonic() + 30
    while asyncio.run(_lso(broker.port, topic_name))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert asyncio.run(_lso(broker.port, topic_name)) == (2, 2)
    assert _read(broker.bootstrap, [topic_name], "read_committed", partitions=1) == []


def test_coordinator_state_survives_restart(broker_factory, topic_name):
    broker = broker_factory()
    _create(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic_name, b"one", partition=0)
    p.commit_transaction(10)
    broker.restart()
    # the old producer is fenced by a new one; the epoch continues from the log
    successor = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    successor.init_transactions(20)
    successor.begin_transaction()
    successor.produce(topic_name, b"two", partition=1)
    successor.commit_transaction(10)
    with pytest.raises(KafkaException):
        p.begin_transaction()
        p.produce(topic_name, b"zombie", partition=0)
        p.commit_transaction(10)
    assert _read(broker.bootstrap, [topic_name], "read_committed") == [b"one", b"two"]


# --- read_committed in every client ------------------------------------------------------------


def _interleaved(bootstrap: str, topic: str) -> list[bytes]:
    """Commits and aborts interleaved on one partition with plain writes; returns what must be visible."""
    _create(bootstrap, topic, partitions=1)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    plain = Producer({"bootstrap.servers": bootstrap})
    txn.init_transactions(10)
    visible = []
    for i in range(6):
        txn.begin_transaction()
        txn.produce(topic, b"t%d" % i, partition=0)
        txn.flush(10)
        plain.produce(topic, b"p%d" % i, partition=0)
        plain.flush(10)
        visible.append(b"p%d" % i)
        if i % 2:
            txn.abort_transaction(10)
        else:
            txn.commit_transaction(10)
            visible.append(b"t%d" % i)
    return sorted(visible)


def test_kafka_python_read_committed_skips_aborted(shared_broker, topic_name):
    from kafka import KafkaConsumer, TopicPartition as TP

    expected = _interleaved(shared_broker.bootstrap, topic_name)
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=3000, auto_offset_reset="earliest")
    consumer.assign([TP(topic_name, 0)])
    got = sorted(m.value for m in consumer)
    consumer.close()
    assert got == expected


async def test_aiokafka_read_committed_skips_aborted(shared_broker, topic_name):
    from aiokafka import AIOKafkaConsumer, TopicPartition as TP

    expected = await asyncio.to_thread(_interleaved, shared_broker.bootstrap, topic_name)
    consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TP(topic_name, 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < len(expected) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            got += [m.value for msgs in batch.values() for m in msgs]
        got += [m.value for msgs in (await consumer.getmany(timeout_ms=500)).values() for m in msgs]
    finally:
        await consumer.stop()
    assert sorted(got) == expected
