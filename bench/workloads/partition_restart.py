"""Restarts with many partitions and data: the first Metadata answer after a clean
restart and after a kill -9, with 20,000 partitions (times ``--scale``) holding about
1 GB (times ``--scale``) and both coordinator topics present, and the RSS of the broker
with every partition idle.

One broker (fresh data dir, ``ulimit -n 1024`` as in partition-scaling): topics of 10
partitions, one committed transaction and one group's committed offset (so both
coordinator topics exist and load at each start), 10 kB records round-robin over every
partition up to the data size. Then, timed each, from spawn to the first Metadata
answer (the start-up probe):

- ``restart ms``: after SIGTERM (a clean stop); ``idle RSS MB`` right after;
- ``kill -9 ms``: after kill -9 (each active segment is then validated beyond its
  recovery point, when first used or by the background pass);
- then ListOffsets must find every record: none lost.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench.brokers import RunningBroker
from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed
from bench.workloads.partition_scaling import OPEN_FILES_LIMIT, _create, _topics, restarts
from bench.workloads.produce import DeliveryTally
from bench.workloads.scaling import latest_offsets, run_async

PARTITIONS = 20_000
DATA_MB = 1000
RECORD_BYTES = 10_000


def _coordinator_topics(bootstrap: str, topic: str, timeout_s: float) -> None:
    """One committed transaction and one committed group offset: both coordinator topics
    exist, and each restart loads them."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "log_level": 4})
    try:
        producer.init_transactions(timeout_s)
        producer.begin_transaction()
        producer.produce(topic, b"txn", partition=0)
        producer.commit_transaction(timeout_s)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group", "log_level": 4})
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        consumer.close()
    except KafkaException as e:
        raise WorkloadFailed(f"partition-restart: coordinator topics: {e!r}") from e


def _fill(bootstrap: str, topics: dict[str, int], megabytes: int, timeout_s: float) -> dict[tuple[str, int], int]:
    """About ``megabytes`` MB of RECORD_BYTES records, round-robin over every partition;
    returns the records sent to each."""
    keys = [(t, p) for t, n in topics.items() for p in range(n)]
    sent = dict.fromkeys(keys, 0)
    tally = DeliveryTally()
    # A record may wait for its partition's first open (20,000 of them): the whole fill's
    # time, not 5 min; idempotent, so a Produce retried after its request timed out (a
    # loaded machine) is not written twice.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": "all",
                         "enable.idempotence": True, "on_delivery": tally, "log_level": 4,
                         "queue.buffering.max.kbytes": 1 << 20, "message.timeout.ms": int(timeout_s * 1000)})
    value = os.urandom(RECORD_BYTES)
    deadline = time.perf_counter() + timeout_s
    for n in range(max(len(keys), megabytes * 1_000_000 // RECORD_BYTES)):
        key = keys[n % len(keys)]
        while True:
            try:
                producer.produce(key[0], value, partition=key[1])
                break
            except BufferError:
                producer.poll(0.01)
        sent[key] += 1
        if n % 1000 == 0 and time.perf_counter() > deadline:
            raise WorkloadFailed(f"partition-restart: data fill unfinished after {timeout_s} s")
    left = producer.flush(max(0.0, deadline - time.perf_counter()))
    if left or tally.failed:
        raise WorkloadFailed(f"partition-restart: data fill: {tally.failed} records failed ({tally.first_error}), "
                             f"{left} undelivered")
    return sent


def run(ctx: RunContext) -> dict[str, float]:
    partitions = max(1, round(PARTITIONS * ctx.settings.scale))
    megabytes = max(1, round(DATA_MB * ctx.settings.scale))
    timeout_s = max(ctx.settings.timeout_s, partitions / 20)
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s, open_files_limit=OPEN_FILES_LIMIT) as broker:
        topics = _topics(partitions)
        _create(broker.bootstrap, topics, timeout_s)
        _coordinator_topics(broker.bootstrap, next(iter(topics)), timeout_s)
        sent = _fill(broker.bootstrap, topics, megabytes, timeout_s)
        sent[(next(iter(topics)), 0)] += 2  # the transaction's record and its commit marker
        _, restart_ms, idle_rss, kill_ms = restarts(broker, partitions, "partition-restart")
        offsets = run_async(latest_offsets(broker.port, topics))
        short = {k: (offsets.get(k), n) for k, n in sent.items() if offsets.get(k) != n}
        if short:
            sample = ", ".join(f"{t}-{p}: {got} of {n}" for (t, p), (got, n) in list(short.items())[:3])
            raise WorkloadFailed(f"partition-restart: {len(short)} partitions do not hold what was sent ({sample})")
    print(f"    partition-restart: {partitions:,} partitions, {megabytes:,} MB: restart {restart_ms:.0f} ms, "
          f"kill -9 {kill_ms:.0f} ms, idle RSS {idle_rss / 1e6:.0f} MB", flush=True)
    return {"restart ms": restart_ms, "kill -9 ms": kill_ms, "idle RSS MB": idle_rss / 1e6}


WORKLOAD = Workload(
    name="partition-restart",
    description="first Metadata after a clean restart and a kill -9 at 20,000 partitions and ~1 GB (own broker)",
    run=run,
    metrics=(Metric("restart ms", "ms", "lower", ",.0f"), Metric("kill -9 ms", "ms", "lower", ",.0f"),
             Metric("idle RSS MB", "MB", "lower", ",.0f")),
    targets=(Target("restart ms", "first Metadata <= 200 ms after a clean restart", below=200.0),
             Target("kill -9 ms", "first Metadata <= 200 ms after a kill -9", below=200.0),
             Target("idle RSS MB", "RSS <= 150 MB with every partition idle", below=150.0)),
    brokers=("eosbroker",),
    why_only="Kafka takes minutes of a JVM to create 20,000 partitions on two cores (partition-scaling runs it "
             "up to --scale-kafka-max); Tansu's memory:// storage keeps nothing across a restart",
)
