"""Periodic background duties; a failing duty is logged and tried again next time."""

from __future__ import annotations

import inspect
import logging

from broker.clock import Clock

log = logging.getLogger(__name__)


async def every(clock: Clock, interval_ms: float, duty) -> None:
    while True:
        await clock.sleep(interval_ms / 1000)
        try:
            result = duty()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("background duty %s failed", getattr(duty, "__name__", duty))
