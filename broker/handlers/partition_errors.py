"""Per-partition errors of the offset APIs (OffsetCommit, TxnOffsetCommit, OffsetDelete):
partitions Kafka refuses before asking the coordinator, and the ``topics`` list of the
response in request order."""

from __future__ import annotations

from typing import Any

from broker.cluster import Cluster
from protocol.names import TopicPartition


def unknown_partitions(cluster: Cluster, partitions: list[TopicPartition]) -> set[TopicPartition]:
    """Partitions of topics that do not exist (or past their partition count): Kafka
    answers UNKNOWN_TOPIC_OR_PARTITION for them without asking the coordinator."""
    return {tp for tp in partitions if cluster.partition(*tp) is None}


def errors_by_topic(partitions: list[TopicPartition], errors: dict[TopicPartition, Any]) -> list[dict]:
    """``topics`` of an OffsetCommit-like response, in request order."""
    topics: dict[str, list[dict]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": errors[(topic, partition)]})
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


def partition_errors(response) -> dict[TopicPartition, Any]:
    """The per-partition errors of a coordinator OffsetCommit/TxnOffsetCommit answer."""
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
