"""The torture run's clients against a real broker: a fatal producer error is one the
client recovers from (a new producer), never one that ends its thread and with it the run."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.test_cluster import create
from torture.clients import IdempotentWriter
from torture.history import ACKED, HistoryLog, read_histories

pytestmark = pytest.mark.timeout(180)


def _wait(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert condition()


def test_the_idempotent_writer_replaces_its_producer_after_a_fatal_error(broker_factory, topic_name, tmp_path):
    broker = broker_factory(admin=True)
    create(broker.bootstrap, topic_name, 1)
    control = broker.control()
    stop = threading.Event()
    writer = IdempotentWriter("i0", broker.bootstrap, HistoryLog(tmp_path / "history-i0.jsonl"), 1, stop,
                              topic_name, 1)
    writer.start()
    try:
        _wait(lambda: writer.progress >= 20)
        # the head-of-line batch answered OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka's idempotent
        # producer makes that fatal, and raises it out of produce/poll as often as it reports
        # it through a delivery report
        control.fault_add(action="error", api_key=0, topic=topic_name, error="OUT_OF_ORDER_SEQUENCE_NUMBER", count=1)
        _wait(lambda: writer.fatal_errors >= 1 or not writer.is_alive())
        assert writer.failure is None and writer.is_alive()
        progress = writer.progress
        _wait(lambda: writer.progress >= progress + 20)  # the new producer writes on
    finally:
        stop.set()
        writer.join(90)
    assert writer.failure is None and not writer.is_alive()
    events = read_histories([tmp_path / "history-i0.jsonl"])
    acked_after = [e for e in events if e["outcome"] == ACKED and e["s"] > 0]
    assert acked_after and writer.fatal_errors >= 1
