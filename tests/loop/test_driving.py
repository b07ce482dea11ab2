"""The driver: when it is armed and wakes, and what it runs in a pass."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop_support import TICK, Callback, run_for, uvloop_class
from support import VirtualLoop, run_until

from aiowheel.loop import WheelLoop

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- driving --------------------------------------------------------------------------------------


def live_base_timers(loop: VirtualLoop) -> list[asyncio.TimerHandle]:
    return [handle for handle in loop._scheduled if not handle.cancelled()]  # type: ignore[attr-defined]


def bucket_start(loop: WheelLoop) -> float:
    """The start of the wheel's earliest bucket, a tick before it expires: every deadline in it
    is later (the wheel rounds deadlines up to a tick)."""
    expires = loop.wheel.next_deadline()
    assert expires is not None
    return (round(expires / TICK) - 1) * TICK


def test_one_driver_armed_for_the_earliest_bucket_and_disarmed_when_empty() -> None:
    loop = VirtualLoop()
    assert live_base_timers(loop) == []
    # Armed just after the start of the earliest bucket: no deadline in it is earlier.
    late = loop.call_later(0.05, Callback())
    (driver,) = live_base_timers(loop)
    assert driver.when() == math.nextafter(bucket_start(loop), math.inf)
    for _ in range(100):
        loop.call_later(0.06, Callback())
    assert live_base_timers(loop) == [driver]  # later buckets do not re-arm it
    early = loop.call_later(0.01, Callback())
    (driver,) = live_base_timers(loop)
    assert driver.when() == math.nextafter(bucket_start(loop), math.inf) <= early.when()
    early.cancel()  # the earliest bucket is now empty: the driver moves later
    (driver,) = live_base_timers(loop)
    assert driver.when() == math.nextafter(bucket_start(loop), math.inf) <= late.when()
    loop.close()


def test_no_wakeup_while_nothing_is_due() -> None:
    loop = VirtualLoop()
    for _ in range(100):
        loop.call_later(2.0, Callback())  # 2 000 ticks ahead: on level 1
    run_for(loop, 2.5)  # the sleep's timer is on level 1 too, in another slot
    stats = loop.wheel_stats()
    # Per level-1 bucket: one pass to cascade it down to level 0, one at the start of the
    # level-0 bucket to find its timers' exact deadline, one at that deadline to run them.
    assert stats.driver_wakeups == 6
    assert stats.fired == 101
    # The loop slept only until those passes, never on some polling interval.
    assert len(loop.waits) == 6
    loop.close()


def test_a_later_timer_in_an_earlier_higher_bucket_needs_no_extra_pass() -> None:
    loop = VirtualLoop()
    run_for(loop, 0.03)  # the wheel's clock is now off a level-1 slot boundary
    start = loop.time()
    ran: list[tuple[str, float]] = []
    first = loop.call_at(start + 0.060, lambda: ran.append(("first", loop.time())))
    later = loop.call_at(start + 0.065, lambda: ran.append(("later", loop.time())))
    # The later timer is on level 1 (beyond level 0's 64 ticks), in a bucket that expires
    # before the first timer's deadline: the wheel's next bucket is its.
    assert loop.wheel.levels == 2
    expiration = loop.wheel.next_deadline()
    assert expiration is not None and expiration < first.when()
    passes = loop.wheel_stats().driver_wakeups
    run_for(loop, 0.07)
    # The driver stayed armed for the first timer's bucket; its pass cascaded the later one in
    # time. Each timer (and the sleep) then needs the pass at the start of its bucket and the
    # one at its exact deadline.
    assert [name for name, _ in ran] == ["first", "later"]
    for (_, ran_at), handle in zip(ran, (first, later), strict=True):
        assert ran_at == handle.when()
    assert loop.wheel_stats().driver_wakeups - passes == 6
    loop.close()


def wakeups_to_stop_after(seconds: float, cancelled: int) -> int:
    """Driver passes needed to stop a loop after ``seconds``, once ``cancelled`` timers (5 s
    ahead) have been scheduled and cancelled."""
    loop = VirtualLoop()
    handles = [loop.call_later(5, Callback()) for _ in range(cancelled)]
    for handle in handles:
        handle.cancel()
    assert live_base_timers(loop) == []
    loop.call_later(seconds, loop.stop)
    loop.run_forever()
    loop.close()
    return loop.wheel_stats().driver_wakeups


def test_cancelled_timers_cost_no_wakeup() -> None:
    assert wakeups_to_stop_after(10, cancelled=10) == wakeups_to_stop_after(10, cancelled=0)


def test_an_idle_wheel_catches_up_before_filing_a_near_timer() -> None:
    loop = VirtualLoop()
    loop.call_later(3600, Callback())  # a far timer keeps the wheel busy but its clock idle
    loop.advance(1800)  # half an hour passes (the loop was blocked, say)
    near = loop.call_later(0.01, Callback())
    # Straight onto level 0, no cascading: its bucket expires at its own tick (a bucket of a
    # higher level expires at the start of its slot, ticks before).
    expiration = loop.wheel.next_deadline()
    assert expiration is not None and near.when() <= expiration < near.when() + TICK
    run_for(loop, 0.02)
    # The near timer's and the sleep's: each at the start of its bucket and at its deadline.
    assert loop.wheel_stats().driver_wakeups == 4
    loop.close()


def test_systemexit_in_a_callback_leaves_the_rest_of_the_batch_for_the_next_run(
    loop: WheelLoop,
) -> None:
    ran: list[int] = []
    when = loop.time() + 0.01

    def exit_now() -> None:
        raise SystemExit(3)

    loop.call_at(when, ran.append, 1)
    loop.call_at(when, exit_now)
    loop.call_at(when, ran.append, 2)
    with pytest.raises(SystemExit):
        loop.run_forever()
    # asyncio stops at once; uvloop, as with any of its callbacks, finishes the pass first.
    assert ran == ([1, 2] if isinstance(loop, uvloop_class()) else [1])
    run_until(loop, lambda: 2 in ran)
    assert ran == [1, 2]


@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.0005, 0.003, 0.05, 1.0]),  # time to the next step
            st.floats(0.0, 70.0),  # the timer's delay
            st.one_of(st.none(), st.integers(0, 40)),  # a timer to cancel at this step
        ),
        max_size=40,
    )
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_schedules_keep_the_contract(
    steps: list[tuple[float, float, int | None]],
) -> None:
    loop = VirtualLoop()
    handles: list[asyncio.TimerHandle] = []
    ran: list[tuple[float, int]] = []
    cancelled: set[int] = set()

    async def script() -> None:
        for gap, delay, victim in steps:
            await asyncio.sleep(gap)
            if victim is not None and victim < len(handles):
                if all(i != victim for _, i in ran):
                    cancelled.add(victim)
                handles[victim].cancel()
            i = len(handles)
            handles.append(loop.call_later(delay, lambda i=i: ran.append((loop.time(), i))))
        await asyncio.sleep(71)

    loop.run_until_complete(script())
    loop.close()
    ran_ids = [i for _, i in ran]
    assert sorted(ran_ids) == sorted(set(range(len(handles))) - cancelled)
    # One order for every timer, on the wheel or not: (deadline, scheduling order); each runs
    # exactly at its when() in virtual time.
    assert ran_ids == sorted(ran_ids, key=lambda i: (handles[i].when(), i))
    for ran_at, i in ran:
        assert ran_at == handles[i].when()
    stats = loop.wheel_stats()
    assert stats.pending == 0
    # Every timer (the script's sleeps too) was on the wheel or in the near queue.
    assert stats.wheel_timers + stats.base_timers == stats.fired + stats.cancelled
