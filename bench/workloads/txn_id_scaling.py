"""Transactional ids: InitProducerId latency and the broker's RSS as the coordinator comes
to know 1,000, 10,000 and 100,000 ids (times ``--scale``), in one broker of its own.

After one untimed FindCoordinator and InitProducerId (the coordinator topic is made), new ids ask for a
producer id by raw InitProducerId v4 requests, 16 at a time over 8 connections, until
the broker knows each size's count; each request's latency is timed (p50, p99), with
ids/s over the step. ``RSS MB`` is the broker's RSS at each size; ``KB/id`` that less
the RSS before the first id, per id known (the target is <= 2 KB per idle id).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from bench.brokers import HOST, RunningBroker
from bench.workloads.base import RunContext, Workload, WorkloadFailed
from bench.workloads.scaling import INIT_PRODUCER_ID, curve_table, run_async, scaled
from broker.wire.client import KafkaConnection
from broker.errors import code

SIZES = (1_000, 10_000, 100_000)
FIND_COORDINATOR = 10
CONNECTIONS = 8
IN_FLIGHT = 16
_RETRIABLE = {code("COORDINATOR_LOAD_IN_PROGRESS"), code("NOT_COORDINATOR"), code("COORDINATOR_NOT_AVAILABLE"),
              code("CONCURRENT_TRANSACTIONS")}


async def _find_coordinator(conn: KafkaConnection, tid: str, deadline: float) -> None:
    """FindCoordinator for a transactional id until it answers one: Kafka creates
    __transaction_state on the first such request, and until then answers InitProducerId
    NOT_COORDINATOR (a client always asks FindCoordinator first; the raw requests here do not)."""
    while True:
        response = await conn.request(FIND_COORDINATOR, 1, {"key": tid, "key_type": 1}, timeout=60)
        if response.error_code == 0:
            return
        if time.perf_counter() > deadline:
            raise WorkloadFailed(f"txn-id-scaling: FindCoordinator({tid}): {response.error_code.name}")
        await asyncio.sleep(0.1)


async def _init(conn: KafkaConnection, tid: str, deadline: float) -> float:
    """Seconds the successful InitProducerId took (retriable answers are retried, and
    counted in)."""
    body = {"transactional_id": tid, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1}
    began = time.perf_counter()
    while True:
        response = await conn.request(INIT_PRODUCER_ID, 4, body, timeout=60)
        if response.error_code == 0:
            return time.perf_counter() - began
        if response.error_code not in _RETRIABLE or time.perf_counter() > deadline:
            raise WorkloadFailed(f"txn-id-scaling: InitProducerId({tid}): {response.error_code.name}")
        await asyncio.sleep(0.01)


async def _grow(port: int, sizes: list[int], timeout_s: float, sample_rss) -> list[dict[str, float]]:
    conns = [await KafkaConnection.connect(HOST, port, "bench-txn-id-scaling") for _ in range(CONNECTIONS)]
    prefix = f"bench-ids-{uuid.uuid4().hex[:8]}"
    try:
        await _find_coordinator(conns[0], f"{prefix}-warm-up", time.perf_counter() + timeout_s)
        await _init(conns[0], f"{prefix}-warm-up", time.perf_counter() + timeout_s)
        base = sample_rss()
        known, steps = 0, []
        for size in sizes:
            latencies: list[float] = []
            pending = iter(range(known, size))
            deadline = time.perf_counter() + timeout_s

            async def worker(w: int) -> None:
                for n in pending:
                    latencies.append(await _init(conns[w % CONNECTIONS], f"{prefix}-{n}", deadline))

            began = time.perf_counter()
            await asyncio.gather(*(worker(w) for w in range(IN_FLIGHT)))
            elapsed = time.perf_counter() - began
            quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
            rss = sample_rss()
            steps.append({"ids": float(size), "p50 ms": quantiles[49] * 1000, "p99 ms": quantiles[98] * 1000,
                          "ids/s": (size - known) / elapsed, "RSS MB": rss / 1e6, "KB/id": (rss - base) / 1e3 / size})
            known = size
        return steps
    finally:
        for conn in conns:
            await conn.close()


def run(ctx: RunContext) -> dict[str, float]:
    sizes = scaled(SIZES, ctx.settings.scale)
    timeout_s = max(ctx.settings.timeout_s, sizes[-1] / 500)
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s) as broker:
        steps = run_async(_grow(broker.port, sizes, timeout_s, broker.sampler.rss))
    metrics: dict[str, float] = {}
    for s in steps:
        metrics.update({f"{int(s['ids']):,} ids: {k}": v for k, v in s.items() if k != "ids"})
    print(curve_table(f"txn-id-scaling, {ctx.broker.kind.name}:",
                      ["transactional ids", "InitProducerId p50 ms", "p99 ms", "ids/s", "RSS MB", "KB/id"],
                      [[f"{int(s['ids']):,}", f"{s['p50 ms']:.2f}", f"{s['p99 ms']:.2f}", f"{s['ids/s']:,.0f}",
                        f"{s['RSS MB']:.0f}", f"{s['KB/id']:.2f}"] for s in steps]), flush=True)
    return metrics


WORKLOAD = Workload(
    name="txn-id-scaling",
    description="InitProducerId latency and RSS at 1,000 to 100,000 transactional ids (own broker)",
    run=run,
    metrics=(),
    brokers=("eosbroker", "kafka"),
    why_only="Tansu refuses raw InitProducerId at v4 only for some ids; left to the transactions workloads",
)
