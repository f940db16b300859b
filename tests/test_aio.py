"""`serval_common.aio`: the asyncio helpers every component uses."""

from __future__ import annotations

import asyncio
import sys

import pydantic
import pytest

from serval_common.aio import run, running_loop_name, uninterrupted, wait_changed
from serval_common.settings import Settings


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


async def _loop_in_use() -> tuple[str, asyncio.AbstractEventLoop]:
    return running_loop_name(), asyncio.get_running_loop()


@pytest.mark.parametrize(
    ("event_loop", "expected"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_the_processes_run_on_the_event_loop_the_settings_name(event_loop: str, expected: str) -> None:
    """uvloop is in the api and node extras, so "auto" (the default) takes it; the loop is closed
    when the process's main coroutine ends."""
    name, loop = run(_loop_in_use(), event_loop)  # type: ignore[arg-type]
    assert name == expected
    assert loop.is_closed()


def test_without_uvloop_auto_falls_back_to_asyncio_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what `import uvloop` meets when it is not installed
    assert run(_loop_in_use(), "auto")[0] == "asyncio"
    with pytest.raises(ImportError):
        run(_loop_in_use(), "uvloop")


def test_the_event_loop_setting_comes_from_the_environment_and_refuses_unknown_loops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SERVAL_EVENT_LOOP", raising=False)
    assert Settings().event_loop == "auto"
    monkeypatch.setenv("SERVAL_EVENT_LOOP", "asyncio")
    assert Settings().event_loop == "asyncio"
    monkeypatch.setenv("SERVAL_EVENT_LOOP", "trio")
    with pytest.raises(pydantic.ValidationError, match="event_loop"):
        Settings()
