"""Produce: one confluent-kafka producer, acks=all, no idempotence, linger.ms=5, fixed-size
records to partition 0 of a fresh single-partition topic.

Timed from the first produce() to flush() returning with every delivery report in;
any failed delivery fails the run.

Before the timed span the producer delivers one record to a topic of its own. That
leaves out librdkafka's start-up, which is the client's and mostly timers: it connects
to the broker it learns from Metadata lazily (~50 ms in), and an idempotent producer
asks for its producer id on a 500 ms timer (the first try finds no connection up, so
the id comes 500 or 1,000 ms in, whatever the broker). With ~0.5 s of records those
timers set half the figure and made single runs of either broker swing by 2x.
"""

from __future__ import annotations

import os
import time
import uuid

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed

TOPIC_KEY = "produce.topic"
# The broker's CPU over the timed span per record: what its own work costs, apart from the
# client's (on 2 shared cores the client's Python loop, not the broker, sets records/s).
CPU_PER_RECORD = Metric("CPU us/record", "us", "lower", ",.3f")
# The CPU of the client's own loop (the thread calling produce()/poll(), or consume()) over
# the same span, per record. When it comes close to the span's wall time per record
# (1e6 / records/s us), the client's Python loop was busy throughout and set records/s,
# whatever the broker: with 2 cores the broker works beside it, not in its way.
CLIENT_CPU_PER_RECORD = Metric("client CPU us/record", "us", "lower", ",.3f")
_POLL_EVERY = 1000


def create_topic(bootstrap: str, name: str, timeout_s: float, partitions: int = 1) -> None:
    # log_level 4: warnings only; at level 6 librdkafka notes the admin result event left
    # unserved in its background queue when the client is destroyed.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        request_timeout=timeout_s,
        operation_timeout=timeout_s,
    )
    try:
        futures[name].result(timeout=timeout_s)
    except KafkaException as e:
        raise WorkloadFailed(f"create_topics({name}) failed: {e}") from e
    except TimeoutError as e:
        raise WorkloadFailed(f"create_topics({name}) got no answer within {timeout_s} s") from e


class DeliveryTally:
    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error = None

    def __call__(self, err, msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = err


def _warm_up(ctx: RunContext, producer: Producer, topic: str, value: bytes, name: str) -> None:
    """Delivers one record to a topic beside ``topic`` (which must hold only the timed
    records): the connection is up, and an idempotent producer has its id, when timing starts."""
    warm_up_topic = f"{topic}-warm-up"
    create_topic(ctx.bootstrap, warm_up_topic, min(30.0, ctx.settings.timeout_s))
    tally = DeliveryTally()
    producer.produce(warm_up_topic, value, partition=0, on_delivery=tally)
    producer.flush(ctx.settings.timeout_s)
    if tally.delivered != 1:
        raise WorkloadFailed(f"{name}: the warm-up record was not delivered: {tally.first_error or 'no delivery report'}")


def produce_to_fresh_topic(ctx: RunContext, name: str, producer_config: dict) -> tuple[str, dict[str, float]]:
    """Creates a 1-partition topic and produces ``--records`` records of ``--record-size``
    bytes to it with acks=all and linger.ms=5 plus ``producer_config``; returns the topic
    and records/s, MB/s, the broker's CPU per record (CPU time, so it holds on a shared
    machine where wall times swing) and the producing thread's own CPU per record.
    ``name`` labels the topic and the failure messages."""
    records, size = ctx.settings.records, ctx.settings.record_size
    topic = f"bench-{name}-{uuid.uuid4().hex[:12]}"
    create_topic(ctx.bootstrap, topic, min(30.0, ctx.settings.timeout_s))
    tally = DeliveryTally()
    producer = Producer(
        {"bootstrap.servers": ctx.bootstrap, "acks": "all", "linger.ms": 5, "on_delivery": tally, **producer_config}
    )
    value = os.urandom(size)
    deadline = ctx.deadline()
    produce, poll = producer.produce, producer.poll
    _warm_up(ctx, producer, topic, value, name)

    cpu_before = ctx.broker.sampler.run_seconds()
    client_before = time.thread_time()
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:  # local queue full: let deliveries drain
                poll(0.01)
                if time.perf_counter() > deadline:
                    raise WorkloadFailed(f"{name}: local queue still full at record {i} after {ctx.settings.timeout_s} s")
        if i % _POLL_EVERY == 0:
            poll(0)
    left = producer.flush(max(0.0, deadline - time.perf_counter()))
    elapsed = time.perf_counter() - started
    client_s = time.thread_time() - client_before
    cpu_s = ctx.broker.sampler.run_seconds() - cpu_before

    if left:
        raise WorkloadFailed(f"{name}: {left} records still undelivered after {ctx.settings.timeout_s} s")
    if tally.failed:
        raise WorkloadFailed(f"{name}: {tally.failed} delivery reports failed, first: {tally.first_error}")
    if tally.delivered != records:
        raise WorkloadFailed(f"{name}: {tally.delivered} successful delivery reports for {records} records")
    return topic, {"records/s": records / elapsed, "MB/s": records * size / elapsed / 1e6,
                   "CPU us/record": cpu_s * 1e6 / records, "client CPU us/record": client_s * 1e6 / records}


def run(ctx: RunContext) -> dict[str, float]:
    topic, metrics = produce_to_fresh_topic(ctx, "produce", {"enable.idempotence": False})
    ctx.state[TOPIC_KEY] = topic
    return metrics


WORKLOAD = Workload(
    name="produce",
    description="acks=all, linger.ms=5, no idempotence, 1 partition",
    run=run,
    metrics=(Metric("records/s", "records/s", "higher", ",.0f"), Metric("MB/s", "MB/s", "higher"), CPU_PER_RECORD,
             CLIENT_CPU_PER_RECORD),
    targets=(Target("records/s", "produce records/s >= 1.0x tansu", min_ratio_to_peer=1.0),),
)
