"""Restart after SIGTERM trusts the index files (clean-shutdown marker); after kill -9 it
validates the active segments batch by batch."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.records import iter_batches

BATCHES = 3000
CLEAN = "after a clean shutdown (index files trusted)"
UNCLEAN = "after an unclean shutdown (active segments validated"


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    # One record per batch: many small batches, like __transaction_state.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    offsets: list[int] = []

    def done(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=done)
        producer.poll(0)
    assert producer.flush(30) == 0
    return sorted(offsets)


def _consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "auto.offset.reset": "error", "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, 0)])
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 20
    while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append((msg.offset(), msg.value()))
    consumer.close()
    return out


def _start_and_read_new_log(broker) -> str:
    seen = len(broker.log_text())
    broker.start()
    return broker.log_text()[seen:]


def test_sigterm_restart_skips_recovery_and_kill_9_restart_validates(broker_factory, topic_name):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    values = [f"v{i}".encode() for i in range(BATCHES)]
    assert _produce(broker.bootstrap, topic_name, values) == list(range(BATCHES))
    marker = broker.data_dir / "meta" / "clean-shutdown"
    assert not marker.exists()

    assert broker.stop() == 0
    assert marker.exists()
    [segment] = (broker.data_dir / f"{topic_name}-0").glob("*.log")
    assert sum(1 for _ in iter_batches(segment.read_bytes())) == BATCHES
    started = _start_and_read_new_log(broker)
    assert not marker.exists()
    assert CLEAN in started and UNCLEAN not in started and "cannot trust" not in started
    assert _consume_all(broker.bootstrap, topic_name) == list(enumerate(values))
    assert _produce(broker.bootstrap, topic_name, [b"after-clean"]) == [BATCHES]

    # kill -9 leaves no marker, and the one read at the last start is gone: a damaged
    # last batch (header intact, CRC wrong) must be found by full recovery.
    broker.kill()
    assert not marker.exists()
    raw = bytearray(segment.read_bytes())
    raw[-1] ^= 0xFF
    segment.write_bytes(raw)
    seen = len(broker.log_text())
    broker.start()
    started = broker.log_text()[seen:]
    assert UNCLEAN in started and CLEAN not in started
    assert _consume_all(broker.bootstrap, topic_name) == list(enumerate(values))
    # found when the partition was opened: at its first use or by the background validation
    assert "CRC mismatch" in broker.log_text()[seen:]
    assert _produce(broker.bootstrap, topic_name, [b"after-crash"]) == [BATCHES]
