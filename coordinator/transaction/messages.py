"""Values the transaction coordinator hands back: responses, effects, annotated records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from coordinator.runtime import CoordinatorRecord
from protocol.names import TopicPartition


@dataclass(slots=True, unsafe_hash=True)  # not frozen, as CoordinatorRecord
class TransactionLogRecord(CoordinatorRecord):
    """A __transaction_state record as the coordinator produced it.

    ``last_producer_epoch`` rides along in memory only: Kafka does not persist it, so a
    record read back from disk has none (-1) and a KIP-360 retry that spans a coordinator
    move is fenced, exactly as on Kafka. The runtime must replay the objects it appended.
    """

    last_producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ProducerIdTaken:
    """A new producer id is in use: the broker's allocator must never hand it out again."""

    producer_id: int


class SendMarkers(NamedTuple):
    """Write COMMIT/ABORT markers to every partition, then call ``markers_written``.
    A NamedTuple: every transaction ends with one (see TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    topic_partitions: tuple[TopicPartition, ...]
    transaction_version: int = 0  # 2: the epoch was bumped for these markers (KIP-1228 check)


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitionsResponse:
    """AddPartitionsToTxn (v0-v3) and AddOffsetsToTxn: one error for the whole request."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class VerifyPartitionsResponse:
    """AddPartitionsToTxn v4+ VerifyOnly: an error per partition."""

    errors: dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    error: ErrorCode
    producer_id: int = -1  # v5 (transaction version 2): the producer's id and new epoch
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResponse:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transaction_states: tuple[ListedTransaction, ...] = field(default_factory=tuple)
