"""Server-side assignors of KIP-848 consumer groups (``group.consumer.assignors``).

An assignor maps every member to the partitions it should own (the target
assignment), from each member's subscribed topics and the topics' partition counts.
``uniform`` spreads all partitions as evenly as the subscriptions allow and keeps
partitions where they were (sticky); ``range`` gives each member of a topic a
contiguous range of its partitions, members ordered by id, as the classic range
assignor does per topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Partitions = dict[uuid.UUID, frozenset[int]]  # topic id -> partition indexes
Assignment = dict[str, Partitions]  # member id -> its partitions


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    subscriptions: Mapping[str, frozenset[uuid.UUID]]  # member id -> subscribed topic ids
    partition_counts: Mapping[uuid.UUID, int]  # topic id -> partitions (existing topics)
    previous: Mapping[str, Partitions]  # the last target assignment


def uniform(spec: AssignmentSpec) -> Assignment:
    members = sorted(spec.subscriptions)
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for topic_id in sorted(spec.partition_counts, key=str):
        subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
        if subscribers:
            for p in range(spec.partition_counts[topic_id]):
                eligible[(topic_id, p)] = subscribers
    owner: dict[tuple[uuid.UUID, int], str] = {}
    counts = dict.fromkeys(members, 0)
    # Sticky first: a member keeps what it had and may still have.
    for member in members:
        for topic_id, partitions in sorted(spec.previous.get(member, {}).items(), key=lambda i: str(i[0])):
            for p in sorted(partitions):
                tp = (topic_id, p)
                if member in eligible.get(tp, ()) and tp not in owner:
                    owner[tp] = member
                    counts[member] += 1
    for tp, subscribers in eligible.items():
        if tp not in owner:
            chosen = min(subscribers, key=lambda m: (counts[m], m))
            owner[tp] = chosen
            counts[chosen] += 1
    # Balance: move a partition while its owner has two more than another subscriber.
    # Every move lowers the sum of squared counts, so this ends.
    moved = True
    while moved:
        moved = False
        for tp, subscribers in eligible.items():
            current = owner[tp]
            lightest = min(subscribers, key=lambda m: (counts[m], m))
            if counts[current] > counts[lightest] + 1:
                owner[tp] = lightest
                counts[current] -= 1
                counts[lightest] += 1
                moved = True
    return _by_member(members, owner)


def range_(spec: AssignmentSpec) -> Assignment:
    members = sorted(spec.subscriptions)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for topic_id, count in spec.partition_counts.items():
        subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
        if not subscribers:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = quota + (1 if i < extra else 0)
            for p in range(start, start + size):
                owner[(topic_id, p)] = member
            start += size
    return _by_member(members, owner)


def _by_member(members: list[str], owner: dict[tuple[uuid.UUID, int], str]) -> Assignment:
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for (topic_id, p), member in owner.items():
        out[member].setdefault(topic_id, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in out.items()}


def simple(spec: AssignmentSpec) -> Assignment:
    """Share groups' assignor (Kafka's SimpleAssignor): members of a share group may
    share a partition. Per topic, with no more subscribers than partitions, each
    partition goes to one subscriber, spread evenly, keeping previous owners where the
    balance allows; with more subscribers than partitions, every subscriber gets one
    partition and the partitions are shared round-robin."""
    members = sorted(spec.subscriptions)
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic_id in sorted(spec.partition_counts, key=str):
        count = spec.partition_counts[topic_id]
        subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
        if not subscribers or not count:
            continue
        if len(subscribers) > count:
            for i, member in enumerate(subscribers):
                out[member].setdefault(topic_id, set()).add(i % count)
            continue
        topic_spec = AssignmentSpec({m: frozenset({topic_id}) for m in subscribers}, {topic_id: count},
                                    {m: {topic_id: spec.previous.get(m, {}).get(topic_id, frozenset())}
                                     for m in subscribers})
        for member, partitions in uniform(topic_spec).items():
            if partitions.get(topic_id):
                out[member].setdefault(topic_id, set()).update(partitions[topic_id])
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in out.items()}


ASSIGNORS: dict[str, Callable[[AssignmentSpec], Assignment]] = {"uniform": uniform, "range": range_}
