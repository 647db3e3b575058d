"""Periodic background duties; a failing duty is logged and tried again next time."""

from __future__ import annotations

import asyncio
import inspect
import logging

log = logging.getLogger(__name__)


async def every(interval_ms: float, duty) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            result = duty()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("background duty %s failed", getattr(duty, "__name__", duty))
