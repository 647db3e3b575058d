"""The differential scenarios: one table, each row a list of wire-level steps.

A step is (label, action); an action is `async (Run) -> value`. test_differential.py
runs every scenario against eosbroker and Apache Kafka with the same topic, ids and
group names, and compares the (label, value) lists. Values are normalised by the
Wire helpers: producer ids become P1, P2..., member ids M1..., durations are ms.

Producers are named ("a", "b"); `init` gives one a producer id and epoch, later steps
use them, and `fence`/`bump` keep the older epoch under "<name>.old" to act as the zombie.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from protocol.records import build_batch, build_control_batch
from tests.reference.wire import Wire, consumed_values, err

Action = Callable[["Run"], Awaitable[object]]


@dataclass
class Run:
    wire: Wire
    topic: str
    tag: str  # unique per test run, the same for both brokers
    producers: dict[str, list] = field(default_factory=dict)  # name -> [transactional id, pid, epoch]
    # eosbroker's control service when the run is against eosbroker (None against Kafka)
    eos_control: object | None = None
    members: dict[str, tuple[int, str]] = field(default_factory=dict)  # group -> (generation, member id)

    def txn_id(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def group(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def pid(self, name: str) -> tuple[int, int]:
        _, pid, epoch = self.producers[name]
        return pid, epoch


@dataclass(frozen=True)
class Scenario:
    id: str
    steps: list[tuple[str, Action]]
    partitions: int = 1
    topic_configs: dict[str, str] = field(default_factory=dict)
    ci: bool = True  # in `make test`'s fixed subset; the rest run in `make test-reference`


# ---------------------------------------------------------------------------------------------
# steps


def init(name: str, txn: bool = True, timeout_ms: int = 60000, keep_old: bool = False,
         resume: bool = False, pid_from: str | None = None, epoch: int | None = None):
    """InitProducerId. `resume` sends the producer's current (pid, epoch) (KIP-360);
    `pid_from`/`epoch` send another producer's id or an explicit epoch."""

    async def action(run: Run):
        txn_id = run.txn_id(name) if txn else None
        pid, ep = -1, -1
        if resume:
            pid, ep = run.pid(name)
        if pid_from is not None:
            pid, ep = run.pid(pid_from)
        if epoch is not None:
            ep = epoch
        r = await run.wire.init_producer_id(txn_id, timeout_ms, pid, ep)
        if r.error_code == 0:
            if name in run.producers and keep_old:
                run.producers[f"{name}.old"] = list(run.producers[name])
            run.producers[name] = [txn_id, r.producer_id, r.producer_epoch]
        return err(r.error_code), run.wire.alias(r.producer_id), r.producer_epoch

    return (f"init {name}", action)


def fence(name: str):
    """A second InitProducerId for the same transactional id: the old epoch is a zombie."""
    label, action = init(name, keep_old=True)
    return (f"fence {name}", action)


def add(name: str, *partitions: int, topic: str | None = None, retry: bool = True):
    async def action(run: Run):
        txn_id, pid, epoch = run.producers[name]
        r = await run.wire.add_partitions(txn_id, pid, epoch, {topic or run.topic: list(partitions or (0,))},
                                          retry=retry)
        return sorted((p, e) for (_t, p), e in r.items())

    return (f"add {name} {partitions}", action)


def add_as(name: str, *, pid: int | None = None, epoch: int | None = None, txn_id: str | None = None,
           topic: str | None = None):
    """AddPartitionsToTxn with a field replaced (error paths)."""

    async def action(run: Run):
        real_txn, real_pid, real_epoch = run.producers.get(name, [run.txn_id(name), 0, 0])
        r = await run.wire.add_partitions(txn_id if txn_id is not None else real_txn,
                                          real_pid if pid is None else pid,
                                          real_epoch if epoch is None else epoch,
                                          {topic or run.topic: [0]})
        return sorted((p, e) for (_t, p), e in r.items())

    return (f"add {name} altered", action)


def add_offsets(name: str, group: str = "g", *, epoch: int | None = None, pid: int | None = None):
    async def action(run: Run):
        txn_id, real_pid, real_epoch = run.producers[name]
        return await run.wire.add_offsets(txn_id, real_pid if pid is None else pid,
                                          real_epoch if epoch is None else epoch, run.group(group))

    return (f"add_offsets {name}", action)


def produce(name: str | None, seq: int, *values: str, partition: int = 0, epoch_delta: int = 0,
            transactional: bool | None = None, send_txn_id: bool = True, acks: int = -1):
    """A batch of `values` from producer `name` (None: a plain producer) at `seq`."""

    async def action(run: Run):
        data = [v.encode() for v in values or (f"v{seq}",)]
        if name is None:
            return await run.wire.produce(run.topic, partition, data, acks=acks)
        txn_id, pid, epoch = run.producers[name]
        is_txn = (txn_id is not None) if transactional is None else transactional
        batch = build_batch([(None, v, (), 1_700_000_000_000 + i) for i, v in enumerate(data)],
                            producer_id=pid, producer_epoch=epoch + epoch_delta, base_sequence=seq,
                            transactional=is_txn)
        p = await run.wire.produce_raw(run.topic, partition, batch, txn_id if send_txn_id else None, acks)
        return err(p.error_code), p.base_offset

    return (f"produce {name} seq {seq} {values}", action)


def produce_v12(name: str, seq: int, *values: str, partition: int = 0):
    """A transactional batch sent as a transaction version 2 client does: Produce v12, whose
    batch adds the partition to the transaction. Retried while the answer is retriable (the
    previous transaction's markers are being written); answers the last (error, offset)."""

    async def action(run: Run):
        txn_id, pid, epoch = run.producers[name]
        data = [v.encode() for v in values]
        batch = build_batch([(None, v, (), 1_700_000_000_000 + i) for i, v in enumerate(data)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
        p = await run.wire.retry(lambda: run.wire.produce_raw(run.topic, partition, batch, txn_id, version=12),
                                 error_of=lambda p: p.error_code)
        return err(p.error_code), p.base_offset

    return (f"produce v12 {name} seq {seq} {values}", action)


def eos_fault(name: str, action: str, **rule):
    """A request fault rule on eosbroker only, for producer `name`'s requests (``api_key``,
    ``delay_ms``, ``count``...): it makes eosbroker slow where Kafka happens to be fast."""

    async def step(run: Run):
        if run.eos_control is not None:
            _txn_id, pid, _epoch = run.producers[name]
            run.eos_control.call("fault_add", action=action, producer_id=pid, **rule)
        return None

    return (f"eosbroker only: {action} {name} {rule}", step)


def produce_bytes(label: str, make: Callable[[Run], bytes], partition: int = 0, topic: str | None = None,
                  acks: int = -1, producer: str | None = None):
    """Raw bytes; with `producer`, sent under that producer's transactional id."""

    async def action(run: Run):
        txn_id = run.producers[producer][0] if producer else None
        p = await run.wire.produce_raw(topic or run.topic, partition, make(run), txn_id, acks)
        return err(p.error_code), p.base_offset

    return (label, action)


def end(name: str, commit: bool = True, *, epoch_delta: int = 0, settle: bool = True, retry: bool = True):
    """EndTxn; with `settle`, then waits until the markers are written."""

    async def action(run: Run):
        txn_id, pid, epoch = run.producers[name]
        result = await run.wire.end_txn(txn_id, pid, epoch + epoch_delta, commit, retry=retry)
        if settle and result == "NONE":
            await wait_settled(run, name)
        return result

    return (f"{'commit' if commit else 'abort'} {name}", action)


def end_v2(name: str, commit: bool = True, *, epoch_delta: int = 0, settle: bool = True):
    """EndTxn v5 (transaction version 2). Answers (error, producer, returned epoch minus
    the epoch sent); a success moves the producer to the returned epoch and keeps the
    one it sent under "<name>.old" (the zombie)."""

    async def action(run: Run):
        txn_id, pid, epoch = run.producers[name]
        sent = epoch + epoch_delta
        r = await run.wire.end_txn_v5(txn_id, pid, sent, commit)
        if r.error_code == 0:
            if r.producer_epoch != epoch:
                run.producers[f"{name}.old"] = [txn_id, pid, epoch]
            run.producers[name] = [txn_id, r.producer_id, r.producer_epoch]
            if settle:
                await wait_settled(run, name)
        delta = r.producer_epoch - sent if r.producer_epoch >= 0 else None
        return err(r.error_code), run.wire.alias(r.producer_id) if r.producer_id >= 0 else None, delta

    return (f"end v5 {'commit' if commit else 'abort'} {name} epoch+{epoch_delta}", action)


async def wait_settled(run: Run, name: str) -> str:
    # Generous: under load Kafka's markers took over 10 s and the next step read a partition
    # without its marker.
    deadline = time.monotonic() + 60
    while True:
        state = (await run.wire.describe_transaction(run.txn_id(name)))["state"]
        if state not in ("PrepareCommit", "PrepareAbort", "PrepareEpochFence") or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.025)


def settled(name: str):
    async def action(run: Run):
        return await wait_settled(run, name)

    return (f"settled {name}", action)


def txn_offsets(name: str, group: str = "g", offsets: dict[int, int] | None = None, *,
                generation: int | None = None, member: str | None = None, epoch_delta: int = 0,
                use_group_member: bool = False):
    async def action(run: Run):
        txn_id, pid, epoch = run.producers[name]
        gen, mem = -1, ""
        if use_group_member:
            gen, mem = run.members[group]
        if generation is not None:
            gen = generation
        if member is not None:
            mem = member
        r = await run.wire.txn_offset_commit(txn_id, run.group(group), pid, epoch + epoch_delta,
                                             {(run.topic, p): o for p, o in (offsets or {0: 1}).items()},
                                             generation=gen, member=mem)
        return sorted((p, e) for (_t, p), e in r.items())

    return (f"txn_offsets {name} {group}", action)


def join(group: str = "g"):
    async def action(run: Run):
        error, generation, member = await run.wire.join_group(run.group(group))
        run.members[group] = (generation, member)
        return error, generation

    return (f"join {group}", action)


def heartbeat(member: str, epoch: int | str, group: str = "g", *, owned: tuple[int, ...] | None = None,
              subscribe: tuple[str, ...] | None = None, label: str = "", **fields):
    """ConsumerGroupHeartbeat v1 (KIP-848). ``epoch`` "last": the member's last epoch.
    ``subscribe`` names topics ("T" is the scenario's topic); epoch 0 subscribes to T
    with no owned partitions unless told otherwise. Answers the error and the epoch
    (a positive one as "joined")."""

    async def action(run: Run):
        member_id = f"{run.tag}-{member}"
        e = run.members.get(member, (0, ""))[0] if epoch == "last" else epoch
        body = {"group_id": run.group(group) if group else "", "member_id": member_id if member else "",
                "member_epoch": e, "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                "topic_partitions": None}
        topic_id = await run.wire.topic_id(run.topic)
        if e == 0:
            body.update(rebalance_timeout_ms=30000, subscribed_topic_names=[run.topic], topic_partitions=[])
        if subscribe is not None:
            body["subscribed_topic_names"] = [run.topic if t == "T" else t for t in subscribe]
        if owned is not None:
            body["topic_partitions"] = [{"topic_id": topic_id, "partitions": list(owned)}] if owned else []
        body.update(fields)
        r = await run.wire.consumer_heartbeat(body)
        if r.error_code == 0 and r.member_epoch > 0:
            run.members[member] = (r.member_epoch, member_id)
        # Kafka 4.4 computes target assignments in batches (group.consumer.assignment.interval.ms,
        # offloaded to a background thread), eosbroker at once: epochs and the heartbeat that
        # carries an assignment differ in time, not in meaning. Errors and the leave answers compare.
        return err(r.error_code), r.member_epoch if r.member_epoch < 1 else "joined"

    return (label or f"heartbeat {member or '-'} epoch={epoch} {fields or ''}", action)


def consumer_commit(member: str, group: str = "g", *, epoch_delta: int = 0, version: int = 9):
    """OffsetCommit of offset 3 on partition 0 with the member's epoch (+ delta)."""

    async def action(run: Run):
        epoch, member_id = run.members.get(member, (-1, ""))
        r = await run.wire.request("offset_commit", {
            "group_id": run.group(group), "generation_id_or_member_epoch": epoch + epoch_delta,
            "member_id": member_id, "group_instance_id": None, "topics": [{"name": run.topic, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}, version=version)
        return err(r.topics[0].partitions[0].error_code)

    return (f"offset_commit {member} epoch+{epoch_delta} v{version}", action)


def offsets(group: str = "g", stable: bool = True, partitions: tuple[int, ...] = (0,)):
    async def action(run: Run):
        return await run.wire.offset_fetch(run.group(group), run.topic, list(partitions), stable)

    return (f"offset_fetch {group} stable={stable}", action)


def fetch(partition: int = 0, committed: bool = True, offset: int = 0):
    async def action(run: Run):
        f = await run.wire.fetch(run.topic, partition, offset, committed)
        return {**f, "consumed": consumed_values(f)}

    return (f"fetch p{partition} {'read_committed' if committed else 'read_uncommitted'} @{offset}", action)


def list_offset(timestamp: int, partition: int = 0, committed: bool = False):
    async def action(run: Run):
        return await run.wire.list_offset(run.topic, partition, timestamp, committed)

    return (f"list_offsets {timestamp} p{partition} committed={committed}", action)


def describe(name: str):
    async def action(run: Run):
        d = await run.wire.describe_transaction(run.txn_id(name))
        d["topics"] = [(t == run.topic, ps) for t, ps in d["topics"]]
        return d

    return (f"describe {name}", action)


def list_txns(*states: str):
    async def action(run: Run):
        error, txns = await run.wire.list_transactions(list(states))
        return error, sorted((t[len(run.tag) + 1:], s) for t, s in txns if t.startswith(run.tag))

    return (f"list_transactions {states}", action)


def producers(partition: int = 0):
    async def action(run: Run):
        return await run.wire.describe_producers(run.topic, partition)

    return (f"describe_producers p{partition}", action)


def sleep(seconds: float):
    async def action(run: Run):
        await asyncio.sleep(seconds)
        return None

    return (f"sleep {seconds}", action)


def request(label: str, api: str, body: Callable[[Run], dict], version: int | None = None,
            view: Callable[[object], object] = lambda r: err(r.error_code), key: int | None = None):
    """Any request, answered through `view`; `key` and `version` for an API wire.py has no default for."""

    async def action(run: Run):
        return view(await run.wire.request(api, body(run), version=version, key=key))

    return (label, action)


def _join_body(group: str, session_ms: int) -> dict:
    return {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": 30000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}


def _unverifiable_txn_offsets(run: Run, group: str, *topics: str) -> dict:
    """A TxnOffsetCommit of a producer id no transaction coordinator knows."""
    return {"transactional_id": run.txn_id("a"), "group_id": group, "producer_id": 424242, "producer_epoch": 0,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                                            "committed_metadata": ""}]} for t in topics]}


def _partition_errors(response) -> list:
    return [err(p.error_code) for t in response.topics for p in t.partitions]


# The checks the group coordinator makes before it schedules a request (an empty group id,
# JoinGroup's session timeout out of the broker's bounds, 6 s to 30 min by default).
CLASSIC_GROUP_REQUEST_ERRORS = [
    request("join with an empty group id", "join_group", lambda r: _join_body("", 10000)),
    request("join with a session timeout below the minimum", "join_group", lambda r: _join_body(r.group("g"), 1)),
    request("join with a session timeout above the maximum", "join_group",
            lambda r: _join_body(r.group("g"), 1_800_001)),
    request("join with an empty group id and a bad session timeout", "join_group", lambda r: _join_body("", 1)),
    request("sync with an empty group id", "sync_group", lambda r: {
        "group_id": "", "generation_id": 1, "member_id": "m", "group_instance_id": None, "protocol_type": "consumer",
        "protocol_name": "range", "assignments": []}),
    request("heartbeat with an empty group id", "heartbeat", lambda r: {
        "group_id": "", "generation_id": 1, "member_id": "m", "group_instance_id": None}),
    request("leave with an empty group id", "leave_group", lambda r: {
        "group_id": "", "members": [{"member_id": "m", "group_instance_id": None}]}),
    request("offset_delete with an empty group id", "offset_delete", lambda r: {
        "group_id": "", "topics": [{"name": r.topic, "partitions": [{"partition_index": 0}]}]}),
    # checked before the producer's transaction is verified (this producer id has none),
    # and a topic the cluster does not have is answered without verifying
    request("txn_offset_commit with an empty group id", "txn_offset_commit",
            lambda r: _unverifiable_txn_offsets(r, "", r.topic), view=_partition_errors),
    request("txn_offset_commit of an unknown topic", "txn_offset_commit",
            lambda r: _unverifiable_txn_offsets(r, r.group("g"), r.topic + "-unknown"), view=_partition_errors),
]



def empty_group_commit(version: int, offset: int, generation: int = -1, member: str = ""):
    """OffsetCommit to the group "" of offset `offset` on partition 0, sent to its coordinator."""

    async def action(run: Run):
        await run.wire.find_coordinator("", 0)
        body = {"group_id": "", "generation_id_or_member_epoch": generation, "member_id": member,
                "group_instance_id": None, "retention_time_ms": -1, "topics": [{"name": run.topic, "partitions": [
                    {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]}
        r = await run.wire.retry(lambda: run.wire.request("offset_commit", body, version=version),
                                 error_of=lambda r: r.topics[0].partitions[0].error_code)
        return err(r.topics[0].partitions[0].error_code)

    return (f"offset_commit v{version} to the empty group id, generation {generation} member {member!r}", action)


def empty_group_fetch(version: int, stable: bool = True):
    """OffsetFetch of partitions 0 and 1 for the group "": (group error, [(error, offset)]);
    v8+ in the batched form."""

    async def action(run: Run):
        await run.wire.find_coordinator("", 0)
        topics = [{"name": run.topic, "partition_indexes": [0, 1]}]
        if version >= 8:
            body = {"groups": [{"group_id": "", "member_id": None, "member_epoch": -1, "topics": topics}],
                    "require_stable": stable}
            r = await run.wire.retry(lambda: run.wire.request("offset_fetch", body, version=version),
                                     error_of=lambda r: r.groups[0].error_code)
            error, topics = r.groups[0].error_code, r.groups[0].topics
        else:
            body = {"group_id": "", "topics": topics, "require_stable": stable}
            r = await run.wire.retry(lambda: run.wire.request("offset_fetch", body, version=version),
                                     error_of=lambda r: getattr(r, "error_code", 0))
            error, topics = getattr(r, "error_code", 0), r.topics
        return err(error), [(err(p.error_code), p.committed_offset) for t in topics for p in t.partitions]

    return (f"offset_fetch v{version} of the empty group id stable={stable}", action)


# Kafka's OffsetCommit and OffsetFetch refuse only a null group id: "" is a group (the
# topic is new to the run, so its offsets under "" start empty on both brokers).
EMPTY_GROUP_OFFSETS = [
    empty_group_fetch(7), empty_group_fetch(8, stable=False),
    empty_group_commit(2, 2), empty_group_commit(8, 8), empty_group_commit(9, 9),
    empty_group_fetch(1, stable=False), empty_group_fetch(7), empty_group_fetch(9),
    empty_group_commit(9, 10, member="m"),
    empty_group_commit(9, 11, generation=1), empty_group_commit(8, 11, generation=1, member="m"),
    empty_group_fetch(7, stable=False),
    request("describe_groups of the empty group id", "describe_groups", lambda r: {
        "groups": [""], "include_authorized_operations": False}, version=5, key=15,
        view=lambda r: [(g.group_id, err(g.error_code), g.group_state) for g in r.groups]),
    request("list_groups shows the empty group id", "list_groups", lambda r: {"states_filter": [], "types_filter": []},
            version=5, key=16, view=lambda r: [(err(r.error_code), g.group_state, g.group_type)
                                               for g in r.groups if g.group_id == ""]),
    request("delete_groups of the empty group id", "delete_groups", lambda r: {"groups_names": [""]}, version=2,
            key=42, view=lambda r: [(x.group_id, err(x.error_code)) for x in r.results]),
]


_COORDINATOR_BUSY = {"COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
                     "CONCURRENT_TRANSACTIONS"}


def mixed_offsets(api: str, group: str, partitions: dict[str, tuple[int, ...]], producer: str = "a"):
    """An OffsetCommit (a simple one), TxnOffsetCommit (in `producer`'s transaction) or
    OffsetDelete of `partitions` by topic, "T" the scenario's topic and "U" one the cluster
    does not have: the partitions as the answer lists them, [(topic, partition, error)]."""

    async def action(run: Run):
        names = {"T": run.topic, "U": f"{run.topic}-unknown"}
        group_id = run.group(group)
        await run.wire.find_coordinator(group_id, 0)
        offset = {"committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}
        topics = [{"name": names[t], "partitions": [{"partition_index": p, **offset} for p in ps]}
                  for t, ps in partitions.items()]
        if api == "txn_offset_commit":
            txn_id, pid, epoch = run.producers[producer]
            body = {"transactional_id": txn_id, "group_id": group_id, "producer_id": pid, "producer_epoch": epoch,
                    "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": topics}
        elif api == "offset_commit":
            body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                    "group_instance_id": None, "topics": topics}
        else:
            body = {"group_id": group_id, "topics": [{"name": names[t], "partitions": [
                {"partition_index": p} for p in ps]} for t, ps in partitions.items()]}

        def busy(r):  # the first error the coordinator asks to retry, else NONE
            codes = (p.error_code for t in r.topics for p in t.partitions)
            return next((c for c in codes if err(c) in _COORDINATOR_BUSY), getattr(r, "error_code", 0))

        r = await run.wire.retry(lambda: run.wire.request(api, body), error_of=busy)
        by_name = {v: k for k, v in names.items()}
        return [(by_name[t.name], p.partition_index, err(p.error_code)) for t in r.topics for p in t.partitions]

    return (f"{api} {group} {partitions}", action)


# Kafka answers the partitions it refuses before asking the group coordinator (unknown
# topics, partitions past the count) first, then merges the coordinator's answer in.
OFFSETS_OF_UNKNOWN_TOPICS = [
    init("a"), add_offsets("a"),
    mixed_offsets("txn_offset_commit", "g", {"T": (0,), "U": (0,)}),
    mixed_offsets("txn_offset_commit", "g", {"T": (0, 5), "U": (1, 0)}),
    end("a", True),
    mixed_offsets("offset_commit", "simple", {"T": (0,), "U": (0,)}),
    mixed_offsets("offset_commit", "simple", {"U": (0,), "T": (7, 0)}),
    mixed_offsets("offset_delete", "simple", {"T": (0,), "U": (0,)}),
]


# ---------------------------------------------------------------------------------------------
# record batches for the malformed cases


def _idem(run: Run, name: str, seq: int = 0, **kw) -> bytearray:
    _txn, pid, epoch = run.producers[name]
    return build_batch([(None, b"x", (), 1_700_000_000_000)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, **kw)


def bad_crc(run: Run) -> bytes:
    b = build_batch([(None, b"x", (), 1_700_000_000_000)])
    b[-1] ^= 0xFF
    return bytes(b)


def client_marker(run: Run) -> bytes:
    return bytes(build_control_batch(123, 0, True, 0, 1_700_000_000_000))


def own_marker(run: Run) -> bytes:
    """A COMMIT marker with producer a's own id and epoch."""
    pid, epoch = run.pid("a")
    return bytes(build_control_batch(pid, epoch, True, 0, 1_700_000_000_000))


def big(run: Run) -> bytes:
    return bytes(build_batch([(None, b"x" * 2048, (), 1_700_000_000_000)]))


# ---------------------------------------------------------------------------------------------
# the table


def _txn(name: str = "a", *parts: int) -> list:
    return [init(name), add(name, *(parts or (0,)))]


def _committed_txn(name: str = "a", seq: int = 0, *values: str) -> list:
    return [*_txn(name), produce(name, seq, *(values or ("c1", "c2"))), end(name, True)]


def _aborted_txn(name: str = "a", seq: int = 0, *values: str) -> list:
    return [*_txn(name), produce(name, seq, *(values or ("x1", "x2"))), end(name, False)]


READ = [fetch(committed=True), fetch(committed=False), list_offset(-1), list_offset(-1, committed=True),
        producers()]

SCENARIOS: list[Scenario] = [
    # -- InitProducerId -------------------------------------------------------------------------
    Scenario("init_transactional", [init("a"), describe("a"), list_txns()]),
    Scenario("init_idempotent", [init("a", txn=False)]),
    Scenario("init_timeout_above_max", [init("a", timeout_ms=900001)]),
    Scenario("init_timeout_zero", [init("a", timeout_ms=0)], ci=False),
    Scenario("init_timeout_negative", [init("a", timeout_ms=-1)], ci=False),
    Scenario("init_empty_transactional_id", [request(
        "init ''", "init_producer_id", lambda r: {"transactional_id": "", "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1})]),
    Scenario("init_again_bumps_epoch", [init("a"), fence("a"), describe("a")]),
    Scenario("init_kip360_resume_current_epoch", [init("a"), init("a", resume=True), describe("a")]),
    Scenario("init_kip360_wrong_producer_id", [init("a"), init("b"), init("a", pid_from="b")], ci=False),
    Scenario("init_kip360_stale_epoch", [init("a"), fence("a"), init("a.old", resume=True)], ci=False),
    Scenario("init_kip360_future_epoch", [init("a"), init("a", resume=True, epoch=5)], ci=False),
    Scenario("init_aborts_ongoing", [*_txn(), produce("a", 0, "x"), fence("a"), settled("a"), describe("a"),
                                     *READ]),
    Scenario("init_zombie_after_ongoing_fence", [*_txn(), produce("a", 0, "x"), fence("a"), settled("a"),
                                                 init("a.old", resume=True), add("a.old"), describe("a")]),
    Scenario("init_kip360_idempotent_resume", [init("a", txn=False), init("a", txn=False, resume=True)],
             ci=False),
    # -- AddPartitionsToTxn ---------------------------------------------------------------------
    Scenario("add_ok_twice", [*_txn(), add("a"), describe("a")]),
    Scenario("add_two_partitions", [*_txn("a", 0, 1), describe("a")], partitions=2),
    Scenario("add_fenced_epoch", [init("a"), fence("a"), add("a.old")]),
    Scenario("add_unknown_transactional_id", [init("a"), add_as("a", txn_id="no-such-id")]),
    Scenario("add_wrong_producer_id", [init("a"), init("b"), add_as("a", pid=123456789)], ci=False),
    Scenario("add_future_epoch", [init("a"), add_as("a", epoch=7)], ci=False),
    Scenario("add_unknown_topic", [init("a"), add_as("a", topic="no-such-topic-x")]),
    Scenario("add_unknown_partition", [init("a"), add("a", 5, retry=False)], ci=False),
    Scenario("add_after_commit_starts_new_txn", [*_committed_txn(), add("a"), describe("a")], ci=False),
    # -- AddOffsetsToTxn ------------------------------------------------------------------------
    Scenario("add_offsets_ok", [init("a"), add_offsets("a"), describe("a")]),
    Scenario("add_offsets_fenced", [init("a"), fence("a"), add_offsets("a.old")]),
    Scenario("add_offsets_wrong_pid", [init("a"), add_offsets("a", pid=987654321)], ci=False),
    Scenario("add_offsets_future_epoch", [init("a"), add_offsets("a", epoch=9)], ci=False),
    # -- EndTxn ---------------------------------------------------------------------------------
    Scenario("end_commit", [*_committed_txn(), describe("a"), *READ]),
    Scenario("end_abort", [*_aborted_txn(), describe("a"), *READ]),
    Scenario("end_without_begin", [init("a"), end("a", True)]),
    Scenario("end_abort_without_begin", [init("a"), end("a", False)], ci=False),
    Scenario("end_fenced", [*_txn(), fence("a"), end("a.old", True)]),
    Scenario("end_commit_retried", [*_committed_txn(), end("a", True)]),
    Scenario("end_abort_after_commit", [*_committed_txn(), end("a", False)]),
    Scenario("end_commit_after_abort", [*_aborted_txn(), end("a", True)], ci=False),
    Scenario("end_abort_retried", [*_aborted_txn(), end("a", False)], ci=False),
    Scenario("end_future_epoch", [*_txn(), end("a", True, epoch_delta=3)], ci=False),
    Scenario("end_offsets_only_commit", [init("a"), add_offsets("a"), txn_offsets("a", offsets={0: 7}),
                                         end("a", True), offsets(), describe("a")]),
    # -- TxnOffsetCommit (KIP-447) ---------------------------------------------------------------
    Scenario("txn_offsets_pending_then_committed", [
        init("a"), add_offsets("a"), txn_offsets("a", offsets={0: 5}), offsets(stable=True),
        offsets(stable=False), end("a", True), offsets(stable=True)]),
    Scenario("txn_offsets_aborted", [init("a"), add_offsets("a"), txn_offsets("a", offsets={0: 5}),
                                     end("a", False), offsets(stable=True)]),
    Scenario("txn_offsets_without_add_offsets", [init("a"), txn_offsets("a")]),
    Scenario("txn_offsets_fenced_epoch", [init("a"), add_offsets("a"), fence("a"), txn_offsets("a.old")]),
    Scenario("txn_offsets_generation_ok", [join("g"), init("a"), add_offsets("a"),
                                           txn_offsets("a", use_group_member=True), end("a"), offsets()]),
    Scenario("txn_offsets_illegal_generation", [join("g"), init("a"), add_offsets("a"),
                                                txn_offsets("a", use_group_member=True, generation=99)]),
    Scenario("txn_offsets_unknown_member", [join("g"), init("a"), add_offsets("a"),
                                            txn_offsets("a", use_group_member=True, member="nobody")]),
    Scenario("txn_offsets_empty_group_with_generation", [init("a"), add_offsets("a"),
                                                         txn_offsets("a", generation=3, member="m")], ci=False),
    # -- EndTxn v5: transaction version 2 (KIP-890 part 2) ----------------------------------------
    Scenario("tv2_commit_bumps_epoch", [
        *_txn(), produce("a", 0, "x"), end_v2("a", True), describe("a"), *READ,
        add("a"), produce("a", 0, "y"), end_v2("a", True), describe("a"), *READ]),
    Scenario("tv2_abort_bumps_epoch", [*_txn(), produce("a", 0, "x"), end_v2("a", False), describe("a"), *READ]),
    Scenario("tv2_retry_with_previous_epoch", [
        *_txn(), produce("a", 0, "x"), end_v2("a", True), end_v2("a", True, epoch_delta=-1),
        end_v2("a", False, epoch_delta=-1), describe("a")]),
    Scenario("tv2_abort_without_transaction", [init("a"), end_v2("a", False), describe("a"),
                                               end_v2("a", True), describe("a")]),
    Scenario("tv2_wrong_epochs", [*_txn(), end_v2("a", True, epoch_delta=1), end_v2("a", True, epoch_delta=-1),
                                  end_v2("a", False), describe("a")]),
    Scenario("tv2_commit_after_timeout_abort", [
        init("a", timeout_ms=1000), add("a"), produce("a", 0, "x"), sleep(4), settled("a"),
        end_v2("a", True), describe("a"), end_v2("a", False), describe("a")]),
    # The next transaction's first batch arrives before the previous one's marker (markers
    # held back 1.5 s on eosbroker): it is added to the new transaction once the markers are
    # written, never folded into the old one.
    Scenario("tv2_produce_before_markers", [
        init("a"), eos_fault("a", "delay", api_key=27, delay_ms=1500, count=1), produce_v12("a", 0, "x"),
        end_v2("a", True, settle=False), produce_v12("a", 0, "y"), end_v2("a", True), describe("a"), *READ]),
    Scenario("tv2_zombie_after_commit", [
        *_txn(), produce("a", 0, "x"), end_v2("a", True), produce("a.old", 1, "zombie"),
        add("a.old"), describe("a"), *READ]),
    # -- ConsumerGroupHeartbeat (KIP-848) -------------------------------------------------------
    Scenario("cgh_join_steady_leave", [
        heartbeat("a", 0), heartbeat("a", "last", owned=(0, 1)), heartbeat("a", "last"),
        heartbeat("a", -1), heartbeat("a", "last", label="after leaving")], partitions=2),
    Scenario("cgh_second_member_waits_for_revocation", [
        heartbeat("a", 0), heartbeat("b", 0), heartbeat("a", "last", owned=(0, 1, 2, 3)),
        heartbeat("b", "last", owned=()), heartbeat("a", "last", owned=(2, 3)),
        heartbeat("a", "last", owned=(2, 3), label="a steady"), heartbeat("b", "last", owned=())],
        partitions=4),
    Scenario("cgh_request_errors", [
        heartbeat("a", 0, group=""), heartbeat("", 0), heartbeat("a", 0, rebalance_timeout_ms=-1),
        heartbeat("a", 0, owned=(0,)), heartbeat("a", 0, subscribe=None, subscribed_topic_names=None),
        heartbeat("a", -3), heartbeat("a", -2), heartbeat("a", 0, instance_id=""), heartbeat("a", 0, rack_id=""),
        heartbeat("a", 0, server_assignor="nope"), heartbeat("a", 0, subscribe=(), subscribed_topic_regex="(")]),
    Scenario("cgh_membership_errors", [
        heartbeat("a", 3), heartbeat("a", -1), heartbeat("a", 0), heartbeat("x", 1), heartbeat("a", 5),
        heartbeat("x", -1), heartbeat("a", 0, label="rejoin with the same id")]),
    Scenario("cgh_static_member", [
        heartbeat("a", 0, instance_id="i1"), heartbeat("b", 0, instance_id="i1"),
        heartbeat("b", 1, instance_id="i1"), heartbeat("a", -2, instance_id="i1"),
        heartbeat("b", 0, instance_id="i1", label="b takes over i1")]),
    Scenario("cgh_classic_group_conflict", [
        join("g"), heartbeat("a", 0), heartbeat("a", 1)]),
    Scenario("cgh_offset_commit_fencing", [
        heartbeat("a", 0), consumer_commit("a"), consumer_commit("a", epoch_delta=-1),
        consumer_commit("a", epoch_delta=1), consumer_commit("a", version=8), consumer_commit("nobody"),
        offsets()]),
    # -- classic groups -------------------------------------------------------------------------
    Scenario("classic_group_request_errors", CLASSIC_GROUP_REQUEST_ERRORS),
    Scenario("empty_group_id_offsets", EMPTY_GROUP_OFFSETS, partitions=2),
    Scenario("offsets_of_unknown_topics", OFFSETS_OF_UNKNOWN_TOPICS),
    # -- Produce: idempotent --------------------------------------------------------------------
    Scenario("idem_in_order", [init("a", txn=False), produce("a", 0, "a", "b"), produce("a", 2, "c"), *READ]),
    Scenario("idem_duplicate", [init("a", txn=False), produce("a", 0), produce("a", 1), produce("a", 0),
                                produce("a", 1), *READ]),
    Scenario("idem_gap", [init("a", txn=False), produce("a", 0), produce("a", 2)]),
    Scenario("idem_old_epoch", [init("a", txn=False), produce("a", 0), produce("a", 1, epoch_delta=-1)],
             ci=False),
    Scenario("idem_new_epoch_nonzero_seq", [init("a", txn=False), produce("a", 0),
                                            produce("a", 3, epoch_delta=1)]),
    Scenario("idem_new_epoch_zero_seq", [init("a", txn=False), produce("a", 0), produce("a", 0, epoch_delta=1),
                                         producers()], ci=False),
    Scenario("idem_sixth_oldest_resent", [init("a", txn=False), *[produce("a", i) for i in range(6)],
                                          produce("a", 0), produce("a", 1)], ci=False),
    Scenario("idem_unknown_producer_nonzero_seq", [
        produce_bytes("unknown pid seq 5", lambda r: build_batch(
            [(None, b"x", (), 1_700_000_000_000)], producer_id=424242, producer_epoch=0, base_sequence=5)),
        producers()], ci=False),
    Scenario("idem_multi_batch_dedup_keeps_offsets", [init("a", txn=False), produce("a", 0, "a", "b", "c"),
                                                      produce("a", 0, "a", "b", "c"), *READ], ci=False),
    # -- Produce: transactional -----------------------------------------------------------------
    Scenario("txn_produce_without_add", [init("a"), produce("a", 0)]),
    Scenario("txn_produce_other_partition", [*_txn("a", 0), produce("a", 0, partition=1)], partitions=2),
    Scenario("txn_nontransactional_batch_in_txn", [*_txn(), produce("a", 0), produce("a", 1, transactional=False)]),
    Scenario("txn_produce_fenced", [*_txn(), fence("a"), produce("a.old", 0)]),
    Scenario("txn_produce_after_commit_without_add", [*_committed_txn(), produce("a", 2)], ci=False),
    Scenario("txn_produce_without_transactional_id", [*_txn(), produce("a", 0, send_txn_id=False)], ci=False),
    Scenario("txn_two_producers_interleaved", [
        *_txn("a"), *_txn("b"), produce("a", 0, "a1"), produce("b", 0, "b1"), produce("a", 1, "a2"),
        end("a", False), produce("b", 1, "b2"), end("b", True), *READ]),
    Scenario("txn_open_holds_lso", [*_committed_txn("a"), *_txn("b"), produce("b", 0, "open"),
                                    produce(None, 0, "plain"), *READ, list_txns("Ongoing")]),
    Scenario("txn_two_partitions_commit", [*_txn("a", 0, 1), produce("a", 0, "p0", partition=0),
                                           produce("a", 0, "p1", partition=1), end("a", True),
                                           fetch(0), fetch(1)], partitions=2),
    Scenario("txn_sequence_continues_across_transactions", [
        *_committed_txn("a", 0, "t1"), add("a"), produce("a", 1, "t2"), end("a", True), *READ], ci=False),
    Scenario("txn_sequence_restarts_after_epoch_bump", [
        *_committed_txn("a", 0, "t1"), init("a", resume=True), add("a"), produce("a", 0, "t2"),
        end("a", True), *READ], ci=False),
    # -- timeouts (both brokers check every second) --------------------------------------------
    Scenario("timeout_aborts_and_fences", [
        init("a", timeout_ms=1000), add("a"), produce("a", 0, "late"), sleep(3.5), settled("a"), describe("a"),
        end("a", True), produce("a", 1, "after"), *READ], ci=False),
    Scenario("timeout_then_kip360_resume", [
        init("a", timeout_ms=1000), add("a"), produce("a", 0, "late"), sleep(3.5), settled("a"),
        init("a", resume=True), describe("a")], ci=False),
    # -- malformed and out of range -------------------------------------------------------------
    Scenario("produce_bad_crc", [produce_bytes("bad crc", bad_crc)]),
    Scenario("produce_control_batch_from_client", [produce_bytes("client marker", client_marker)]),
    Scenario("produce_control_batch_with_transactional_id", [
        init("a"), add("a"), produce_bytes("own marker", own_marker, producer="a"), *READ]),
    Scenario("produce_unverifiable_marker", [
        init("a"), add("a"), produce_bytes("foreign marker", client_marker, producer="a")], ci=False),
    Scenario("produce_too_large", [produce_bytes("2 KiB record", big)], topic_configs={"max.message.bytes": "1024"}),
    Scenario("produce_unknown_partition", [produce_bytes("p9", lambda r: bytes(build_batch(
        [(None, b"x", (), 1_700_000_000_000)])), partition=9)], ci=False),
    Scenario("produce_internal_topic", [produce_bytes("__transaction_state", lambda r: bytes(build_batch(
        [(None, b"x", (), 1_700_000_000_000)])), topic="__transaction_state")], ci=False),
    Scenario("produce_bad_acks", [produce_bytes("acks=2", lambda r: bytes(build_batch(
        [(None, b"x", (), 1_700_000_000_000)])), acks=2)], ci=False),
    Scenario("fetch_out_of_range", [produce(None, 0, "x"), fetch(offset=5, committed=False),
                                    fetch(offset=5, committed=True)]),
    Scenario("list_offsets_earliest_latest", [produce(None, 0, "x", "y"), list_offset(-2), list_offset(-1),
                                              list_offset(-3), list_offset(1_700_000_000_001)], ci=False),
    Scenario("describe_unknown_transaction", [describe("nobody")]),
    Scenario("describe_producers_unknown_partition", [request(
        "describe_producers p7", "describe_producers",
        lambda r: {"topics": [{"name": r.topic, "partition_indexes": [7]}]},
        view=lambda r: err(r.topics[0].partitions[0].error_code))], ci=False),
    Scenario("list_transactions_filters", [*_txn("a"), init("b"), list_txns(), list_txns("Ongoing"),
                                           list_txns("Empty"), list_txns("NoSuchState")], ci=False),
    Scenario("create_topic_errors", [
        request("exists", "create_topics", lambda r: {"topics": [{
            "name": r.topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 5000}, view=lambda r: err(r.topics[0].error_code)),
        request("zero partitions", "create_topics", lambda r: {"topics": [{
            "name": r.topic + "-z", "num_partitions": 0, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 5000}, view=lambda r: err(r.topics[0].error_code)),
        request("rf 3", "create_topics", lambda r: {"topics": [{
            "name": r.topic + "-r", "num_partitions": 1, "replication_factor": 3, "assignments": [],
            "configs": []}], "timeout_ms": 5000}, view=lambda r: err(r.topics[0].error_code)),
        request("trailing newline", "create_topics", lambda r: {"topics": [{
            "name": r.topic + "-n\n", "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 5000}, view=lambda r: err(r.topics[0].error_code)),
    ], ci=False),
    Scenario("find_coordinator_group_and_txn", [request(
        "find both", "find_coordinator", lambda r: {"key_type": 0, "coordinator_keys": [r.group("g")]},
        view=lambda r: [(err(c.error_code), c.node_id) for c in r.coordinators])], ci=False),
]
