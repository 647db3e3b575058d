"""Idle connections: the transactional load of ``transactions`` (one confluent-kafka
producer, 10 records per transaction) alone, then again while 1,000 other connections
stay open and idle; the throughput ratio should stay within 10%.

Each idle connection does one ApiVersions round trip first (so the broker holds it
as a real Kafka connection, as a client pool's idle ones are), then sends nothing.
Broker RSS is read with the connections open. The two timed runs use a quarter of
``--transactions`` each (at least 100) on fresh topics.
"""

from __future__ import annotations

import resource
import socket
import struct
import uuid

from bench.brokers import HOST
from bench.probe import read_exactly
from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed
from bench.workloads.produce import create_topic
from bench.workloads.transactions import PARTITIONS, run_transactions
from protocol.request_wire import encode_request_frame

IDLE_CONNECTIONS = 1000
MIN_TRANSACTIONS = 100
API_VERSIONS = 18
_INT32 = struct.Struct(">i")
_MB = 1e6


def _open_idle(port: int, count: int, timeout_s: float) -> list[socket.socket]:
    """``count`` connections, each after one ApiVersions v0 round trip."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))
    frame = encode_request_frame(API_VERSIONS, 0, 1, "bench-idle", False, b"")
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.create_connection((HOST, port), timeout=timeout_s)
            sockets.append(s)
            s.sendall(frame)
        for s in sockets:  # answers read after all were sent: the broker serves them together
            (size,) = _INT32.unpack(read_exactly(s, 4))
            read_exactly(s, size)
    except OSError as e:
        for s in sockets:
            s.close()
        raise WorkloadFailed(f"idle-connections: opening {count} connections: {e}") from e
    return sockets


def _txn_per_s(ctx: RunContext, transactions: int) -> float:
    topic = f"bench-idle-{uuid.uuid4().hex[:12]}"
    create_topic(ctx.bootstrap, topic, min(30.0, ctx.settings.timeout_s), partitions=PARTITIONS)
    elapsed, _latencies = run_transactions(ctx, topic, transactions)
    return transactions / elapsed


def run(ctx: RunContext) -> dict[str, float]:
    transactions = max(MIN_TRANSACTIONS, ctx.settings.transactions // 4)
    alone = _txn_per_s(ctx, transactions)
    sockets = _open_idle(ctx.broker.port, IDLE_CONNECTIONS, ctx.settings.timeout_s)
    try:
        rss = ctx.broker.sampler.sample()
        with_idle = _txn_per_s(ctx, transactions)
        ctx.broker.check_alive()
    finally:
        for s in sockets:
            s.close()
    return {
        "txn/s alone": alone,
        "txn/s with idle": with_idle,
        "ratio": with_idle / alone,
        "RSS with idle MB": rss / _MB,
    }


WORKLOAD = Workload(
    name="idle-connections",
    description=f"transactional load alone, then beside {IDLE_CONNECTIONS:,} idle connections",
    run=run,
    metrics=(
        Metric("txn/s alone", "transactions/s", "higher", ",.0f"),
        Metric("txn/s with idle", "transactions/s", "higher", ",.0f"),
        Metric("ratio", "x", "higher", ",.2f"),
        Metric("RSS with idle MB", "MB", "lower"),
    ),
    targets=(Target("ratio", f"throughput beside {IDLE_CONNECTIONS:,} idle connections >= 0.9x alone", above=0.9),),
)
