"""The one clock every part of the broker reads time from.

Handlers, storage, the coordinator services and the background duties ask the
broker's ``Clock`` for the time and for their waits; the sans-IO cores (protocol/,
coordinator/, the storage state machines) never read time at all: they are handed
``now`` by whoever calls them, which got it here.

A virtual clock (for tests that jump time forward) is this class with two changes:
``now_ms``/``monotonic`` add an offset, and ``call_later`` keeps its timers in its own
wheel, firing every due timer in deadline order when time jumps. ``sleep`` and
``wait_for`` are written on top of ``call_later`` so that they follow either clock.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock:
    """The system clock: wall time for timestamps, monotonic time for durations, and
    timers on the running event loop."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, deadlines kept in state)."""
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        """Seconds that never go backwards (idle connections, elapsed-time logging)."""
        return time.monotonic()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        """Runs ``callback`` on the event loop after ``delay_s`` seconds of this clock."""
        return asyncio.get_running_loop().call_later(max(delay_s, 0.0), callback)

    async def sleep(self, delay_s: float) -> None:
        if delay_s <= 0:
            await asyncio.sleep(0)
            return
        done = asyncio.get_running_loop().create_future()
        handle = self.call_later(delay_s, lambda: done.done() or done.set_result(None))
        try:
            await done
        finally:
            handle.cancel()

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float) -> T:
        """``awaitable``'s result, or ``asyncio.TimeoutError`` once ``timeout_s`` of this
        clock has passed (the awaitable is then cancelled, as asyncio.wait_for does).

        A coroutine runs in the calling task, as under ``asyncio.timeout`` (the timer
        cancels this task): no task per wait, and work that finishes without waiting
        finishes in this turn of the loop, arming no timer (none could fire before the
        turn ends). A future or task is awaited in a task."""
        current = asyncio.current_task()
        if current is None or not asyncio.iscoroutine(awaitable):
            return await self._wait_for_in_task(awaitable, timeout_s)
        cancelling = current.cancelling()
        try:
            waits_on = awaitable.send(None)  # its first step, up to where it first waits
        except StopIteration as finished:
            return finished.value
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            current.cancel()

        handle = self.call_later(timeout_s, expire)
        try:
            result = await _resume(awaitable, waits_on)
        except asyncio.CancelledError:
            # ours only if no one else cancelled the task too (then theirs propagates)
            if expired and current.uncancel() <= cancelling:
                raise asyncio.TimeoutError() from None
            raise
        finally:
            handle.cancel()
        if expired:  # the awaitable finished despite the cancel: take ours back
            current.uncancel()
        return result

    async def _wait_for_in_task(self, awaitable: Awaitable[T], timeout_s: float) -> T:
        task = asyncio.ensure_future(awaitable)
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        handle = self.call_later(timeout_s, expire)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if expired and (current is None or current.cancelling() == 0):
                raise asyncio.TimeoutError() from None
            raise
        finally:
            handle.cancel()
            if not task.done():
                task.cancel()


@types.coroutine
def _resume(coroutine, waits_on):
    """Goes on with ``coroutine``, which waits on ``waits_on`` after a first step taken
    outside this await, as ``await coroutine`` would have."""
    while True:
        try:
            sent = yield waits_on
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as e:  # a cancel: raised where the coroutine waits
            step, value = coroutine.throw, e
        else:
            step, value = coroutine.send, sent
        try:
            waits_on = step(value)
        except StopIteration as finished:
            return finished.value


SYSTEM_CLOCK = Clock()
