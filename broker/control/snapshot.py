"""The live state the console shows and /metrics exports, read from the objects the
request handlers use (no bookkeeping of its own): nodes, transactions as their
coordinators describe them, partitions' offsets and open transactions, producers,
consumer and streams groups with their committed and pending offsets, and share groups with their
share-partitions' records in flight.

Every function takes the running ``broker.process.Broker`` and returns plain data.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.messages import OffsetFetchGroup
from protocol.names import CONSUMER_OFFSETS, TRANSACTION_STATE

OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def _coordinators(broker, topic: str):
    """(node id, coordinator) of every node whose coordinator for ``topic`` is running."""
    for node in broker.nodes:
        if not node.is_up:
            continue
        service = node.coordinator_service(topic, create=False)
        if service is not None:
            yield node.node_id, service.coordinator


def nodes(broker) -> list[dict]:
    return [n.describe() for n in broker.cluster.nodes]


def transactions(broker, now_ms: int) -> list[dict]:
    """Every transactional id a serving coordinator holds, as DescribeTransactions tells it."""
    out = []
    for node_id, coordinator in _coordinators(broker, TRANSACTION_STATE):
        listed = coordinator.list_transactions()
        if listed.error != ErrorCode.none:  # still loading: shown once loaded
            continue
        ids = [t.transactional_id for t in listed.transaction_states]
        for d in coordinator.describe_transactions(ids):
            if d.error != ErrorCode.none:
                continue
            in_flight = d.state in OPEN_STATES and d.transaction_start_time_ms >= 0
            out.append({
                "transactional_id": d.transactional_id, "state": d.state, "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch, "timeout_ms": d.transaction_timeout_ms,
                "start_time_ms": d.transaction_start_time_ms,
                "age_ms": now_ms - d.transaction_start_time_ms if in_flight else None,
                "partitions": [f"{t}-{p}" for t, ps in d.topics for p in sorted(ps)],
                "coordinator": node_id, "open": d.state == "Ongoing",
            })
    return sorted(out, key=lambda t: t["transactional_id"])


def partitions(broker) -> list[dict]:
    cluster = broker.cluster
    out = []
    for topic, index in sorted(cluster.partition_keys()):
        try:
            p = cluster.partition(topic, index)  # the control API's view opens what no client has
        except OSError as e:
            out.append({"topic": topic, "partition": index, "leader": cluster.leader_of(topic, index),
                        "error": str(e)})
            continue
        out.append({
            "topic": topic, "partition": index, "leader": cluster.leader_of(topic, index),
            "log_start_offset": p.log_start_offset, "last_stable_offset": p.last_stable_offset,
            "high_watermark": p.high_watermark,
            "open_transactions": len(p.producer_state.open_transactions()),
            "aborted_transactions": len(p.aborted),
        })
    return out


def producers(broker) -> list[dict]:
    out = []
    for (topic, index), p in sorted(broker.cluster.partitions.items()):
        for e in sorted(p.producer_state.entries().values(), key=lambda e: e.producer_id):
            out.append({"topic": topic, "partition": index, "producer_id": e.producer_id,
                        "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                        "current_txn_start_offset": e.current_txn_first_offset,
                        "last_timestamp": e.last_timestamp})
    return out


def share_partitions(broker) -> list[dict]:
    """Share-partitions (KIP-932) on their leaders: the share-partition start offset and
    the records in flight, by state (available, acquired, acknowledged, archived)."""
    by_id = broker.cluster.topics.by_id
    out = []
    for node in broker.nodes:
        shares = node.made("shares")  # not started: this node leads no share-partition
        for (group, topic_id, index), share in ([] if shares is None else sorted(shares.partitions.items(), key=str)):
            topic = by_id.get(topic_id)
            counts = share.counts()
            out.append({"group_id": group, "topic": topic.name if topic else str(topic_id), "partition": index,
                        "leader": node.node_id, "start_offset": share.start_offset, "counts": counts,
                        "in_flight": sum(counts.values())})
    return out


def groups(broker) -> list[dict]:
    """Classic, consumer, streams and share groups with their members and offsets; a partition
    whose offset a transaction has committed but not yet completed is listed as pending.
    Each offset's lag: to the partition's LSO (what a read_committed consumer has left to
    read) and to its high watermark. A share group's share-partitions: their records in
    flight by state (``share_partitions``)."""
    out = []
    shared: dict[str, list[dict]] = {}
    for row in share_partitions(broker):
        shared.setdefault(row["group_id"], []).append(row)
    for node_id, coordinator in _coordinators(broker, CONSUMER_OFFSETS):
        listed = coordinator.list_groups()
        if listed.error_code != ErrorCode.none:  # still loading
            continue
        for g in listed.groups:
            consumer = coordinator.consumer_group(g.group_id) or coordinator.streams_group(g.group_id)
            group = coordinator.group(g.group_id) if consumer is None else None
            if consumer is None and group is None:
                share = coordinator.share_group(g.group_id)
                if share is not None:
                    out.append({"group_id": g.group_id, "protocol": "share", "state": share.state,
                                "generation": share.group_epoch, "members": sorted(share.members),
                                "coordinator": node_id, "offsets": [], "has_pending_offsets": False,
                                "share_partitions": shared.get(g.group_id, [])})
                continue
            fetched = coordinator.offset_fetch([OffsetFetchGroup(g.group_id)], require_stable=False).groups[0]
            stable = coordinator.offset_fetch([OffsetFetchGroup(g.group_id)], require_stable=True).groups[0]
            unstable = {(t.name, p.partition_index) for t in stable.topics for p in t.partitions
                        if p.error_code == ErrorCode.unstable_offset_commit}
            committed = [{"topic": t.name, "partition": p.partition_index, "offset": p.committed_offset,
                          "pending": (t.name, p.partition_index) in unstable}
                         | _lag(broker.cluster, t.name, p.partition_index, p.committed_offset)
                         for t in fetched.topics for p in t.partitions]
            out.append({"group_id": g.group_id, "protocol": "classic" if consumer is None else g.group_type,
                        "state": group.state.value if consumer is None else g.group_state,
                        "generation": group.generation_id if consumer is None else consumer.group_epoch,
                        "members": sorted((group or consumer).members), "coordinator": node_id,
                        "offsets": committed, "has_pending_offsets": coordinator.has_pending_offsets(g.group_id)})
    return sorted(out, key=lambda g: g["group_id"])


def _lag(cluster, topic: str, index: int, offset: int) -> dict:
    part = cluster.partitions.get((topic, index))  # not opened for this: an unopened one moved nowhere
    if part is None or offset < 0:
        return {"last_stable_offset": None, "high_watermark": None, "lag_lso": None, "lag_hw": None}
    lso, hw = part.last_stable_offset, part.high_watermark
    return {"last_stable_offset": lso, "high_watermark": hw, "lag_lso": max(0, lso - offset),
            "lag_hw": max(0, hw - offset)}
