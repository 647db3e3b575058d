"""The virtual clock: the system clock plus an offset that only grows, and a wheel of
the timers set through it, so that moving time forward fires every timer that falls
due, in deadline order, at once (`eosbroker ctl clock advance 7d`).

Timers still fire by themselves when real time reaches them. Clients keep real time;
everything the broker stamps or schedules (LogAppendTime, the transaction log,
producer state, transaction timeouts, expirations, session timeouts) follows this one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable

from broker.clock import Clock

log = logging.getLogger(__name__)


class _Timer:
    __slots__ = ("deadline", "callback", "loop_handle", "done")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.loop_handle: asyncio.TimerHandle | None = None
        self.done = False

    def fire(self) -> None:
        if self.done:
            return
        self.done = True
        if self.loop_handle is not None:
            self.loop_handle.cancel()
        self.callback()

    def cancel(self) -> None:
        self.done = True
        if self.loop_handle is not None:
            self.loop_handle.cancel()


class VirtualClock(Clock):
    def __init__(self) -> None:
        self.offset_ms = 0
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()

    def now_ms(self) -> int:
        return super().now_ms() + self.offset_ms

    def monotonic(self) -> float:
        return super().monotonic() + self.offset_ms / 1000

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> _Timer:
        delay_s = max(delay_s, 0.0)
        timer = _Timer(self.monotonic() + delay_s, callback)
        timer.loop_handle = asyncio.get_running_loop().call_later(delay_s, timer.fire)
        heapq.heappush(self._timers, (timer.deadline, next(self._order), timer))
        if len(self._timers) > 4096:  # fired and cancelled timers pile up between jumps
            self._timers = [t for t in self._timers if not t[2].done]
            heapq.heapify(self._timers)
        return timer

    def advance(self, ms: int) -> int:
        """Moves time forward by ``ms`` and fires the timers now due, earliest first.
        Returns how many fired."""
        if ms < 0:
            raise ValueError("the clock only moves forward")
        self.offset_ms += ms
        now = self.monotonic()
        fired = 0
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.done:
                timer.fire()
                fired += 1
        log.info("clock advanced by %d ms (offset now %d ms); %d timers fired", ms, self.offset_ms, fired)
        return fired
