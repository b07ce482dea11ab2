"""Closing from every place a user could (:data:`CLOSING`), and from a task started eagerly in the
middle of the driver's pass (:data:`EAGER_CLOSING`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import cache, partial
from typing import Any

import anyio
import anyio.abc
import pytest
from support import HANG, VirtualLoop, cancellation, noop, running_tasks

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts
from aiowheel.testing import VirtualTimeLoop

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- closing from every place a user could --------------------------------------------------------
#
# Each row closes the Timer from somewhere while the block that entered it runs, with a timer
# pending and a coroutine job running. In every row: the Timer is closed, the pending timer is
# cancelled and never runs, the running job is cancelled, the block itself is not cancelled (it
# runs on and leaves cleanly), and nothing is left running afterwards.

Closer = Callable[[Timer, anyio.abc.TaskGroup], Awaitable[None]]


async def _until_closed(timer: Timer) -> None:
    with anyio.fail_after(HANG):
        while not timer.closed:
            await anyio.sleep(0.001)  # not sleep(0): virtual time would never advance


async def _close_in_the_block(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    await timer.aclose()


async def _close_from_a_sibling(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    group.start_soon(timer.aclose)
    await _until_closed(timer)


async def _close_from_a_task_a_callback_starts(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    timer.call_later(0, group.start_soon, timer.aclose)
    await _until_closed(timer)


async def _close_from_a_coroutine_job(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    async def close() -> str:
        await timer.aclose()
        return "ran on"

    job = timer.schedule(0, close)
    assert await job == "ran on"  # a job closing its own Timer is not cancelled by that


async def _close_from_a_coroutine_on_expire(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    async def on_expire(key: str) -> None:
        await timer.aclose()

    IdleTimeouts(timer, 0.001, on_expire).touch("closer")
    await _until_closed(timer)


async def _close_inside_a_timeout(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    # Far, as the pending timer of test_closing: uvloop runs in real time, and a loaded machine
    # can take milliseconds to reach aclose(). The deadline's entry is cancelled with the rest:
    # none is left to fire, and the block ends unexpired.
    async with timer.timeout(10) as scope:
        await timer.aclose()
        assert timer.stats().pending == 0
        await anyio.sleep(0.005)
    assert not scope.expired()


async def _close_from_two_tasks_at_once(timer: Timer, group: anyio.abc.TaskGroup) -> None:
    group.start_soon(timer.aclose)
    group.start_soon(timer.aclose)
    await timer.aclose()


CLOSING: list[tuple[str, Closer]] = [
    ("aclose() in the block that entered the Timer", _close_in_the_block),
    ("aclose() from a sibling task", _close_from_a_sibling),
    ("aclose() from a task a callback starts", _close_from_a_task_a_callback_starts),
    ("aclose() from a coroutine job of the Timer: the job runs on", _close_from_a_coroutine_job),
    ("aclose() from a coroutine on_expire", _close_from_a_coroutine_on_expire),
    ("aclose() inside a timeout block: the deadline never fires", _close_inside_a_timeout),
    ("aclose() from three tasks at once", _close_from_two_tasks_at_once),
]


@pytest.mark.parametrize("closer", [closer for _, closer in CLOSING], ids=[n for n, _ in CLOSING])
async def test_closing(backend_name: str, closer: Closer) -> None:
    reported: list[dict[str, Any]] = []
    before = running_tasks(backend_name)
    started = anyio.Event()
    ran: list[str] = []

    async def work() -> None:
        started.set()
        await anyio.sleep_forever()

    timer = Timer(exception_handler=reported.append)
    async with anyio.create_task_group() as group, timer:
        pending = timer.call_later(10, ran.append, "pending")  # far: uvloop runs in real time
        running = timer.schedule(0, work)
        await started.wait()
        await closer(timer, group)
        assert timer.closed
        assert pending.cancelled()
        with pytest.raises(cancellation(backend_name)):
            await running
        await anyio.sleep(0.02)  # the block was not cancelled; the pending timer never runs
        with pytest.raises(RuntimeError, match="Timer is closed"):
            timer.call_later(0, noop)
    assert ran == []
    assert reported == []
    assert running_tasks(backend_name) == before


# -- eager tasks: a close in the middle of the driver's pass --------------------------------------
#
# With asyncio.eager_task_factory (Python 3.12+), a task a callback creates runs at once, up to its
# first suspension, inside the callback: a coroutine job, a coroutine on_expire or a task a
# callback starts can close the Timer in the middle of the driver's pass, with the rest of the
# batch already out of the wheel. Each row closes the Timer so; in every row a callback and a job
# due with the closer, scheduled after it (the rest of its batch), never run -- the job is
# cancelled -- nothing runs once aclose() has returned, and nothing is reported: no error of the
# library's own (such as IdleTimeouts re-filing a key on the closed Timer). On asyncio in virtual
# time, on the wheel loop in virtual time, and on uvloop (real time: delays of milliseconds, only
# the outcome asserted). Each closer returns when it is due: the rest of its batch is due then.

EagerCloser = Callable[[Timer, list[str]], float]
DUE = 0.002  # the closer's delay


async def _close_and_record(timer: Timer, ran: list[str]) -> None:
    await timer.aclose()
    ran.append("aclose() returned")


def _job_closes(timer: Timer, ran: list[str]) -> float:
    return timer.schedule(DUE, _close_and_record, timer, ran).when()


def _callback_starts_a_closing_task(timer: Timer, ran: list[str]) -> float:
    tasks: list[asyncio.Task[None]] = []  # a reference to the task, as asyncio asks
    return timer.call_later(
        DUE, lambda: tasks.append(asyncio.ensure_future(_close_and_record(timer, ran)))
    ).when()


def _on_expire_closes(timer: Timer, ran: list[str], *, touched: str | None) -> float:
    async def on_expire(key: str) -> None:
        ran.append(f"expired {key}")
        if key == "closer":
            await _close_and_record(timer, ran)

    idle = IdleTimeouts(timer, DUE, on_expire)
    idle.touch("closer")
    idle.touch("next")  # filed under the same tick, looked at after the closer
    if touched is not None:  # touched again before the tick: re-filed when the filing comes due
        timer.call_later(DUE / 2, idle.touch, touched)
    return idle.deadline("closer")  # type: ignore[return-value]


EAGER_CLOSING: list[tuple[str, EagerCloser, list[str]]] = [
    (
        "a coroutine job awaits timer.aclose()",
        _job_closes,
        ["aclose() returned"],
    ),
    (
        "a callback starts a task that closes the Timer",
        _callback_starts_a_closing_task,
        ["aclose() returned"],
    ),
    (
        "a coroutine on_expire closes it; the next key of its filing is due too",
        partial(_on_expire_closes, touched=None),
        ["expired closer", "aclose() returned"],
    ),
    (
        "a coroutine on_expire closes it; the next key of its filing was touched since",
        partial(_on_expire_closes, touched="next"),
        ["expired closer", "aclose() returned"],
    ),
]

EAGER_LOOPS = ["asyncio", "wheel loop", "uvloop"]
# A key touched strictly between its filing and its deadline: a time window, which only virtual
# time keeps exactly (on a loaded machine uvloop's pass could come after the deadline).
EAGER_VIRTUAL_ONLY = {EAGER_CLOSING[3][1]}


def _eager_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        pytest.importorskip("uvloop")
    if not _starts_eager_tasks_at_once(name):
        pytest.skip(
            f"{name}: a task made with asyncio.eager_task_factory in the running loop has not "
            "started when create_task returns, which these tests rely on (uvloop 0.23: on "
            "CPython 3.13.0 its create_task passes eager_start=, which the factory refuses; on "
            "3.14 it passes eager_start=None, which turns the eager start off)"
        )
    return _make_eager_loop(name)


def _make_eager_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "asyncio":
        return VirtualTimeLoop()
    if name == "wheel loop":
        return VirtualLoop()
    import uvloop

    return uvloop.new_event_loop()  # type: ignore[no-any-return]


@cache
def _starts_eager_tasks_at_once(name: str) -> bool:
    """What the eager tests rely on, asked of the loop itself: with asyncio's eager task factory,
    a task created in the running loop has already started (run to its first suspension) when
    ``create_task`` returns."""
    loop = _make_eager_loop(name)
    started: list[bool] = []

    async def step() -> None:
        started.append(True)

    async def probe() -> bool:
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        coroutine = step()
        try:
            task = loop.create_task(coroutine)
        except TypeError:  # the factory refused what the loop passed it
            coroutine.close()
            return False
        started_at_once = started == [True]
        await task
        return started_at_once

    try:
        return loop.run_until_complete(probe())
    finally:
        loop.close()


@pytest.mark.skipif(
    not hasattr(asyncio, "eager_task_factory"), reason="asyncio.eager_task_factory is Python 3.12+"
)
@pytest.mark.parametrize("loop_name", EAGER_LOOPS)
@pytest.mark.parametrize(
    ("closer", "expected"),
    [(closer, expected) for _, closer, expected in EAGER_CLOSING],
    ids=[name for name, _, _ in EAGER_CLOSING],
)
def test_eager_close_mid_pass(loop_name: str, closer: EagerCloser, expected: list[str]) -> None:
    if closer in EAGER_VIRTUAL_ONLY and loop_name == "uvloop":
        pytest.skip("needs virtual time: see EAGER_VIRTUAL_ONLY")
    reported: list[dict[str, Any]] = []
    ran: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        timer = Timer(exception_handler=reported.append)
        async with timer:
            when = closer(timer, ran)
            rest = timer.call_at(when, ran.append, "the rest of the batch")
            job = timer.schedule_at(when, ran.append, "a job of the rest of the batch")
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(job, HANG)  # the bound turns a hang into a failure
            assert timer.closed and rest.cancelled() and job.cancelled()
            await asyncio.sleep(DUE * 5)  # nothing of the Timer runs any more
        assert len(timer) == 0

    with asyncio.Runner(loop_factory=lambda: _eager_loop(loop_name)) as runner:
        runner.run(main())
    assert ran == expected
    assert reported == []
