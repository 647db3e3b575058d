"""KIP-890 verification from the partition leader's side, as Kafka's AddPartitionsToTxnManager.

A transactional Produce whose batch would start the producer's transaction on a
partition, and a TxnOffsetCommit, ask the transactional id's coordinator with an
AddPartitionsToTxn request in the brokers' batched form (v5), sent from the leader's node
to the coordinator's node through ``Network.request``: verify-only for Produce v3-v11 and
TxnOffsetCommit v0-v4, an add for Produce v12+ and TxnOffsetCommit v5+ (transaction
version 2 adds the partition implicitly). The request meets the link faults, a paused
node and the request fault rules (client id ``eosbroker-node-N``) like any other between
nodes, within ``request.timeout.ms``; a refused connection, a cut link or a timeout is
NETWORK_EXCEPTION for every partition it asked about.

Requests to one coordinator node are batched as Kafka does: while one is in flight, the
transactions that arrive wait and leave together in the next. A verification that finds
nothing in flight or waiting leaves at once, from the asking request's own task; an add
always goes through the sender task, so that its write is never abandoned with a client
that goes away. A second request for a transactional id already waiting takes its
place: the waiting one is answered NETWORK_EXCEPTION (same epoch: the client is
retrying) or INVALID_PRODUCER_EPOCH (an older epoch: it is fenced), and one with an older
epoch than the waiting one is refused INVALID_PRODUCER_EPOCH at once.

The answers are Kafka's AddPartitionsToTxnManager's; ``produce_error`` and
``txn_offset_commit_error`` turn them into what ReplicaManager and the group coordinator
answer their clients.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import lru_cache

from kio.schema.errors import ErrorCode

from protocol.answer_wire import kio_request, request_type


log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN = 24
VERSION = 5  # the brokers' batched form; v5 marks an add as transaction version 2's
_REQUEST = request_type(ADD_PARTITIONS_TO_TXN)

# What the client's request version lets the leader do (Kafka's TransactionSupportedOperation).
DEFAULT_ERROR = 0  # a partition missing from the transaction is INVALID_TXN_STATE
GENERIC_ERROR_SUPPORTED = 1  # ...is TRANSACTION_ABORTABLE
ADD_PARTITION = 2  # the partition is added to the transaction, not only verified

E = ErrorCode
TopicPartition = tuple[str, int]


def produce_operation(version: int) -> int:
    return ADD_PARTITION if version >= 12 else GENERIC_ERROR_SUPPORTED if version >= 11 else DEFAULT_ERROR


def txn_offset_commit_operation(version: int) -> int:
    return ADD_PARTITION if version >= 5 else GENERIC_ERROR_SUPPORTED if version >= 4 else DEFAULT_ERROR


# Coordinator trouble older producers would not retry, answered as the retriable
# NOT_ENOUGH_REPLICAS (it does not make the client refresh its metadata), as ReplicaManager does.
_PRODUCE_RETRIABLE = frozenset({E.network_exception, E.coordinator_load_in_progress,
                                E.coordinator_not_available, E.not_coordinator})


def produce_error(error: ErrorCode, operation: int) -> ErrorCode:
    """The Produce answer for a partition the verification did not pass."""
    if error in _PRODUCE_RETRIABLE:
        return E.not_enough_replicas
    if error is E.concurrent_transactions and operation != ADD_PARTITION:
        return E.not_enough_replicas  # transaction version 2 clients retry it as it is
    return error


# The group coordinator's answers for what its transaction verification failed with.
_TXN_OFFSET_COMMIT_ERRORS = {
    E.network_exception: E.coordinator_load_in_progress,  # retried without a coordinator lookup
    E.not_enough_replicas: E.coordinator_not_available,
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.request_timed_out: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
}


def txn_offset_commit_error(error: ErrorCode) -> ErrorCode:
    """The TxnOffsetCommit answer for offsets the verification did not pass."""
    return _TXN_OFFSET_COMMIT_ERRORS.get(error, error)


@dataclass(slots=True)
class _Waiting:
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    operation: int
    answer: asyncio.Future | None  # None: sent at once by the request that asks (_send_now)


class TransactionVerifier:
    """The verification requests of every node of the process, per (leader node,
    coordinator node) link: one in flight, the next ones waiting to leave together."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._waiting: dict[tuple[int, int], dict[str, _Waiting]] = {}
        self._in_flight: set[tuple[int, int]] = set()
        self._senders: set[asyncio.Task] = set()  # referenced: the loop keeps only weak ones

    async def verify(self, source: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], operation: int) -> dict[TopicPartition, ErrorCode]:
        """Asks the coordinator of ``transactional_id`` from node ``source``; returns the
        partitions that did not pass, each with Kafka's AddPartitionsToTxnManager answer."""
        coordinator = self._coordinator(transactional_id)
        if coordinator is None:
            return dict.fromkeys(partitions, E.coordinator_not_available)
        link = (source, coordinator)
        waiting = self._waiting.setdefault(link, {})
        earlier = waiting.get(transactional_id)
        if earlier is not None:
            if producer_epoch < earlier.producer_epoch:
                return dict.fromkeys(partitions, E.invalid_producer_epoch)
            fenced = earlier.producer_epoch < producer_epoch
            _answer(earlier, dict.fromkeys(earlier.partitions,
                                           E.invalid_producer_epoch if fenced else E.network_exception))
        if not waiting and link not in self._in_flight and operation != ADD_PARTITION:
            return await self._send_now(link, transactional_id,
                                        _Waiting(producer_id, producer_epoch, list(partitions), operation, None))
        answer = asyncio.get_running_loop().create_future()
        waiting[transactional_id] = _Waiting(producer_id, producer_epoch, list(partitions), operation, answer)
        if link not in self._in_flight:
            self._start_sender(link)
        return await answer

    async def _send_now(self, link: tuple[int, int], transactional_id: str, waiting: _Waiting) -> dict:
        """A verification with nothing ahead of it on its link leaves at once, in the
        asking request's task: a sender task would cost it two turns of the event loop.
        Only a verification: it writes nothing, so a client that goes away meanwhile
        abandons nothing but a read. What arrives while it is in flight waits, and then
        leaves together in the sender task."""
        self._in_flight.add(link)
        try:
            answers = await self._request(link, {transactional_id: waiting})
        except Exception:  # noqa: BLE001 - answered, as the sender task answers
            log.exception("AddPartitionsToTxn from node %d to node %d failed", *link)
            return dict.fromkeys(waiting.partitions, E.unknown_server_error)
        finally:
            self._in_flight.discard(link)
            if self._waiting.get(link):
                self._start_sender(link)
        return answers[transactional_id]

    def _start_sender(self, link: tuple[int, int]) -> None:
        self._in_flight.add(link)
        sender = asyncio.get_running_loop().create_task(self._send(link))
        self._senders.add(sender)
        sender.add_done_callback(self._senders.discard)

    async def close(self) -> None:
        """Stops sending (the broker stops); what waits is answered NETWORK_EXCEPTION."""
        senders = list(self._senders)
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)

    def _coordinator(self, transactional_id: str) -> int | None:
        """The node leading the id's __transaction_state partition, if it is alive."""
        info = self.broker.coordinator_node(transactional_id, 1)
        node = None if info is None else self.broker.node(info.node_id)
        return node.node_id if node is not None and node.is_up else None

    async def _send(self, link: tuple[int, int]) -> None:
        batch: dict[str, _Waiting] = {}
        try:
            while True:
                batch = self._waiting.pop(link, None)
                if not batch:
                    return
                try:
                    answers = await self._request(link, batch)
                except Exception:  # noqa: BLE001 - no waiting request may be left unanswered
                    log.exception("AddPartitionsToTxn from node %d to node %d failed", *link)
                    answers = {tid: dict.fromkeys(w.partitions, E.unknown_server_error) for tid, w in batch.items()}
                for tid, waiting in batch.items():
                    _answer(waiting, answers[tid])
        except asyncio.CancelledError:
            for waiting in [*(batch or {}).values(), *self._waiting.pop(link, {}).values()]:
                _answer(waiting, dict.fromkeys(waiting.partitions, E.network_exception))
            raise
        finally:
            self._in_flight.discard(link)

    async def _request(self, link: tuple[int, int], batch: dict[str, _Waiting]) -> dict[str, dict]:
        source, target = link
        if len(batch) == 1:
            (tid, w), = batch.items()
            request = _one_transaction_request(tid, w.producer_id, w.producer_epoch, w.operation != ADD_PARTITION,
                                               tuple(w.partitions))
        else:
            request = _REQUEST(transactions=tuple(_transaction(tid, w.producer_id, w.producer_epoch,
                                                               w.operation != ADD_PARTITION, w.partitions)
                                                  for tid, w in batch.items()))
        try:
            response = await self.broker.network.request(source, target, ADD_PARTITIONS_TO_TXN, VERSION, request,
                                                          typed=False)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.warning("AddPartitionsToTxn from node %d to node %d failed with a network exception (%s)",
                        source, target, e or type(e).__name__)
            return {tid: dict.fromkeys(w.partitions, E.network_exception) for tid, w in batch.items()}
        error = ErrorCode(int(response.error_code))
        if error is not E.none:
            log.error("AddPartitionsToTxn from node %d to node %d answered %s", source, target, error.name)
            if error is E.cluster_authorization_failed:  # not a client's business: say it was not verified
                error = E.invalid_txn_state
            return {tid: dict.fromkeys(w.partitions, error) for tid, w in batch.items()}
        answers: dict[str, dict] = {}
        for result in response.results_by_transaction:
            tid = result.transactional_id
            waiting = batch.get(tid)
            if waiting is None:
                continue
            unverified = answers[tid] = {}
            for topic in result.topic_results:
                name = topic.name
                for p in topic.results_by_partition:
                    error = ErrorCode(int(p.partition_error_code))
                    if error is E.none:
                        continue
                    if error is E.producer_fenced:  # what producers expect here
                        error = E.invalid_producer_epoch
                    elif error is E.transaction_abortable and waiting.operation == DEFAULT_ERROR:
                        error = E.invalid_txn_state  # older clients do not know it
                    unverified[(name, p.partition_index)] = error
        for tid, waiting in batch.items():
            if tid not in answers:  # left out of the answer: not verified
                log.error("AddPartitionsToTxn from node %d to node %d did not answer for %s", source, target, tid)
                answers[tid] = dict.fromkeys(waiting.partitions, E.unknown_server_error)
        return answers


@lru_cache(maxsize=256)  # a producer's transactions (same epoch, same partitions) ask the same
def _one_transaction_request(transactional_id: str, producer_id: int, producer_epoch: int, verify_only: bool,
                             partitions: tuple[TopicPartition, ...]):
    """The request for a batch of one transaction, as kio's request of VERSION (built once)."""
    return kio_request(ADD_PARTITIONS_TO_TXN, VERSION, _REQUEST(transactions=(
        _transaction(transactional_id, producer_id, producer_epoch, verify_only, partitions),)))


def _transaction(transactional_id: str, producer_id: int, producer_epoch: int, verify_only: bool,
                 partitions) -> tuple:
    return _REQUEST.AddPartitionsToTxnTransaction(transactional_id=transactional_id, producer_id=producer_id,
                                                  producer_epoch=producer_epoch, verify_only=verify_only,
                                                  topics=_topics(partitions))


def _topics(partitions) -> tuple:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return tuple(_REQUEST.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def _answer(waiting: _Waiting, errors: dict) -> None:
    if not waiting.answer.done():  # its request may have been abandoned meanwhile
        waiting.answer.set_result(errors)
