"""Transactions: one confluent-kafka transactional producer commits ``--transactions``
transactions of 10 records (5 to each partition of a fresh 2-partition topic).

transactions/s is timed from the first begin_transaction() to the last
commit_transaction() returning; commit latency is the time of each
commit_transaction() call (librdkafka flushes the transaction's records, then sends
EndTxn and waits for its answer). init_transactions() is not timed. CPU ms/txn is the
broker's user+system CPU over the timed part divided by the transactions (CPU time, so
it holds on a shared machine where wall times do not); "of which JIT" is the part spent
in a JVM's just-in-time compiler threads (Kafka's; 0 for the others, which have none):
every run starts a fresh broker, so a JVM compiles its hot code during the workload.

Afterwards a read_committed consumer must see exactly 10 x N records, each once
(every value starts with its transaction and record number); anything else fails the
run. It reads to the end of both partitions (partition EOF at the last stable offset),
and keeps reading while records are missing, since the markers of the last
transaction may land after its commit_transaction() has returned.
"""

from __future__ import annotations

import math
import os
import struct
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed
from bench.workloads.produce import DeliveryTally, create_topic

PARTITIONS = 2
RECORDS_PER_PARTITION = 5
RECORDS_PER_TRANSACTION = PARTITIONS * RECORDS_PER_PARTITION
# Transaction number and record number within it, at the start of every value.
_IDENTITY = struct.Struct(">IB")
_BATCH = 10_000


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[max(0, math.ceil(fraction * len(sorted_values)) - 1)]


def run_transactions(ctx: RunContext, topic: str, transactions: int,
                     client_config: dict | None = None) -> tuple[float, list[float]]:
    """Returns the elapsed seconds and every commit_transaction() latency in seconds.
    ``client_config``: the producer's connection settings (default: the run's PLAINTEXT bootstrap)."""
    tally = DeliveryTally()
    producer = Producer(
        {
            "bootstrap.servers": ctx.bootstrap,
            "transactional.id": f"bench-txn-{uuid.uuid4().hex[:12]}",
            "linger.ms": 5,  # as in produce; commit_transaction() flushes without waiting for it
            "on_delivery": tally,
            **(client_config or {}),
        }
    )
    timeout_s = ctx.settings.timeout_s
    producer.init_transactions(timeout_s)
    filler = os.urandom(max(0, ctx.settings.record_size - _IDENTITY.size))
    deadline = ctx.deadline()
    latencies = []
    produce = producer.produce
    started = time.perf_counter()
    for t in range(transactions):
        producer.begin_transaction()
        for r in range(RECORDS_PER_TRANSACTION):
            produce(topic, _IDENTITY.pack(t, r) + filler, partition=r % PARTITIONS)
        before = time.perf_counter()
        producer.commit_transaction(max(0.0, deadline - before))
        latencies.append(time.perf_counter() - before)
        if before > deadline:
            raise WorkloadFailed(f"transactions: {t + 1} of {transactions} committed after {timeout_s} s")
    elapsed = time.perf_counter() - started
    producer.flush(0)  # serve any delivery reports not yet served
    expected = transactions * RECORDS_PER_TRANSACTION
    if tally.failed:
        raise WorkloadFailed(f"transactions: {tally.failed} delivery reports failed, first: {tally.first_error}")
    if tally.delivered != expected:
        raise WorkloadFailed(f"transactions: {tally.delivered} successful delivery reports for {expected} records")
    return elapsed, latencies


def verify_committed(ctx: RunContext, topic: str, transactions: int) -> None:
    """Fails unless a read_committed consumer sees every committed record exactly once."""
    expected = transactions * RECORDS_PER_TRANSACTION
    consumer = Consumer(
        {
            "bootstrap.servers": ctx.bootstrap,
            "group.id": f"bench-txn-verify-{uuid.uuid4().hex[:12]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    seen: set[tuple[int, int]] = set()
    received = 0
    at_end: set[int] = set()
    deadline = ctx.deadline()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while received < expected or len(at_end) < PARTITIONS:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise WorkloadFailed(
                    f"transactions: read_committed consumer saw {received} records, expected {expected} "
                    f"(at end of partitions {sorted(at_end)} after {ctx.settings.timeout_s} s)"
                )
            for msg in consumer.consume(num_messages=_BATCH, timeout=min(0.5, remaining)):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise WorkloadFailed(f"transactions: read_committed consumer: {error}")
                at_end.discard(msg.partition())
                received += 1
                seen.add(_IDENTITY.unpack_from(msg.value())[:2])
    finally:
        consumer.close()
    if received != expected or len(seen) != expected:
        raise WorkloadFailed(
            f"transactions: read_committed consumer saw {received} records ({len(seen)} distinct), "
            f"expected exactly {expected}"
        )


def run(ctx: RunContext, client_config: dict | None = None) -> dict[str, float]:
    """The workload's figures; ``client_config`` as for run_transactions (the read-back
    goes through the PLAINTEXT bootstrap)."""
    transactions = ctx.settings.transactions
    topic = f"bench-transactions-{uuid.uuid4().hex[:12]}"
    create_topic(ctx.bootstrap, topic, min(30.0, ctx.settings.timeout_s), partitions=PARTITIONS)
    sampler = ctx.broker.sampler
    cpu_before, jit_before = sampler.cpu_seconds(), sampler.jit_cpu_seconds()
    try:
        elapsed, latencies = run_transactions(ctx, topic, transactions, client_config)
    except KafkaException as e:
        raise WorkloadFailed(f"transactions: {e}") from e
    cpu_s = sampler.cpu_seconds() - cpu_before
    jit_s = sampler.jit_cpu_seconds() - jit_before
    verify_committed(ctx, topic, transactions)
    latencies.sort()
    return {
        "txn/s": transactions / elapsed,
        "commit p50 ms": percentile(latencies, 0.50) * 1000,
        "commit p99 ms": percentile(latencies, 0.99) * 1000,
        "CPU ms/txn": cpu_s * 1000 / transactions,
        "of which JIT ms/txn": jit_s * 1000 / transactions,
    }


WORKLOAD = Workload(
    name="transactions",
    description="transactional producer, 10 x 100 B per transaction over 2 partitions, commit each",
    run=run,
    metrics=(
        Metric("txn/s", "transactions/s", "higher", ",.0f"),
        Metric("commit p50 ms", "ms", "lower", ",.2f"),
        Metric("commit p99 ms", "ms", "lower", ",.2f"),
        Metric("CPU ms/txn", "ms", "lower", ",.2f"),
        Metric("of which JIT ms/txn", "ms", "lower", ",.2f"),
    ),
    targets=(
        Target("txn/s", "transactions/s >= 1.2x tansu", min_ratio_to_peer=1.2),
        Target("commit p99 ms", "commit p99 latency <= tansu's", max_ratio_to_peer=1.0),
        Target("CPU ms/txn", "broker CPU per transaction <= 1.2x tansu's", max_ratio_to_peer=1.2),
        Target("CPU ms/txn", "broker CPU per transaction <= 0.5 ms", below=0.5),
    ),
)
