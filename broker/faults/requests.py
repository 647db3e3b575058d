"""Request faults: rules consulted when a request arrives, before its handler (on a
client connection, and on the network between nodes).

A rule's ``Match`` names any of: API key and version range, node, client id,
transactional id, producer id, group id, topic, partition (``broker.faults.fields``
finds what a request names). Of the matching requests the rule lets the first
``skip`` through, then fires on up to ``count`` of them (every one when absent: until
removed); with a ``probability`` each of those fires only if the rule's own RNG,
seeded by ``seed``, says so (same seed and same requests: same firings).

Actions: ``delay`` (by ``delay_ms``, then process), ``drop_response`` (process, never
answer: the lost acknowledgement behind most duplicate bugs), ``close_after``
(process, then close), ``close_before`` (close without processing), ``error`` (answer
``error`` without processing: ``broker.faults.answers``) and ``hold`` (wait until
released by ``release``, removal or clear, then process; only its own connection
waits). Every firing is logged and counted per rule and action.

``observe`` adds an observer: a callable given a ``RequestSeen`` for every request a
node receives (before any rule acts), with ``Match.matches`` to test it.

``Match`` and ``FaultRule`` live in ``broker.faults.rules`` and load with the first
rule (this module names them on first use), like ``broker.faults.fields``: a broker
never given a rule or a trigger builds none of them at start-up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.request_wire import api_name

if TYPE_CHECKING:  # loaded on first use: a broker without rules or triggers never needs them
    from broker.faults.fields import Named
    from broker.faults.rules import FaultRule, Match

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
            from broker.faults.fields import named_in

            self._named = named_in(self.api_key, self.request, self._topic_name)
        return self._named

    def describe(self) -> str:
        return (f"{api_name(self.api_key)} v{self.api_version} to node {self.node_id} "
                f"from client {self.client_id!r}")


class FaultRules:
    """The rules in force and the observers of every request; ``firings`` counts per
    (rule id, action) and outlives removed rules (the /metrics counter)."""

    def __init__(self) -> None:
        self.on_fire = None  # (rule, seen): the event history's record of a firing
        self.on_change = None  # (): a rule added or removed (replication fetches while any is in force)
        self.rules: dict[int, FaultRule] = {}  # changed only through add, remove and clear
        self.observers: tuple[Callable[[RequestSeen], None], ...] = ()  # added by ``observe``
        self.firings: Counter[tuple[int, str]] = Counter()
        self._ids = itertools.count(1)
        # Whether any rule or observer is set: what every request's dispatch asks, kept
        # up to date by each change rather than worked out per request.
        self.active = False

    def observe(self, observer: Callable[[RequestSeen], None]) -> None:
        self.observers = (*self.observers, observer)
        self._changed()

    def add(self, action: str, match: Match | None = None, **options) -> FaultRule:
        if options.get("probability") is not None and options.get("seed") is None:
            import random

            options["seed"] = random.randrange(2**31)  # reported, so a run can be repeated
        from broker.faults.rules import FaultRule, Match

        rule = FaultRule(next(self._ids), action, match or Match(), **options)
        self.rules[rule.id] = rule
        self._changed()
        return rule

    def _changed(self) -> None:
        self.active = bool(self.rules or self.observers)
        if self.on_change is not None:
            self.on_change()

    def remove(self, rule_id: int) -> FaultRule | None:
        rule = self.rules.pop(rule_id, None)
        if rule is not None:
            rule.release()
            self._changed()
        return rule

    def clear(self) -> int:
        rules = list(self.rules.values())
        self.rules.clear()
        for rule in rules:
            rule.release()
        self._changed()
        return len(rules)

    def consult(self, seen: RequestSeen) -> FaultRule | None:
        """Tells the observers, then returns the rule that fires for this request, if
        any (the first added that fires wins; the rules after it do not see the
        request)."""
        for observer in self.observers:
            try:
                observer(seen)
            except Exception:  # a trigger's failure never costs a client its answer
                log.exception("request observer %r failed on %s", observer, seen.describe())
        for rule in list(self.rules.values()):
            if rule.match.matches(seen) and rule.fires():
                self.firings[(rule.id, rule.action)] += 1
                log.warning("fault rule %d fired (%d of %d matched): %s on %s", rule.id, rule.fired, rule.matched,
                            rule.action, seen.describe())
                if self.on_fire is not None:
                    self.on_fire(rule, seen)
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


async def run_request(broker, node_id: int, header, request, process,
                      serving: Callable[[], bool] = lambda: True) -> Any:
    """What a node's dispatch (a client's connection, or the network between nodes) calls
    instead of ``process()`` while rules or observers are set (``FaultRules.active``):
    the observers are told of the request, and the rule that fires runs it
    (``run_under``)."""
    seen = seen_by(broker, node_id, header.api_key, header.api_version, header.client_id, request)
    return await run_under(broker.faults.consult(seen), seen, broker.clock, process, serving)


async def run_under(rule: FaultRule | None, seen: RequestSeen, clock, process,
                    serving: Callable[[], bool] = lambda: True) -> Any:
    """Runs ``process()`` (the request's handler) as ``rule`` says: returns the handler's
    result, an error answer, or DROPPED; raises FaultClose for the closing actions.

    A delayed or held request has reached its node: it is processed when its wait ends
    even if the requester gave up meanwhile (timed out, closed the connection), as a
    Kafka broker processes a request it has read; only its answer is lost. Not when
    ``serving()`` says the node stopped meanwhile."""
    if rule is None:
        return await process()
    if rule.action == "close_before":
        raise FaultClose(f"fault rule {rule.id}: closing before processing")
    if rule.action == "error":
        from broker.faults.answers import error_answer

        return error_answer(seen.api_key, seen.api_version, seen.request, rule.error)
    if rule.action in ("delay", "hold"):
        result = await _outliving(_late(rule, clock, process, serving))
    else:
        result = await process()
    if rule.action == "drop_response":
        return DROPPED
    if rule.action == "close_after":
        raise FaultClose(f"fault rule {rule.id}: closing after processing")
    return result


_LATE: set[asyncio.Task] = set()  # delayed or held requests, referenced until processed


async def _late(rule: FaultRule, clock, process, serving: Callable[[], bool]) -> Any:
    if rule.action == "delay":
        await clock.sleep(rule.delay_ms / 1000)
    else:
        await rule.hold()
    if not serving():
        raise FaultClose(f"fault rule {rule.id}: the node stopped while the request waited")
    return await process()


def _outliving(work) -> asyncio.Future:
    """``work`` as a task its awaiter's cancellation does not cancel."""
    task = asyncio.get_running_loop().create_task(work)
    _LATE.add(task)
    task.add_done_callback(_late_done)
    return asyncio.shield(task)


def _late_done(task: asyncio.Task) -> None:
    _LATE.discard(task)
    if not task.cancelled() and isinstance(task.exception(), Exception) \
            and not isinstance(task.exception(), FaultClose):
        log.debug("a delayed request failed: %r", task.exception())


def __getattr__(name: str):
    if name in ("Match", "FaultRule"):  # broker.faults.rules, loaded on first use
        from broker.faults import rules as fault_rules

        return getattr(fault_rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
