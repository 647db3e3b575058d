"""Behaviours where eosbroker used to differ from Kafka, each answered as Kafka answers:
over the exact wire, with the error code a client gets."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from broker.wire.client import KafkaConnection
from broker.errors import code
from broker.testing import wait_until
from protocol.records import build_batch

HOST = "127.0.0.1"


async def _create(conn: KafkaConnection, topic: str, configs: dict[str, str] | None = None, partitions: int = 1):
    r = await conn.request(19, 5, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                               "assignments": [], "configs": [{"name": k, "value": v} for k, v in
                                                                              (configs or {}).items()]}],
                                   "timeout_ms": 5000})
    return r.topics[0]


async def _produce(conn: KafkaConnection, topic: str, records, transactional_id=None, version=9, **batch):
    data = bytes(build_batch(records, **batch))
    r = await conn.request(0, version, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
                                        "topic_data": [{"name": topic, "partition_data": [
                                            {"index": 0, "records": data}]}]})
    return r.responses[0].partition_responses[0]


async def _offsets(conn: KafkaConnection, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0."""
    out = []
    for isolation in (1, 0):
        r = await conn.request(2, 2, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        out.append(r.topics[0].partitions[0].offset)
    return out[0], out[1]


# --- keyless records on a compacted topic ------------------------------------------------------


async def test_keyless_record_on_compacted_topic_is_invalid_record(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        assert (await _create(conn, topic_name, {"cleanup.policy": "compact"})).error_code == 0
        refused = await _produce(conn, topic_name, [(b"k", b"v", (), 1), (None, b"v", (), 2), (None, b"v", (), 3)])
        assert refused.error_code == code("INVALID_RECORD")
        assert [(e.batch_index, e.batch_index_error_message) for e in refused.record_errors] == [
            (i, f"Compacted topic cannot accept message without key in topic partition {topic_name}-0")
            for i in (1, 2)]
        assert refused.error_message.startswith("One or more records have been rejected due to 2 record errors")
        keyed = await _produce(conn, topic_name, [(b"k", b"v", (), 1)], compression=1)  # gzip: decoded too
        assert (keyed.error_code, keyed.base_offset) == (0, 0)
        zipped = await _produce(conn, topic_name, [(None, b"v", (), 1)], compression=1)
        assert zipped.error_code == code("INVALID_RECORD")
        assert await _offsets(conn, topic_name) == (1, 1)  # nothing of the refused batches was appended


def test_confluent_producer_gets_invalid_record_for_keyless_compacted_write(shared_broker, topic_name):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact,delete"})])[
        topic_name].result(10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "retries": 0})
    reports = []
    producer.produce(topic_name, b"no key", partition=0, on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[0] is not None and reports[0].code() == code("INVALID_RECORD")


# --- topic configs ----------------------------------------------------------------------------


KAFKA_ONLY_CONFIGS = {
    "file.delete.delay.ms": "30000", "max.compaction.lag.ms": "86400000", "min.compaction.lag.ms": "1000",
    "segment.jitter.ms": "10", "segment.index.bytes": "4096", "preallocate": "true",
    "unclean.leader.election.enable": "false", "message.timestamp.before.max.ms": "3600000",
    "message.timestamp.after.max.ms": "3600000", "compression.zstd.level": "5",
    "leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "0:1,1:1",
    "local.retention.ms": "-2", "remote.storage.enable": "false",
}


def test_every_kafka_topic_config_is_accepted_and_described(shared_broker, topic_name):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config=KAFKA_ONLY_CONFIGS)])[topic_name].result(10)
    described = admin.describe_configs([ConfigResource("topic", topic_name)])
    entries = next(iter(described.values())).result(10)
    for name, value in KAFKA_ONLY_CONFIGS.items():
        assert entries[name].value == value, name
        assert entries[name].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert entries["compression.gzip.level"].value == "-1"  # Kafka's defaults for the rest
    assert entries["compression.gzip.level"].source == 5


async def test_unknown_and_invalid_topic_configs_are_invalid_config(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        unknown = await _create(conn, topic_name, {"no.such.config": "1"})
        assert (unknown.error_code, unknown.error_message) == (code("INVALID_CONFIG"),
                                                               "Unknown topic config name: no.such.config")
        for name, value in [("max.compaction.lag.ms", "0"), ("min.cleanable.dirty.ratio", "1.5"),
                            ("preallocate", "maybe"), ("compression.type", "brotli"),
                            ("cleanup.policy", "compact,shred"), ("leader.replication.throttled.replicas", "x")]:
            bad = await _create(conn, topic_name, {name: value})
            assert bad.error_code == code("INVALID_CONFIG"), (name, value)
        lags = await _create(conn, topic_name, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
        assert lags.error_code == code("INVALID_CONFIG")
        assert (await _create(conn, topic_name, {"cleanup.policy": "compact, delete"})).error_code == 0


# --- CONCURRENT_TRANSACTIONS -------------------------------------------------------------------


async def _init(conn: KafkaConnection, tid: str):
    """InitProducerId, retried while the coordinator topic is created and loaded (Kafka
    creates it when FindCoordinator first asks)."""
    deadline = time.monotonic() + 60
    while True:
        await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [tid]})
        init = await conn.request(22, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                          "producer_id": -1, "producer_epoch": -1})
        if init.error_code not in (code("COORDINATOR_LOAD_IN_PROGRESS"), code("COORDINATOR_NOT_AVAILABLE"),
                                   code("NOT_COORDINATOR")):
            return init
        assert time.monotonic() < deadline, init
        await asyncio.sleep(0.05)


async def _begin(conn: KafkaConnection, tid: str, topic: str) -> tuple[int, int]:
    init = await _init(conn, tid)
    assert init.error_code == 0
    await _add(conn, tid, init.producer_id, init.producer_epoch, topic)
    return init.producer_id, init.producer_epoch


async def _add(conn, tid, pid, epoch, topic) -> int:
    r = await conn.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                   "v3_and_below_producer_epoch": epoch,
                                   "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _end(conn, tid, pid, epoch, commit=True):
    return conn.request(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                "committed": commit})


async def test_concurrent_transactions_is_answered_at_once(broker_factory, topic_name):
    # markers held back: the transaction stays PrepareCommit, and Kafka answers 51 at once
    broker = broker_factory({"emulate.fault.hold.txn.markers": "true"})
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        await _create(conn, topic_name)
        pid, epoch = await _begin(conn, topic_name, topic_name)
        assert (await _end(conn, topic_name, pid, epoch)).error_code == 0
        assert await _add(conn, topic_name, pid, epoch, topic_name) == code("CONCURRENT_TRANSACTIONS")
        assert (await _end(conn, topic_name, pid, epoch)).error_code == code("CONCURRENT_TRANSACTIONS")
        init = await conn.request(22, 4, {"transactional_id": topic_name, "transaction_timeout_ms": 60000,
                                          "producer_id": pid, "producer_epoch": epoch})
        assert init.error_code == code("CONCURRENT_TRANSACTIONS")
        # KIP-360: a producer id that is not this transaction's is fenced first, as Kafka checks
        stranger = await conn.request(22, 4, {"transactional_id": topic_name, "transaction_timeout_ms": 60000,
                                              "producer_id": pid + 1000, "producer_epoch": 0})
        assert stranger.error_code == code("PRODUCER_FENCED")


async def test_next_transaction_batch_waits_for_the_previous_markers(broker_factory, topic_name):
    # Transaction version 2: EndTxn v5 bumps the epoch and answers before the markers are
    # written (held back here), so the next transaction's first batch (Produce v12, the new
    # epoch) meets the previous transaction still open on the partition. It must not be
    # folded into it: the coordinator answers CONCURRENT_TRANSACTIONS, which Produce v12
    # passes on as is (Kafka 4) and older versions as the retriable NOT_ENOUGH_REPLICAS.
    broker = broker_factory({"emulate.fault.hold.txn.markers": "true"})
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        await _create(conn, topic_name)
        init = await _init(conn, topic_name)
        pid, epoch = init.producer_id, init.producer_epoch
        first = await _produce(conn, topic_name, [(None, b"x", (), 1)], transactional_id=topic_name, version=12,
                               producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        assert (first.error_code, first.base_offset) == (0, 0)
        ended = await conn.request(26, 5, {"transactional_id": topic_name, "producer_id": pid,
                                           "producer_epoch": epoch, "committed": True})
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        answers = []
        for version in (12, 11):
            r = await _produce(conn, topic_name, [(None, b"y", (), 2)], transactional_id=topic_name,
                               version=version, producer_id=pid, producer_epoch=epoch + 1, base_sequence=0,
                               transactional=True)
            answers.append(r.error_code)
        assert answers == [code("CONCURRENT_TRANSACTIONS"), code("NOT_ENOUGH_REPLICAS")]
        assert await _offsets(conn, topic_name) == (0, 1)  # nothing appended: "x" alone, still open


async def test_hold_setting_answers_after_the_markers(broker_factory, topic_name):
    broker = broker_factory({"emulate.concurrent.transactions.hold.ms": 10_000})
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        await _create(conn, topic_name)
        pid, epoch = await _begin(conn, topic_name, topic_name)
        # pipelined right behind EndTxn: held until the markers are written, then run
        end = conn.send(26, 3, {"transactional_id": topic_name, "producer_id": pid, "producer_epoch": epoch,
                                "committed": True})
        add = conn.send(24, 3, {"v3_and_below_transactional_id": topic_name, "v3_and_below_producer_id": pid,
                                "v3_and_below_producer_epoch": epoch,
                                "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
        assert (await asyncio.wait_for(end, 30)).error_code == 0
        added = await asyncio.wait_for(add, 30)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


# --- LSO after DeleteRecords -------------------------------------------------------------------


async def test_lso_is_clamped_to_the_log_start_offset(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        await _create(conn, topic_name)
        await _produce(conn, topic_name, [(None, b"plain", (), 1)])
        pid, epoch = await _begin(conn, topic_name, topic_name)
        txn = await _produce(conn, topic_name, [(None, b"open", (), 1)], transactional_id=topic_name,
                             producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        assert (txn.error_code, txn.base_offset) == (0, 1)
        await _produce(conn, topic_name, [(None, b"after", (), 1), (None, b"after", (), 2)])
        assert await _offsets(conn, topic_name) == (1, 4)
        deleted = await conn.request(21, 1, {"topics": [{"name": topic_name, "partitions": [
            {"partition_index": 0, "offset": 3}]}], "timeout_ms": 5000})
        assert deleted.topics[0].partitions[0].low_watermark == 3
        # past the open transaction's first offset: as in Kafka 4.4, the LSO moves to the
        # base offset of the batch holding the new log start (offsets 2-3)
        assert await _offsets(conn, topic_name) == (2, 4)
        fetched = await conn.request(1, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic_name, "partitions": [{"partition": 0, "fetch_offset": 3,
                                                              "current_leader_epoch": -1, "log_start_offset": -1,
                                                              "partition_max_bytes": 1 << 20}]}]})
        part = fetched.responses[0].partitions[0]
        assert (part.error_code, part.last_stable_offset, part.log_start_offset) == (0, 2, 3)
        assert (await _end(conn, topic_name, pid, epoch)).error_code == 0
        deadline = time.monotonic() + 10
        while (await _offsets(conn, topic_name))[0] != 5:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)


# --- markers fenced at the partition -----------------------------------------------------------


async def test_fenced_markers_are_cancelled_not_retried(broker_factory, topic_name):
    broker = broker_factory()
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        await _create(conn, topic_name)
        pid, epoch = await _begin(conn, topic_name, topic_name)
        # the partition learns a newer epoch of the producer id behind the coordinator's back
        newer = await _produce(conn, topic_name, [(None, b"x", (), 1)], producer_id=pid,
                               producer_epoch=epoch + 5, base_sequence=0)
        assert newer.error_code == 0
        assert (await _end(conn, topic_name, pid, epoch)).error_code == 0
        deadline = time.monotonic() + 10
        while "cancelling the COMMIT markers" not in broker.log_text():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a retry loop would log again within its 50 ms back-off
        described = await conn.request(65, 0, {"transactional_ids": [topic_name]})
        assert described.transaction_states[0].transaction_state == "PrepareCommit"
        assert (await _end(conn, topic_name, pid, epoch)).error_code == code("CONCURRENT_TRANSACTIONS")
    log = broker.log_text()
    assert log.count("cancelling the COMMIT markers") == 1
    assert "INVALID_PRODUCER_EPOCH; retrying" not in log


# --- clean shutdown of the marker sender -------------------------------------------------------


def test_no_pending_task_warnings_after_transactions_and_shutdown(broker_factory, topic_name):
    broker = broker_factory({"connections.max.idle.ms": 1000})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    producer.init_transactions(10)
    for commit in (True, False, True):
        producer.begin_transaction()
        producer.produce(topic_name, b"v", partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    # the broker closes the idle connections (the producer's, and any it made itself)
    wait_until(lambda: "idle longer than connections.max.idle.ms" in broker.log_text(), 30,
               message="an idle connection to be closed")
    producer.begin_transaction()
    producer.produce(topic_name, b"v", partition=0)
    try:
        producer.commit_transaction(10)
    except KafkaException as e:  # pragma: no cover - diagnostic
        raise AssertionError(broker.log_tail()) from e
    assert broker.stop() == 0
    assert "Task was destroyed but it is pending" not in broker.log_text()
    assert "Traceback" not in broker.log_text()


# --- version profiles ----------------------------------------------------------------------------


@pytest.mark.parametrize("profile,produce_max,features", [
    ("2.8", 9, []), ("3.9", 11, []), ("4.4", 12, [("transaction.version", 2, 2), ("share.version", 1, 1),
                                   ("streams.version", 1, 1)])])
async def test_version_profile_answers_api_versions_as_that_release(broker_factory, profile, produce_max, features):
    broker = broker_factory({"emulate.kafka.version": profile})
    async with await KafkaConnection.connect(HOST, broker.port) as conn:
        r = await conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert {k.api_key: k.max_version for k in r.api_keys}[0] == produce_max
    assert [(f.name, f.min_version_level, f.max_version_level) for f in r.finalized_features] == features


def test_kafka_python_infers_the_emulated_release(broker_factory):
    from kafka import KafkaAdminClient

    broker = broker_factory({"emulate.kafka.version": "2.8"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.list_topics()
        assert admin._manager.broker_version[:2] == (2, 8)
    finally:
        admin.close()


# --- TxnOffsetCommit verified like Produce (KIP-890) -------------------------------------------


async def txn_offset_commit_without_add_offsets(conn: KafkaConnection, topic: str) -> dict:
    """TxnOffsetCommit v3, v4 and v5 in a transaction that never called AddOffsetsToTxn:
    the error each version gets, and what a read_committed OffsetFetch sees after the
    commit. (Shared with the differential test against Kafka.)"""
    await _create(conn, topic)
    out = {}
    for version in (3, 4, 5):
        tid, group = f"{topic}-tx{version}", f"{topic}-g{version}"
        pid, epoch = await _begin(conn, tid, topic)
        deadline = time.monotonic() + 60
        while True:  # the group coordinator may still be loading
            await conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
            r = await conn.request(28, version, {
                "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]})
            error = r.topics[0].partitions[0].error_code
            if error not in (code("COORDINATOR_LOAD_IN_PROGRESS"), code("NOT_COORDINATOR"),
                             code("COORDINATOR_NOT_AVAILABLE")) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        ended = await _end(conn, tid, pid, epoch, commit=True)
        deadline = time.monotonic() + 30
        while True:
            fetched = await conn.request(9, 7, {"group_id": group, "require_stable": True, "topics": [
                {"name": topic, "partition_indexes": [0]}]})
            # Kafka lists no partitions for a group that has no offsets at all
            fetch_error, offset = fetched.error_code, -1
            if fetched.topics and fetched.topics[0].partitions:
                p = fetched.topics[0].partitions[0]
                fetch_error, offset = p.error_code or fetch_error, p.committed_offset
            retriable = (code("UNSTABLE_OFFSET_COMMIT"), code("NOT_COORDINATOR"), code("COORDINATOR_LOAD_IN_PROGRESS"))
            if fetch_error not in retriable or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        out[version] = (error, ended.error_code, fetch_error, offset)
    return out


async def test_txn_offset_commit_is_verified_like_produce(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        answers = await txn_offset_commit_without_add_offsets(conn, topic_name)
    assert answers == {
        3: (code("INVALID_TXN_STATE"), 0, 0, -1),  # refused, and nothing stays pending
        4: (code("TRANSACTION_ABORTABLE"), 0, 0, -1),
        5: (0, 0, 0, 7),  # added to the transaction implicitly, committed with it
    }


# --- Produce to a partition the transaction does not hold --------------------------------------


async def produce_without_add_partitions(conn: KafkaConnection, topic: str) -> dict:
    """A transactional Produce (v9-v12) for a partition never added to the transaction:
    the error, then EndTxn(commit) and the offsets. (Shared with the differential test.)"""
    await _create(conn, topic)
    out = {}
    for version in (9, 11, 12):
        tid = f"{topic}-tx{version}"
        init = await _init(conn, tid)
        r = await _produce(conn, topic, [(None, b"x", (), 1)], transactional_id=tid, version=version,
                           producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0,
                           transactional=True)
        ended = await _end(conn, tid, init.producer_id, init.producer_epoch, commit=True)
        out[version] = (r.error_code, ended.error_code)
    deadline = time.monotonic() + 30
    while (offsets := await _offsets(conn, topic))[0] != offsets[1] and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    out["offsets"] = offsets
    return out


async def test_produce_v12_adds_the_partition_to_the_transaction(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        answers = await produce_without_add_partitions(conn, topic_name)
    assert answers == {
        9: (code("INVALID_TXN_STATE"), code("INVALID_TXN_STATE")),  # nothing to commit either
        11: (code("TRANSACTION_ABORTABLE"), code("INVALID_TXN_STATE")),
        12: (0, 0),  # added implicitly and committed: one record and its marker
        "offsets": (2, 2),
    }


# --- WriteTxnMarkers v2: the marker's transaction version (KIP-1228) --------------------------


async def markers_by_transaction_version(conn: KafkaConnection, topic: str) -> list:
    """Markers at the partition's current epoch, one above and one below, as transaction
    version 1 and 2 markers, with no transaction open (shared with the differential test)."""
    await _create(conn, topic)
    deadline = time.monotonic() + 30
    while True:  # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first producer id block arrives
        init = await conn.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                          "producer_id": -1, "producer_epoch": -1})
        if init.error_code == 0 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    pid, epoch = init.producer_id, init.producer_epoch
    written = await _produce(conn, topic, [(None, b"x", (), 1)], producer_id=pid, producer_epoch=epoch,
                             base_sequence=0)
    assert written.error_code == 0
    out = []
    for marker_epoch, version in ((epoch, 2), (epoch, 1), (epoch + 1, 2), (epoch + 1, 2), (epoch, 2)):
        r = await conn.request(27, 2, {"markers": [{
            "producer_id": pid, "producer_epoch": marker_epoch, "transaction_result": False,
            "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": 0,
            "transaction_version": version}]})
        out.append((marker_epoch - epoch, version, r.markers[0].topics[0].partitions[0].error_code))
    return out


async def test_transaction_version_2_markers_need_a_newer_epoch(shared_broker, topic_name):
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        answers = await markers_by_transaction_version(conn, topic_name)
    # With no transaction open, a TV2 marker at the current epoch is a coordinator's retry
    # and is written again (KAFKA-19999); one below the current epoch is fenced. (With a
    # transaction open at that epoch it is refused: tests/reference, tv2_produce_before_markers.)
    # The last one, at the first epoch again, is now below the current one.
    assert answers == [(0, 2, 0), (0, 1, 0), (1, 2, 0), (1, 2, 0), (0, 2, code("INVALID_PRODUCER_EPOCH"))]
