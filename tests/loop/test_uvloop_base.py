"""The uvloop base: never early on uvloop's millisecond clock, and the driver on time."""

from __future__ import annotations

import asyncio
import random

import pytest
from loop_support import run
from support import HANG, needs_uvloop

import aiowheel
import aiowheel._impl
import aiowheel.loop
from aiowheel.loop import new_event_loop, new_uvloop_event_loop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- the uvloop base: never early, driver on time -------------------------------------------------


@pytest.mark.parametrize("now_ms", [0, 1, 999, 123_456_789, 98_765_432_101])
def test_uvloop_delays_are_whole_milliseconds_at_or_after_when(now_ms: int) -> None:
    pytest.importorskip("uvloop")
    from aiowheel.loop._uvloop import delay_to_ms_at_or_after

    now = now_ms / 1000  # uvloop's loop.time()
    for step in range(-3, 300):
        # Bucket deadlines as the wheel reports them (expiration * tick) and times between.
        for when in ((now_ms + step) * 0.001, (now_ms + step) / 1000, now + step / 7000):
            delay = delay_to_ms_at_or_after(when, now)
            due_ms = now_ms + round(delay * 1000)  # what uvloop makes of the delay
            assert delay * 1000 == round(delay * 1000)  # whole milliseconds
            if when <= now:
                assert delay == 0.0
            else:
                # The first millisecond at or after when: never early, never a millisecond late.
                assert due_ms / 1000 >= when
                assert (due_ms - 1) / 1000 < when


@needs_uvloop
def test_a_lone_timer_costs_one_driver_pass_on_uvloop() -> None:
    # uvloop's clock counts whole milliseconds, the default tick: a pass at the start of a
    # timer's tick could never find it due. The driver is armed just after that start, for the
    # tick's own millisecond, so each lone timer takes one pass (it took two: the regression).
    # Counted for the timers filed on level 0 only: when a stall of the process leaves the
    # wheel's clock behind the loop's at the call (by less than level 0's span, so it is not
    # moved up), the timer is filed a level higher and cascades first, a pass that says nothing
    # about the arming. A stall while a timer waits makes its one pass late, not a second one.
    loop = new_uvloop_event_loop()
    passes: list[int] = []

    async def lone_timers(count: int) -> None:
        for _ in range(count):
            done = loop.create_future()
            before = loop.wheel_stats().driver_wakeups
            loop.call_later(0.0503, done.set_result, None)  # off uvloop's millisecond grid
            on_level_0 = loop.wheel.pending_per_level()[0] == 1  # it is the wheel's only timer
            await done
            if on_level_0:
                passes.append(loop.wheel_stats().driver_wakeups - before)

    try:
        loop.run_until_complete(asyncio.wait_for(lone_timers(20), HANG))
        assert loop.wheel_stats().fired == 20
    finally:
        loop.close()
    assert passes, "every timer was filed above level 0: the process stalled at each call"
    assert passes == [1] * len(passes)


def test_uvloop_driver_is_armed_for_the_buckets_millisecond() -> None:
    # The regression: ceil((deadline - time()) * 1000) made 22.000000000048203 ms into 23, so
    # about half the drivers, and every timer of their buckets, ran a millisecond late.
    loop = new_uvloop_event_loop()
    checked = 0
    try:
        for step in range(1, 400):
            before = loop.time()
            deadline = (round(before * 1000) + step % 40 + 1) * loop.wheel.tick
            driver = loop._arm_driver(deadline)  # type: ignore[attr-defined]
            after = loop.time()
            driver.cancel()
            if before != after:  # uvloop's millisecond turned meanwhile: nothing exact to say
                continue
            checked += 1
            due_ms = round(driver.when() * 1000)
            assert due_ms / 1000 >= deadline, (deadline, driver.when())
            assert (due_ms - 1) / 1000 < deadline, (deadline, driver.when())
    finally:
        loop.close()
    assert checked > 0


def test_no_timer_of_the_wheel_loop_runs_before_its_when(use_uvloop: bool) -> None:
    # Real time, many timers, no upper bound: only "never before when()" and "fired". Short
    # timers stay on the base loop; uvloop's own round delays to the nearest millisecond, and
    # without the guard about half of these ran up to half a millisecond early on uvloop.
    rng = random.Random(16)

    async def main() -> tuple[int, list[tuple[float, float]], aiowheel.loop.WheelStats]:
        loop = asyncio.get_running_loop()
        early: list[tuple[float, float]] = []
        fired = 0
        done = loop.create_future()
        count = 600

        def check(when: float) -> None:
            nonlocal fired
            fired += 1
            now = loop.time()
            if now < when:
                early.append((when, now))
            if fired == count and not done.done():
                done.set_result(None)

        for i in range(count):
            delay = rng.uniform(0.0001, 0.008)  # both sides of min_delay (4 ms)
            if i % 2:
                when = loop.time() + delay
                loop.call_at(when, check, when)
            else:
                # The clock read before the call: at most the when() call_later computes.
                loop.call_later(delay, check, loop.time() + delay)
            if i % 25 == 0:
                await asyncio.sleep(0)
        # asyncio.sleep goes through call_later as well.
        for _ in range(30):
            delay = rng.uniform(0.0001, 0.004)
            started = loop.time()
            await asyncio.sleep(delay)
            if loop.time() < started + delay:
                early.append((started + delay, loop.time()))
        await done
        return fired, early, loop.wheel_stats()  # type: ignore[attr-defined]

    fired, early, stats = run(main(), uvloop=use_uvloop)
    assert early == []
    assert fired == 600
    assert stats.base_timers > 0 and stats.wheel_timers > 0  # both routes were taken


@needs_uvloop
def test_a_timer_on_the_uvloop_base_wakes_its_driver_once_per_timer() -> None:
    # The regression: the Timer did not recognise the wheel-backed uvloop as uvloop, and short
    # delays went to uvloop's round-to-nearest timers, so its driver woke early, found nothing
    # due and re-armed until the millisecond turned: 15 to 27 wake-ups per timer.
    from aiowheel import Timer

    rng = random.Random(10)

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        async with Timer(tick=0.001) as timer:
            for _ in range(40):
                fired = loop.create_future()
                timer.call_later(rng.uniform(0.0005, 0.0045), fired.set_result, None)
                await fired
            stats = timer.stats()
        return stats.driver_wakeups, stats.fired

    wakeups, fired = run(main(), uvloop=True)
    assert fired == 40
    assert wakeups == 40


@needs_uvloop
def test_the_timers_backend_counts_a_uvloop_subclass_as_uvloop() -> None:
    from aiowheel._backends._asyncio import AsyncioBackend

    class MyUVLoop(uvloop.Loop):  # type: ignore[misc,name-defined]
        pass

    for loop in (new_uvloop_event_loop(), MyUVLoop(), uvloop.new_event_loop()):
        try:
            assert AsyncioBackend(loop)._bias == 0.0005  # round-to-nearest made a ceil
        finally:
            loop.close()
    loop = new_event_loop()
    try:
        assert AsyncioBackend(loop)._bias == 0.0
    finally:
        loop.close()
