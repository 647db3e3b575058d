"""Start-up with a full __transaction_state (eosbroker only: Tansu's memory storage has
nothing to recover).

In a broker of its own (a fresh temp dir, so the run's broker and its resource figures
are untouched), about ``--txn-state-records`` coordinator records are written by raw
requests over a few pipelined connections: each of up to 200 transactional ids does
InitProducerId, then short transactions of four AddPartitionsToTxn (one partition each)
and EndTxn(commit), i.e. six records each (four Ongoing, PrepareCommit, CompleteCommit),
and finally a KIP-360 InitProducerId with its current epoch, which is refused with
CONCURRENT_TRANSACTIONS until its last commit is complete (so nothing is left for the
restarted coordinator to finish). For 100,000 records that is 200 ids x 83
transactions. The transactions hold no data; their markers go to a 4-partition topic.

Then the broker gets SIGTERM and is spawned again on the same port and data dir:

- ``records``: sum over __transaction_state partitions of the latest offset
  (ListOffsets), i.e. records ever appended (compaction does not lower it); after the
  restart it must have grown by exactly the two probes' InitProducerId records.
- ``stop ms``: SIGTERM to process exit.
- ``metadata ms``: spawn to the first raw Metadata v1 answer.
- ``ready ms``: spawn to the first InitProducerId answered without error (not
  COORDINATOR_LOAD_IN_PROGRESS), asked every 5 ms on a raw connection, for a new
  transactional id in the highest __transaction_state partition (the coordinator loads
  partitions in index order, so that one is ready last): when loading finished.
- ``init_txn ms``: spawn to confluent-kafka's init_transactions() returning, for another
  new id in that partition, started at the same moment (right after the Metadata
  answer) in a thread. While the partition loads, librdkafka retries its InitProducerId
  about every 800 ms, so this is what a client sees, rounded up by that backoff.
- ``load ms``: the coordinator's own load time, summed over its per-partition log lines
  (loading begins after the logs are opened, not at the spawn).

Before that restart, ``--txn-state-data-mb`` of plain records (10 kB each) go to the
data topic, so the crash recovery below has partition data to cope with as well.

Then it is killed with SIGKILL right after a new transaction's records and spawned
again (crash recovery: no clean-shutdown marker, so the logs are recovered):

- ``kill -9 ready ms``: spawn to the first InitProducerId answered without error, as
  ``ready ms``; the target is 1 s.
- ``kill -9 metadata ms``: spawn to the first Metadata answer.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException, Producer

from bench.brokers import HOST, BrokerFailed, RunningBroker
from bench.workloads.base import Metric, RunContext, Target, Workload, WorkloadFailed
from bench.workloads.produce import DeliveryTally, create_topic
from broker.wire.client import KafkaConnection
from broker.errors import code
from coordinator.partitioning import partition_for

TOPIC = "__transaction_state"
DATA_PARTITIONS = 4
PARTITIONS_PER_TRANSACTION = 4  # added one request at a time: one Ongoing record each
MAX_IDS = 200
RECORDS_PER_TRANSACTION = PARTITIONS_PER_TRANSACTION + 2  # + PrepareCommit, CompleteCommit
RECORDS_PER_ID = 2  # the first and the closing InitProducerId
CONNECTIONS = 8
DATA_RECORD_BYTES = 10_000
FILL_TIMEOUTS = 3  # the fill may take this many --timeout; the restart gets one more
_RETRY_PAUSE_S = 0.005
READY_POLL_S = 0.005

METADATA, LIST_OFFSETS, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 3, 2, 22, 24, 26
_RETRIABLE = {code("CONCURRENT_TRANSACTIONS"), code("COORDINATOR_LOAD_IN_PROGRESS")}
# one line per loaded partition
_LOADED = re.compile(r"transaction coordinator of node \d+ loaded (\d+) records from __transaction_state-\d+ in (\d+) ms")


def fill_plan(target_records: int) -> tuple[int, int]:
    """(transactional ids, transactions per id) for about ``target_records`` records."""
    ids = max(1, min(MAX_IDS, target_records // 500))
    per_id = max(1, math.ceil((target_records / ids - RECORDS_PER_ID) / RECORDS_PER_TRANSACTION))
    return ids, per_id


class _Fill:
    def __init__(self, conns: list[KafkaConnection], topic: str, deadline: float) -> None:
        self.conns = conns
        self.topic = topic
        self.deadline = deadline

    async def _until_done(self, send, error_of, what: str):
        while True:
            response = await send()
            error = error_of(response)
            if error == 0:
                return response
            if error not in _RETRIABLE:
                raise WorkloadFailed(f"txn-state-startup: {what}: {error.name}")
            if time.perf_counter() > self.deadline:
                raise WorkloadFailed(f"txn-state-startup: {what} still {error.name} at the deadline")
            await asyncio.sleep(_RETRY_PAUSE_S)

    def _init(self, conn, tid: str, producer_id: int = -1, epoch: int = -1):
        body = {"transactional_id": tid, "transaction_timeout_ms": 60_000, "producer_id": producer_id,
                "producer_epoch": epoch}
        return self._until_done(lambda: conn.request(INIT_PRODUCER_ID, 4, body), lambda r: r.error_code,
                                f"InitProducerId({tid})")

    def _add(self, conn, tid: str, producer_id: int, epoch: int, partition: int):
        body = {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": producer_id,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": self.topic, "partitions": [partition]}]}
        return self._until_done(
            lambda: conn.request(ADD_PARTITIONS_TO_TXN, 3, body),
            lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            f"AddPartitionsToTxn({tid})")

    def _commit(self, conn, tid: str, producer_id: int, epoch: int):
        body = {"transactional_id": tid, "producer_id": producer_id, "producer_epoch": epoch, "committed": True}
        return self._until_done(lambda: conn.request(END_TXN, 3, body), lambda r: r.error_code, f"EndTxn({tid})")

    async def one_id(self, n: int, tid: str, transactions: int) -> None:
        conn = self.conns[n % len(self.conns)]
        init = await self._init(conn, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        for t in range(transactions):
            for k in range(PARTITIONS_PER_TRANSACTION):
                await self._add(conn, tid, pid, epoch, (n + t + k) % DATA_PARTITIONS)
            await self._commit(conn, tid, pid, epoch)
        await self._init(conn, tid, pid, epoch)  # waits out the last commit's markers


async def _fill(port: int, topic: str, ids: int, per_id: int, timeout_s: float) -> None:
    conns = [await KafkaConnection.connect(HOST, port, "bench-txn-state-fill") for _ in range(min(CONNECTIONS, ids))]
    try:
        fill = _Fill(conns, topic, time.perf_counter() + timeout_s)
        prefix = f"bench-txn-state-{uuid.uuid4().hex[:8]}"
        await asyncio.gather(*(fill.one_id(n, f"{prefix}-{n}", per_id) for n in range(ids)))
    finally:
        for conn in conns:
            await conn.close()


async def _transaction_state_size(port: int) -> tuple[int, int]:
    """(partitions, records): the sum over __transaction_state partitions of the latest offset."""
    async with await KafkaConnection.connect(HOST, port, "bench-txn-state-count") as conn:
        metadata = await conn.request(METADATA, 1, {"topics": [{"name": TOPIC}]})
        topic = metadata.topics[0]
        if topic.error_code != 0 or not topic.partitions:
            raise WorkloadFailed(f"txn-state-startup: Metadata for {TOPIC}: {topic.error_code.name}")
        partitions = [p.partition_index for p in topic.partitions]
        answer = await conn.request(LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1} for p in partitions]}]})
    total = 0
    for p in answer.topics[0].partitions:
        if p.error_code != 0:
            raise WorkloadFailed(f"txn-state-startup: ListOffsets {TOPIC}-{p.partition_index}: {p.error_code.name}")
        total += p.offset
    return len(partitions), total


def _id_in_partition(partition: int, partitions: int) -> str:
    prefix = f"bench-txn-state-probe-{uuid.uuid4().hex[:8]}"
    n = 0
    while partition_for(f"{prefix}-{n}", partitions) != partition:
        n += 1
    return f"{prefix}-{n}"


def _time_init_transactions(broker: RunningBroker, transactional_id: str, timeout_s: float) -> float:
    """Seconds from the latest spawn to init_transactions() returning."""
    # log_level 3: librdkafka's warning per COORDINATOR_LOAD_IN_PROGRESS retry is expected here
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id, "log_level": 3})
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as e:
        raise WorkloadFailed(f"txn-state-startup: init_transactions after the restart: {e}") from e
    return time.perf_counter() - broker.spawned_at


async def _time_coordinator_ready(broker: RunningBroker, transactional_id: str, timeout_s: float) -> float:
    """Seconds from the latest spawn to the first InitProducerId answered without error,
    asked every READY_POLL_S on a raw connection."""
    deadline = time.perf_counter() + timeout_s
    body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60_000, "producer_id": -1,
            "producer_epoch": -1}
    async with await KafkaConnection.connect(HOST, broker.port, "bench-txn-state-ready") as conn:
        while True:
            response = await conn.request(INIT_PRODUCER_ID, 4, body)
            answered = time.perf_counter()
            if response.error_code == 0:
                return answered - broker.spawned_at
            if response.error_code not in _RETRIABLE:
                raise WorkloadFailed(f"txn-state-startup: InitProducerId after the restart: {response.error_code.name}")
            if answered > deadline:
                raise WorkloadFailed(f"txn-state-startup: coordinator still loading {timeout_s} s after the restart")
            await asyncio.sleep(READY_POLL_S)


def _fill_data(bootstrap: str, topic: str, megabytes: int, timeout_s: float) -> None:
    """About ``megabytes`` MB of 10 kB records over the data topic's partitions."""
    tally = DeliveryTally()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "none", "on_delivery": tally})
    value = os.urandom(DATA_RECORD_BYTES)
    deadline = time.perf_counter() + timeout_s
    for n in range(megabytes * 1_000_000 // DATA_RECORD_BYTES):
        while True:
            try:
                producer.produce(topic, value, partition=n % DATA_PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 1000 == 0 and time.perf_counter() > deadline:
            raise WorkloadFailed(f"txn-state-startup: data fill unfinished after {timeout_s} s")
    producer.flush(timeout_s)
    if tally.failed:
        raise WorkloadFailed(f"txn-state-startup: data fill: {tally.failed} records failed: {tally.first_error}")


def _crash_restart(broker: RunningBroker, partitions: int, timeout_s: float) -> tuple[float, float]:
    """kill -9 and a new spawn; (seconds to a ready coordinator, seconds to Metadata)."""
    try:
        broker.crash_restart()
    except BrokerFailed as e:
        raise WorkloadFailed(f"txn-state-startup: restart after kill -9: {e}") from e
    ready_s = asyncio.run(_time_coordinator_ready(broker, _id_in_partition(partitions - 1, partitions), timeout_s))
    return ready_s, broker.startup_s


def run(ctx: RunContext) -> dict[str, float]:
    ids, per_id = fill_plan(ctx.settings.txn_state_records)
    timeout_s = ctx.settings.timeout_s
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s) as broker:
        topic = f"bench-txn-state-{uuid.uuid4().hex[:12]}"
        create_topic(broker.bootstrap, topic, min(30.0, timeout_s), partitions=DATA_PARTITIONS)
        started, cpu_before = time.perf_counter(), broker.sampler.cpu_seconds()
        asyncio.run(_fill(broker.port, topic, ids, per_id, FILL_TIMEOUTS * timeout_s))
        fill_s = time.perf_counter() - started
        fill_cpu_s = broker.sampler.cpu_seconds() - cpu_before
        if ctx.settings.txn_state_data_mb:
            _fill_data(broker.bootstrap, topic, ctx.settings.txn_state_data_mb, FILL_TIMEOUTS * timeout_s)
        partitions, records = asyncio.run(_transaction_state_size(broker.port))
        try:
            stop_s = broker.restart()
        except BrokerFailed as e:
            raise WorkloadFailed(f"txn-state-startup: restart: {e}") from e
        # Both probes start at the first Metadata answer, with new ids in the partition
        # the coordinator loads last; each writes one record.
        client_id, raw_id = (_id_in_partition(partitions - 1, partitions) for _ in range(2))
        with ThreadPoolExecutor(1) as pool:
            init_txn = pool.submit(_time_init_transactions, broker, client_id, timeout_s)
            ready_s = asyncio.run(_time_coordinator_ready(broker, raw_id, timeout_s))
            init_txn_s = init_txn.result()
        loaded = [(int(n), int(ms)) for n, ms in _LOADED.findall(broker.log_since_spawn())]
        _, after = asyncio.run(_transaction_state_size(broker.port))
        if after != records + 2:  # + the two probes' InitProducerId
            raise WorkloadFailed(
                f"txn-state-startup: {records} records in {TOPIC} before the restart, {after} after "
                f"(expected two more, from the probes' InitProducerId)"
            )
        clean_metadata_s = broker.startup_s
        crash_ready_s, crash_metadata_s = _crash_restart(broker, partitions, timeout_s)
        metrics = {
            "kill -9 ready ms": crash_ready_s * 1000,
            "kill -9 metadata ms": crash_metadata_s * 1000,
            "records": float(records),
            "fill s": fill_s,
            "fill CPU s": fill_cpu_s,
            "stop ms": stop_s * 1000,
            "metadata ms": clean_metadata_s * 1000,
            "ready ms": ready_s * 1000,
            "init_txn ms": init_txn_s * 1000,
        }
        if loaded:
            metrics["loaded records"] = float(sum(n for n, _ in loaded))
            metrics["load ms"] = float(sum(ms for _, ms in loaded))
        return metrics


WORKLOAD = Workload(
    name="txn-state-startup",
    description="restart on a __transaction_state of ~100,000 records (own broker)",
    run=run,
    metrics=(
        Metric("records", "records", "higher", ",.0f"),
        Metric("fill s", "s", "lower", ",.1f"),
        Metric("fill CPU s", "s", "lower", ",.1f"),
        Metric("stop ms", "ms", "lower", ",.0f"),
        Metric("metadata ms", "ms", "lower", ",.0f"),
        Metric("ready ms", "ms", "lower", ",.0f"),
        Metric("init_txn ms", "ms", "lower", ",.0f"),
        Metric("loaded records", "records", "higher", ",.0f"),
        Metric("load ms", "ms", "lower", ",.0f"),
        Metric("kill -9 metadata ms", "ms", "lower", ",.0f"),
        Metric("kill -9 ready ms", "ms", "lower", ",.0f"),
    ),
    targets=(Target("kill -9 ready ms", "ready for InitProducerId <= 1 s after kill -9", below=1000.0),),
    brokers=("eosbroker",),
    why_only="Tansu's memory:// storage has nothing to recover; its load figures read eosbroker's log lines",
)
