"""Partitions: how start-up, memory, Metadata and produce costs grow with the partition
count (100, 1,000, 5,000 and 20,000 times ``--scale``).

Each size gets a broker of its own (fresh data dir) started under ``ulimit -n 1024``
(soft and hard limit; Kafka gets the machine's limit, as its documentation asks for a
raised one). Then, timed each:

- ``create s``: topics of 10 partitions, 100 topics per CreateTopics request (AdminClient);
- ``produce rec/s``: one confluent-kafka producer (acks=all, linger.ms=5) sends 5 records
  of 100 B to every partition, first produce() to flush(); every delivery must succeed;
- ``metadata ms``: Metadata v1 for every topic, median of 5;
- ``RSS MB``: the broker's RSS with every partition written;
- ``stop s``: SIGTERM to exit (every written partition closes and snapshots);
- ``restart ms``: then spawn again, to the first Metadata answer (the start-up probe);
  ``idle RSS MB`` right after (no partition used since), and ``idle KB/partition``: that
  less the RSS of the same broker empty, per partition;
- ``kill -9 ms``: kill -9 and spawn again, to the first Metadata answer;
- then ListOffsets must find 5 records in every partition: none lost.

Kafka runs the sizes up to ``--scale-kafka-max`` partitions (5,000 by default); above it
its cells say n/a, as creating them takes minutes of a JVM on two cores. A size Kafka
cannot take says why under its curve and in the table's notes; the larger ones are skipped.
"""

from __future__ import annotations

import os
import time
import uuid

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.brokers import BrokerFailed, RunningBroker
from bench.workloads.base import SUBJECT, RunContext, Workload, WorkloadFailed
from bench.workloads.produce import DeliveryTally
from bench.workloads.scaling import curve_table, latest_offsets, metadata_ms, run_async, scaled

SIZES = (100, 1_000, 5_000, 20_000)
PARTITIONS_PER_TOPIC = 10
TOPICS_PER_REQUEST = 100
RECORDS_PER_PARTITION = 5
RECORD_BYTES = 100
OPEN_FILES_LIMIT = 1024


def _topics(total: int) -> dict[str, int]:
    """Topic name -> partitions, ``total`` partitions in topics of PARTITIONS_PER_TOPIC."""
    prefix = f"bench-scale-{uuid.uuid4().hex[:8]}"
    out, left, n = {}, total, 0
    while left:
        out[f"{prefix}-{n}"] = min(PARTITIONS_PER_TOPIC, left)
        left -= out[f"{prefix}-{n}"]
        n += 1
    return out


def _create(bootstrap: str, topics: dict[str, int], timeout_s: float) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    names = list(topics)
    began = time.perf_counter()
    for first in range(0, len(names), TOPICS_PER_REQUEST):
        chunk = names[first:first + TOPICS_PER_REQUEST]
        futures = admin.create_topics([NewTopic(t, topics[t], 1) for t in chunk], request_timeout=timeout_s,
                                      operation_timeout=timeout_s)
        for name, future in futures.items():
            try:
                future.result(timeout=timeout_s)
            except (KafkaException, TimeoutError) as e:
                raise WorkloadFailed(f"partition-scaling: create_topics({name}): {e!r}") from e
    return time.perf_counter() - began


def _produce_to_all(bootstrap: str, topics: dict[str, int], timeout_s: float) -> float:
    tally = DeliveryTally()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "on_delivery": tally,
                         "log_level": 4, "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(RECORD_BYTES)
    expected = sum(topics.values()) * RECORDS_PER_PARTITION
    deadline = time.perf_counter() + timeout_s
    began = time.perf_counter()
    for _ in range(RECORDS_PER_PARTITION):
        for topic, partitions in topics.items():
            for p in range(partitions):
                while True:
                    try:
                        producer.produce(topic, value, partition=p)
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
    left = producer.flush(max(0.0, deadline - time.perf_counter()))
    elapsed = time.perf_counter() - began
    if left or tally.failed or tally.delivered != expected:
        raise WorkloadFailed(f"partition-scaling: {tally.delivered} of {expected} records delivered "
                             f"({tally.failed} failed, first {tally.first_error}; {left} undelivered)")
    return expected / elapsed


def _none_lost(broker: RunningBroker, topics: dict[str, int], when: str, timeout_s: float) -> None:
    # A partition answering an error (-1) is asked again: Kafka answers the first Metadata
    # after a restart before its partitions have leaders again (NOT_LEADER_OR_FOLLOWER).
    deadline = time.perf_counter() + timeout_s
    while True:
        offsets = run_async(latest_offsets(broker.port, topics))
        if -1 not in offsets.values() or time.perf_counter() > deadline:
            break
        time.sleep(0.5)
    short = {k: v for k, v in offsets.items() if v != RECORDS_PER_PARTITION}
    if short or len(offsets) != sum(topics.values()):
        sample = ", ".join(f"{t}-{p}: {v}" for (t, p), v in list(short.items())[:3])
        raise WorkloadFailed(f"partition-scaling: {when}, {len(short)} partitions do not hold "
                             f"{RECORDS_PER_PARTITION} records ({sample}); {len(offsets)} answered")



def restarts(broker: RunningBroker, partitions: int, workload: str) -> tuple[float, float, int, float]:
    """A clean restart, then a kill -9 and restart: (seconds the stop took, ms to the first
    answer after the clean restart, RSS idle after it, ms to the first answer after the
    kill)."""
    try:
        stop_s = broker.restart(stop_timeout_s=max(30.0, partitions / 100))
        restart_ms = broker.startup_s * 1000
        idle_rss = broker.sampler.rss()
        broker.crash_restart()
        return stop_s, restart_ms, idle_rss, broker.startup_s * 1000
    except Exception as e:
        raise WorkloadFailed(f"{workload}: restart with {partitions} partitions: {e}") from e


def one_size(ctx: RunContext, partitions: int) -> dict[str, float]:
    subject = ctx.broker.kind.name == SUBJECT
    timeout_s = max(ctx.settings.timeout_s, partitions / 50)
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s,
                       open_files_limit=OPEN_FILES_LIMIT if subject else None) as broker:
        empty_rss = broker.sampler.rss()
        topics = _topics(partitions)
        create_s = _create(broker.bootstrap, topics, timeout_s)
        produce_rate = _produce_to_all(broker.bootstrap, topics, timeout_s)
        meta_ms = run_async(metadata_ms(broker.port))
        rss = broker.sampler.rss()
        stop_s, restart_ms, idle_rss, kill_ms = restarts(broker, partitions, "partition-scaling")
        _none_lost(broker, topics, "after a clean restart and a kill -9", timeout_s)
    return {"create s": create_s, "produce rec/s": produce_rate, "metadata ms": meta_ms, "RSS MB": rss / 1e6,
            "stop s": stop_s, "restart ms": restart_ms, "idle RSS MB": idle_rss / 1e6, "kill -9 ms": kill_ms,
            "idle KB/partition": (idle_rss - empty_rss) / 1e3 / partitions}


def run(ctx: RunContext) -> dict[str, float]:
    sizes = scaled(SIZES, ctx.settings.scale)
    name = ctx.broker.kind.name
    cap = ctx.settings.scale_kafka_max if name == "kafka" else None
    metrics: dict[str, float] = {}
    rows, not_run = [], []
    for n in sizes:
        if cap is not None and n > cap:
            not_run.append(f"{n:,} partitions: not run on {name}, above --scale-kafka-max {cap:,}")
        elif not_run and name != SUBJECT:
            not_run.append(f"{n:,} partitions: not run on {name}, as it could not take a smaller size")
        else:
            try:
                figures = one_size(ctx, n)
            except (WorkloadFailed, BrokerFailed) as e:
                if name == SUBJECT:
                    raise
                # A peer that cannot take a size says so in the tables; the smaller sizes still count.
                not_run.append(f"{n:,} partitions: {name} could not: {_first_line(str(e))}")
                continue
            _row(n, figures, metrics, rows)
    for text in not_run:
        ctx.note(WORKLOAD.name, text)
    table = curve_table(f"partition-scaling, {name}:",
                        ["partitions", "create s", "ms/part", "produce rec/s", "metadata ms", "us/part", "RSS MB",
                         "idle RSS MB", "KB/part", "stop s", "restart ms", "kill -9 ms"], rows) if rows else \
        f"    partition-scaling, {name}: no size ran"
    print("\n".join([table, *(f"      {text}" for text in not_run)]), flush=True)
    return metrics


def _first_line(text: str) -> str:
    return text.strip().partition("\n")[0]


def _row(n: int, figures: dict[str, float], metrics: dict[str, float], rows: list[list[str]]) -> None:
    metrics.update({f"{n:,} partitions: {k}": v for k, v in figures.items()})
    rows.append([f"{n:,}", f"{figures['create s']:.2f}", f"{figures['create s'] * 1e3 / n:.3f}",
                 f"{figures['produce rec/s']:,.0f}", f"{figures['metadata ms']:.1f}",
                 f"{figures['metadata ms'] * 1e3 / n:.2f}", f"{figures['RSS MB']:.0f}",
                 f"{figures['idle RSS MB']:.0f}", f"{figures['idle KB/partition']:.2f}",
                 f"{figures['stop s']:.1f}", f"{figures['restart ms']:.0f}", f"{figures['kill -9 ms']:.0f}"])


WORKLOAD = Workload(
    name="partition-scaling",
    description="start-up, RSS, Metadata and produce-to-all at 100 to 20,000 partitions (own brokers)",
    run=run,
    metrics=(),
    brokers=("eosbroker", "kafka"),
    why_only="Tansu's memory:// storage keeps nothing across a restart",
)
