"""Request faults: rules consulted when a request arrives, before its handler.

A rule matches on any of API key, node, client id and transactional id, lets the
first ``skip`` matching requests through, then fires on up to ``count`` of them (every
one when ``count`` is absent). Its action: ``delay`` (by ``delay_ms``, then process),
``drop_response`` (process, then never answer: the lost acknowledgement behind most
duplicate bugs), ``close_after`` (process, then close the connection) or
``close_before`` (close without processing). Every firing is logged and counted.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

ACTIONS = ("delay", "drop_response", "close_after", "close_before")


@dataclass
class FaultRule:
    id: int
    action: str
    api_key: int | None = None
    node_id: int | None = None
    client_id: str | None = None
    transactional_id: str | None = None
    delay_ms: int = 0
    skip: int = 0
    count: int | None = None
    matched: int = 0
    fired: int = 0

    def matches(self, node_id: int, api_key: int, client_id: str | None, request) -> bool:
        return ((self.api_key is None or self.api_key == api_key)
                and (self.node_id is None or self.node_id == node_id)
                and (self.client_id is None or self.client_id == client_id)
                and (self.transactional_id is None
                     or getattr(request, "transactional_id", None) == self.transactional_id))

    def describe(self) -> dict:
        return {k: getattr(self, k) for k in ("id", "action", "api_key", "node_id", "client_id", "transactional_id",
                                              "delay_ms", "skip", "count", "matched", "fired")}


class FaultRules:
    def __init__(self) -> None:
        self.rules: dict[int, FaultRule] = {}
        self._ids = itertools.count(1)

    def add(self, action: str, **match) -> FaultRule:
        rule = FaultRule(next(self._ids), action, **match)
        self.rules[rule.id] = rule
        return rule

    def consult(self, node_id: int, api_key: int, client_id: str | None, request) -> FaultRule | None:
        """The rule that fires for this request, if any (the first added wins)."""
        if not self.rules:
            return None
        for rule in self.rules.values():
            if not rule.matches(node_id, api_key, client_id, request):
                continue
            rule.matched += 1
            if rule.matched <= rule.skip or (rule.count is not None and rule.fired >= rule.count):
                continue
            rule.fired += 1
            log.warning("fault rule %d fired: %s on API %d to node %d from client %r", rule.id, rule.action,
                        api_key, node_id, client_id)
            return rule
        return None
