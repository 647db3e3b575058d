"""The client-floor responder (bench/client_floor.py) serves the bench's transactional
producer: a few confluent-kafka transactions over real TCP commit, every record's
delivery report succeeds. The responder is a measuring instrument, not a broker, so
nothing is read back."""

from __future__ import annotations

from bench.brokers import RunningBroker
from bench.client_floor import TOPIC, responder_kind
from bench.workloads.base import RunContext, Settings
from bench.workloads.transactions import run_transactions


def test_transactions_of_the_bench_producer_commit_against_the_responder():
    with RunningBroker(responder_kind()) as responder:
        ctx = RunContext(responder, Settings(records=0, record_size=100, timeout_s=30.0))
        elapsed, latencies = run_transactions(ctx, TOPIC, 5)  # raises unless all commit and deliver
        responder.check_alive()
    assert len(latencies) == 5
