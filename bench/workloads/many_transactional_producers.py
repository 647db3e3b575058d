"""1,000 transactional producers at once (times ``--scale``): aiokafka producers, one task
each on one event loop, each committing 2 transactions of 10 records over a fresh
4-partition topic (the concurrent-transactions workload's producers, many more of
them). Reported: the seconds all their start() took (InitProducerId each), aggregate
transactions/s, the broker's CPU ms per transaction over the producers' whole life, its
RSS at the end and, per producer, the RSS it added; then a read_committed consumer must
see every record exactly once.
"""

from __future__ import annotations

import asyncio
import resource
import uuid

from bench.workloads.base import SUBJECT, RunContext, Workload, WorkloadFailed
from bench.workloads.concurrent_transactions import (_IDENTITY, PARTITIONS, RECORDS_PER_TRANSACTION, _aiokafka,
                                                     _read_committed)
from bench.workloads.produce import create_topic
from bench.workloads.scaling import curve_table, scaled

PRODUCERS = 1_000
TRANSACTIONS_PER_PRODUCER = 2


def _raise_own_open_files_limit() -> None:
    """Each producer holds a connection or two in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(ctx: RunContext) -> dict[str, float]:
    _raise_own_open_files_limit()
    (count,) = scaled([PRODUCERS], ctx.settings.scale)
    filler = bytes(max(0, ctx.settings.record_size - _IDENTITY.size))
    topic = f"bench-many-producers-{uuid.uuid4().hex[:12]}"
    create_topic(ctx.bootstrap, topic, min(30.0, ctx.settings.timeout_s), partitions=PARTITIONS)
    sampler = ctx.broker.sampler
    rss_before, cpu_before = sampler.rss(), sampler.cpu_seconds()
    started: list[float] = []
    elapsed = asyncio.run(_aiokafka(ctx, topic, TRANSACTIONS_PER_PRODUCER, filler, count, started))
    cpu_s = sampler.cpu_seconds() - cpu_before
    rss_after = max(sampler.peak_rss, sampler.rss())
    expected = {(1, n, t, r) for n in range(count) for t in range(TRANSACTIONS_PER_PRODUCER)
                for r in range(RECORDS_PER_TRANSACTION)}
    received, seen = _read_committed(ctx, topic, expected)
    missing, extra = len(expected - seen), received - len(seen & expected)
    if (missing or extra) and ctx.broker.kind.name == SUBJECT:
        raise WorkloadFailed(f"many-transactional-producers: {missing} committed records missing, {extra} duplicated")
    total = count * TRANSACTIONS_PER_PRODUCER
    metrics = {"producers": float(count), "start s": started[0], "txn/s": total / elapsed,
               "CPU ms/txn": cpu_s * 1000 / total, "RSS MB": rss_after / 1e6,
               "KB/producer": max(0, rss_after - rss_before) / 1e3 / count,
               "records missing": float(missing), "records duplicated": float(extra)}
    print(curve_table(f"many-transactional-producers, {ctx.broker.kind.name}:",
                      ["producers", "start s", "txn/s", "CPU ms/txn", "RSS MB", "KB/producer"],
                      [[f"{count:,}", f"{started[0]:.1f}", f"{metrics['txn/s']:,.0f}", f"{metrics['CPU ms/txn']:.2f}",
                        f"{metrics['RSS MB']:.0f}", f"{metrics['KB/producer']:.1f}"]]), flush=True)
    return metrics


WORKLOAD = Workload(
    name="many-transactional-producers",
    description=f"{PRODUCERS:,} aiokafka transactional producers at once, "
                f"{TRANSACTIONS_PER_PRODUCER} transactions of {RECORDS_PER_TRANSACTION} records each",
    run=run,
    metrics=(),
    brokers=("eosbroker", "kafka"),
    why_only="Tansu refuses aiokafka's transactional producer (see concurrent-transactions)",
)
