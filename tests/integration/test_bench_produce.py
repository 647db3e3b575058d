"""The bench's produce, consume and idempotent-produce workloads against a real eosbroker
process, on a few records: each reports every metric it declares, the client loop's own
CPU per record among them (no bounds: speed is the bench's business, not a test's)."""

from __future__ import annotations

from bench.brokers import BROKERS, RunningBroker
from bench.workloads import BY_NAME
from bench.workloads.base import RunContext, Settings


def test_produce_consume_and_idempotent_produce_report_the_broker_and_client_cpu_per_record():
    with RunningBroker(BROKERS["eosbroker"]) as broker:
        ctx = RunContext(broker, Settings(records=2_000, record_size=100, timeout_s=60.0))
        figures = {name: BY_NAME[name].run(ctx) for name in ("produce", "consume", "idempotent-produce")}
        broker.check_alive()
    for name, metrics in figures.items():
        assert set(metrics) == {m.name for m in BY_NAME[name].metrics}, name
        assert "client CPU us/record" in metrics, name
        assert all(value > 0 for value in metrics.values()), (name, metrics)
