"""Scenario triggers at run time: consulted when a request arrives and when its answer
is about to leave; a matching trigger runs its control operations in order.

The operations run in a task of their own, and the request waits for them (shielded):
a trigger that pauses the node the request arrived at holds that very request until
the node resumes, one that stops or kills it ends the request with its connection
(the client never gets the answer), and neither cancels the operations half way.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from broker.faults.scenarios.format import NODE_PLACEHOLDER, OLD_VERSIONS_PREFIX, TriggerSpec
from protocol.request_wire import api_name
from protocol.answer_wire import ms

log = logging.getLogger(__name__)


@dataclass
class Trigger:
    id: int
    spec: TriggerSpec
    matched: int = 0
    fired: int = 0
    errors: list[str] = field(default_factory=list)

    def matches(self, at: str, node_id: int, api_key: int, client_id: str | None, request: Any) -> bool:
        w = self.spec.when
        if w.api_key != api_key or w.at != at:
            return False
        if (w.node_id is not None and w.node_id != node_id) or (w.client_id is not None and w.client_id != client_id):
            return False
        return all(_field(request, name) == want for name, want in w.fields.items())

    def describe(self) -> dict:
        return {"id": self.id, "matched": self.matched, "fired": self.fired, "errors": list(self.errors)} \
            | self.spec.describe()


def _field(request: Any, name: str) -> Any:
    v = getattr(request, name, None)
    if v is None:
        v = getattr(request, OLD_VERSIONS_PREFIX + name, None)
    if hasattr(v, "total_seconds"):
        return ms(v)
    return v


class Triggers:
    """The loaded scenario's triggers; ``broker.triggers`` while one is loaded."""

    def __init__(self, control, specs: tuple[TriggerSpec, ...]) -> None:
        self.control = control  # broker.control.service.ControlService
        self.triggers = [Trigger(i + 1, spec) for i, spec in enumerate(specs)]
        self._running: set[asyncio.Task] = set()

    def describe(self) -> list[dict]:
        return [t.describe() for t in self.triggers]

    async def arrived(self, node, api_key: int, client_id: str | None, request: Any) -> None:
        await self._consult("arrival", node, api_key, client_id, request)

    async def answering(self, node, api_key: int, client_id: str | None, request: Any) -> None:
        await self._consult("answer", node, api_key, client_id, request)

    async def _consult(self, at: str, node, api_key: int, client_id: str | None, request: Any) -> None:
        due = []
        for trigger in self.triggers:
            if not trigger.matches(at, node.node_id, api_key, client_id, request):
                continue
            trigger.matched += 1
            w = trigger.spec.when
            if trigger.matched <= w.skip or (w.count is not None and trigger.fired >= w.count):
                continue
            trigger.fired += 1
            log.warning("scenario trigger %d fired: %s %s at node %d from client %r (match %d)", trigger.id,
                        api_name(api_key), at, node.node_id, client_id, trigger.matched)
            due.append(trigger)
        for trigger in due:
            task = asyncio.get_running_loop().create_task(self._run(trigger, node.node_id))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            await asyncio.shield(task)

    async def _run(self, trigger: Trigger, node_id: int) -> None:
        for step in trigger.spec.do:
            args = {k: node_id if v == NODE_PLACEHOLDER else v for k, v in step.args.items()}
            try:
                await self.control.call(step.op, args, by=f"scenario trigger {trigger.id}")
            except Exception as e:  # a step that cannot run now (node already down): logged, the rest go on
                message = getattr(e, "message", None) or str(e) or type(e).__name__
                trigger.errors.append(f"{step.op}: {message}")
                log.warning("scenario trigger %d: %s %s refused: %s", trigger.id, step.op, args, message)

    async def close(self) -> None:
        for task in list(self._running):
            try:
                await task
            except Exception:  # already logged by the step
                pass
