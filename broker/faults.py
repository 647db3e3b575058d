"""Request faults: rules consulted when a request arrives, before its handler (on a
client connection, and on the network between nodes).

A rule's ``Match`` names any of: API key and version range, node, client id,
transactional id, producer id, group id, topic, partition (``broker.fault_fields``
finds what a request names). Of the matching requests the rule lets the first
``skip`` through, then fires on up to ``count`` of them (every one when absent: until
removed); with a ``probability`` each of those fires only if the rule's own RNG,
seeded by ``seed``, says so (same seed and same requests: same firings).

Actions: ``delay`` (by ``delay_ms``, then process), ``drop_response`` (process, never
answer: the lost acknowledgement behind most duplicate bugs), ``close_after``
(process, then close), ``close_before`` (close without processing), ``error`` (answer
``error`` without processing: ``broker.fault_answers``) and ``hold`` (wait until
released by ``release``, removal or clear, then process; only its own connection
waits). Every firing is logged and counted per rule and action.

Triggers use ``observers``: callables given a ``RequestSeen`` for every request a
node receives (before any rule acts), with ``Match.matches`` to test it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.fault_fields import Named, named_in
from protocol.apis import api_name

log = logging.getLogger(__name__)

ACTIONS = ("delay", "drop_response", "close_after", "close_before", "error", "hold")


class RequestSeen:
    """A request as fault rules and observers see it; what it names is worked out once,
    on first use."""

    __slots__ = ("node_id", "api_key", "api_version", "client_id", "request", "_topic_name", "_named")

    def __init__(self, node_id: int, api_key: int, api_version: int, client_id: str | None, request,
                 topic_name: Callable[[Any], str | None]) -> None:
        self.node_id = node_id
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id
        self.request = request
        self._topic_name = topic_name
        self._named: Named | None = None

    @property
    def named(self) -> Named:
        if self._named is None:
            self._named = named_in(self.api_key, self.request, self._topic_name)
        return self._named

    def describe(self) -> str:
        return (f"{api_name(self.api_key)} v{self.api_version} to node {self.node_id} "
                f"from client {self.client_id!r}")


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
        from broker.fault_answers import error_name

        out = {"id": self.id, "action": self.action} | self.match.describe()
        out |= {"delay_ms": self.delay_ms, "error": None if self.error is None else error_name(self.error),
                "skip": self.skip, "count": self.count, "nth": self.nth, "probability": self.probability,
                "seed": self.seed, "matched": self.matched, "fired": self.fired, "held": len(self.held)}
        return out


class FaultRules:
    """The rules in force and the observers of every request; ``firings`` counts per
    (rule id, action) and outlives removed rules (the /metrics counter)."""

    def __init__(self) -> None:
        self.rules: dict[int, FaultRule] = {}
        self.observers: list[Callable[[RequestSeen], None]] = []
        self.firings: Counter[tuple[int, str]] = Counter()
        self._ids = itertools.count(1)

    @property
    def active(self) -> bool:
        return bool(self.rules or self.observers)

    def add(self, action: str, match: Match | None = None, **options) -> FaultRule:
        if options.get("probability") is not None and options.get("seed") is None:
            import random

            options["seed"] = random.randrange(2**31)  # reported, so a run can be repeated
        rule = FaultRule(next(self._ids), action, match or Match(), **options)
        self.rules[rule.id] = rule
        return rule

    def remove(self, rule_id: int) -> FaultRule | None:
        rule = self.rules.pop(rule_id, None)
        if rule is not None:
            rule.release()
        return rule

    def clear(self) -> int:
        rules = list(self.rules.values())
        self.rules.clear()
        for rule in rules:
            rule.release()
        return len(rules)

    def consult(self, seen: RequestSeen) -> FaultRule | None:
        """Tells the observers, then returns the rule that fires for this request, if
        any (the first added that fires wins; the rules after it do not see the
        request)."""
        for observer in list(self.observers):
            try:
                observer(seen)
            except Exception:  # a trigger's failure never costs a client its answer
                log.exception("request observer %r failed on %s", observer, seen.describe())
        for rule in list(self.rules.values()):
            if rule.match.matches(seen) and rule.fires():
                self.firings[(rule.id, rule.action)] += 1
                log.warning("fault rule %d fired (%d of %d matched): %s on %s", rule.id, rule.fired, rule.matched,
                            rule.action, seen.describe())
                return rule
        return None


class FaultClose(Exception):
    """A rule closes the connection (the caller's kind of closing: TCP or node link)."""


DROPPED = object()  # a rule swallowed the answer: the requester never gets one


def seen_by(broker, node_id: int, api_key: int, api_version: int, client_id: str | None, request) -> RequestSeen:
    def topic_name(topic_id) -> str | None:
        info = broker.cluster.topics.by_id.get(topic_id)
        return None if info is None else info.name

    return RequestSeen(node_id, api_key, api_version, client_id, request, topic_name)


async def run_under(rule: FaultRule | None, seen: RequestSeen, clock, process) -> Any:
    """Runs ``process()`` (the request's handler) as ``rule`` says: returns the handler's
    result, an error answer, or DROPPED; raises FaultClose for the closing actions."""
    if rule is None:
        return await process()
    if rule.action == "close_before":
        raise FaultClose(f"fault rule {rule.id}: closing before processing")
    if rule.action == "error":
        from broker.fault_answers import error_answer

        return error_answer(seen.api_key, seen.api_version, seen.request, rule.error)
    if rule.action == "delay":
        await clock.sleep(rule.delay_ms / 1000)
    elif rule.action == "hold":
        await rule.hold()
    result = await process()
    if rule.action == "drop_response":
        return DROPPED
    if rule.action == "close_after":
        raise FaultClose(f"fault rule {rule.id}: closing after processing")
    return result
