"""The broker's clock: waits follow ``call_later``, so a clock that schedules its own
timers (a virtual clock) drives every sleep and timeout in the broker."""

from __future__ import annotations

import asyncio
import heapq
import itertools

import pytest

from broker.clock import Clock


class ManualClock(Clock):
    """Time moves only when ``advance`` is called; due timers fire in deadline order."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self._timers: list = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return int(self.now * 1000)

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay_s, callback):
        entry = [self.now + max(delay_s, 0.0), next(self._seq), callback]
        heapq.heappush(self._timers, entry)

        class Handle:
            def cancel(self_inner) -> None:
                entry[2] = None

        return Handle()

    def advance(self, seconds: float) -> list[float]:
        self.now += seconds
        fired = []
        while self._timers and self._timers[0][0] <= self.now:
            when, _, callback = heapq.heappop(self._timers)
            if callback is not None:
                fired.append(when)
                callback()
        return fired


def test_system_clock_reads_wall_and_monotonic_time():
    clock = Clock()
    assert clock.now_ms() > 1_600_000_000_000
    a = clock.monotonic()
    assert clock.monotonic() >= a


def test_sleep_and_wait_for_follow_the_clock():
    async def scenario():
        clock = ManualClock()
        order = []

        async def sleeper(name, seconds):
            await clock.sleep(seconds)
            order.append(name)

        tasks = [asyncio.create_task(sleeper("late", 5)), asyncio.create_task(sleeper("early", 1))]
        await asyncio.sleep(0)
        assert clock.advance(0.5) == []
        await asyncio.sleep(0)
        assert order == []
        clock.advance(10)  # both due: fired in deadline order
        await asyncio.gather(*tasks)
        assert order == ["early", "late"]

        never = asyncio.Event()
        waiting = asyncio.create_task(clock.wait_for(never.wait(), 3))
        await asyncio.sleep(0)
        clock.advance(3)
        with pytest.raises(asyncio.TimeoutError):
            await waiting

        ready = asyncio.Event()
        waiting = asyncio.create_task(clock.wait_for(ready.wait(), 3))
        await asyncio.sleep(0)
        ready.set()
        assert await waiting is True
        assert all(entry[2] is None for entry in clock._timers)  # the timeout was cancelled

    asyncio.run(scenario())


def test_wait_for_passes_on_a_cancellation_of_the_waiter():
    async def scenario():
        clock = Clock()
        waiter = asyncio.create_task(clock.wait_for(asyncio.Event().wait(), 60))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(scenario())


def test_wait_for_runs_a_coroutine_in_the_calling_task():
    async def scenario():
        clock = ManualClock()
        caller = asyncio.current_task()
        ran_in = []

        async def immediate():
            ran_in.append(asyncio.current_task())
            return 7

        tasks_before = len(asyncio.all_tasks())
        assert await clock.wait_for(immediate(), 3) == 7
        assert ran_in == [caller] and len(asyncio.all_tasks()) == tasks_before
        assert clock._timers == []  # it never waited: no timer was armed

        # one that waits runs on under the timer from where it first waited, to its result
        async def waits_twice():
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            ran_in.append(asyncio.current_task())
            return 8

        assert await clock.wait_for(waits_twice(), 3) == 8
        assert ran_in == [caller, caller] and len(clock._timers) == 1 and clock._timers[0][2] is None

        async def fails_after_waiting():
            await asyncio.sleep(0)
            raise KeyError("from the coroutine")

        with pytest.raises(KeyError, match="from the coroutine"):
            await clock.wait_for(fails_after_waiting(), 3)
        assert all(entry[2] is None for entry in clock._timers)

        # a timeout cancels the coroutine where it waits and leaves the task uncancelled
        cleaned = []

        async def stuck():
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append(True)

        async def expire_soon():
            await asyncio.sleep(0)
            clock.advance(3)

        advancing = asyncio.create_task(expire_soon())
        with pytest.raises(asyncio.TimeoutError):
            await clock.wait_for(stuck(), 3)
        await advancing
        assert cleaned == [True] and caller.cancelling() == 0

        # a coroutine that swallows the timeout's cancel returns its result; the task's
        # cancel request is taken back
        async def stubborn():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "kept"

        advancing = asyncio.create_task(expire_soon())
        assert await clock.wait_for(stubborn(), 3) == "kept"
        await advancing
        assert caller.cancelling() == 0
        await asyncio.sleep(0)  # no cancel left pending on the task

    asyncio.run(scenario())


def test_wait_for_a_timeout_and_an_outside_cancel_together_is_a_cancel():
    async def scenario():
        clock = ManualClock()

        async def waiter():
            return await clock.wait_for(asyncio.Event().wait(), 3)

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        task.cancel()
        clock.advance(3)  # the timeout fires in the same turn as the outside cancel
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
