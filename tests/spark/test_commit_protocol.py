"""The sink's driver protocol against a real broker, without Spark: recovery of a decided
batch, replay detection, double commits, timed-out transactions, the murmur2 partitioner."""

from __future__ import annotations

import pickle
import time
import uuid

import pytest
from pyspark import cloudpickle

from spark_client import wire
from spark_client.commit_protocol import (
    Committer, TaskCommit, TransactionLostError, TransactionTimedOutError, in_scope, transactional_id,
)
from spark_client.control import COMMITTED, COMMITTING, ControlLog, Decision
from spark_client.options import SinkOptions, SourceOptions
from spark_client.partitioner import murmur2, partition_for_key
from spark_client.preflight import PreflightError
from spark_client.sink import InjectedTaskFailure
from tests.broker_process import wait_until
from tests.spark.helpers import consume, create_topic, transaction_states

pytestmark = pytest.mark.spark


def _opts(bootstrap: str, topic: str, prefix: str, timeout_ms: int = 60000) -> SinkOptions:
    return SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                              "transactional.id.prefix": prefix, "transaction.timeout.ms": str(timeout_ms),
                              "commit.timeout.ms": "20000"})


def _task(opts: SinkOptions, scope: str, batch: int, run: str, values: list[bytes], partition: int = 0,
          started_ms: int | None = None, attempt: int = 0) -> TaskCommit:
    """What a Spark task does: write ``values`` in an open transaction, return its commit message."""
    txn_id = transactional_id(opts.transactional_id_prefix, scope, batch, partition, attempt, run)
    with wire.Client(opts.bootstrap) as cluster:
        producer = wire.Producer(cluster, transactional_id=txn_id, transaction_timeout_ms=opts.transaction_timeout_ms)
        for v in values:
            producer.send(opts.topic, partition, None, v)
        txn = producer.flush()
    if txn is None:  # no values: no transaction
        return TaskCommit(scope, batch, run, partition, attempt, None, -1, -1, 0, -1)
    return TaskCommit(scope, batch, run, partition, attempt, txn.transactional_id, txn.producer_id,
                      txn.producer_epoch, len(values), producer.started_ms if started_ms is None else started_ms)


@pytest.fixture
def setup(broker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    return broker.bootstrap, topic, f"p{uuid.uuid4().hex[:6]}"


def _values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    return sorted(m.value() for m in consume(bootstrap, topic, 1, isolation, settle=0.5))


def test_restart_finishes_the_decided_batch_and_aborts_its_replay(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    decided = _task(opts, "q", 5, "run1", [b"a1", b"a2"])
    with Committer(opts, "q") as first_driver:  # decides, then "crashes" before any EndTxn
        first_driver.control.ensure_topic()
        first_driver.control.append(Decision(5, COMMITTING, (decided.txn,)))
    replay = _task(opts, "q", 5, "run2", [b"b1", b"b2"])
    with Committer(opts, "q") as second_driver:
        second_driver.commit(5, [replay])
        assert second_driver.control.latest() == Decision(5, COMMITTED, (decided.txn,))
    assert _values(bootstrap, topic) == [b"a1", b"a2"]
    assert _values(bootstrap, topic, "read_uncommitted") == [b"a1", b"a2", b"b1", b"b2"]
    states = transaction_states(bootstrap, prefix)
    assert states[decided.transactional_id] == "CompleteCommit"
    assert states[replay.transactional_id] == "CompleteAbort"


def _stable(bootstrap: str, topic: str, partitions: int = 1) -> bool:
    """Whether the last stable offset equals the high watermark on every partition."""
    with wire.Client(bootstrap) as cluster:
        lso = cluster.list_offsets(topic, range(partitions), wire.LATEST, wire.READ_COMMITTED)
        hw = cluster.list_offsets(topic, range(partitions), wire.LATEST, wire.READ_UNCOMMITTED)
    return lso == hw


def test_a_starting_query_commits_the_decided_batch_and_aborts_what_a_crashed_run_left_open(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    decided = _task(opts, "q", 3, "run1", [b"decided"])
    with Committer(opts, "q") as crashed:  # decided batch 3, then died before any EndTxn ...
        crashed.control.ensure_topic()
        crashed.control.append(Decision(3, COMMITTING, (decided.txn,)))
    undecided = _task(opts, "q", 4, "run1", [b"undecided"])  # ... while batch 4's task had written
    other_query = _task(opts, "q-2", 4, "run1", [b"other"])  # "q-2" is not an attempt of "q"
    assert not _stable(bootstrap, topic)
    with Committer(opts, "q") as restarted:
        restarted.start()
        assert restarted.control.latest() == Decision(3, COMMITTED, (decided.txn,))
    states = transaction_states(bootstrap, prefix)
    assert states[decided.transactional_id] == "CompleteCommit"
    assert states[undecided.transactional_id] == "Empty"  # fenced: aborted, epoch bumped
    assert states[other_query.transactional_id] == "Ongoing"
    with Committer(opts, "q-2") as other:
        other.abort(4, [])  # an abort resolves its query's leftovers too
    assert transaction_states(bootstrap, prefix)[other_query.transactional_id] == "Empty"
    wait_until(lambda: _stable(bootstrap, topic), timeout=10, message="LSO == high watermark")
    assert _values(bootstrap, topic) == [b"decided"]


def test_a_commit_aborts_the_failed_and_losing_attempts_left_open(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    killed = _task(opts, "q", 0, "r", [b"killed"], attempt=0)  # its executor died: nobody aborted it
    loser = _task(opts, "q", 0, "r", [b"loser"], attempt=2)  # a speculative copy that lost
    winner = _task(opts, "q", 0, "r", [b"winner"], attempt=1)
    with Committer(opts, "q") as driver:
        driver.commit(0, [winner])
    states = transaction_states(bootstrap, prefix)
    assert states[winner.transactional_id] == "CompleteCommit"
    assert states[killed.transactional_id] == states[loser.transactional_id] == "Empty"
    wait_until(lambda: _stable(bootstrap, topic), timeout=10, message="LSO == high watermark")
    assert _values(bootstrap, topic) == [b"winner"]


@pytest.mark.parametrize("txn_id,scope,inside", [
    ("p-w-0-1-0-ab12cd34", "w", True),
    ("p-w-2-0-1-0-ab12cd34", "w", False),  # write id "w-2"
    ("p-w-2-0-1-0-ab12cd34", "w-2", True),
    ("p-w-x-0-1-0-ab12cd34", "w", False),
    ("p-w-0-1-0", "w", False),
])
def test_which_ids_are_attempts_of_a_scope(txn_id, scope, inside):
    assert in_scope(txn_id, "p", scope) is inside


def test_next_batch_commits_and_a_lost_endtxn_response_is_harmless(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    first = _task(opts, "q", 0, "r", [b"x"])
    empty = TaskCommit("q", 0, "r", 1, 0, None, -1, -1, 0, -1)  # a task with no rows opens no transaction
    with Committer(opts, "q") as driver:
        driver.commit(0, [first, empty, None])
        driver.finish(Decision(0, COMMITTING, (first.txn,)))  # the same EndTxn again: NONE
        second = _task(opts, "q", 1, "r", [b"y"])
        driver.commit(1, [second])
        assert driver.control.latest().batch_id == 1
    assert _values(bootstrap, topic) == [b"x", b"y"]


def test_scopes_are_independent(setup):
    """A new checkpoint (new query id) with the same prefix starts again at batch 0."""
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    with Committer(opts, "old-query") as driver:
        driver.commit(3, [_task(opts, "old-query", 3, "r", [b"old"])])
    with Committer(opts, "new-query") as driver:
        driver.commit(0, [_task(opts, "new-query", 0, "r", [b"new"])])
    assert _values(bootstrap, topic) == [b"new", b"old"]


def test_abort_without_a_decision_aborts_the_tasks_transactions(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    task = _task(opts, "q", 0, "r", [b"gone"])
    with Committer(opts, "q") as driver:
        driver.abort(0, [task, None])
    assert transaction_states(bootstrap, prefix)[task.transactional_id] == "CompleteAbort"
    assert _values(bootstrap, topic) == []


def test_a_transaction_too_old_to_commit_safely_is_not_decided(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix, timeout_ms=60000)
    task = _task(opts, "q", 0, "r", [b"late"], started_ms=int(time.time() * 1000) - 59000)
    with Committer(opts, "q") as driver:
        with pytest.raises(TransactionTimedOutError, match=r"NOT committed.*transaction\.timeout\.ms=60000"):
            driver.commit(0, [task])
        assert driver.control.latest() is None
    assert transaction_states(bootstrap, prefix)[task.transactional_id] == "CompleteAbort"


def test_a_transaction_the_broker_aborted_after_the_decision_is_a_loud_error(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix, timeout_ms=1000)
    kept = _task(opts, "q", 0, "r", [b"kept"], partition=0)
    lost = _task(opts, "q", 0, "r", [b"lost"], partition=0)
    wait_until(lambda: transaction_states(bootstrap, prefix).get(lost.transactional_id) == "CompleteAbort",
               timeout=10, message="the broker to abort the timed-out transaction")
    # The driver believes both are fresh (started now) and decides; the broker disagrees.
    fresh = [TaskCommit(**{**m.__dict__, "started_ms": int(time.time() * 1000)}) for m in (kept, lost)]
    with Committer(opts, "q") as driver:
        with pytest.raises(TransactionLostError) as failure:
            driver.commit(0, fresh)
        message = str(failure.value)
        assert "transaction.timeout.ms=1000" in message and "LOST" in message and "most likely" not in message
        assert lost.transactional_id in message and ("PRODUCER_FENCED" in message or "INVALID_PRODUCER_EPOCH" in message)
        assert "now CompleteAbort" in message and lost.transactional_id in failure.value.lost
        # abort() after the failed commit rolls forward and fails the same way; so does a restart.
        with pytest.raises(TransactionLostError):
            driver.abort(0, fresh)
    with Committer(opts, "q") as restarted:
        with pytest.raises(TransactionLostError):
            restarted.commit(0, fresh)
        assert restarted.control.latest().state == COMMITTING


def test_control_log_reads_only_the_latest_decision_per_key(setup):
    bootstrap, _topic, prefix = setup
    with wire.Client(bootstrap) as cluster:
        a = ControlLog(cluster, bootstrap, f"control-{prefix}", "a")
        b = ControlLog(cluster, bootstrap, f"control-{prefix}", "b")
        a.ensure_topic()
        a.append(Decision(1, COMMITTING, ()))
        b.append(Decision(7, COMMITTED, ()))
        a.append(Decision(1, COMMITTED, ()))
        assert a.latest() == Decision(1, COMMITTED, ())
        assert b.latest() == Decision(7, COMMITTED, ())
        a.append(Decision(2, COMMITTING, ()))
        assert a.latest() == Decision(2, COMMITTING, ())  # incremental read from the cached position


@pytest.mark.parametrize("key,expected", [
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829), (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_the_kafka_clients(key, expected):
    assert murmur2(key) == expected
    assert partition_for_key(key, 3) == (expected & 0x7FFFFFFF) % 3


def test_options_are_checked_on_the_driver():
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        SinkOptions.parse({"topic": "t"})
    with pytest.raises(ValueError, match="protobuf.descriptor.file"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "value.format": "protobuf"})
    with pytest.raises(ValueError, match="delivery.guarantee"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "delivery.guarantee": "maybe"})
    assert not SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "delivery.guarantee": "at_least_once"}).exactly_once
    with pytest.raises(ValueError, match=r"unknown option 'delivery.guarantees' for the eosbroker sink \(did you "
                                         r"mean 'delivery.guarantee'\?\); valid options: kafka.bootstrap.servers, "):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "delivery.guarantees": "at-least-once"})
    with pytest.raises(ValueError, match=r"unknown option 'kafka.sasl.kerberos.service.name' for the eosbroker source"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.sasl.kerberos.service.name": "k"})
    with pytest.raises(ValueError, match="kafka.security.protocol must be one of"):  # known, and checked
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.security.protocol": "TLS"})
    # Spark lower-cases option names; a streaming query passes its checkpointLocation through.
    assert SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "checkpointlocation": "/c"}).checkpoint_location == "/c"
    assert SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                "startingoffsets": "latest"}).starting_offsets == "latest"


def test_register_refuses_local_workers_that_cannot_import_the_data_source(tmp_path):
    import sys
    from types import SimpleNamespace

    from spark_client import _check_local_workers

    def session(python: str, master: str = "local[2]"):
        return SimpleNamespace(sparkContext=SimpleNamespace(master=master, pythonExec=python))

    bare = tmp_path / "python"  # an interpreter without spark_client: a script that fails to import it
    bare.write_text("#!/bin/sh\nexit 1\n")
    bare.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"Spark's Python workers run .* cannot import spark_client.*PYSPARK_PYTHON"):
        _check_local_workers(session(str(bare)))
    _check_local_workers(session(sys.executable))  # this venv has it
    _check_local_workers(session(str(bare), master="spark://elsewhere:7077"))  # not ours to check


def test_a_task_that_writes_nothing_opens_no_transaction(setup):
    """No InitProducerId for nothing: the id never exists on the broker and the task
    reports no transaction, so the driver has nothing to EndTxn."""
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    message = _task(opts, "q", 0, "r", [])
    assert (message.transactional_id, message.count, message.txn) == (None, 0, None)
    assert transaction_states(bootstrap, prefix) == {}


def test_a_batch_whose_tasks_all_wrote_nothing_commits_as_an_empty_batch_and_the_next_one_follows(setup):
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    with Committer(opts, "q") as driver:
        driver.commit(0, [_task(opts, "q", 0, "r", [], partition=p) for p in (0, 1)])
        assert driver.control.latest() == Decision(0, COMMITTED, ())
        driver.commit(1, [_task(opts, "q", 1, "r", [b"after"]), _task(opts, "q", 1, "r", [], partition=1)])
        assert driver.control.latest().batch_id == 1
    assert _values(bootstrap, topic) == [b"after"]


def _never_began(opts: SinkOptions, scope: str, batch: int, partition: int) -> TaskCommit:
    """What a task of an earlier version reported for no rows: an id initialised (Empty)
    but never begun, 0 records."""
    txn_id = transactional_id(opts.transactional_id_prefix, scope, batch, partition, 0, "old")
    with wire.Client(opts.bootstrap) as cluster:
        handle = wire.init_producer_id(cluster, txn_id, opts.transaction_timeout_ms, time.monotonic() + 20)
    return TaskCommit(scope, batch, "old", partition, 0, txn_id, handle.producer_id, handle.producer_epoch, 0,
                      int(time.time() * 1000))


def test_a_decided_transaction_that_never_began_is_not_lost(setup):
    """A COMMITTING record holding 0-record transactions that are Empty at the epoch the
    task reported (what an earlier version wrote for an empty micro-batch) finishes: EndTxn
    answers INVALID_TXN_STATE for them, which is not an abort."""
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    with_rows = _task(opts, "q", 3, "old", [b"kept"])
    empty = [_never_began(opts, "q", 3, p) for p in (1, 2)]
    with Committer(opts, "q") as crashed:
        crashed.control.ensure_topic()
        crashed.control.append(Decision(3, COMMITTING, tuple(m.txn for m in [with_rows, *empty])))
    with Committer(opts, "q") as restarted:
        restarted.commit(3, [_task(opts, "q", 3, "new", [b"replayed"])])  # a replay of the decided batch
        assert restarted.control.latest().state == COMMITTED
        restarted.commit(4, [_task(opts, "q", 4, "new", [])])
        assert restarted.control.latest() == Decision(4, COMMITTED, ())
    assert _values(bootstrap, topic) == [b"kept"]


def test_a_never_begun_transaction_fenced_since_is_lost_with_what_was_seen(setup):
    """Empty at another epoch than the task reported: someone else initialised the id
    (a fence aborts whatever it held), so the driver cannot know it held nothing."""
    bootstrap, topic, prefix = setup
    opts = _opts(bootstrap, topic, prefix)
    empty = _never_began(opts, "q", 0, 0)
    with wire.Client(bootstrap) as cluster:
        fenced = wire.fence(cluster, empty.transactional_id, time.monotonic() + 20)
    with Committer(opts, "q") as driver:
        with pytest.raises(TransactionLostError) as failure:
            driver.commit(0, [empty])
    message = str(failure.value)
    assert f"reported epoch {empty.producer_epoch}" in message
    assert f"now Empty with producer id {fenced.producer_id}, producer epoch {fenced.producer_epoch}" in message
    assert "most likely" not in message


@pytest.mark.parametrize("error", [
    TransactionLostError("batch 3 lost", batch_id=3, scope="q", lost=("t-3-0",)),
    TransactionTimedOutError("too old"),
    wire.KafkaError(wire.ErrorCode.invalid_txn_state, "EndTxn for 't'"),
    InjectedTaskFailure("hook"),
    PreflightError("no such topic"),
], ids=lambda e: type(e).__name__)
def test_every_error_the_data_source_raises_survives_pickling(error):
    """Spark ships exceptions between its processes with (cloud)pickle."""
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        copy = loads(dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and copy.__dict__ == error.__dict__


def test_a_lost_batch_found_while_spark_pickles_the_writer_fails_the_commit_as_what_it_is(setup, tmp_path):
    """Resolving earlier runs happens while Spark pickles the stream writer: an error
    there reached the user as a PicklingError. The commit meets it and raises it whole."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark_client.sink import EosBrokerStreamWriter

    bootstrap, topic, prefix = setup
    (tmp_path / "metadata").write_text('{"id":"q-lost"}\n')
    opts = SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                              "transactional.id.prefix": prefix, "checkpointLocation": str(tmp_path)})
    decided = _task(opts, "q-lost", 0, "r", [b"gone"])
    with wire.Client(bootstrap) as cluster:
        wire.fence(cluster, decided.transactional_id, time.monotonic() + 20)
    with Committer(opts, "q-lost") as crashed:
        crashed.control.ensure_topic()
        crashed.control.append(Decision(0, COMMITTING, (decided.txn,)))
    writer = EosBrokerStreamWriter(opts, StructType([StructField("value", BinaryType())]))
    cloudpickle.loads(cloudpickle.dumps(writer))
    with pytest.raises(TransactionLostError) as failure:
        writer.commit([_task(opts, "q-lost", 1, "r", [])], 1)
    assert failure.value.lost == (decided.transactional_id,) and failure.value.batch_id == 0
