"""Concurrent transactions: 50 transactional producers at once, each committing
transactions of 10 records spread over a fresh 4-partition topic; once with
confluent-kafka (one thread per producer) and once with aiokafka (one task per
producer on one event loop).

Each producer commits ``--transactions`` / 50 transactions (at least 10). txn/s is the
aggregate: all transactions over the time from the first begin to the last commit
(init_transactions()/start() are done before, not timed). Afterwards a read_committed
consumer must see every record exactly once (values carry library, producer,
transaction and record numbers). CPU ms/txn: the broker's CPU time per transaction,
for each library over its producers' whole life (creation, InitProducerId, the
transactions, closing).

A peer broker that refuses aiokafka's transactional producer gets no aiokafka figures;
the table's note gives aiokafka's error and the broker's answers to a raw InitProducerId
at v0 (all aiokafka 0.14 sends) and at v3. Tansu 0.6.0 answers v0 with
UNKNOWN_SERVER_ERROR: it only accepts a request whose producer id and epoch are -1,
fields that v0-v2 do not have. eosbroker failing it fails the workload. Likewise a
committed record missing or read twice fails eosbroker's workload, and is counted
(records missing / duplicated, with a note) for a peer.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time
import uuid

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from aiokafka.errors import KafkaError as KafkaErrorFromAiokafka

from bench.brokers import HOST
from bench.workloads.base import SUBJECT, Metric, RunContext, Workload, WorkloadFailed
from bench.workloads.produce import create_topic
from broker.wire.client import KafkaConnection

PRODUCERS = 50
PARTITIONS = 4
RECORDS_PER_TRANSACTION = 10
MIN_TRANSACTIONS_PER_PRODUCER = 10
_IDENTITY = struct.Struct(">BHIB")  # library (0 confluent, 1 aiokafka), producer, transaction, record
_BATCH = 10_000
INIT_PRODUCER_ID = 22


def _per_producer(ctx: RunContext) -> int:
    return max(MIN_TRANSACTIONS_PER_PRODUCER, ctx.settings.transactions // PRODUCERS)


def _value(library: int, producer: int, txn: int, record: int, filler: bytes) -> bytes:
    return _IDENTITY.pack(library, producer, txn, record) + filler


def _confluent(ctx: RunContext, topic: str, per_producer: int, filler: bytes) -> float:
    timeout_s = ctx.settings.timeout_s
    producers = [Producer({"bootstrap.servers": ctx.bootstrap, "linger.ms": 5, "log_level": 3,
                           "transactional.id": f"bench-concurrent-{uuid.uuid4().hex[:12]}"})
                 for _ in range(PRODUCERS)]
    for p in producers:
        p.init_transactions(timeout_s)
    errors: list[BaseException] = []
    start = threading.Barrier(PRODUCERS + 1)

    def work(n: int, producer: Producer) -> None:
        try:
            start.wait(timeout_s)
            for t in range(per_producer):
                producer.begin_transaction()
                for r in range(RECORDS_PER_TRANSACTION):
                    producer.produce(topic, _value(0, n, t, r, filler), partition=r % PARTITIONS)
                producer.commit_transaction(timeout_s)
        except BaseException as e:  # reported below, with the others' results
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n, p), daemon=True) for n, p in enumerate(producers)]
    for t in threads:
        t.start()
    start.wait(timeout_s)
    began = time.perf_counter()
    for t in threads:
        t.join(timeout_s * 2)
    elapsed = time.perf_counter() - began
    if errors or any(t.is_alive() for t in threads):
        raise WorkloadFailed(f"concurrent-transactions: confluent-kafka producers failed: {errors[:3]!r}")
    for p in producers:
        p.flush(0)
    return elapsed


async def _aiokafka(ctx: RunContext, topic: str, per_producer: int, filler: bytes, count: int = PRODUCERS,
                    started: list[float] | None = None) -> float:
    """Seconds from the first transaction to the last commit of ``count`` producers;
    ``started`` gets the seconds their start() took."""
    producers = [AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, linger_ms=5, enable_idempotence=True,
                                  transactional_id=f"bench-concurrent-aio-{uuid.uuid4().hex[:12]}")
                 for _ in range(count)]
    try:
        starting = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(p.start() for p in producers)), ctx.settings.timeout_s)
        if started is not None:
            started.append(time.perf_counter() - starting)

        async def work(n: int, producer: AIOKafkaProducer) -> None:
            for t in range(per_producer):
                async with producer.transaction():
                    sends = [await producer.send(topic, _value(1, n, t, r, filler), partition=r % PARTITIONS)
                             for r in range(RECORDS_PER_TRANSACTION)]
                await asyncio.gather(*sends)

        began = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(work(n, p) for n, p in enumerate(producers))),
                               ctx.settings.timeout_s)
        return time.perf_counter() - began
    finally:
        await asyncio.gather(*(p.stop() for p in producers), return_exceptions=True)


def _read_committed(ctx: RunContext, topic: str, expected: set[tuple]) -> tuple[int, set[tuple]]:
    """(records read, distinct identities) under read_committed, up to the end of every
    partition once ``expected`` many were read, or until the workload's timeout."""
    consumer = Consumer({"bootstrap.servers": ctx.bootstrap, "group.id": f"bench-concurrent-{uuid.uuid4().hex[:12]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.queue.backoff.ms": 10})
    seen: set[tuple] = set()
    received = 0
    at_end: set[int] = set()
    deadline = ctx.deadline()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while (received < len(expected) or len(at_end) < PARTITIONS) and time.perf_counter() < deadline:
            for msg in consumer.consume(num_messages=_BATCH, timeout=0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise WorkloadFailed(f"concurrent-transactions: read_committed consumer: {error}")
                at_end.discard(msg.partition())
                received += 1
                seen.add(_IDENTITY.unpack_from(msg.value()))
    finally:
        consumer.close()
    return received, seen


async def _init_producer_id_by_version(ctx: RunContext) -> dict[int, str]:
    """The broker's answer (error name) to InitProducerId for a new transactional id at v0,
    the only version aiokafka sends, and at v3, the first that carries producer id and epoch."""
    answers = {}
    async with await KafkaConnection.connect(HOST, ctx.broker.port, "bench-concurrent-probe") as conn:
        for version, body in ((0, {}), (3, {"producer_id": -1, "producer_epoch": -1})):
            response = await conn.request(INIT_PRODUCER_ID, version, {
                "transactional_id": f"bench-probe-{uuid.uuid4().hex[:12]}", "transaction_timeout_ms": 60_000, **body,
            }, timeout=ctx.settings.timeout_s)
            answers[version] = response.error_code.name.upper()
    return answers


def refusal_note(error: BaseException, answers: dict[int, str] | None) -> str:
    """What the table says when a peer refuses aiokafka's transactional producer: the error
    aiokafka raised and, when the probe ran, the broker's answers to InitProducerId by version."""
    text = f"no aiokafka figure: its transactional producer failed with {error!r}"
    if answers:
        text += "; InitProducerId for a new transactional id answers " + ", ".join(
            f"v{v} {name}" for v, name in sorted(answers.items()))
        if answers.get(0) not in (None, "NONE") and answers.get(3) == "NONE":
            text += " (aiokafka only sends v0, which has no producer id and epoch fields)"
    return text


def _run_aiokafka(ctx: RunContext, topic: str, per_producer: int, filler: bytes) -> float | None:
    """aiokafka's elapsed seconds, or None (with a note) when a peer refuses its producer."""
    aiokafka_log = logging.getLogger("aiokafka")
    quiet = ctx.broker.kind.name != SUBJECT  # a peer refusing it: one note, not one log line per retry
    level = aiokafka_log.level
    if quiet:
        aiokafka_log.setLevel(logging.CRITICAL)
    try:
        return asyncio.run(_aiokafka(ctx, topic, per_producer, filler))
    except KafkaErrorFromAiokafka as e:
        if ctx.broker.kind.name == SUBJECT:
            raise WorkloadFailed(f"concurrent-transactions: aiokafka: {e!r}") from e
        try:
            answers = asyncio.run(_init_producer_id_by_version(ctx))
        except (OSError, asyncio.TimeoutError, ConnectionError):
            answers = None
        ctx.note(WORKLOAD.name, refusal_note(e, answers))
        return None
    finally:
        aiokafka_log.setLevel(level)


def run(ctx: RunContext) -> dict[str, float]:
    per_producer = _per_producer(ctx)
    filler = bytes(max(0, ctx.settings.record_size - _IDENTITY.size))
    topic = f"bench-concurrent-{uuid.uuid4().hex[:12]}"
    create_topic(ctx.bootstrap, topic, min(30.0, ctx.settings.timeout_s), partitions=PARTITIONS)
    cpu = ctx.broker.sampler.cpu_seconds
    before = cpu()
    confluent_s = _confluent(ctx, topic, per_producer, filler)
    between = cpu()
    aiokafka_s = _run_aiokafka(ctx, topic, per_producer, filler)
    after = cpu()
    libraries = [0] if aiokafka_s is None else [0, 1]
    expected = {(lib, n, t, r) for lib in libraries for n in range(PRODUCERS)
                for t in range(per_producer) for r in range(RECORDS_PER_TRANSACTION)}
    received, seen = _read_committed(ctx, topic, expected)
    missing, extra = len(expected - seen), received - len(seen & expected)
    if missing or extra:
        problem = (f"read_committed consumer saw {received} records ({len(seen)} distinct): "
                   f"{missing} committed records missing, {extra} duplicated or unexpected")
        if ctx.broker.kind.name == SUBJECT:
            raise WorkloadFailed(f"concurrent-transactions: {problem}")
        ctx.note(WORKLOAD.name, problem)  # a peer's failure is a figure, not an abort
    total = PRODUCERS * per_producer
    metrics = {"confluent txn/s": total / confluent_s, "confluent CPU ms/txn": (between - before) * 1000 / total,
               "records missing": float(missing), "records duplicated": float(extra)}
    if aiokafka_s is not None:
        metrics["aiokafka txn/s"] = total / aiokafka_s
        metrics["aiokafka CPU ms/txn"] = (after - between) * 1000 / total
    return metrics


WORKLOAD = Workload(
    name="concurrent-transactions",
    description=f"{PRODUCERS} transactional producers at once (confluent-kafka, then aiokafka), "
                f"{RECORDS_PER_TRANSACTION} records per transaction over {PARTITIONS} partitions",
    run=run,
    metrics=(
        Metric("confluent txn/s", "transactions/s", "higher", ",.0f"),
        Metric("confluent CPU ms/txn", "ms", "lower", ",.2f"),
        Metric("aiokafka txn/s", "transactions/s", "higher", ",.0f"),
        Metric("aiokafka CPU ms/txn", "ms", "lower", ",.2f"),
        Metric("records missing", "records", "lower", ",.0f"),
        Metric("records duplicated", "records", "lower", ",.0f"),
    ),
)
