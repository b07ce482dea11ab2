"""``max_pending`` reached from outside and inside the driver (:data:`LIMITS`): new work refused
at the call that asks for it, the library's own re-filing never.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import pytest
from faults_support import Scenario
from support import HANG, Fired, noop

from aiowheel import PendingLimitError, Timer
from aiowheel.idle import IdleTimeouts

if TYPE_CHECKING:
    from aiowheel._impl import Implementation

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- limits: max_pending, from outside and inside the driver --------------------------------------
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
VIRTUAL_ONLY: set[Scenario] = {_idle_refiles_at_the_limit}


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
        blockers = [timer.call_later(10, noop) for _ in range(2)]  # far: uvloop runs in real time
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


async def test_the_librarys_own_re_filing_is_never_refused_by_max_pending(
    twins: Implementation,
) -> None:
    """``refile_at``, the hook aiowheel.idle and aiowheel.timeouts re-file their entries with:
    work already accepted must not be refused inside the driver's pass, where it would be lost.
    """
    async with Timer(max_pending=1) as timer:
        fired = Fired(timer)
        when = timer.time() + 0.002
        timer.call_at(when, fired, "new work")
        handle = timer.refile_at(when, fired, "re-filed")
        assert isinstance(handle, twins.timer.TimerHandle) and handle.when() == when
        assert len(timer) == 2
        with pytest.raises(PendingLimitError):
            timer.call_at(when, fired, "refused")
        await anyio.sleep(0.005)
        assert fired.labels == ["new work", "re-filed"]
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.refile_at(1, noop)
