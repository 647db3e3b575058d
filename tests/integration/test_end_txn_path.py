"""docs/architecture.md's EndTxn path names every file an EndTxn runs, and its count is
the count of those files: a committed transaction's EndTxn is traced on a cluster of
three nodes, from its bytes on the socket to the transaction's Complete record (the
LSO moved on every partition before that), with no fault rules set, as the page counts."""

from __future__ import annotations

import asyncio
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker.testing.helpers import wait_until
from tests.integration.test_cluster import create
from tests.unit.test_architecture_page import PACKAGES, PATH, ROOT, _lines, end_txn_files

pytestmark = pytest.mark.timeout(120)

_PACKAGE_DIRS = tuple(f"{ROOT / p}/" for p in PACKAGES)
_READER = ("broker/wire/server.py", "_RequestReader")


def _named_in_end_txn_section(lines: list[str]) -> set[str]:
    """Every file the EndTxn section names (its steps, the files beside them) and those of
    the Produce steps its first step goes through."""
    start = lines.index("### EndTxn (socket to the LSO)")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("#"))
    return end_txn_files(lines) | {p for line in lines[start:end] for p in PATH.findall(line)}


class _Tracer:
    """Which package files each task tree runs (a task made by a traced task counts as its
    parent's), and those run in callbacks on behalf of a connection's reader."""

    def __init__(self) -> None:
        self.parents: dict[asyncio.Task, asyncio.Task | None] = {}
        self.by_root: dict[object, set[str]] = defaultdict(set)
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
            outer, f = None, frame
            while f is not None:
                if f.f_code.co_filename.startswith(_PACKAGE_DIRS):
                    outer = f
                f = f.f_back
            if outer.f_code.co_filename.endswith(_READER[0]) and outer.f_code.co_qualname.startswith(_READER[1]):
                self.reading.add(file)
            return
        while self.parents.get(task) is not None:
            task = self.parents[task]
        self.by_root[task].add(file)

    def files_of(self, handler: str) -> set[str]:
        """The files of the task tree that ran ``handler``'s module, and the readers'."""
        roots = [files for files in self.by_root.values() if handler in files]
        assert len(roots) == 1, roots
        return roots[0] | self.reading


def test_the_end_txn_section_names_every_file_an_end_txn_runs(broker_factory, topic_name):
    cluster = broker_factory(nodes=3, in_process=True)
    bootstrap = ",".join(f"127.0.0.1:{cluster.port + i}" for i in range(3))
    create(bootstrap, topic_name, partitions=2, replication=3)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic_name}-txn"})
    producer.init_transactions(30)

    def transaction() -> None:
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(topic_name, b"v", partition=partition)
        producer.flush(30)

    for _ in range(2):  # what runs once (a first open, a first import) is not the path
        transaction()
        producer.commit_transaction(30)
    transaction()
    tracer = _Tracer()

    async def trace(on: bool) -> None:
        asyncio.get_running_loop().set_task_factory(tracer.task_factory if on else None)
        sys.setprofile(tracer.profile if on else None)

    def completed() -> bool:
        async def state():
            for node in cluster.broker.nodes:
                service = node.made("transactions")
                md = service and service.coordinator.transaction_metadata(f"{topic_name}-txn")
                if md is not None and md.state.state_name == "CompleteCommit":
                    return True
            return False
        return cluster.call(state)

    cluster.call(lambda: trace(True))
    try:
        producer.commit_transaction(30)
        wait_until(completed, timeout=30)
    finally:
        cluster.call(lambda: trace(False))
    ran = tracer.files_of("broker/handlers/end_txn.py")

    lines = _lines()
    assert sorted(ran - _named_in_end_txn_section(lines)) == []
    stated = next(int(m.group(1)) for line in lines if (m := re.search(r"runs code in (\d+) files", line)))
    assert len(ran) == stated, sorted(ran)
