"""Transaction admin APIs and the ``eosbroker transactions`` tool against a real broker:
list/describe through kafka-python's admin client and the CLI, and a hanging
transaction found by find-hanging and ended by abort. The handlers' coordinator
errors are checked in process, where a loading or foreign partition is set up exactly."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode

from broker.commands import main
from broker.wire.client import KafkaConnection
from broker.clock import SYSTEM_CLOCK
from broker.errors import code
from broker.handlers import describe_transactions, list_transactions
from broker.tools.transaction_admin import ActiveProducer, Description, hanging, open_transactions
from coordinator.partitioning import partition_for
from coordinator.runtime import CoordinatorRuntime, InMemoryLog
from coordinator.transaction import TransactionConfig, TransactionCoordinator
from protocol import answer_wire

HOST = "127.0.0.1"
TXN_PARTITIONS = TransactionConfig().transaction_state_log_num_partitions

# A transactional producer that writes and then hangs until it is killed: no commit, no abort.
_ABANDONED_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, transactional_id, topic = sys.argv[1:]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
              "transaction.timeout.ms": 600000})
p.init_transactions(10)
p.begin_transaction()
for i in range(3):
    p.produce(topic, b"hanging-%d" % i, partition=0)
assert p.flush(10) == 0
print("produced", flush=True)
time.sleep(120)
"""


def tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.program", "transactions", "--bootstrap-server", bootstrap,
                           *args], capture_output=True, text=True, timeout=60)


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()]


def run_transaction(bootstrap: str, transactional_id: str, topic: str, commit: bool) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"v", partition=0)
    assert p.flush(10) == 0
    (p.commit_transaction if commit else p.abort_transaction)(10)


async def _lso_and_high_watermark(port: int, topic: str) -> tuple[int, int]:
    async with await KafkaConnection.connect(HOST, port) as conn:
        offsets = []
        for isolation in (1, 0):
            r = await conn.request(2, 2, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
            offsets.append(r.topics[0].partitions[0].offset)
        return offsets[0], offsets[1]


def test_list_and_describe(shared_broker, topic_name):
    committed, aborted = topic_name + "-commit", topic_name + "-abort"
    run_transaction(shared_broker.bootstrap, committed, topic_name, commit=True)
    run_transaction(shared_broker.bootstrap, aborted, topic_name, commit=False)

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        listed = {t.transactional_id: t for ts in admin.list_transactions().values() for t in ts}
        assert listed[committed].state == "CompleteCommit" and listed[aborted].state == "CompleteAbort"
        described = admin.describe_transactions([committed])[committed]
        assert (described.state, described.producer_id) == ("CompleteCommit", listed[committed].producer_id)
        assert described.transaction_timeout_ms == 60000 and described.transaction_start_time_ms > 0
    finally:
        admin.close()

    listing = tool(shared_broker.bootstrap, "list")
    assert listing.returncode == 0, listing.stderr
    table = rows(listing.stdout)
    assert table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [committed, "1", str(listed[committed].producer_id), "CompleteCommit"] in table
    assert [aborted, "1", str(listed[aborted].producer_id), "CompleteAbort"] in table
    # aligned: every row's ProducerId starts where its header does
    header, *lines = listing.stdout.splitlines()
    column = header.index("ProducerId")
    assert all(line[column - 1] == " " and line[column].isdigit() for line in lines)

    describe = tool(shared_broker.bootstrap, "describe", "--transactional-id", committed)
    assert describe.returncode == 0, describe.stderr
    head, row = rows(describe.stdout)
    assert head[:6] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                        "TransactionTimeoutMs"]
    assert row[:6] == ["1", committed, str(listed[committed].producer_id), "0", "CompleteCommit", "60000"]
    assert int(row[6]) == described.transaction_start_time_ms and int(row[7]) >= 0

    missing = CliRunner().invoke(main, ["transactions", "--bootstrap-server", shared_broker.bootstrap, "describe",
                                        "--transactional-id", topic_name + "-never-used"])
    assert missing.exit_code == 1 and missing.stdout == ""
    assert missing.stderr == (f"Error: cannot describe transactional-id `{topic_name}-never-used`: "
                              "TRANSACTIONAL_ID_NOT_FOUND\n")

    producers = tool(shared_broker.bootstrap, "describe-producers", "--topic", topic_name, "--partition", "0")
    assert producers.returncode == 0, producers.stderr
    assert rows(producers.stdout)[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                                         "LastTimestamp", "CurrentTransactionStartOffset"]
    assert sorted(r[0] for r in rows(producers.stdout)[1:]) == sorted(
        str(listed[t].producer_id) for t in (committed, aborted))
    assert all(r[5] == "None" for r in rows(producers.stdout)[1:])


async def test_list_transactions_filters_over_the_wire(shared_broker, topic_name):
    run_transaction(shared_broker.bootstrap, topic_name, topic_name, commit=True)
    async with await KafkaConnection.connect(HOST, shared_broker.port) as conn:
        # EndTxn answers once PrepareCommit is logged; CompleteCommit follows the markers.
        for _ in range(200):
            r = await conn.request(66, 1, {"state_filters": ["CompleteCommit", "Bogus"], "producer_id_filters": [],
                                           "duration_filter": -1})
            if topic_name in {t.transactional_id for t in r.transaction_states}:
                break
            await asyncio.sleep(0.05)
        assert r.error_code == code("NONE") and r.unknown_state_filters == ("Bogus",)
        assert topic_name in {t.transactional_id for t in r.transaction_states}
        assert {t.transaction_state for t in r.transaction_states} == {"CompleteCommit"}
        r = await conn.request(66, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1})
        assert topic_name not in {t.transactional_id for t in r.transaction_states}
        # the transaction started moments ago: not longer than an hour
        r = await conn.request(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": 3_600_000})
        assert topic_name not in {t.transactional_id for t in r.transaction_states}


def test_hanging_transaction_is_found_and_aborted(broker_factory, topic_name):
    broker = broker_factory()
    transactional_id = topic_name + "-abandoned"
    producer = subprocess.Popen([sys.executable, "-c", _ABANDONED_PRODUCER, broker.bootstrap, transactional_id,
                                 topic_name], stdout=subprocess.PIPE, text=True)
    try:
        assert producer.stdout.readline() == "produced\n"
    finally:
        producer.kill()
        producer.wait()
        producer.stdout.close()
    assert asyncio.run(_lso_and_high_watermark(broker.port, topic_name)) == (0, 3)

    # Still Ongoing at its coordinator, which will abort it at the timeout: not hanging.
    describe = tool(broker.bootstrap, "describe", "--transactional-id", transactional_id)
    assert rows(describe.stdout)[1][4] == "Ongoing" and rows(describe.stdout)[1][-1] == f"{topic_name}-0"
    quiet = tool(broker.bootstrap, "find-hanging", "--max-transaction-timeout", "0")
    assert quiet.returncode == 0, quiet.stderr
    assert rows(quiet.stdout) == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                   "StartOffset", "LastTimestamp", "Duration(min)"]]

    # The coordinator loses the transaction (its __transaction_state partition is gone):
    # the partition now holds a transaction nobody will ever end.
    broker.stop()
    shutil.rmtree(broker.data_dir / f"__transaction_state-{partition_for(transactional_id, TXN_PARTITIONS)}")
    broker.start()
    time.sleep(0.01)  # the open transaction must be older than --max-transaction-timeout 0

    found = tool(broker.bootstrap, "find-hanging", "--max-transaction-timeout", "0")
    assert found.returncode == 0, found.stderr
    [hanging] = rows(found.stdout)[1:]
    producer_id = hanging[2]
    assert hanging[:2] == [topic_name, "0"] and hanging[3:6] == ["0", "-1", "0"]

    aborted = tool(broker.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "0")
    assert aborted.returncode == 0, aborted.stderr
    assert aborted.stdout == (f"Aborted the transaction of producer {producer_id} (epoch 0) on {topic_name}-0 "
                              "that started at offset 0\n")
    assert asyncio.run(_lso_and_high_watermark(broker.port, topic_name)) == (4, 4)  # past the ABORT marker


def test_tool_errors(shared_broker, topic_name):
    unknown = tool(shared_broker.bootstrap, "describe-producers", "--topic", topic_name, "--partition", "0")
    assert unknown.returncode == 1
    assert unknown.stderr == f"Error: cannot describe topic {topic_name}: UNKNOWN_TOPIC_OR_PARTITION\n"

    run_transaction(shared_broker.bootstrap, topic_name, topic_name, commit=True)
    runner = CliRunner()
    for partition, start, message in [(7, 0, f"partition {topic_name}-7 does not exist"),
                                      (0, 0, f"no open transaction starts at offset 0 on partition {topic_name}-0")]:
        result = runner.invoke(main, ["transactions", "--bootstrap-server", shared_broker.bootstrap, "abort",
                                      "--topic", topic_name, "--partition", str(partition),
                                      "--start-offset", str(start)])
        assert (result.exit_code, result.stderr) == (1, f"Error: {message}\n")

    port = _unused_port()
    down = runner.invoke(main, ["transactions", "--bootstrap-server", f"{HOST}:{port}", "list"])
    assert down.exit_code == 1
    assert down.stderr.startswith(f"Error: cannot reach any bootstrap server: {HOST}:{port}: ")
    bad_address = runner.invoke(main, ["transactions", "--bootstrap-server", "localhost", "list"])
    assert (bad_address.exit_code, bad_address.stderr) == (
        1, "Error: invalid --bootstrap-server entry 'localhost': expected HOST:PORT\n")
    usage = runner.invoke(main, ["transactions", "--bootstrap-server", shared_broker.bootstrap, "find-hanging",
                                 "--partition", "0"])
    assert usage.exit_code == 2 and "--partition requires --topic" in usage.stderr


def test_hanging_candidates_and_verdicts():
    def producer(pid, start, last_timestamp):
        return ActiveProducer(pid, 0, 5, last_timestamp, -1, start)

    now, max_timeout = 1_000_000, 60_000
    producers = {("t", 0): [producer(1, 10, now - max_timeout - 1), producer(2, -1, 0),
                            producer(3, 20, now - max_timeout)],
                 ("t", 1): [producer(4, 0, 0), producer(5, 3, 0), producer(6, 8, 0)]}
    candidates = open_transactions(producers, now, max_timeout)
    # no open transaction (2) or not older than the maximum timeout (3): not a candidate
    assert [(c.topic, c.partition, c.producer.producer_id) for c in candidates] == [
        ("t", 0, 1), ("t", 1, 4), ("t", 1, 5), ("t", 1, 6)]

    def described(transactional_id, *partitions):
        return Description(1, transactional_id, "Ongoing", 0, 0, 60000, now, partitions)

    transactional_ids = {1: "a", 4: "b", 5: "c"}  # producer 6: no coordinator knows it
    descriptions = {"a": described("a", ("t", 0)), "b": described("b", ("t", 0)),
                    "c": ErrorCode.transactional_id_not_found}
    assert [c.producer.producer_id for c in hanging(candidates, transactional_ids, descriptions)] == [4, 5, 6]


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --- the handlers' coordinator errors, in process --------------------------------------


def _context(coordinator: TransactionCoordinator):
    # no authorizer configured: RequestContext.allowed allows everything
    return SimpleNamespace(node=SimpleNamespace(transactions=SimpleNamespace(coordinator=coordinator)),
                           clock=SYSTEM_CLOCK, allowed=lambda *_args, **_kwargs: True)


async def test_describe_transactions_errors_per_id():
    coordinator = TransactionCoordinator(TransactionConfig())
    loading_id = "loading-id"
    loading = partition_for(loading_id, TXN_PARTITIONS)
    foreign_id = next(f"id-{i}" for i in range(1000) if partition_for(f"id-{i}", TXN_PARTITIONS) != loading)
    CoordinatorRuntime(coordinator, InMemoryLog(), lambda _effect: None).begin_load(loading, 3)
    request = answer_wire.build_request(65, 0, {"transactional_ids": [loading_id, foreign_id]})
    response = await describe_transactions.handle(_context(coordinator), request)
    built = answer_wire.build_response(65, 0, response)
    assert [(s.transactional_id, s.error_code) for s in built.transaction_states] == [
        (loading_id, code("COORDINATOR_LOAD_IN_PROGRESS")), (foreign_id, code("NOT_COORDINATOR"))]
    # every other field at its schema default, as Kafka 4.4 answers (tests/reference)
    assert answer_wire.ms(built.transaction_states[0].transaction_start_time) == 0
    assert built.transaction_states[0].producer_id == 0


@pytest.mark.parametrize("version, pattern, loading, error", [
    (1, None, True, "COORDINATOR_LOAD_IN_PROGRESS"),
    (2, "app-(", False, "INVALID_REGULAR_EXPRESSION"),
    (2, "app-.*", False, "NONE"),
])
async def test_list_transactions_errors(version, pattern, loading, error):
    coordinator = TransactionCoordinator(TransactionConfig())
    runtime = CoordinatorRuntime(coordinator, InMemoryLog(), lambda _effect: None)
    runtime.begin_load(0, 0)
    if not loading:
        runtime.load(0, 0)
    body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
    if pattern is not None:
        body["transactional_id_pattern"] = pattern
    response = await list_transactions.handle(_context(coordinator), answer_wire.build_request(66, version, body))
    assert answer_wire.build_response(66, version, response).error_code == code(error)
