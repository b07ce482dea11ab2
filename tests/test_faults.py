"""Fault injection: what can go wrong around each public entry point, as tables.

Each table is one kind of fault; each row names what is done and, next to it, what must happen.
The promises of the README's guarantee table -- never early, at most once, nothing lost -- hold
in every row: after the fault the Timer either keeps working (a timer scheduled after it still
runs, nothing pending is left behind) or is closed and says so at the next use.

* :data:`RAISING` -- a callback, a job, an ``on_expire`` raising Exception, BaseException or
  CancelledError;
* :data:`INTERRUPTING` -- the same raising KeyboardInterrupt or SystemExit: on asyncio and uvloop
  the interrupt leaves the loop once and the Timer keeps working, as with ``loop.call_later``; on
  trio it ends the block that entered the Timer (bare, not in an exception group), which closes
  the Timer; next to it, a SystemExit leaves ``asyncio.Runner.run`` once;
* :data:`REENTRANT` -- calls from inside callbacks: cancel, schedule, touch, discard, close;
* :data:`LIMITS` -- ``max_pending`` reached from outside and inside the driver: new work is
  refused at the call that asks for it, the library's own re-filing never; next to it, every
  scheduling call refused with the message naming the limit, and the slots freed again;
* :data:`CLOSING` -- closing from every place a user could;
* :data:`EAGER_CLOSING` -- closing from a task that starts eagerly, in the middle of the
  driver's pass (Python 3.12's ``asyncio.eager_task_factory``): the rest of the batch never
  runs, and nothing of the library's own is reported;
* :data:`COPIES` -- copying or pickling a handle of the Timer or of the wheel loop: refused;
* :data:`BAD_STARTS` -- a virtual clock started at infinity, NaN or a non-number: refused;
* :data:`LOOP_FAULTS` -- the wheel loop used as a hostile user would (a clock patched by a test,
  an exception handler keeping handles, a loop dropped unclosed, a handle's context, numbers of
  every type, a ``min_delay`` below a tick): on each base, as the base loop itself behaves, or as
  the row says where asyncio is not the reference.

Every async row runs on asyncio in virtual time, uvloop (real time: delays of a few
milliseconds, and only order and outcome are asserted, never an upper time bound) and trio with
``MockClock``; the interrupt rows on asyncio and uvloop drive a loop by hand, because an
interrupt leaves ``run_until_complete``. No real sleeps beyond uvloop's milliseconds.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import gc
import logging
import math
import pickle
import re
import warnings
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import cache, partial
from typing import TYPE_CHECKING, Any
from unittest import mock

import anyio
import anyio.abc
import pytest
from support import (
    HANG,
    Boom,
    Fatal,
    Fired,
    VirtualLoop,
    cancellation,
    make_loop,
    needs_uvloop,
    noop,
    raise_,
    raise_soon,
    running_tasks,
)
from twins import is_loop_handle

from aiowheel import PendingLimitError, Timer
from aiowheel._impl import CPYTHON_FALLBACK
from aiowheel.idle import IdleTimeouts
from aiowheel.loop import new_event_loop, new_uvloop_event_loop
from aiowheel.testing import VirtualTimeLoop, run

if TYPE_CHECKING:
    from twins import Impl

# Every test on both twins of the cores (the `core` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("core")]


def raising_on_expire(
    entry: str, record: list[str], raising_key: str, exc_type: type[BaseException]
) -> Callable[[str], Any]:
    """An ``on_expire`` for ``entry`` -- "plain on_expire" or "coroutine on_expire" -- that
    records each key and raises ``exc_type`` for ``raising_key``."""

    def plain(key: str) -> None:
        record.append(key)
        if key == raising_key:
            raise exc_type

    async def coroutine(key: str) -> None:
        await anyio.sleep(0)
        plain(key)

    return plain if entry == "plain on_expire" else coroutine


# -- raising: Exception, BaseException, CancelledError ----------------------------------------

RAISED: dict[str, type[BaseException]] = {
    "Exception": Boom,
    "BaseException": Fatal,
    "CancelledError": asyncio.CancelledError,
}

# Outcomes. In every row the Timer carries on: a timer due after the fault still runs.
REPORTED = "reported to the exception handler, the Timer carries on"
RAISED_BY_AWAIT = "raised by `await job`, not reported"
JOB_CANCELLED = "the job is cancelled: `await job` raises the backend's cancellation"
SILENT = "nothing reported: the task ends cancelled, as an asyncio task does"


@dataclass(frozen=True)
class Raising:
    entry: str
    raised: str
    expected: str
    # Where trio differs: asyncio.CancelledError is just another BaseException there.
    on_trio: str | None = None

    def __str__(self) -> str:
        return f"{self.entry}-{self.raised}"

    def outcome(self, backend_name: str) -> str:
        return self.on_trio if backend_name == "trio" and self.on_trio else self.expected


RAISING = [
    Raising("callback", "Exception", REPORTED),
    Raising("callback", "BaseException", REPORTED),
    Raising("callback", "CancelledError", REPORTED),  # as asyncio's Handle._run
    Raising("plain job", "Exception", RAISED_BY_AWAIT),
    Raising("plain job", "BaseException", RAISED_BY_AWAIT),
    Raising("plain job", "CancelledError", RAISED_BY_AWAIT),
    Raising("coroutine job", "Exception", RAISED_BY_AWAIT),
    Raising("coroutine job", "BaseException", RAISED_BY_AWAIT),
    Raising("coroutine job", "CancelledError", JOB_CANCELLED, on_trio=RAISED_BY_AWAIT),
    Raising("plain on_expire", "Exception", REPORTED),
    Raising("plain on_expire", "BaseException", REPORTED),
    Raising("plain on_expire", "CancelledError", REPORTED),
    Raising("coroutine on_expire", "Exception", REPORTED),
    Raising("coroutine on_expire", "BaseException", REPORTED),
    Raising("coroutine on_expire", "CancelledError", SILENT, on_trio=REPORTED),
]


@pytest.mark.parametrize("row", RAISING, ids=str)
async def test_raising(backend_name: str, row: Raising) -> None:
    exc_type = RAISED[row.raised]
    reported: list[type[BaseException]] = []
    outcome: BaseException | None = None
    expired: list[str] = []
    job = None
    async with Timer(exception_handler=lambda c: reported.append(type(c["exception"]))) as timer:
        after: list[str] = []
        if row.entry == "callback":
            timer.call_later(0.001, raise_, exc_type)
        elif row.entry.endswith("job"):
            job = timer.schedule(
                0.001, raise_ if row.entry == "plain job" else raise_soon, exc_type
            )
            try:
                await job
            except BaseException as exc:
                outcome = exc
        else:
            on_expire = raising_on_expire(row.entry, expired, "raising", exc_type)
            idle = IdleTimeouts(timer, 0.001, on_expire)
            for key in ("first", "raising", "last"):
                idle.touch(key)
        timer.call_later(0.003, after.append, "later")
        await timer.sleep(0.005)
        assert after == ["later"]  # the Timer carried on
        assert len(timer) == 0  # nothing left behind
    gc.collect()  # a job failure nobody retrieved would be reported now
    if row.entry.endswith("on_expire"):
        assert sorted(expired) == ["first", "last", "raising"]  # no key lost
    if reported == [exc_type] and outcome is None:
        observed = REPORTED
    elif not reported and isinstance(outcome, cancellation(backend_name)) and job.cancelled():  # type: ignore[union-attr]
        observed = JOB_CANCELLED
    elif not reported and type(outcome) is exc_type:
        observed = RAISED_BY_AWAIT
    elif not reported and outcome is None:
        observed = SILENT
    else:
        observed = f"reported {reported}, outcome {outcome!r}"
    assert observed == row.outcome(backend_name)


# -- interrupting: KeyboardInterrupt, SystemExit ------------------------------------------------

INTERRUPTS = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}
# Outcomes, by backend.
LEAVES_ONCE = "leaves run_until_complete once; everything else runs after; aclose() is clean"
ENDS_BLOCK = "leaves the block bare (no exception group); the Timer is closed, pending cancelled"

INTERRUPTING_ENTRIES = [
    "callback",
    "plain job",
    "coroutine job",
    "plain on_expire",
    "coroutine on_expire",
    # A callback raises Boom; the exception_handler it goes to raises the interrupt.
    "exception_handler",
]
INTERRUPTING = [
    (entry, name, {"asyncio": LEAVES_ONCE, "uvloop": LEAVES_ONCE, "trio": ENDS_BLOCK})
    for entry in INTERRUPTING_ENTRIES
    for name in INTERRUPTS
]


def _arm_fault(timer: Timer, entry: str, exc_type: type[BaseException], ran: list[str]) -> Any:
    """Make ``entry`` raise ``exc_type`` 2 ms from now -- a callback or a job between one timer
    "before" it and one in the "same batch" after it; return the IdleTimeouts, if any."""
    when = timer.time() + 0.002
    if entry.endswith("on_expire"):
        idle = IdleTimeouts(timer, 0.002, raising_on_expire(entry, ran, "interrupting", exc_type))
        for key in ("first", "interrupting", "last"):
            idle.touch(key)
        return idle
    timer.call_at(when, ran.append, "before")
    if entry in ("callback", "exception_handler"):
        timer.call_at(when, raise_, exc_type if entry == "callback" else Boom)
    elif entry == "plain job":
        timer.schedule_at(when, raise_, exc_type)
    else:
        timer.schedule_at(when, raise_soon, exc_type)
    timer.call_at(when, ran.append, "same batch")
    return None


def _interrupting_handler(exc_type: type[BaseException]) -> Callable[[dict[str, Any]], None]:
    def handler(context: dict[str, Any]) -> None:
        raise exc_type

    return handler


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize(("entry", "interrupt", "expected"), INTERRUPTING)
def test_interrupting_on_asyncio(
    loop_name: str, entry: str, interrupt: str, expected: dict[str, str]
) -> None:
    assert expected[loop_name] == LEAVES_ONCE
    exc_type = INTERRUPTS[interrupt]
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop = uvloop.new_event_loop()
    else:
        loop = VirtualTimeLoop()

    async def enter() -> Timer:
        handler = _interrupting_handler(exc_type) if entry == "exception_handler" else None
        timer = Timer(exception_handler=handler)
        await timer.__aenter__()
        return timer

    try:
        timer = loop.run_until_complete(enter())
        ran: list[str] = []
        idle = _arm_fault(timer, entry, exc_type, ran)
        timer.call_later(0.004, ran.append, "later")
        with pytest.raises(exc_type):
            loop.run_until_complete(asyncio.sleep(5))  # ends at the interrupt
        if entry == "callback" and loop_name == "asyncio":
            assert ran == ["before"]  # the interrupt left at once, as asyncio's does
        elif entry == "callback":
            # uvloop leaves run_until_complete only at the end of its libuv iteration (its own
            # timers show it: one due with the interrupting one still runs), and a stall of the
            # process during the iteration makes more come due in it: the rest of the batch, the
            # "later" timer. What holds: the interrupt left after "before", and below, everything
            # runs once.
            assert ran[0] == "before"
        timer.call_later(0.001, ran.append, "after recovery")
        # Once: no second interrupt. (The bound turns a dead driver into a failure, not a hang.)
        loop.run_until_complete(asyncio.wait_for(timer.sleep(0.01), HANG))
        expected_ran = ["after recovery", "later"]
        if idle is None:
            assert ran[:2] == ["before", "same batch"]  # the rest of the batch first
            expected_ran += ["before", "same batch"]
        else:
            expected_ran += ["first", "interrupting", "last"]
        assert sorted(ran) == sorted(expected_ran)  # nothing lost, nothing twice
        assert len(timer) == 0 and (idle is None or len(idle) == 0)
        loop.run_until_complete(timer.aclose())  # does not raise the interrupt again
    finally:
        loop.close()


@pytest.mark.parametrize(("entry", "interrupt", "expected"), INTERRUPTING)
async def test_interrupting_on_trio(
    backend_name: str, entry: str, interrupt: str, expected: dict[str, str]
) -> None:
    if backend_name != "trio":
        pytest.skip("asyncio and uvloop: test_interrupting_on_asyncio drives the loop by hand")
    assert expected[backend_name] == ENDS_BLOCK
    exc_type = INTERRUPTS[interrupt]
    handler = _interrupting_handler(exc_type) if entry == "exception_handler" else None
    ran: list[str] = []
    with pytest.raises(exc_type):
        async with Timer(exception_handler=handler) as timer:
            _arm_fault(timer, entry, exc_type, ran)
            later = timer.call_later(0.004, ran.append, "later")
            await anyio.sleep(1)
    assert "later" not in ran and later.cancelled()
    assert timer.closed and len(timer) == 0
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.call_later(0, noop)


def new_loop(loop_name: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop to drive by hand: asyncio in virtual time, or uvloop."""
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return VirtualTimeLoop()


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize("source", ["callback", "coroutine job"])
def test_system_exit_from_a_callback_leaves_asyncio_run_once(
    loop_name: str, source: str, caplog: pytest.LogCaptureFixture
) -> None:
    closed: list[bool] = []

    async def exiting_coroutine() -> None:
        raise SystemExit(3)

    async def main() -> None:
        timer = Timer()
        try:
            async with timer:
                if source == "callback":
                    timer.call_later(0.001, raise_, SystemExit(3))
                else:
                    timer.schedule(0.001, exiting_coroutine)
                await asyncio.sleep(HANG)  # ends at the SystemExit
        finally:
            closed.append(timer.closed)

    # Earlier tests' garbage first: a pending task of theirs collected during this test (when
    # the collector runs depends on what ran before, and how long) would log "Task was destroyed
    # but it is pending!" here, with this test's Timer not at fault.
    gc.collect()
    runner = asyncio.Runner(loop_factory=partial(new_loop, loop_name))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(SystemExit) as info:
            runner.run(main())
        assert info.value.code == 3
        runner.close()  # cancels main(), which closes the Timer: no second SystemExit
        gc.collect()
    assert closed == [True]
    assert [record.getMessage() for record in caplog.records] == []


# -- re-entrant calls from inside callbacks -----------------------------------------------------
#
# Each row: a scenario (it records what happens in `events`) and the events that must result.

Scenario = Callable[[Timer, list[str]], Awaitable[None]]


async def _cancel_itself(timer: Timer, events: list[str]) -> None:
    handles: list[Any] = []

    def callback() -> None:
        handles[0].cancel()
        events.append(f"ran, cancelled={handles[0].cancelled()}")

    handles.append(timer.call_later(0.001, callback))
    await timer.sleep(0.003)


async def _cancel_later_in_batch(timer: Timer, events: list[str]) -> None:
    when = timer.time() + 0.001
    victims = []
    timer.call_at(when, lambda: [victim.cancel() for victim in victims])
    victims.append(timer.call_at(when, events.append, "same deadline"))
    victims.append(timer.schedule_at(when, events.append, "job"))
    timer.call_at(when, events.append, "survivor")
    await timer.sleep(0.003)
    events.append(f"job cancelled={victims[1].cancelled()}")


async def _schedule_from_callback(timer: Timer, events: list[str]) -> None:
    async def coroutine_job() -> None:
        events.append("coroutine job")

    def callback() -> None:
        events.append("callback")
        timer.call_later(-1, events.append, "due at once")
        timer.schedule(0, events.append, "plain job")
        timer.schedule(0, coroutine_job)

    when = timer.time() + 0.001
    timer.call_at(when, callback)
    timer.call_at(when, events.append, "same batch")
    await timer.sleep(0.005)


async def _touch_and_discard_from_callback(timer: Timer, events: list[str]) -> None:
    # 100 ms of margin: on uvloop, in real time, the callbacks must run before the keys' deadline,
    # even on a loaded machine.
    idle = IdleTimeouts(timer, 0.1, events.append)
    idle.touch("discarded")
    idle.touch("touched")
    timer.call_later(0.001, idle.discard, "discarded")
    timer.call_later(0.001, idle.touch, "new")
    await timer.sleep(0.2)


async def _close_idle_from_callback(timer: Timer, events: list[str]) -> None:
    idle = IdleTimeouts(timer, 0.1, events.append)  # 100 ms of margin, for uvloop's real time
    idle.touch("a")
    timer.call_later(0.001, idle.close)
    await timer.sleep(0.15)
    events.append(f"tracked={len(idle)}")


async def _on_expire_closes_its_idle(timer: Timer, events: list[str]) -> None:
    def on_expire(key: str) -> None:
        events.append(key)
        idle.close()

    idle = IdleTimeouts(timer, 0.002, on_expire)
    for key in ("first", "second"):
        idle.touch(key)
    await timer.sleep(0.005)


async def _on_expire_touches_and_discards(timer: Timer, events: list[str]) -> None:
    def on_expire(key: str) -> None:
        events.append(key)
        if key == "first" and events.count("first") == 1:
            # "second" is due too: too late to discard, it expires first (once, right here).
            assert idle.discard("second") is False
            idle.touch("first")  # a new period: expires once more

    idle = IdleTimeouts(timer, 0.002, on_expire)
    for key in ("first", "second"):
        idle.touch(key)
    await timer.sleep(0.008)


async def _reschedule_timeout_from_callback(timer: Timer, events: list[str]) -> None:
    async with timer.move_on_after(1) as scope:
        timer.call_later(0.001, lambda: scope.reschedule(timer.time() + 0.001))
        await anyio.sleep(0.5)
    events.append(f"caught={scope.cancelled_caught}, early={timer.time() < scope.when()}")  # type: ignore[operator]


async def _cancel_a_job_from_callback(timer: Timer, events: list[str]) -> None:
    now = timer.time()  # one reading: in real time two could be more than a millisecond apart
    job = timer.schedule_at(now + 0.002, events.append, "job ran")
    timer.call_at(now + 0.001, job.cancel)
    try:
        await job
    except BaseException as exc:
        events.append(type(exc).__name__)


# In real time (uvloop) two touches in a row may straddle a tick boundary and so not share a
# batch (or a wheel entry): the rows that need them to are run in virtual time only. Rows of
# later tables join the set where they are defined.
VIRTUAL_ONLY: set[Scenario] = {_on_expire_touches_and_discards}

REENTRANT: list[tuple[str, Scenario, list[str]]] = [
    ("a callback cancels itself", _cancel_itself, ["ran, cancelled=True"]),
    (
        "a callback cancels timers and a job later in its batch: they never run",
        _cancel_later_in_batch,
        ["survivor", "job cancelled=True"],
    ),
    (
        "a callback schedules: all run, in a later pass than its batch",
        _schedule_from_callback,
        ["callback", "same batch", "due at once", "plain job", "coroutine job"],
    ),
    (
        "a callback discards and touches idle keys",
        _touch_and_discard_from_callback,
        ["touched", "new"],
    ),
    ("a callback closes an IdleTimeouts", _close_idle_from_callback, ["tracked=0"]),
    ("on_expire closes its IdleTimeouts", _on_expire_closes_its_idle, ["first"]),
    (
        "on_expire discards a key of its batch (too late: it expires, once) and touches its own",
        _on_expire_touches_and_discards,
        ["first", "second", "first"],
    ),
    (
        "a callback moves a Timeout's deadline earlier",
        _reschedule_timeout_from_callback,
        ["caught=True, early=False"],
    ),
    ("a callback cancels a pending job", _cancel_a_job_from_callback, ["<cancellation>"]),
]


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [(scenario, expected) for _, scenario, expected in REENTRANT],
    ids=[name for name, _, _ in REENTRANT],
)
async def test_reentrant(backend_name: str, scenario: Scenario, expected: list[str]) -> None:
    if scenario in VIRTUAL_ONLY and backend_name == "uvloop":
        pytest.skip("needs virtual time: see VIRTUAL_ONLY")
    reported: list[dict[str, Any]] = []
    events: list[str] = []
    async with Timer(exception_handler=reported.append) as timer:
        await scenario(timer, events)
        await timer.sleep(0.001)  # the Timer still works
        assert len(timer) == 0
    expected = [
        cancellation(backend_name).__name__ if e == "<cancellation>" else e for e in expected
    ]
    assert events == expected
    assert reported == []


# -- limits: max_pending, from outside and inside the driver -----------------------------------
#
# Each row starts with a Timer(max_pending=2) holding two timers 50 ms away: at the limit, or
# below it when the row needs room to file its own first entries. New work is refused at the call
# that asks for it (PendingLimitError), the library's own re-filing never is, and nothing
# already accepted is lost.

REFUSED = "PendingLimitError"


async def _call_later_outside(timer: Timer, events: list[str]) -> None:
    try:
        timer.call_later(0.001, events.append, "ran")
    except PendingLimitError:
        events.append(REFUSED)


async def _call_later_in_callback(timer: Timer, events: list[str]) -> None:
    done = anyio.Event()

    def ran() -> None:
        events.append("ran")
        done.set()

    def callback() -> None:
        try:
            timer.call_later(0.001, ran)
            timer.call_later(0.001, ran)
        except PendingLimitError:
            events.append(REFUSED)
        timer.call_later(0.001, events.append, "uncaught")  # refused: reported, stops nothing

    timer.call_later(-1, callback)
    with anyio.fail_after(HANG):
        await done.wait()


async def _schedule_and_sleep(timer: Timer, events: list[str]) -> None:
    for attempt in (partial(timer.schedule, 0, noop), partial(timer.sleep, 0)):
        try:
            result = attempt()
            if asyncio.iscoroutine(result):
                await result
        except PendingLimitError:
            events.append(REFUSED)


async def _touch_a_new_key(timer: Timer, events: list[str]) -> None:
    idle = IdleTimeouts(timer, 0.002, events.append)
    try:
        idle.touch("new")
    except PendingLimitError:
        events.append(REFUSED)
    events.append(f"tracked={len(idle)}")


async def _timeout_entered(timer: Timer, events: list[str]) -> None:
    try:
        async with timer.timeout(1):
            events.append("entered")
    except PendingLimitError:
        events.append(REFUSED)


async def _idle_refiles_at_the_limit(timer: Timer, events: list[str]) -> None:
    idle = IdleTimeouts(timer, 0.03, events.append)
    idle.touch("a")
    idle.touch("b")  # the same tick, so one entry: at the limit (virtual time only, see below)
    await anyio.sleep(0.002)
    idle.touch("a")  # two new deadlines...
    await anyio.sleep(0.002)
    idle.touch("b")  # ...re-filed when the first entry fires: never refused
    with anyio.fail_after(HANG):
        while len(idle):
            await anyio.sleep(0.001)


async def _timeout_moved_later_at_the_limit(timer: Timer, events: list[str]) -> None:
    def fill_up() -> None:  # runs just before the Timeout's entry fires, in its batch
        timer.call_later(1, noop)
        timer.call_later(1, noop)

    timer.call_later(0.002, fill_up)
    async with timer.move_on_after(0.002) as scope:
        scope.reschedule(timer.time() + 0.004)
        await anyio.sleep(0.5)
    events.append(f"caught={scope.cancelled_caught}")


# Its first two touches must share a deadline tick: in real time they may straddle a tick
# boundary, and the second key would then need an entry of its own, which the limit refuses.
VIRTUAL_ONLY.add(_idle_refiles_at_the_limit)


@dataclass(frozen=True)
class Limit:
    name: str
    scenario: Scenario
    expected: list[str]
    # Errors the exception handler gets.
    reported: list[type[BaseException]]
    # Free slots to start with: blockers cancelled before the scenario.
    room: int = 0

    def __str__(self) -> str:
        return self.name


LIMITS = [
    Limit("call_later from outside the driver: refused", _call_later_outside, [REFUSED], []),
    Limit(
        "call_later from a callback: refused, and reported if not caught",
        _call_later_in_callback,
        [REFUSED, "ran"],
        [PendingLimitError],
        room=1,
    ),
    Limit("schedule and sleep: refused", _schedule_and_sleep, [REFUSED, REFUSED], []),
    Limit(
        "touch of a key needing a new entry: refused, not tracked",
        _touch_a_new_key,
        [REFUSED, "tracked=0"],
        [],
    ),
    Limit("a Timeout: refused at entry", _timeout_entered, [REFUSED], []),
    Limit(
        "IdleTimeouts' re-filing in the driver: never refused, no key lost",
        _idle_refiles_at_the_limit,
        ["a", "b"],
        [],
        room=1,
    ),
    Limit(
        "a Timeout whose deadline moved later: its re-filing is never refused",
        _timeout_moved_later_at_the_limit,
        ["caught=True"],
        [],
        room=2,
    ),
]


@pytest.mark.parametrize("row", LIMITS, ids=str)
async def test_limits(backend_name: str, row: Limit) -> None:
    if row.scenario in VIRTUAL_ONLY and backend_name == "uvloop":
        pytest.skip("needs virtual time: see VIRTUAL_ONLY")
    reported: list[type[BaseException]] = []
    events: list[str] = []
    handler = lambda context: reported.append(type(context["exception"]))  # noqa: E731
    async with Timer(max_pending=2, exception_handler=handler) as timer:
        blockers = [timer.call_later(0.05, noop) for _ in range(2)]
        for blocker in blockers[: row.room]:
            blocker.cancel()
        await row.scenario(timer, events)
    assert events == row.expected
    assert reported == row.reported


async def test_max_pending_refuses_beyond_the_limit_then_recovers() -> None:
    assert issubclass(PendingLimitError, RuntimeError)
    async with Timer(max_pending=3) as timer:
        done = anyio.Event()
        when = timer.time() + 0.002
        handles = [timer.call_at(when, noop) for _ in range(2)]
        handles.append(timer.call_at(when, done.set))
        message = re.escape("3 timers are pending, the limit is max_pending=3")
        for schedule in [
            partial(timer.call_later, 0.001, noop),
            partial(timer.call_at, timer.time(), noop),
            partial(timer.schedule, 0.001, noop),
            partial(timer.schedule_at, timer.time(), noop),
        ]:
            with pytest.raises(PendingLimitError, match=message):
                schedule()
        with pytest.raises(PendingLimitError, match=message):
            await timer.sleep(0.001)
        assert len(timer) == 3

        handles[0].cancel()  # a cancel frees a slot
        handles[0] = timer.call_at(when, noop)
        with pytest.raises(PendingLimitError):
            timer.call_at(when, noop)

        await done.wait()  # fired timers free their slots (all ran in done.set's batch)
        assert len(timer) == 0
        jobs = [timer.schedule(0.001, int, str(i)) for i in range(3)]
        with pytest.raises(PendingLimitError):
            timer.call_later(0, noop)
        assert [await job for job in jobs] == [0, 1, 2]
        await timer.sleep(0)


async def test_the_librarys_own_re_filing_is_never_refused_by_max_pending(impl: Impl) -> None:
    """``refile_at``, the hook aiowheel.idle and aiowheel.timeouts re-file their entries with:
    work already accepted must not be refused inside the driver's pass, where it would be lost.
    """
    async with Timer(max_pending=1) as timer:
        fired = Fired(timer)
        when = timer.time() + 0.002
        timer.call_at(when, fired, "new work")
        handle = timer.refile_at(when, fired, "re-filed")
        assert isinstance(handle, impl.timer.TimerHandle) and handle.when() == when
        assert len(timer) == 2
        with pytest.raises(PendingLimitError):
            timer.call_at(when, fired, "refused")
        await anyio.sleep(0.005)
        assert fired.labels == ["new work", "re-filed"]
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.refile_at(1, noop)


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
    async with timer.timeout(0.002) as scope:
        await timer.aclose()
        await anyio.sleep(0.005)  # the deadline's entry was cancelled with the rest
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


# -- copying and pickling a handle ------------------------------------------------------------
#
# A handle is the one handle of its timer: copy.copy, copy.deepcopy and pickle.dumps are refused
# with a TypeError, on both cores, for the Timer's TimerHandle and Job and for the wheel loop's
# LoopTimerHandle, pending, run or cancelled alike. (A copy sharing the timer's place on the
# wheel could cancel it behind the original's back; one not sharing it, or an unpickled one,
# would be a handle of no timer.) After the refusal the handle is unchanged: a pending one runs.

COPIES: dict[str, Callable[[Any], object]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "pickle.dumps": pickle.dumps,
}
STATES = ["pending", "run", "cancelled"]
NOT_COPYABLE = r"a {} cannot be copied or pickled: it is the one handle of its timer"


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("kind", ["TimerHandle", "Job"])
async def test_copying_a_timer_handle(backend_name: str, kind: str, how: str, state: str) -> None:
    ran: list[str] = []
    async with Timer() as timer:
        schedule = timer.call_later if kind == "TimerHandle" else timer.schedule
        handle = schedule(0.001, ran.append, "ran")
        if state == "run":
            await timer.sleep(0.002)
        elif state == "cancelled":
            handle.cancel()
        with pytest.raises(TypeError, match=NOT_COPYABLE.format(kind)):
            COPIES[how](handle)
        await timer.sleep(0.002)
    assert ran == ([] if state == "cancelled" else ["ran"])
    assert handle.cancelled() == (state == "cancelled")


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("kind", ["virtual", pytest.param("uvloop", marks=needs_uvloop)])
def test_copying_a_wheel_loop_handle(kind: str, how: str, state: str) -> None:
    ran: list[str] = []
    loop = make_loop(kind)
    try:
        handle = loop.call_later(0.01, ran.append, "ran")  # on the wheel: >= min_delay
        assert is_loop_handle(handle)
        if state == "run":
            loop.run_until_complete(asyncio.sleep(0.02))
        elif state == "cancelled":
            handle.cancel()
        with pytest.raises(TypeError, match=NOT_COPYABLE.format("LoopTimerHandle")):
            COPIES[how](handle)
        loop.run_until_complete(asyncio.sleep(0.02))
    finally:
        loop.close()
    assert ran == ([] if state == "cancelled" else ["ran"])
    assert handle.cancelled() == (state == "cancelled")


# -- a virtual clock started nowhere ------------------------------------------------------------
#
# VirtualTimeLoop(start=...) and aiowheel.testing.run(start=...) check start as advance() checks
# its seconds, with the same messages: at infinity the clock would never reach a timer (the loop
# spun at 100 % CPU), at NaN every timer would be due at once, out of order. A negative start is
# a clock like any other.

BAD_STARTS: list[tuple[object, type[Exception], str]] = [
    (math.inf, ValueError, "start must be finite, got inf"),
    (-math.inf, ValueError, "start must be finite, got -inf"),
    (math.nan, ValueError, "start must be finite, got nan"),
    (10**400, ValueError, "start must be finite, got 1000"),
    ("1", TypeError, "start must be an int or a float, got '1'"),
    (None, TypeError, "start must be an int or a float, got None"),
    (True, TypeError, "start must be an int or a float, got True"),
]


@pytest.mark.parametrize("entry", ["VirtualTimeLoop", "run"])
@pytest.mark.parametrize(
    ("start", "error", "message"), BAD_STARTS, ids=[repr(s)[:8] for s, _, _ in BAD_STARTS]
)
def test_bad_start(entry: str, start: Any, error: type[Exception], message: str) -> None:
    started: list[str] = []

    async def main() -> None:
        started.append("main")

    with pytest.raises(error, match=re.escape(message)):
        if entry == "VirtualTimeLoop":
            VirtualTimeLoop(start=start).close()
        else:
            run(main(), start=start)
    assert started == []


@pytest.mark.parametrize("start", [-5, -0.5, 0, 2.5])
def test_any_finite_start(start: float) -> None:
    assert run(_loop_time(), start=start) == start
    loop = VirtualTimeLoop(start=start)
    try:
        assert loop.time() == start
    finally:
        loop.close()


async def _loop_time() -> float:
    return asyncio.get_running_loop().time()


# -- the wheel loop used as a hostile user would (issue 27) --------------------------------------
#
# Each row is a scenario run on a loop the row's base makes: the wheel loop on it and, where the
# base loop is the reference, the base loop itself (asyncio's selector loop, uvloop), side by
# side: the wheel loop must observe what the base observes. Where asyncio is not the reference
# (it computes float32 deadlines, refuses Decimal), the row names what must hold. Real time on
# both bases, a few milliseconds; only outcomes are compared, never a time bound.

Make = Callable[[], asyncio.AbstractEventLoop]


def _spin(loop: asyncio.AbstractEventLoop, seconds: float = 0.005) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def _patched_clock(make: Make) -> object:
    """A test sets the clock by hand (aiohttp's own tests do): a 10 s timer made then is 10 s
    after the patched clock, and does not run while the patched clock is short of it."""
    loop = make()
    try:
        ran: list[str] = []
        now = loop.time() + 1000
        with mock.patch.object(loop, "time", return_value=now):
            handle = loop.call_later(10, ran.append, "ran")
            later = loop.call_at(now + 10, ran.append, "ran at")
            for _ in range(3):  # passes of the loop, its driver's included, on the frozen clock
                loop.call_soon(loop.stop)
                loop.run_forever()
            whens = (handle.when() - now, later.when() - now)
        handle.cancel()
        later.cancel()
        return whens, ran
    finally:
        loop.close()


def _kept_handles(make: Make) -> object:
    """An exception handler keeps context["handle"] of the failing timers (error reporters do):
    once closed, the loop is still freed."""
    loop = make()
    reporter = _Reporter()
    loop.set_exception_handler(reporter)
    loop.call_later(0.001, raise_, Boom)  # on the wheel
    loop.call_later(0, raise_, Boom)  # in the near queue
    _spin(loop)
    loop.close()
    kept = len(reporter.kept)
    freed = weakref.ref(loop)
    del loop, reporter  # the handles are now reachable from the loop only, through the handler
    gc.collect()
    return kept, freed() is None


class _Reporter:
    """An exception handler that keeps the failing handles, as error reporters do."""

    def __init__(self) -> None:
        self.kept: list[object] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.kept.append(context["handle"])


def _freed_by_reference_counting(make: Make) -> object:
    """A closed loop goes when its last reference does, without the cyclic collector (anyio's
    test_asyncio_run_does_not_leak_event_loop)."""
    loop = make()
    loop.call_later(100, noop)
    loop.call_later(0.001, noop)
    _spin(loop)
    loop.close()
    freed = weakref.ref(loop)
    gc.disable()
    try:
        del loop
        return freed() is None
    finally:
        gc.enable()


def _dropped_unclosed(make: Make) -> object:
    """A loop dropped without close() with a timer pending: collected, warning as its base.
    (Not after a re-arm of the driver on uvloop: uvloop keeps a loop alive, unclosed, once any
    of its timers was cancelled, until it runs again; see docs/loop.md.)"""
    loop = make()
    loop.call_later(100, noop)
    freed = weakref.ref(loop)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del loop
        gc.collect()
    unclosed = [w for w in caught if str(w.message).startswith("unclosed event loop")]
    return freed() is None, [w.category.__name__ for w in unclosed]


def _debug_repr_cancelled_after_it_ran(make: Make) -> object:
    loop = make()
    try:
        loop.set_debug(True)
        handle = loop.call_later(0.001, noop)
        _spin(loop)
        handle.cancel()
        return handle.cancelled(), "cancelled" in repr(handle)
    finally:
        loop.close()


_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="unset")


def _a_handles_own_context(make: Make) -> object:
    """What is set in one handle's get_context() is that handle's alone."""
    loop = make()
    try:
        seen: dict[str, str] = {}
        first = loop.call_later(0.001, lambda: seen.update(first=_VAR.get()))
        loop.call_later(0.001, lambda: seen.update(wheel=_VAR.get()))
        loop.call_later(0, lambda: seen.update(near=_VAR.get()))
        first.get_context().run(_VAR.set, "x")  # type: ignore[union-attr]
        _spin(loop)
        return seen
    finally:
        loop.close()


def _numbers(make: Make) -> object:
    """Delays of every real number type: when() is a float at or after the exact clock + delay,
    and the callback runs at or after it."""
    np = pytest.importorskip("numpy")
    loop = make()
    try:
        outcomes = []
        for delay in (np.float32(0.003), np.float16(0.003), Decimal("0.003"), Fraction(3, 1000)):
            ran: list[float] = []
            now = loop.time()
            handle = loop.call_later(delay, lambda ran=ran: ran.append(loop.time()))
            when = handle.when()
            _spin(loop, 0.01)
            exact = Fraction(delay) if isinstance(delay, Decimal | Fraction) else float(delay)
            floor = Fraction(now) + Fraction(exact)
            outcomes.append(
                type(when) is float and when >= floor and len(ran) == 1 and ran[0] >= when
            )
        return outcomes
    finally:
        loop.close()


@dataclass(frozen=True)
class LoopFault:
    name: str
    scenario: Callable[[Make], object]
    # What the wheel loop must observe, or None: what its base loop observes.
    expected: object = None
    # Whether asyncio's loop also observes `expected` (then checked on the asyncio base).
    asyncios_too: bool = False
    # What the compiled core observes where it differs by design (docs/loop.md says why).
    on_compiled: object = None

    def __str__(self) -> str:
        return self.name


HAS_GET_CONTEXT = hasattr(asyncio.Handle, "get_context")  # Python 3.12+

LOOP_FAULTS = [
    LoopFault("a clock patched by a test", _patched_clock, ((10.0, 10.0), []), asyncios_too=True),
    LoopFault("handles kept by the exception handler", _kept_handles),
    LoopFault("a closed loop freed by reference counting", _freed_by_reference_counting),
    # The compiled core's handles are not tracked by the cyclic collector (the price of tracking
    # them: about 180 instructions per timer, docs/loop.md): a loop dropped unclosed with a
    # timer pending is never collected. Close your loops.
    LoopFault("a loop dropped unclosed", _dropped_unclosed, on_compiled=(False, [])),
    LoopFault("debug repr cancelled after it ran", _debug_repr_cancelled_after_it_ran),
    LoopFault(
        "a handle's own context",
        _a_handles_own_context,
        {"first": "x", "wheel": "unset", "near": "unset"},
        asyncios_too=HAS_GET_CONTEXT,
    ),
    LoopFault("numbers of every type", _numbers, [True] * 4),
]


def _makers(base: str) -> tuple[Make, Make]:
    """(the base loop itself, the wheel loop on it)."""
    if base == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.new_event_loop, new_uvloop_event_loop
    return asyncio.SelectorEventLoop, new_event_loop


@pytest.mark.parametrize("base", ["asyncio", "uvloop"])
@pytest.mark.parametrize("row", LOOP_FAULTS, ids=str)
def test_loop_fault(base: str, row: LoopFault, core: str) -> None:
    reference, wheel = _makers(base)
    observed = row.scenario(wheel)
    if core == "compiled" and row.on_compiled is not None and not CPYTHON_FALLBACK:
        assert observed == row.on_compiled
        return
    if row.expected is None:
        assert observed == row.scenario(reference)
        return
    assert observed == row.expected
    if base == "asyncio" and row.asyncios_too:
        assert row.scenario(reference) == row.expected


@pytest.mark.parametrize("min_delay_ticks", [0, 0.25, 0.5, 0.99, 1, 4])
def test_no_timer_late_whatever_min_delay(min_delay_ticks: float) -> None:
    """A min_delay below a tick once filed a timer made right after a driver pass in a bucket
    that expires with the wheel's clock, late by up to two ticks: every timer runs at its own
    deadline, in virtual time exactly."""
    tick = 0.5
    loop = VirtualLoop(tick=tick, min_delay=min_delay_ticks * tick)
    late: list[float] = []
    handles: list[asyncio.TimerHandle] = []

    def check(index: int) -> None:
        late.append(loop.time() - handles[index].when())

    def after_a_pass() -> None:  # a wheel timer: runs in a driver pass
        for delay in (0.05, 0.2, 0.25, 0.3, 0.45, 0.5, 0.7, 0.99, 1.2):
            handles.append(loop.call_later(delay, check, len(handles)))

    try:
        loop.call_later(3 * tick, after_a_pass)
        _spin(loop, 4.0)
    finally:
        loop.close()
    assert late == [0.0] * 9
