"""The aborted-transaction index kept per segment (<base>.txnindex), seen by read_committed
consumers: aborts spread over rolled segments stay skipped after a kill -9, and a data
directory of an older version (one aborted-transactions.index per partition) keeps its
aborted ranges when the broker upgraded onto it moves them into the segments."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol import crc
from tests.read_to_end import read_partition_in_order


def _aborts_over_segments(bootstrap: str, topic: str) -> list[bytes]:
    """Transactions, every other one aborted, over small segments; returns what was committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "600"})])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic, "linger.ms": 0})
    p.init_transactions(30)
    committed = []
    for i in range(8):
        p.begin_transaction()
        values = [b"%d-%d" % (i, j) for j in range(3)]
        for v in values:
            p.produce(topic, v, partition=0)
            p.flush(10)
        if i % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += values
    return committed


def test_aborts_in_rolled_segments_stay_skipped_after_kill_9(broker_factory, tmp_path):
    broker = broker_factory(data_dir=tmp_path / "data")
    topic = f"t-{uuid.uuid4().hex[:8]}"
    committed = _aborts_over_segments(broker.bootstrap, topic)
    directory = tmp_path / "data" / f"{topic}-0"
    assert len(list(directory.glob("*.txnindex"))) > 1  # the aborts are indexed in several segments
    broker.kill()
    broker.start()
    assert read_partition_in_order(broker.bootstrap, topic, "read_committed") == committed
    assert len(read_partition_in_order(broker.bootstrap, topic, "read_uncommitted")) == 24


def _as_older_version_left_it(directory: Path) -> None:
    """Replaces the .txnindex files with the per-partition file of older versions."""
    legacy = b""
    for path in sorted(directory.glob("*.txnindex")):
        for _version, pid, first, last, _lso in struct.iter_unpack(">hqqqq", path.read_bytes()):
            fields = struct.pack(">qqq", pid, first, last)
            legacy += fields + struct.pack(">I", crc.crc32c(fields))
        path.unlink()
    assert len(legacy) == 4 * 28
    (directory / "aborted-transactions.index").write_bytes(legacy)


def test_an_older_versions_index_is_moved_into_the_segments_at_upgrade(broker_factory, tmp_path):
    broker = broker_factory(data_dir=tmp_path / "data")
    topic = f"t-{uuid.uuid4().hex[:8]}"
    committed = _aborts_over_segments(broker.bootstrap, topic)
    assert broker.stop() == 0  # clean: no replay will find the aborts again
    directory = tmp_path / "data" / f"{topic}-0"
    _as_older_version_left_it(directory)
    broker.start()
    assert read_partition_in_order(broker.bootstrap, topic, "read_committed") == committed
    assert not (directory / "aborted-transactions.index").exists()
    assert len(list(directory.glob("*.txnindex"))) > 1
