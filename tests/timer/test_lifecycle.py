"""The lifecycle -- leaving ``async with`` cancels what is pending and cancels and awaits what
runs, ``aclose`` from any task, and a Timer not entered yet, closed, or entered twice refusing
what it cannot do.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from functools import partial
from typing import Any

import anyio
import pytest
from support import HANG, Boom, cancellation, is_virtual, noop, running_tasks

from aiowheel import Timer

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- lifecycle ---------------------------------------------------------------------------------


async def test_leaving_cancels_pending_timers_which_never_run(backend_name: str) -> None:
    delay = 10.0 if is_virtual(backend_name) else 0.01
    called: list[str] = []
    async with Timer() as timer:
        handles = [timer.call_later(delay * (1 + i), called.append, "ran") for i in range(3)]
        job = timer.schedule(delay, called.append, "job ran")
    assert timer.closed
    assert all(handle.cancelled() for handle in handles)
    assert job.cancelled()
    assert len(timer) == 0
    stats = timer.stats()
    assert (stats.pending, stats.cancelled, stats.fired) == (0, 4, 0)
    await anyio.sleep(delay * 4)
    assert called == []


async def test_leaving_cancels_and_awaits_running_jobs(backend_name: str) -> None:
    started = anyio.Event()
    cleaned_up: list[bool] = []

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            # Clean-up that takes time: leaving the Timer must wait for it.
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.002)
            cleaned_up.append(True)

    async with Timer() as timer:
        job = timer.schedule(0, work)
        await started.wait()
    assert cleaned_up == [True]
    assert job.done()
    assert job.cancelled()
    with pytest.raises(cancellation(backend_name)):
        await job


async def test_leaving_wakes_awaiters_of_pending_and_running_jobs_and_sleepers(
    backend_name: str,
) -> None:
    outcomes: dict[str, type[BaseException] | str] = {}

    async def watch(name: str, awaitable: Awaitable[Any], waiting: anyio.Event) -> None:
        waiting.set()
        try:
            await awaitable
        except BaseException as exc:  # the cancellation is the outcome under test
            outcomes[name] = type(exc)
        else:
            outcomes[name] = "returned"

    # fail_after: a sleeper or awaiter left hanging would otherwise hang the test.
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as group, Timer() as timer:
            pending = timer.schedule(10, noop)
            running = timer.schedule(0, anyio.sleep_forever)
            for name, awaitable in [
                ("pending job", pending),
                ("running job", running),
                ("sleeper", timer.sleep(10)),
            ]:
                waiting = anyio.Event()
                group.start_soon(watch, name, awaitable, waiting)
                await waiting.wait()
            await timer.sleep(0.001)  # the running job has started, everyone is waiting
            assert not outcomes
    expected = cancellation(backend_name)
    assert outcomes == {"pending job": expected, "running job": expected, "sleeper": expected}


async def test_nothing_is_left_running_after_close(backend_name: str) -> None:
    started = anyio.Event()

    async def work() -> None:
        started.set()
        await anyio.sleep_forever()

    before = running_tasks(backend_name)
    if backend_name == "trio":
        import trio

        nurseries_before = list(trio.lowlevel.current_task().child_nurseries)
    async with Timer() as timer:
        timer.call_later(10, noop)
        timer.schedule(0, work)
        await started.wait()
        assert len(running_tasks(backend_name) - before) == 2  # the driver and the job
    assert running_tasks(backend_name) == before
    if backend_name == "trio":
        assert trio.lowlevel.current_task().child_nurseries == nurseries_before


async def test_leaving_with_an_error_still_closes() -> None:
    called: list[str] = []
    with pytest.raises(Boom):
        async with Timer() as timer:
            handle = timer.call_later(0.001, called.append, "ran")
            raise Boom
    assert timer.closed
    assert handle.cancelled()
    await anyio.sleep(0.002)
    assert called == []


async def test_aclose_is_idempotent_and_ends_the_timer() -> None:
    timer = Timer()
    await timer.__aenter__()
    handle = timer.call_later(0.001, noop)
    await timer.aclose()
    await timer.aclose()
    assert timer.closed
    assert handle.cancelled()


@pytest.mark.parametrize("closer", ["sibling task", "coroutine job", "plain callback's task"])
async def test_aclose_from_another_task_than_the_one_that_entered(
    backend_name: str, closer: str
) -> None:
    """Closing from a sibling task, from a coroutine job of the Timer itself, or from a task a
    callback started works on every backend (on trio it ended in TrioInternalError): pending
    timers are cancelled, running jobs cancelled and waited for, and the block that entered
    the Timer is not cancelled -- it runs on, and leaving it is clean."""
    before = running_tasks(backend_name)
    started = anyio.Event()
    closed = anyio.Event()

    async def work() -> None:
        started.set()
        await anyio.sleep_forever()

    async def close() -> None:
        try:
            await timer.aclose()
        finally:
            closed.set()

    async with anyio.create_task_group() as group:
        async with Timer() as timer:
            pending = timer.call_later(10, noop)
            running = timer.schedule(0, work)
            await started.wait()
            if closer == "sibling task":
                group.start_soon(close)
            elif closer == "coroutine job":
                closing = timer.schedule(0, close)
            else:
                timer.call_later(0, group.start_soon, close)
            with anyio.fail_after(HANG):
                await closed.wait()
            assert timer.closed
            assert pending.cancelled()
            with pytest.raises(cancellation(backend_name)):
                await running
            if closer == "coroutine job":
                # A job that closes its own Timer is not cancelled by that: it runs to its end.
                assert await closing is None
            await anyio.sleep(0.001)  # the block itself was not cancelled
            with pytest.raises(RuntimeError, match="Timer is closed"):
                timer.call_later(0, noop)
        await timer.aclose()  # still idempotent
    assert running_tasks(backend_name) == before


async def test_aclose_inside_a_cancel_scope_entered_after_the_timer() -> None:
    """From the block's own task but inside a timeout block (on trio, a cancel scope entered
    after the Timer's nursery, which therefore cannot be exited yet): it closes the Timer; the
    block's end exits the nursery. (trio broke the task's cancel scopes.)"""
    async with Timer() as timer:
        pending = timer.call_later(10, noop)
        async with timer.timeout(0.002) as scope:
            with anyio.CancelScope():
                await timer.aclose()
            await anyio.sleep(0.005)  # the deadline's entry was cancelled with the rest
        assert not scope.expired()
        assert timer.closed and pending.cancelled()
    await timer.aclose()


async def test_a_closed_timer_refuses_scheduling_and_reentry() -> None:
    async with Timer() as timer:
        pass
    for schedule in [
        partial(timer.call_later, 1, noop),
        partial(timer.call_at, 1, noop),
        partial(timer.schedule, 1, noop),
        partial(timer.schedule_at, 1, noop),
    ]:
        with pytest.raises(RuntimeError, match="Timer is closed"):
            schedule()
    with pytest.raises(RuntimeError, match="Timer is closed"):
        await timer.sleep(1)
    with pytest.raises(RuntimeError, match="Timer is closed"):
        await timer.sleep_until(1)
    with pytest.raises(RuntimeError, match=re.escape("Timer is closed; create a new one")):
        async with timer:
            pass


async def test_a_timer_not_entered_yet_refuses_scheduling() -> None:
    timer = Timer()
    message = re.escape("Timer is not running: use it inside 'async with Timer() as timer:'")
    for schedule in [
        partial(timer.call_later, 1, noop),
        partial(timer.call_at, 1, noop),
        partial(timer.schedule, 1, noop),
        partial(timer.schedule_at, 1, noop),
        timer.time,
    ]:
        with pytest.raises(RuntimeError, match=message):
            schedule()
    with pytest.raises(RuntimeError, match=message):
        await timer.sleep(1)
    with pytest.raises(RuntimeError, match=message):
        await timer.sleep_until(1)


async def test_a_timer_not_entered_can_be_closed_and_is_then_unusable() -> None:
    timer = Timer()
    await timer.aclose()
    assert timer.closed
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.call_later(1, noop)
    with pytest.raises(RuntimeError, match="Timer is closed"):
        await timer.__aenter__()


async def test_a_running_timer_cannot_be_entered_twice() -> None:
    async with Timer() as timer:
        with pytest.raises(RuntimeError, match="Timer is already running"):
            await timer.__aenter__()
        timer.call_later(0, noop)  # still usable
        await timer.sleep(0)
