"""Files damaged while the broker was down, with the clean-shutdown marker still present:
a torn active segment, a garbage offset index, a garbage producer snapshot and a torn
__transaction_state segment. The broker starts, says what it repaired, and serves what
the files really hold: no acknowledged record before the damage is lost, nothing
half-written is served, and idempotent and transactional producers carry on."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.read_to_end import read_partition_in_order


def _setup(broker_factory, tmp_path: Path):
    broker = broker_factory(data_dir=tmp_path / "data")
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    idem = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                     "linger.ms": 0, "batch.num.messages": 1})
    for i in range(200):
        idem.produce(topic, b"i%03d" % i, partition=0)
        idem.flush(10)  # one batch per record: the damage below takes the last one only
    txp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    txp.init_transactions(30)
    txp.begin_transaction()
    txp.produce(topic, b"tx", partition=0)
    txp.commit_transaction(30)
    for i in range(200, 205):
        idem.produce(topic, b"i%03d" % i, partition=0)
        idem.flush(10)
    assert broker.stop() == 0  # clean: the marker is written
    return broker, topic, tmp_path / "data" / f"{topic}-0"


BEFORE = [b"i%03d" % i for i in range(200)] + [b"tx"]
ALL = BEFORE + [b"i%03d" % i for i in range(200, 205)]


def _only(directory: Path, suffix: str) -> Path:
    files = sorted(directory.glob(f"0*{suffix}"))  # segment files, not aborted-transactions.index
    assert files, f"no {suffix} in {directory}"
    return files[-1]


def test_torn_active_segment_under_a_clean_shutdown_marker_is_recovered(broker_factory, tmp_path):
    broker, topic, part = _setup(broker_factory, tmp_path)
    log = _only(part, ".log")
    os.truncate(log, log.stat().st_size - 7)  # the last batch (i204) loses its tail
    broker.start()
    # a partition is opened (and its damage found) on first use, not at start
    AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=30)
    assert "truncating at position" not in broker.log_text()
    expected = BEFORE + [b"i%03d" % i for i in range(200, 204)]
    assert read_partition_in_order(broker.bootstrap, topic) == expected  # the torn batch is not served
    assert "cannot trust the indexes of active segment" in broker.log_text()
    assert "truncating at position" in broker.log_text()
    assert read_partition_in_order(broker.bootstrap, topic, "read_uncommitted") == expected
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    p.produce(topic, b"after", partition=0)
    assert p.flush(30) == 0
    assert read_partition_in_order(broker.bootstrap, topic) == expected + [b"after"]


def test_garbage_offset_index_is_rebuilt(broker_factory, tmp_path):
    broker, topic, part = _setup(broker_factory, tmp_path)
    index = _only(part, ".index")
    index.write_bytes(os.urandom(max(index.stat().st_size, 64)))
    broker.start()
    assert read_partition_in_order(broker.bootstrap, topic) == ALL
    assert "cannot trust the indexes of active segment" in broker.log_text()


def test_garbage_producer_snapshot_is_ignored_and_state_rebuilt(broker_factory, tmp_path):
    broker, topic, part = _setup(broker_factory, tmp_path)
    snapshot = _only(part, ".snapshot")
    snapshot.write_bytes(b"\x00\x01" + os.urandom(100))
    broker.start()
    # the transactional producer's state came back from the log: it fences and goes on
    txp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    txp.init_transactions(60)
    txp.begin_transaction()
    txp.produce(topic, b"tx2", partition=0)
    txp.commit_transaction(30)
    assert read_partition_in_order(broker.bootstrap, topic) == ALL + [b"tx2"]
    assert "ignoring unreadable producer snapshot" in broker.log_text()


def test_torn_transaction_state_segment_is_recovered(broker_factory, tmp_path):
    broker, topic, _ = _setup(broker_factory, tmp_path)
    data = tmp_path / "data"
    segments = [p for p in data.glob("__transaction_state-*/*.log") if p.stat().st_size > 0]
    assert segments
    for seg in segments:
        os.truncate(seg, seg.stat().st_size - 5)
    broker.start()
    txp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    txp.init_transactions(60)  # answered once its coordinator partition is loaded: opened, so recovered
    assert "truncating at position" in broker.log_text()
    txp.begin_transaction()
    txp.produce(topic, b"tx2", partition=0)
    txp.commit_transaction(30)
    assert read_partition_in_order(broker.bootstrap, topic) == ALL + [b"tx2"]
    assert "Traceback" not in broker.log_text()
