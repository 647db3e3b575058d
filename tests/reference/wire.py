"""Exact wire-level requests for differential tests, the same against any broker.

`Wire` sends the requests a transactional client sends, at fixed API versions both
brokers support (transactions v1: EndTxn < 5, as librdkafka and older Java clients
speak), and returns the decoded responses. The `normalised` helpers turn answers into
plain values with what legitimately differs between brokers (producer ids, timestamps,
cluster ids) replaced by stable names, so two brokers' answers compare with ==.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.wire.client import KafkaConnection
from kio.schema.errors import ErrorCode
from protocol.records import build_batch, decode_records, iter_batches, read_control_record

HOST = "127.0.0.1"

V = {
    "produce": 9, "fetch": 12, "list_offsets": 7, "metadata": 12, "find_coordinator": 4,
    "init_producer_id": 4, "add_partitions": 3, "add_offsets": 3, "end_txn": 3,
    "txn_offset_commit": 3, "offset_fetch": 7, "offset_commit": 8, "create_topics": 5,
    "describe_transactions": 0, "list_transactions": 1, "describe_producers": 0,
    "join_group": 7, "sync_group": 5, "heartbeat": 4, "leave_group": 4, "delete_records": 2,
    "consumer_group_heartbeat": 1, "consumer_group_describe": 0, "offset_delete": 0,
}

# Errors a client retries: the coordinator is loading, or markers are being written.
RETRIABLE = {"COORDINATOR_LOAD_IN_PROGRESS", "CONCURRENT_TRANSACTIONS", "NOT_COORDINATOR",
             "COORDINATOR_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE",
             "NOT_LEADER_OR_FOLLOWER"}


def err(code: int) -> str:
    return ErrorCode(code).name.upper()


class Wire:
    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.alias = Aliases()

    @classmethod
    async def connect(cls, port: int) -> "Wire":
        return cls(await KafkaConnection.connect(HOST, port, client_id="eosbroker-differential"))

    async def close(self) -> None:
        await self.conn.close()

    async def request(self, api: str, body: dict[str, Any], version: int | None = None, key: int | None = None):
        return await self.conn.request(API_KEYS[api] if key is None else key, V[api] if version is None else version, body)

    async def retry(self, call, *, attempts: int = 200, delay: float = 0.05, error_of=None):
        """Calls `call()` until its error (by `error_of`) is not a retriable one."""
        error_of = error_of or (lambda r: r.error_code)
        for _ in range(attempts):
            response = await call()
            if err(error_of(response)) not in RETRIABLE:
                return response
            await asyncio.sleep(delay)
        return response

    # topics --------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        r = await self.request("create_topics", {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}], "timeout_ms": 30000})
        code = err(r.topics[0].error_code)
        # every partition must be led before produce/fetch answer (Kafka's partition 1 may
        # still answer NOT_LEADER_OR_FOLLOWER after partition 0 is ready)
        for index in range(partitions):
            await self.retry(lambda: self.list_offsets_raw(name, index, -1),
                             error_of=lambda r: r.topics[0].partitions[0].error_code)
        return code

    async def find_coordinator(self, key: str, key_type: int = 1) -> tuple[str, int]:
        """FindCoordinator (0 group, 1 transaction), retried while the coordinator topic is
        created and loaded; Kafka creates it on this request, as clients always send it first."""
        async def call():
            return await self.request("find_coordinator", {"key_type": key_type, "coordinator_keys": [key]})

        r = await self.retry(call, error_of=lambda r: r.coordinators[0].error_code)
        c = r.coordinators[0]
        return err(c.error_code), c.node_id

    # idempotent / transactional producer ---------------------------------
    async def init_producer_id(self, transactional_id: str | None, timeout_ms: int = 60000,
                               producer_id: int = -1, producer_epoch: int = -1, retry: bool = True):
        if transactional_id is not None:
            await self.find_coordinator(transactional_id)
        body = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
                "producer_id": producer_id, "producer_epoch": producer_epoch}
        call = lambda: self.request("init_producer_id", body)  # noqa: E731
        return await (self.retry(call) if retry else call())

    async def add_partitions(self, transactional_id: str, pid: int, epoch: int, topics: dict[str, list[int]],
                             retry: bool = True) -> dict[tuple[str, int], str]:
        body = {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        async def call():
            return await self.request("add_partitions", body)

        def first_error(r):
            return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

        r = await (self.retry(call, error_of=first_error) if retry else call())
        return {(t.name, p.partition_index): err(p.partition_error_code)
                for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}

    async def add_offsets(self, transactional_id: str, pid: int, epoch: int, group: str, retry: bool = True) -> str:
        await self.find_coordinator(group, 0)
        body = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        call = lambda: self.request("add_offsets", body)  # noqa: E731
        return err((await (self.retry(call) if retry else call())).error_code)

    async def end_txn_v5(self, transactional_id: str, pid: int, epoch: int, commit: bool):
        """EndTxn v5 (transaction version 2): the answer carries the producer id and epoch."""
        body = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
        return await self.retry(lambda: self.request("end_txn", body, version=5))

    async def end_txn(self, transactional_id: str, pid: int, epoch: int, commit: bool, retry: bool = True) -> str:
        body = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
        call = lambda: self.request("end_txn", body)  # noqa: E731
        return err((await (self.retry(call) if retry else call())).error_code)

    async def produce_raw(self, topic: str, partition: int, batch: bytes, transactional_id: str | None = None,
                          acks: int = -1, version: int | None = None):
        r = await self.request("produce", {
            "transactional_id": transactional_id, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}]},
            version=version)
        return r.responses[0].partition_responses[0]

    async def produce(self, topic: str, partition: int, values: list[bytes], *, pid: int = -1, epoch: int = -1,
                      seq: int = -1, transactional_id: str | None = None, acks: int = -1, headers=()):
        batch = build_batch([(None, v, headers, 1_700_000_000_000 + i) for i, v in enumerate(values)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                            transactional=transactional_id is not None)
        p = await self.produce_raw(topic, partition, batch, transactional_id, acks)
        return err(p.error_code), p.base_offset

    # reading ---------------------------------------------------------------
    async def list_offsets_raw(self, topic: str, partition: int, timestamp: int, isolation: int = 0):
        return await self.request("list_offsets", {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                            "current_leader_epoch": -1}]}]})

    async def list_offset(self, topic: str, partition: int, timestamp: int, read_committed: bool = False):
        r = await self.list_offsets_raw(topic, partition, timestamp, 1 if read_committed else 0)
        p = r.topics[0].partitions[0]
        return err(p.error_code), p.offset

    async def fetch_raw(self, topic: str, partition: int, offset: int, read_committed: bool, max_bytes: int = 1 << 20):
        r = await self.request("fetch", {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": 1 if read_committed else 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                         "fetch_offset": offset, "last_fetched_epoch": -1,
                                                         "log_start_offset": -1,
                                                         "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        return r.responses[0].partitions[0]

    async def fetch(self, topic: str, partition: int = 0, offset: int = 0, read_committed: bool = False) -> dict:
        """What a consumer reading from `offset` to the end sees, normalised: batches (data
        and control), HW, LSO, log start and the aborted list. Fetches again from the next
        offset until the end (HW, or LSO for read_committed): Kafka may answer a fetch with
        fewer batches than there are (it stops at the last position it knows)."""
        batches: list[tuple] = []
        aborted: set | None = None
        for _ in range(1000):
            p = await self.fetch_raw(topic, partition, offset, read_committed)
            if p.aborted_transactions is not None:
                aborted = (aborted or set()) | {(a.first_offset, self.alias(a.producer_id))
                                                for a in p.aborted_transactions}
            got = batches_of(p.records or b"", self.alias)
            batches += got
            end = p.last_stable_offset if read_committed else p.high_watermark
            if p.error_code or not got:
                break
            offset = _next_offset(p.records)
            if offset >= end:
                break
        return {
            "error": err(p.error_code),
            "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset,
            "log_start_offset": p.log_start_offset,
            "aborted": None if aborted is None else sorted(aborted),
            "batches": batches,
        }

    async def describe_producers(self, topic: str, partition: int = 0) -> list[dict]:
        r = await self.request("describe_producers", {"topics": [{"name": topic, "partition_indexes": [partition]}]})
        p = r.topics[0].partitions[0]
        # Brokers list producers in no particular order: sorted by producer id here.
        return [{"error": err(p.error_code), "epoch": s.producer_epoch, "last_sequence": s.last_sequence,
                 "current_txn_start_offset": s.current_txn_start_offset, "producer": self.alias(s.producer_id)}
                for s in sorted(p.active_producers, key=lambda s: s.producer_id)] or [{"error": err(p.error_code)}]

    async def describe_transaction(self, transactional_id: str) -> dict:
        r = await self.request("describe_transactions", {"transactional_ids": [transactional_id]})
        s = r.transaction_states[0]
        return {"error": err(s.error_code), "state": s.transaction_state,
                "timeout_ms": _ms(s.transaction_timeout), "epoch": s.producer_epoch, "producer": self.alias(s.producer_id),
                "topics": sorted((t.topic, tuple(sorted(t.partitions))) for t in s.topics)}

    async def settled_state(self, transactional_id: str) -> str:
        """The transaction's state once its markers are written (PrepareCommit/PrepareAbort
        passed), or the prepare state still held after 10 s."""
        for _ in range(200):
            state = (await self.describe_transaction(transactional_id))["state"]
            if state not in ("PrepareCommit", "PrepareAbort"):
                return state
            await asyncio.sleep(0.05)
        return state

    async def produce_v12(self, topic: str, partition: int, value: bytes, transactional_id: str, pid: int,
                          epoch: int, seq: int) -> str:
        """One transactional record by Produce v12 (transactions v2: the partition is added
        implicitly), retried while the broker answers a retriable error; its error's name."""
        batch = build_batch([(None, value, (), 1_700_000_000_000)], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
        answer = await self.retry(lambda: self.produce_raw(topic, partition, batch, transactional_id, version=12),
                                  error_of=lambda p: p.error_code)
        return err(answer.error_code)

    async def list_transactions(self, states: list[str] = (), producer_ids: list[int] = ()) -> tuple[str, list]:
        r = await self.request("list_transactions", {"state_filters": list(states),
                                                     "producer_id_filters": list(producer_ids),
                                                     "duration_filter": -1})
        return err(r.error_code), sorted((s.transactional_id, s.transaction_state) for s in r.transaction_states)

    # groups ----------------------------------------------------------------
    async def join_group(self, group: str, member: str = "", session_ms: int = 10000) -> tuple[str, int, str]:
        """JoinGroup (with the MEMBER_ID_REQUIRED round trip) and SyncGroup as the only
        member: (error, generation, member id)."""
        await self.find_coordinator(group, 0)
        body = {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": session_ms,
                "member_id": member, "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        for _ in range(50):
            r = await self.request("join_group", body)
            if err(r.error_code) == "MEMBER_ID_REQUIRED":
                body["member_id"] = r.member_id
                continue
            if err(r.error_code) in RETRIABLE:
                await asyncio.sleep(0.05)
                continue
            break
        if r.error_code:
            return err(r.error_code), -1, ""
        s = await self.request("sync_group", {"group_id": group, "generation_id": r.generation_id,
                                              "member_id": r.member_id, "group_instance_id": None,
                                              "protocol_type": "consumer", "protocol_name": "range",
                                              "assignments": [{"member_id": r.member_id, "assignment": b""}]})
        return err(s.error_code), r.generation_id, r.member_id

    async def txn_offset_commit(self, transactional_id: str, group: str, pid: int, epoch: int,
                                offsets: dict[tuple[str, int], int], generation: int = -1, member: str = "",
                                instance: str | None = None, version: int | None = None) -> dict:
        await self.find_coordinator(group, 0)
        topics: dict[str, list] = {}
        for (t, part), off in offsets.items():
            topics.setdefault(t, []).append({"partition_index": part, "committed_offset": off,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"transactional_id": transactional_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                "generation_id": generation, "member_id": member, "group_instance_id": instance,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        r = await self.retry(lambda: self.request("txn_offset_commit", body, version=version),
                             error_of=lambda r: r.topics[0].partitions[0].error_code)
        return {(t.name, p.partition_index): err(p.error_code) for t in r.topics for p in t.partitions}

    async def topic_id(self, topic: str):
        r = await self.request("metadata", {"topics": [{"name": topic, "topic_id": None}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
        return r.topics[0].topic_id

    async def consumer_heartbeat(self, body: dict[str, Any]):
        """ConsumerGroupHeartbeat (KIP-848) to the group's coordinator, retried while it loads."""
        await self.find_coordinator(body["group_id"], 0)
        return await self.retry(lambda: self.request("consumer_group_heartbeat", body))

    async def offset_fetch(self, group: str, topic: str, partitions: list[int], require_stable: bool) -> dict:
        """Retried while the group's coordinator is not ready: a Kafka whose __consumer_offsets
        FindCoordinator has just created answers NOT_COORDINATOR until the partition is loaded."""
        await self.find_coordinator(group, 0)
        body = {"group_id": group, "require_stable": require_stable,
                "topics": [{"name": topic, "partition_indexes": partitions}]}
        r = await self.retry(lambda: self.request("offset_fetch", body))
        return {"error": err(r.error_code),
                "partitions": {p.partition_index: (err(p.error_code), p.committed_offset)
                               for t in r.topics for p in t.partitions}}


API_KEYS = {
    "produce": 0, "fetch": 1, "list_offsets": 2, "metadata": 3, "offset_commit": 8, "offset_fetch": 9,
    "find_coordinator": 10, "join_group": 11, "heartbeat": 12, "leave_group": 13, "sync_group": 14,
    "create_topics": 19, "delete_records": 21, "init_producer_id": 22, "add_partitions": 24, "add_offsets": 25,
    "end_txn": 26, "txn_offset_commit": 28, "describe_producers": 61, "describe_transactions": 65,
    "list_transactions": 66, "offset_delete": 47, "consumer_group_heartbeat": 68, "consumer_group_describe": 69,
}


class Aliases:
    """Stable names for values that differ per broker: the n-th producer id seen is Pn."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def __call__(self, producer_id: int) -> str:
        if producer_id < 0:
            return "-"
        return self.names.setdefault(producer_id, f"P{len(self.names) + 1}")


def batches_of(data: bytes, alias: Aliases) -> list[tuple]:
    """Fetched bytes as (base offset, producer, kind, contents): data batches list
    their base sequence and values, control batches their type."""
    out = []
    for batch in iter_batches(memoryview(data)):
        producer = alias(batch.producer_id)
        if batch.is_control:
            control_type, _epoch = read_control_record(batch)
            out.append((batch.base_offset, producer, "COMMIT" if control_type == 1 else "ABORT"))
        else:
            kind = "txn" if batch.is_transactional else ("idem" if batch.producer_id >= 0 else "plain")
            out.append((batch.base_offset, producer, kind, batch.base_sequence,
                        tuple(r.value for r in decode_records(batch))))
    return out


def consumed_values(fetched: dict) -> list[bytes]:
    """The values a consumer is given from this fetch: with an aborted-transactions list
    (read_committed), a producer's batches from an aborted transaction's first offset to
    its ABORT marker are skipped, as the clients do."""
    aborted = sorted(fetched["aborted"] or ())
    skipping: set[str] = set()
    out = []
    for b in fetched["batches"]:
        offset, producer, kind = b[0], b[1], b[2]
        while aborted and aborted[0][0] <= offset:
            skipping.add(aborted.pop(0)[1])
        if kind in ("COMMIT", "ABORT"):
            if kind == "ABORT":
                skipping.discard(producer)
            continue
        if producer not in skipping:
            out.extend(b[4])
    return out


def _ms(value) -> int:
    """kio gives durations as timedelta; the wire has milliseconds."""
    return value if isinstance(value, int) else int(value.total_seconds() * 1000)


def _next_offset(data: bytes) -> int:
    last = None
    for batch in iter_batches(memoryview(data)):
        last = batch
    return last.next_offset
