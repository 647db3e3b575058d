"""docs/architecture.md's three paths name every file their request runs, and the EndTxn
count is the count of those files: each path is traced on a cluster of three nodes with
no fault rules set, as the page counts.

- EndTxn, from its bytes on the socket to the transaction's Complete record (the LSO
  moved on every partition before that);
- a transactional Produce, from its bytes to its answer (the partition's verification
  with the coordinator on the way);
- a node stop through the control API, to its coordinator partition loaded by the new
  leader."""

from __future__ import annotations

import asyncio
import re
import sys
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker.testing.helpers import wait_until
from tests.integration.test_cluster import create
from tests.unit.test_architecture_page import PACKAGES, PATH, ROOT, _lines, end_txn_files

pytestmark = pytest.mark.timeout(120)

_PACKAGE_DIRS = tuple(f"{ROOT / p}/" for p in PACKAGES)
END_TXN = "### EndTxn (socket to the LSO)"
PRODUCE = "### A transactional Produce (socket to acknowledged batch)"
NODE_STOP = "### A node stop (control API to coordinator failover)"


def _named_in(heading: str) -> set[str]:
    """Every file a path's section names (its steps and its prose); EndTxn's also those of
    the Produce steps its first step goes through."""
    lines = _lines()
    start = lines.index(heading)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("#"))
    named = {p for line in lines[start:end] for p in PATH.findall(line)}
    return named | end_txn_files(lines) if heading == END_TXN else named


class _Tracer:
    """Which package files each task tree runs (a task made by a traced task counts as its
    parent's), and those run in callbacks of a connection's reader."""

    def __init__(self) -> None:
        self.parents: dict[asyncio.Task, asyncio.Task | None] = {}
        self.by_root: dict[asyncio.Task, set[str]] = defaultdict(set)
        self.reading: set[str] = set()

    def task_factory(self, loop, coro, **kwargs):
        task = asyncio.Task(coro, loop=loop, **kwargs)
        self.parents[task] = asyncio.current_task(loop)
        return task

    def profile(self, frame, event, arg) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(_PACKAGE_DIRS):
            return
        file = str(Path(frame.f_code.co_filename).relative_to(ROOT))
        task = asyncio.current_task()
        if task is None:  # a callback: counted when a connection's reader runs it
            outer, f = frame, frame.f_back
            while f is not None:
                if f.f_code.co_filename.startswith(_PACKAGE_DIRS):
                    outer = f
                f = f.f_back
            if outer.f_code.co_qualname.startswith("_RequestReader."):
                self.reading.add(file)
            return
        while self.parents.get(task) is not None:
            task = self.parents[task]
        self.by_root[task].add(file)

    def files_of(self, module: str, from_socket: bool = True) -> set[str]:
        """The files of the task tree that ran ``module``, and (``from_socket``) the readers'."""
        roots = [files for files in self.by_root.values() if module in files]
        assert len(roots) == 1, roots
        return roots[0] | self.reading if from_socket else roots[0]


@contextmanager
def _traced(cluster):
    tracer = _Tracer()

    async def trace(on: bool) -> None:
        asyncio.get_running_loop().set_task_factory(tracer.task_factory if on else None)
        sys.setprofile(tracer.profile if on else None)

    cluster.call(lambda: trace(True))
    try:
        yield tracer
    finally:
        cluster.call(lambda: trace(False))


def _transactional_producer(cluster, topic: str, bootstrap: str) -> tuple[Producer, str]:
    """A producer two transactions in: what runs once (a first open, a first import) is
    not the path."""
    txn_id = f"{topic}-txn"
    create(bootstrap, topic, partitions=2, replication=3)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    for _ in range(2):
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(topic, b"v", partition=partition)
        producer.commit_transaction(30)
    return producer, txn_id


def _transaction_state(cluster, txn_id: str) -> tuple[int, str] | None:
    """(node, state) of the node whose coordinator holds ``txn_id``, if any."""
    async def state():
        for node in cluster.broker.nodes:
            service = node.made("transactions")
            md = service.coordinator.transaction_metadata(txn_id) if node.is_up and service else None
            if md is not None:
                return node.node_id, md.state.state_name
        return None
    return cluster.call(state)


def _bootstrap(cluster) -> str:
    return ",".join(f"127.0.0.1:{cluster.port + i}" for i in range(3))


def _end_txn_files(cluster, producer, txn_id: str, topic: str, commit: bool = True) -> set[str]:
    """The files one EndTxn runs, from the socket to the transaction's completion."""
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, b"v", partition=partition)
    producer.flush(30)
    with _traced(cluster) as tracer:
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
        done = "CompleteCommit" if commit else "CompleteAbort"
        wait_until(lambda: (_transaction_state(cluster, txn_id) or (None, None))[1] == done, timeout=30)
    return tracer.files_of("broker/handlers/end_txn.py")


def _assert_the_end_txn_section_names(ran: set[str]) -> None:
    assert sorted(ran - _named_in(END_TXN)) == []
    stated = next(int(m.group(1)) for line in _lines() if (m := re.search(r"runs code in (\d+) files", line)))
    assert len(ran) == stated, sorted(ran)


def test_the_end_txn_section_names_every_file_an_end_txn_runs(broker_factory, topic_name):
    cluster = broker_factory(nodes=3, in_process=True)
    producer, txn_id = _transactional_producer(cluster, topic_name, _bootstrap(cluster))
    _assert_the_end_txn_section_names(_end_txn_files(cluster, producer, txn_id, topic_name))


def test_the_produce_section_names_every_file_a_transactional_produce_runs(broker_factory, topic_name):
    cluster = broker_factory(nodes=3, in_process=True)
    producer, _ = _transactional_producer(cluster, topic_name, _bootstrap(cluster))
    producer.begin_transaction()
    with _traced(cluster) as tracer:
        producer.produce(topic_name, b"v", partition=0)
        assert producer.flush(30) == 0
    assert sorted(tracer.files_of("broker/handlers/produce.py") - _named_in(PRODUCE)) == []
    producer.abort_transaction(30)


def test_the_node_stop_section_names_every_file_a_node_stop_runs(broker_factory, topic_name):
    cluster = broker_factory(nodes=3, in_process=True, admin=True)
    producer, txn_id = _transactional_producer(cluster, topic_name, _bootstrap(cluster))
    coordinator, _ = _transaction_state(cluster, txn_id)
    with _traced(cluster) as tracer:
        cluster.control().call("node_stop", node_id=coordinator)
        wait_until(lambda: (_transaction_state(cluster, txn_id) or (coordinator,))[0] != coordinator, timeout=30)
    assert sorted(tracer.files_of("broker/control/service.py", from_socket=False) - _named_in(NODE_STOP)) == []


def test_an_abort_runs_the_files_a_commit_runs_once_its_segments_index_aborts(broker_factory, topic_name):
    """An abort indexes its marker in the segment's ``.txnindex``: the first abort of a
    segment opens that file (through the descriptor pool, named beside the steps); the
    next runs the same files as a commit."""
    cluster = broker_factory(nodes=3, in_process=True)
    producer, txn_id = _transactional_producer(cluster, topic_name, _bootstrap(cluster))
    _end_txn_files(cluster, producer, txn_id, topic_name, commit=False)
    _assert_the_end_txn_section_names(_end_txn_files(cluster, producer, txn_id, topic_name, commit=False))
