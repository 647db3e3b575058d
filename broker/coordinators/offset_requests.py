"""What the offset APIs' handlers share (OffsetCommit, TxnOffsetCommit, OffsetDelete): partitions
Kafka refuses before asking the group coordinator, and the per-partition ``topics`` of
the response in the order Kafka gives them. ``answer`` is the API's answer type (``answer_type``),
whose nested types are named after it: ``<answer>Topic`` and ``<answer>Partition``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.security.acls import GROUP, GROUP_DENIED, READ, TOPIC, TOPIC_DENIED
from broker.cluster.cluster import Cluster
from broker.errors import code
from coordinator.group import OffsetToCommit
from coordinator.group.coordinator import offset_errors
from coordinator.group.log_codec import NO_LEADER_EPOCH
from coordinator.runtime import Result
from protocol.names import TopicPartition


def refused_by_acls(ctx, request, answer: type):
    """OffsetCommit and TxnOffsetCommit with the authorizer on, checked as Kafka does:
    READ on the group (else every partition GROUP_AUTHORIZATION_FAILED). None: go on."""
    if ctx.allowed(READ, GROUP, request.group_id):
        return None
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    return answer(topics=errors_by_topic(partitions, dict.fromkeys(partitions, GROUP_DENIED), answer))


async def commit_offsets(ctx, request, commit: Callable[[list[OffsetToCommit]], Result], answer: type,
                         verify: Callable[[], Awaitable[ErrorCode]] | None = None, group_id_checked: bool = False):
    """OffsetCommit and TxnOffsetCommit: ``commit(offsets)`` (the group coordinator's
    handler) runs on the partitions of known topics the client may READ; the others get
    TOPIC_AUTHORIZATION_FAILED or UNKNOWN_TOPIC_OR_PARTITION. ``group_id_checked``: the
    coordinator's ``group_id_error`` answers first (TxnOffsetCommit's; OffsetCommit
    commits for the empty group id). ``verify()``: TxnOffsetCommit's
    KIP-890 verification, asked once the group coordinator's checks passed, before the
    write (as Kafka's transactional write operation asks it); an error it gives answers
    each offset. Returns the answer."""
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied = {tp for tp in partitions if not ctx.allowed(READ, TOPIC, tp[0])}
    unknown = unknown_partitions(ctx.cluster, partitions) | denied
    offsets = [
        OffsetToCommit(t.name, p.partition_index, p.committed_offset,
                       getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH), p.committed_metadata)
        for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in unknown
    ]
    refused = dict.fromkeys(unknown, code("UNKNOWN_TOPIC_OR_PARTITION")) | dict.fromkeys(denied, TOPIC_DENIED)
    response = None
    if offsets or not partitions:
        groups = ctx.node.groups

        def failed(error):  # error for every partition, as Kafka's OffsetCommitRequest.getErrorResponse
            return offset_errors(offsets, lambda _o: error)

        response = groups.group_id_given(request.group_id, failed)() if group_id_checked else None
        if response is None and verify is not None and (error := await verify()) is not ErrorCode.none:
            response = failed(error)
        if response is None:
            response = await groups.run(request.group_id, lambda: commit(offsets), failed)
    return answer(topics=answer_topics(partitions, refused, response, answer))


def unknown_partitions(cluster: Cluster, partitions: list[TopicPartition]) -> set[TopicPartition]:
    """Partitions of topics that do not exist (or past their partition count): Kafka
    answers UNKNOWN_TOPIC_OR_PARTITION for them without asking the coordinator."""
    return {tp for tp in partitions if not cluster.has_partition(*tp)}


def answer_topics(partitions: list[TopicPartition], refused: dict[TopicPartition, Any], response, answer: type
                  ) -> list:
    """``topics`` of an OffsetCommit, TxnOffsetCommit or OffsetDelete answer in Kafka's order:
    the partitions ``refused`` before the coordinator was asked, in request order, then the
    coordinator's ``response`` (None: not asked), whose partitions join their topic where it
    is listed already (as Kafka's response builder merges the coordinator's answer)."""
    errors = dict(refused)
    order = [tp for tp in partitions if tp in refused]
    for t in response.topics if response is not None else ():
        for p in t.partitions:
            order.append((t.name, p.partition_index))
            errors[(t.name, p.partition_index)] = p.error_code
    return errors_by_topic(order, errors, answer)


def errors_by_topic(partitions: list[TopicPartition], errors: dict[TopicPartition, Any], answer: type) -> list:
    """``topics`` of an OffsetCommit-like answer, partitions in the order given, each
    topic where it first appears."""
    topic_type = getattr(answer, answer.__name__ + "Topic")
    partition_type = getattr(answer, answer.__name__ + "Partition")
    topics: dict[str, list] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition_type(partition_index=partition,
                                                           error_code=errors[(topic, partition)]))
    return [topic_type(name=t, partitions=ps) for t, ps in topics.items()]
