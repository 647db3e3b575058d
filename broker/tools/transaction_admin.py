"""``eosbroker transactions``: inspect and repair transactions on any Kafka-compatible
cluster, in the spirit of Kafka's kafka-transactions.sh.

Everything goes over the wire (broker/tools/admin_client.py): Metadata for leaders,
FindCoordinator for coordinators, then ListTransactions, DescribeTransactions,
DescribeProducers and WriteTxnMarkers, each at the highest version both sides know.

A hanging transaction is one a partition holds open but its coordinator will never
finish: find-hanging takes the partition's open transactions older than the maximum
transaction timeout (by the producer's last write), then keeps those whose producer id
no coordinator lists, or whose coordinator does not name the partition in the
producer's current transaction. ``abort`` ends one with an ABORT marker written
straight to the partition leader, as an administrator would.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

import click
from kio.schema.errors import ErrorCode

from broker.clock import SYSTEM_CLOCK
from broker.tools.admin_client import Admin, ToolError, error_name, run_admin
from protocol.client import DESCRIBE_TRANSACTIONS, FIND_COORDINATOR, METADATA
from protocol.answer_wire import ms, request_type

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, LIST_TRANSACTIONS = 27, 61, 66
# The version ranges this tool can speak (it reads only fields these versions share).
_SPOKEN = {
    METADATA: (1, 12),
    FIND_COORDINATOR: (1, 6),
    LIST_TRANSACTIONS: (0, 2),
    DESCRIBE_TRANSACTIONS: (0, 0),
    DESCRIBE_PRODUCERS: (0, 0),
    WRITE_TXN_MARKERS: (1, 1),
}


# -- values --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listing:
    coordinator: int
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class Description:
    coordinator: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1: no transaction in progress
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    topic: str
    partition: int
    producer: ActiveProducer


# -- the wire ------------------------------------------------------------------------


class TransactionAdmin(Admin):
    """The admin client with the transaction requests the commands need."""

    def __init__(self, bootstrap: str, spoken: dict[int, tuple[int, int]] | None = None,
                 client_id: str = "eosbroker-transactions") -> None:
        super().__init__(bootstrap, _SPOKEN if spoken is None else spoken, client_id)

    async def list_transactions(self, producer_ids: Iterable[int] = ()) -> list[Listing]:
        """Every coordinator's transactions (ListTransactions goes to each broker)."""
        if not self.nodes:
            await self.leaders([])
        listings = []
        for node_id in sorted(self.nodes):
            _, response = await self.request(node_id, LIST_TRANSACTIONS, request_type(LIST_TRANSACTIONS)(
                state_filters=(), producer_id_filters=tuple(producer_ids)))
            if response.error_code != ErrorCode.none:
                raise ToolError(f"cannot list the transactions of node {node_id}: {error_name(response.error_code)}")
            listings += [Listing(node_id, t.transactional_id, t.producer_id, t.transaction_state)
                         for t in response.transaction_states]
        return listings

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, Description | ErrorCode]:
        """Each id's description from its coordinator, or the error the coordinator gave."""
        by_coordinator: dict[int, list[str]] = defaultdict(list)
        for transactional_id in transactional_ids:
            by_coordinator[await self.coordinator(transactional_id)].append(transactional_id)
        described: dict[str, Description | ErrorCode] = {}
        for node_id, ids in by_coordinator.items():
            _, response = await self.request(node_id, DESCRIBE_TRANSACTIONS, request_type(DESCRIBE_TRANSACTIONS)(
                transactional_ids=tuple(ids)))
            for s in response.transaction_states:
                if s.error_code != ErrorCode.none:
                    described[s.transactional_id] = s.error_code
                    continue
                described[s.transactional_id] = Description(
                    node_id, s.transactional_id, s.transaction_state, s.producer_id, s.producer_epoch,
                    ms(s.transaction_timeout), ms(s.transaction_start_time),
                    tuple(sorted((t.topic, p) for t in s.topics for p in t.partitions)))
        return described

    async def describe_producers(
            self, leaders: dict[tuple[str, int], int]) -> dict[tuple[str, int], list[ActiveProducer]]:
        """Active producers of each partition, asked of its leader."""
        by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for (topic, partition), leader in sorted(leaders.items()):
            if leader < 0:
                raise ToolError(f"partition {topic}-{partition} has no leader")
            by_leader[leader][topic].append(partition)
        found = {}
        for leader, topics in by_leader.items():
            request = request_type(DESCRIBE_PRODUCERS)
            _, response = await self.request(leader, DESCRIBE_PRODUCERS, request(topics=tuple(
                request.TopicRequest(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        detail = f" ({p.error_message})" if p.error_message else ""
                        raise ToolError(f"cannot describe the producers of {t.name}-{p.partition_index} on node "
                                        f"{leader}: {error_name(p.error_code)}{detail}")
                    found[(t.name, p.partition_index)] = [
                        ActiveProducer(a.producer_id, a.producer_epoch, a.last_sequence, a.last_timestamp,
                                       a.coordinator_epoch, a.current_txn_start_offset)
                        for a in p.active_producers]
        return found

    async def write_abort_marker(self, leader: int, topic: str, partition: int, producer_id: int,
                                 producer_epoch: int, coordinator_epoch: int) -> ErrorCode:
        request = request_type(WRITE_TXN_MARKERS)
        marker = request.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch,
            topics=(request.WritableTxnMarkerTopic(name=topic, partition_indexes=(partition,)),))
        _, response = await self.request(leader, WRITE_TXN_MARKERS, request(markers=(marker,)))
        return response.markers[0].topics[0].partitions[0].error_code


# -- pure parts ----------------------------------------------------------------------


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def open_transactions(producers: dict[tuple[str, int], list[ActiveProducer]], now_ms: int,
                      max_timeout_ms: int) -> list[OpenTransaction]:
    """Open transactions whose producer last wrote longer ago than any transaction may
    last: the candidates for hanging."""
    return [OpenTransaction(topic, partition, p)
            for (topic, partition), active in sorted(producers.items())
            for p in active
            if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms]


def hanging(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
            descriptions: dict[str, Description | ErrorCode]) -> list[OpenTransaction]:
    """The candidates their coordinator will never complete: no coordinator knows the
    producer id, the id is gone, or its current transaction does not include the partition
    (any partition still awaiting a marker is listed while PrepareCommit/PrepareAbort)."""
    found = []
    for txn in candidates:
        transactional_id = transactional_ids.get(txn.producer.producer_id)
        description = descriptions.get(transactional_id) if transactional_id is not None else None
        if not isinstance(description, Description) or (txn.topic, txn.partition) not in description.partitions:
            found.append(txn)
    return found


def awaiting_markers(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
                     descriptions: dict[str, Description | ErrorCode]) -> list[tuple[OpenTransaction, Description]]:
    """The candidates whose coordinator has decided (PrepareCommit/PrepareAbort) but whose
    marker has not arrived (a leader it cannot reach): not hanging, as the coordinator
    keeps sending it, and never to be aborted by hand (the decision may be commit)."""
    found = []
    for txn in candidates:
        description = descriptions.get(transactional_ids.get(txn.producer.producer_id, ""))
        if isinstance(description, Description) and description.state in ("PrepareCommit", "PrepareAbort") \
                and (txn.topic, txn.partition) in description.partitions:
            found.append((txn, description))
    return found


# -- commands ------------------------------------------------------------------------


@click.group("transactions")
@click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT",
              help="broker(s) to connect to, comma-separated")
@click.pass_context
def transactions(ctx: click.Context, bootstrap: str) -> None:
    """Analyse transactions and recover from hanging ones (like kafka-transactions.sh)."""
    ctx.obj = bootstrap


@transactions.command("list")
@click.pass_obj
def list_command(bootstrap: str) -> None:
    """List the transactions of every coordinator."""
    async def command(admin: TransactionAdmin) -> None:
        listings = await admin.list_transactions()
        rows = [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state]
                for t in sorted(listings, key=lambda t: t.transactional_id)]
        click.echo(format_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows))

    run_admin(bootstrap, command, TransactionAdmin)


@transactions.command("describe")
@click.option("--transactional-id", required=True)
@click.pass_obj
def describe_command(bootstrap: str, transactional_id: str) -> None:
    """Describe one transactional id as its coordinator sees it."""
    async def command(admin: TransactionAdmin) -> None:
        d = (await admin.describe_transactions([transactional_id]))[transactional_id]
        if not isinstance(d, Description):
            raise ToolError(f"cannot describe transactional-id `{transactional_id}`: {error_name(d)}")
        started = d.start_time_ms >= 0
        row = [str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
               str(d.timeout_ms), str(d.start_time_ms) if started else "None",
               str(SYSTEM_CLOCK.now_ms() - d.start_time_ms) if started else "None",
               ",".join(f"{t}-{p}" for t, p in d.partitions)]
        click.echo(format_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                                 "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                                 "TransactionDurationMs", "TopicPartitions"], [row]))

    run_admin(bootstrap, command, TransactionAdmin)


@transactions.command("describe-producers")
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@click.pass_obj
def describe_producers_command(bootstrap: str, topic: str, partition: int) -> None:
    """Describe the active producers of one partition, from its leader."""
    async def command(admin: TransactionAdmin) -> None:
        leader = await _leader(admin, topic, partition)
        producers = (await admin.describe_producers({(topic, partition): leader}))[(topic, partition)]
        rows = [[str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
                 str(p.last_timestamp),
                 str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None"]
                for p in producers]
        click.echo(format_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                                 "LastTimestamp", "CurrentTransactionStartOffset"], rows))

    run_admin(bootstrap, command, TransactionAdmin)


@transactions.command("find-hanging")
@click.option("--topic", help="search only this topic (default: every topic)")
@click.option("--partition", type=int, help="search only this partition of --topic")
@click.option("--broker-id", type=int, help="search only partitions this broker leads")
@click.option("--max-transaction-timeout", "max_timeout_minutes", type=click.IntRange(min=0), default=15,
              show_default=True, help="the cluster's transaction.max.timeout.ms, in minutes")
@click.pass_obj
def find_hanging_command(bootstrap: str, topic: str | None, partition: int | None, broker_id: int | None,
                         max_timeout_minutes: int) -> None:
    """Find open transactions their coordinator will never complete."""
    if partition is not None and topic is None:
        raise click.UsageError("--partition requires --topic")

    async def command(admin: TransactionAdmin) -> None:
        leaders = await admin.leaders(None if topic is None else [topic])
        leaders = {tp: leader for tp, leader in leaders.items()
                   if (partition is None or tp[1] == partition) and (broker_id is None or leader == broker_id)}
        if topic is not None and partition is not None and not leaders:
            raise ToolError(f"partition {topic}-{partition} does not exist")
        candidates = open_transactions(await admin.describe_producers(leaders), SYSTEM_CLOCK.now_ms(),
                                       max_timeout_minutes * 60_000)
        found: list[OpenTransaction] = []
        waiting: list[tuple[OpenTransaction, Description]] = []
        if candidates:
            producer_ids = {c.producer.producer_id for c in candidates}
            transactional_ids = {t.producer_id: t.transactional_id
                                 for t in await admin.list_transactions(producer_ids) if t.producer_id in producer_ids}
            descriptions = await admin.describe_transactions(sorted(set(transactional_ids.values())))
            for transactional_id, d in descriptions.items():
                if d is not ErrorCode.transactional_id_not_found and not isinstance(d, Description):
                    raise ToolError(f"cannot describe transactional-id `{transactional_id}`: {error_name(d)}")
            found = hanging(candidates, transactional_ids, descriptions)
            waiting = awaiting_markers(candidates, transactional_ids, descriptions)
        now = SYSTEM_CLOCK.now_ms()
        rows = [[t.topic, str(t.partition), str(t.producer.producer_id), str(t.producer.producer_epoch),
                 str(t.producer.coordinator_epoch), str(t.producer.current_txn_start_offset),
                 str(t.producer.last_timestamp), str((now - t.producer.last_timestamp) // 60_000)]
                for t in found]
        click.echo(format_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                 "StartOffset", "LastTimestamp", "Duration(min)"], rows))
        for t, d in waiting:
            click.echo(f"\nNot hanging, awaiting its {'COMMIT' if d.state == 'PrepareCommit' else 'ABORT'} marker: "
                       f"{t.topic}-{t.partition} from offset {t.producer.current_txn_start_offset}, transactional id "
                       f"{d.transactional_id} ({d.state} on coordinator {d.coordinator}, which keeps sending it; "
                       "do not abort it)")

    run_admin(bootstrap, command, TransactionAdmin)


@transactions.command("abort")
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@click.option("--start-offset", required=True, type=int, help="first offset of the open transaction to abort")
@click.pass_obj
def abort_command(bootstrap: str, topic: str, partition: int, start_offset: int) -> None:
    """Abort the open transaction that starts at --start-offset (writes an ABORT marker)."""
    async def command(admin: TransactionAdmin) -> None:
        leader = await _leader(admin, topic, partition)
        producers = (await admin.describe_producers({(topic, partition): leader}))[(topic, partition)]
        match = [p for p in producers if p.current_txn_start_offset == start_offset]
        if not match:
            raise ToolError(f"no open transaction starts at offset {start_offset} on partition {topic}-{partition}")
        p = match[0]
        # A producer that never completed a transaction here has no coordinator epoch
        # yet; 0 is at most any real one, so the marker is not fenced (as Kafka's tool does).
        coordinator_epoch = max(p.coordinator_epoch, 0)
        error = await admin.write_abort_marker(leader, topic, partition, p.producer_id, p.producer_epoch,
                                               coordinator_epoch)
        if error != ErrorCode.none:
            raise ToolError(f"cannot abort the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) "
                            f"on {topic}-{partition}: {error_name(error)}")
        click.echo(f"Aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) "
                   f"on {topic}-{partition} that started at offset {start_offset}")

    run_admin(bootstrap, command, TransactionAdmin)


async def _leader(admin: Admin, topic: str, partition: int) -> int:
    leaders = await admin.leaders([topic])
    if (topic, partition) not in leaders:
        raise ToolError(f"partition {topic}-{partition} does not exist")
    return leaders[(topic, partition)]
