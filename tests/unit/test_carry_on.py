"""_carry_on: a request the connection's reader started outside any task and that
suspended is carried on by the processor task as if it had run there all along: its
result, its errors, and a cancellation of the task (its cleanup runs) all reach it."""

from __future__ import annotations

import asyncio

import pytest

from broker.server import _carry_on


def _start(coro):
    """Runs ``coro`` up to its first suspension, as the reader does: (coro, what it waits for)."""
    return coro, coro.send(None)


async def test_the_result_of_a_carried_on_coroutine_is_the_tasks():
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    steps = []

    async def request():
        steps.append("started")
        value = await gate
        await asyncio.sleep(0)  # a second suspension, now inside the task
        steps.append("resumed")
        return value + 1

    started = _start(request())
    assert steps == ["started"]

    async def processor():
        return await _carry_on(*started)

    task = loop.create_task(processor())
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(41)
    assert await task == 42
    assert steps == ["started", "resumed"]


async def test_an_error_after_the_suspension_reaches_the_task():
    gate = asyncio.get_running_loop().create_future()

    async def request():
        await gate
        raise ValueError("bad")

    started = _start(request())
    gate.set_result(None)
    with pytest.raises(ValueError, match="bad"):
        await _carry_on(*started)


async def test_cancelling_the_task_cancels_the_coroutine_and_runs_its_cleanup():
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    cleaned = []

    async def request():
        try:
            await gate
        finally:
            cleaned.append(True)

    started = _start(request())
    task = loop.create_task(_carry_on(*started))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]
    assert gate.cancelled()  # what it waited for was cancelled, as a task's await is


async def test_a_coroutine_that_handles_the_cancellation_returns_its_answer():
    gate = asyncio.get_running_loop().create_future()

    async def request():
        try:
            await gate
        except asyncio.CancelledError:
            return "gave up"
        return "done"

    task = asyncio.get_running_loop().create_task(_carry_on(*_start(request())))
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "gave up"
