"""`serval_common.aio`: the asyncio helpers every component uses."""

from __future__ import annotations

import asyncio

import pytest

from serval_common.aio import uninterrupted, wait_changed


def test_a_cancelled_caller_lets_an_uninterrupted_read_finish_then_is_cancelled() -> None:
    """The read runs to its end (a database session closes normally, never mid-query), and the
    caller's cancellation is raised after it."""
    steps: list[str] = []

    async def read() -> str:
        steps.append("read started")
        await asyncio.sleep(0.2)
        steps.append("read finished")
        return "value"

    async def scenario() -> None:
        caller = asyncio.create_task(uninterrupted(read()))
        await asyncio.sleep(0.05)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert steps == ["read started", "read finished"], "the read was not cut off"

    asyncio.run(scenario())


def test_an_uninterrupted_read_answers_and_raises_as_it_would() -> None:
    async def failing() -> str:
        raise ValueError("no such build")

    async def scenario() -> None:
        assert await uninterrupted(asyncio.sleep(0, result=7)) == 7
        with pytest.raises(ValueError, match="no such build"):
            await uninterrupted(failing())

    asyncio.run(scenario())


def test_wait_changed_says_whether_the_event_came_in_time() -> None:
    async def scenario() -> tuple[bool, bool]:
        changed = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, changed.set)
        came = await wait_changed(changed, 30)
        return came, await wait_changed(asyncio.Event(), 0.01)

    assert asyncio.run(scenario()) == (True, False)
