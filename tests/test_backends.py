"""Tests for :mod:`aiowheel.timer` where the backends differ: where a callback's error goes (the
loop's exception handler on asyncio and uvloop, the ``aiowheel`` logger on trio), and that on
asyncio and uvloop callbacks run outside any task, as ``loop.call_at`` callbacks do, with
sniffio and anyio still knowing the library.

Every async test runs three times (see conftest.py): asyncio on a virtual clock, uvloop in real
time, trio on ``MockClock``. In virtual time the assertions are exact: a callback due at ``when``
with tick ``t`` sees ``when <= timer.time() < when + t``. On uvloop (real time) the tests use
delays of at most 50 ms and assert only order, never-early and completion, never an upper time
bound; tests that need long waits or exact times ask for the ``virtual_time`` fixture.

A handy synchronisation point: ``await timer.sleep_until(when)`` returns only after every timer
due at or before ``when`` and scheduled before the sleep has run, because the sleep is itself a
wheel timer and due timers run in (deadline, scheduling order).

The Timer's other tests are in ``tests/timer/``; the wheel loop's in ``tests/loop/``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import pytest
from support import Boom, Fired, boom

from aiowheel import Timer

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- errors: the loop's exception handler, or the logger on trio -------------------------------


async def test_callback_error_goes_to_the_loop_exception_handler(backend_name: str) -> None:
    if backend_name == "trio":
        pytest.skip("trio has no loop exception handler; errors go to the logger there")
    loop = asyncio.get_running_loop()
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))
    try:
        async with Timer() as timer:
            fired = Fired(timer)
            when = timer.time() + 0.001
            timer.call_at(when, fired, "before")
            failing = timer.call_at(when, boom, 1)
            timer.call_at(when, fired, "same batch")
            timer.call_later(0.003, fired, "later")
            await timer.sleep(0.004)
    finally:
        loop.set_exception_handler(None)

    assert fired.labels == ["before", "same batch", "later"]  # the timer kept going
    [context] = contexts
    assert set(context) == {"message", "exception", "handle"}  # asyncio's Handle._run shape
    assert context["message"].startswith("Exception in callback ")
    assert "boom" in context["message"]
    assert isinstance(context["exception"], Boom)
    assert context["exception"].args == (1,)
    assert context["handle"] is failing


async def test_callback_error_is_logged_on_trio(
    backend_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    if backend_name != "trio":
        pytest.skip("asyncio reports to loop.call_exception_handler")
    with caplog.at_level(logging.ERROR, logger="aiowheel"):
        async with Timer() as timer:
            fired = Fired(timer)
            when = timer.time() + 0.001
            timer.call_at(when, boom, 2)
            timer.call_at(when, fired, "same batch")
            timer.call_later(0.003, fired, "later")
            await timer.sleep(0.004)

    assert fired.labels == ["same batch", "later"]
    [record] = [record for record in caplog.records if record.name == "aiowheel"]
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("Exception in callback ")
    assert "boom" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], Boom)


# -- callbacks outside any task on asyncio -----------------------------------------------------


async def test_callbacks_run_outside_any_task_on_asyncio(backend_name: str) -> None:
    """On asyncio and uvloop a wake of the driver is the loop timer's own callback (no task step
    per wake): Timer callbacks run as ``loop.call_at`` callbacks do, outside any task; a
    coroutine job still runs in a task of its own."""
    if backend_name == "trio":
        pytest.skip("trio has no loop callbacks: its driver task runs the passes")
    tasks: list[asyncio.Task[Any] | None] = []

    async def job() -> None:
        tasks.append(asyncio.current_task())

    async with Timer() as timer:
        timer.call_later(0.001, lambda: tasks.append(asyncio.current_task()))
        await timer.schedule(0.001, job)
        await timer.sleep(0.002)
        stats = timer.stats()
    assert tasks[0] is None
    assert isinstance(tasks[1], asyncio.Task)
    assert stats.driver_wakeups >= 1


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_anyio_and_sniffio_know_the_backend_inside_a_callback(loop_name: str) -> None:
    """A callback runs outside any task on asyncio, where sniffio looks for one: the pass names
    the library for it, so anyio's calls work there as they do in a task. Run under a plain
    ``asyncio.Runner``: anyio's test runner would name the library in the context already."""
    sniffio = pytest.importorskip("sniffio")
    factory = pytest.importorskip("uvloop").new_event_loop if loop_name == "uvloop" else None
    seen: list[object] = []

    async def main() -> None:
        def callback() -> None:
            try:
                seen.append(sniffio.current_async_library())
                seen.append(isinstance(anyio.current_time(), float))  # raised NoEventLoopError
            finally:
                done.set()

        async with Timer() as timer:
            done = asyncio.Event()
            timer.call_later(0.001, callback)
            await done.wait()

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
    assert seen == ["asyncio", True]
    assert sniffio.thread_local.name is None  # the pass left it as it found it
