"""What a fault rule is: the requests it matches (``Match``) and what it does to them
(``FaultRule``: its action, how many it lets through, fires on and holds).

A module of its own, loaded with the first rule, trigger or control-API fault
(``broker.faults.requests`` names both on first use): a broker that is never given one does not
build these classes at start-up.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.faults.requests import RequestSeen


@dataclass(frozen=True)
class Match:
    """Which requests a rule (or a trigger) is about; None fields match anything."""

    api_key: int | None = None
    min_version: int | None = None
    max_version: int | None = None
    node_id: int | None = None
    client_id: str | None = None
    transactional_id: str | None = None
    producer_id: int | None = None
    group_id: str | None = None
    topic: str | None = None
    partition: int | None = None

    FIELDS = ("api_key", "min_version", "max_version", "node_id", "client_id", "transactional_id", "producer_id",
              "group_id", "topic", "partition")

    def matches(self, seen: RequestSeen) -> bool:
        if self.api_key is not None and self.api_key != seen.api_key:
            return False
        if self.min_version is not None and seen.api_version < self.min_version:
            return False
        if self.max_version is not None and seen.api_version > self.max_version:
            return False
        if self.node_id is not None and self.node_id != seen.node_id:
            return False
        if self.client_id is not None and self.client_id != seen.client_id:
            return False
        if self.transactional_id is None and self.producer_id is None and self.group_id is None \
                and self.topic is None and self.partition is None:
            return True
        named = seen.named
        if self.transactional_id is not None and self.transactional_id not in named.transactional_ids:
            return False
        if self.producer_id is not None and self.producer_id not in named.producer_ids:
            return False
        if self.group_id is not None and self.group_id not in named.group_ids:
            return False
        if self.topic is not None or self.partition is not None:
            return any((self.topic is None or t == self.topic) and (self.partition is None or p == self.partition)
                       for t, p in named.partitions)
        return True

    def describe(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}


@dataclass
class FaultRule:
    """One fault rule: its action, its match, and how often it has matched and fired."""

    id: int
    action: str
    match: Match = field(default_factory=Match)
    delay_ms: int = 0
    error: int | None = None  # the error code of an ``error`` rule
    skip: int = 0
    count: int | None = None
    nth: int | None = None  # as given; skip = nth - 1, count = 1
    probability: float | None = None
    seed: int | None = None
    matched: int = 0
    fired: int = 0
    held: list[asyncio.Future] = field(default_factory=list)

    def __post_init__(self) -> None:
        import random  # here: a broker without fault rules never loads it

        self._rng = random.Random(self.seed)

    def fires(self) -> bool:
        """Counts one matching request; whether the rule fires on it."""
        self.matched += 1
        if self.matched <= self.skip or (self.count is not None and self.fired >= self.count):
            return False
        if self.probability is not None and self._rng.random() >= self.probability:
            return False
        self.fired += 1
        return True

    async def hold(self) -> None:
        """Waits until the rule releases its held requests."""
        waiter = asyncio.get_running_loop().create_future()
        self.held.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self.held:
                self.held.remove(waiter)

    def release(self) -> int:
        released = 0
        for waiter in self.held:
            if not waiter.done():
                waiter.set_result(None)
                released += 1
        self.held.clear()
        return released

    def describe(self) -> dict:
        from broker.faults.answers import error_name

        out = {"id": self.id, "action": self.action} | self.match.describe()
        out |= {"delay_ms": self.delay_ms, "error": None if self.error is None else error_name(self.error),
                "skip": self.skip, "count": self.count, "nth": self.nth, "probability": self.probability,
                "seed": self.seed, "matched": self.matched, "fired": self.fired, "held": len(self.held)}
        return out
