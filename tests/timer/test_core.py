"""The Timer core's contract, on both twins: what :class:`aiowheel.Timer` may ask of the core it
holds (``start``, ``call_at``, ``run_due``, ``rearm``, ``close``, ``counters``...), and nothing
it may not.

The core is driven here as the Timer drives it, without a loop: :meth:`start` gets a clock the
test moves by hand, an ``arm`` that records every time the driver is armed for, and a ``report``
that fails the test. The one rule of arming (the class docstring of
:class:`aiowheel._timercore.TimerCore`) is checked call by call: the two twins must arm the same
times, in the same order. The Timer's side of it, on every backend, closes the module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

import aiowheel.timer
from aiowheel import Timer
from aiowheel._checks import CLOSED, NOT_RUNNING
from aiowheel._lateness import LATENESS_BUCKETS

if TYPE_CHECKING:
    from aiowheel._backends import Backend
    from aiowheel._impl import Implementation


class HandClock:
    """A clock the test moves."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Driver:
    """The Timer's side of a started core: every ``arm(when)`` recorded; a report fails."""

    def __init__(self) -> None:
        self.armed: list[float | None] = []

    def arm(self, when: float | None) -> None:
        self.armed.append(when)

    def report(self, callback: object, args: object, exc: BaseException, handle: object) -> None:
        raise AssertionError(f"{callback!r}{args!r} raised") from exc


def started(twins: Implementation, clock: Callable[[], float]) -> tuple[Any, Driver]:
    """A core of ``twins`` (tick 1 s, 8 slots a level), started on ``clock``."""
    core = twins.timer.TimerCore(1.0, 8, None)
    driver = Driver()
    core.start(clock, driver.arm, driver.report)
    return core, driver


def _noop() -> None:
    pass


def test_a_new_core_is_neither_running_nor_closed_and_refuses_work(twins: Implementation) -> None:
    core = twins.timer.TimerCore(0.5, 16, None)
    assert (core.tick, core.wheel_size, core.running, core.closed, len(core)) == (
        0.5,
        16,
        False,
        False,
        0,
    )
    assert core.counters() == ((0,) * LATENESS_BUCKETS, 0.0, 0.0, 0)
    for schedule in (core.call_later, core.call_at, core.refile_at):
        with pytest.raises(RuntimeError, match=re.escape(NOT_RUNNING)):
            schedule(1.0, _noop)
    with pytest.raises(RuntimeError, match=re.escape(NOT_RUNNING)):
        core.time()


def test_start_gives_the_core_its_clock_and_starts_the_wheel_at_its_time(
    twins: Implementation,
) -> None:
    clock = HandClock(100.0)
    core, driver = started(twins, clock)
    assert core.running and not core.closed
    assert core.time is clock
    handle = core.call_later(2.5, _noop)
    assert handle.when() == 102.5
    assert core.pending_per_level()[0] == 1  # 102.5 is within level 0 of a wheel at 100
    assert driver.armed == [103.0]  # the bucket of 102.5, which ends at 103


def test_filing_arms_the_driver_only_when_the_next_deadline_gets_earlier(
    twins: Implementation,
) -> None:
    """The first rule: filing arms the wheel's next deadline if that is earlier than the time
    armed -- not for a later deadline, not for one in the bucket already armed (the driver wakes
    for it anyway), and the same on both twins (the pure twin armed again for the latter while
    the Timer subclassed its core)."""
    core, driver = started(twins, HandClock(0.0))
    core.call_at(5.0, _noop)
    assert driver.armed == [5.0]
    core.call_at(7.0, _noop)  # later
    core.call_at(5.0, _noop)  # the armed deadline
    core.call_at(4.5, _noop)  # earlier, but in the bucket that ends at 5.0, armed already
    core.refile_at(4.25, _noop)  # re-filing follows the same rule
    assert driver.armed == [5.0]
    core.call_at(2.0, _noop)
    core.refile_at(1.0, _noop)
    assert driver.armed == [5.0, 2.0, 1.0]


def test_nothing_arms_during_a_pass_and_rearm_arms_the_next_deadline_whatever_was_armed(
    twins: Implementation,
) -> None:
    """The second rule: from ``run_due`` until ``rearm`` the driver is dispatching and filing
    arms nothing; ``rearm`` then arms the wheel's next deadline, also when it is not earlier
    than the time armed, and None once nothing is pending. Closed, it arms nothing."""
    clock = HandClock(0.0)
    core, driver = started(twins, clock)
    ran: list[float] = []
    core.call_at(2.0, lambda: ran.append(core.call_at(2.5, _noop).when()))
    later = core.call_at(6.0, _noop)
    assert driver.armed == [2.0]
    clock.now = 2.0
    core.run_due()
    assert ran == [2.5]  # filed from the pass: earlier than anything armed, yet not armed
    third = core.call_at(3.5, _noop)  # after the pass, before rearm: still dispatching
    assert driver.armed == [2.0]
    core.rearm()
    assert driver.armed == [2.0, 3.0]
    core.rearm()  # whatever was armed: the same time again
    assert driver.armed == [2.0, 3.0, 3.0]
    clock.now = 3.0
    core.run_due()  # runs the 2.5 one
    third.cancel()
    later.cancel()
    core.rearm()
    assert driver.armed == [2.0, 3.0, 3.0, None]
    core.close()
    core.rearm()
    assert driver.armed == [2.0, 3.0, 3.0, None]


def test_an_empty_pass_still_counts_as_dispatching(twins: Implementation) -> None:
    clock = HandClock(0.0)
    core, driver = started(twins, clock)
    core.run_due()  # nothing due
    core.call_at(1.0, _noop)
    assert driver.armed == []
    core.rearm()
    assert driver.armed == [1.0]


def test_close_cancels_what_is_pending_and_returns_callbacks_and_args_in_deadline_order(
    twins: Implementation,
) -> None:
    clock = HandClock(0.0)
    core, _ = started(twins, clock)

    def first() -> None:
        pass

    def second() -> None:
        pass

    handles = [core.call_at(3.0, second, "b"), core.call_at(1.0, first), core.call_later(9, _noop)]
    handles[2].cancel()
    assert core.close() == [(first, ()), (second, ("b",))]
    assert all(handle.cancelled() for handle in handles)
    assert (core.running, core.closed, len(core)) == (False, True, 0)
    assert core.counters()[3] == 3  # cancelled before they ran
    assert core.close() == []  # idempotent
    with pytest.raises(RuntimeError, match=re.escape(CLOSED)):
        core.call_at(1.0, _noop)


def test_close_before_start_cancels_nothing_and_refuses_the_start_of_work(
    twins: Implementation,
) -> None:
    core = twins.timer.TimerCore(1.0, 8, None)
    assert core.close() == []
    assert core.closed and not core.running
    with pytest.raises(RuntimeError, match=re.escape(CLOSED)):
        core.call_later(1.0, _noop)


def test_counters_count_started_callbacks_their_lateness_and_cancellations(
    twins: Implementation,
) -> None:
    clock = HandClock(0.0)
    core, _ = started(twins, clock)
    core.call_at(1.0, _noop)
    core.call_at(1.5, _noop)
    core.call_at(4.0, _noop).cancel()
    clock.now = 2.0
    core.run_due()
    started_per_bucket, lateness_sum, max_lateness, cancelled = core.counters()
    assert sum(started_per_bucket) == 2
    assert (lateness_sum, max_lateness, cancelled) == (1.5, 1.0, 1)


# -- the Timer's side: one rule of arming on every backend -------------------------------------


@pytest.mark.anyio
async def test_the_timer_arms_its_backend_by_the_cores_rule(
    implementation: str, monkeypatch: pytest.MonkeyPatch, virtual_time: None
) -> None:
    """A timer in the bucket already armed arms nothing more, on both twins (the pure twin, while
    the Timer subclassed it, armed the loop again: its ``_rearm`` was the Timer's)."""
    armed: list[float | None] = []
    make_backend = aiowheel.timer.current_backend

    def recording_backend() -> Backend:
        backend = make_backend()
        real_arm = backend.arm

        def arm(when: float | None) -> None:
            armed.append(when)
            real_arm(when)

        backend.arm = arm  # type: ignore[method-assign]
        return backend

    monkeypatch.setattr(aiowheel.timer, "current_backend", recording_backend)
    async with Timer(tick=1.0) as timer:
        assert timer.implementation == implementation
        start = timer.time()
        bucket_end = float(int(start) + 5)
        timer.call_at(bucket_end, _noop)
        before = len(armed)
        timer.call_at(bucket_end - 0.5, _noop)  # the same bucket
        timer.call_at(bucket_end + 3, _noop)  # later
        assert len(armed) == before
        assert armed[-1] == bucket_end
        await timer.sleep_until(bucket_end)
