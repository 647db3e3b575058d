"""The bench's start-up workload against a real eosbroker process: the spawn-to-Metadata
figure and, beside it, the broker's own CPU time to that answer (no bounds: speed is
the bench's business, not a test's)."""

from __future__ import annotations

from bench.brokers import BROKERS, RunningBroker
from bench.workloads import BY_NAME
from bench.workloads.base import RunContext, Settings


def test_start_up_reports_the_wall_figure_and_the_brokers_cpu_to_its_first_answer():
    workload = BY_NAME["start-up"]
    with RunningBroker(BROKERS["eosbroker"]) as broker:
        figures = workload.run(RunContext(broker, Settings(records=1, record_size=1, timeout_s=30.0)))
        broker.check_alive()
    assert set(figures) == {m.name for m in workload.metrics} == {"ms", "CPU ms"}
    assert figures["ms"] > 0 and figures["CPU ms"] > 0
