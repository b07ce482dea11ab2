"""The Timer's callbacks: ``call_later`` and ``call_at`` on time with their arguments, in
(deadline, scheduling order), and scheduled, cancelled or rescheduled from other callbacks of
the same pass.
"""

from __future__ import annotations

import math
import random
import threading
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from support import HANG, TICK, Fired, assert_on_time, is_virtual

from aiowheel import Timer, TimerHandle

if TYPE_CHECKING:
    from aiowheel._impl import Implementation

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- call_later / call_at: on time, with their arguments ------------------------------------------


async def test_call_later_runs_the_callback_with_its_args_on_time(
    backend_name: str, twins: Implementation
) -> None:
    exact = is_virtual(backend_name)
    delays = [0.0004, 0.001, 0.0123, 0.03]
    if exact:  # far enough to go through one, two and three cascades
        delays += [0.5, 4.2, 100.0, 3600.25]
    calls: list[tuple[tuple[Any, ...], float, int]] = []

    def callback(*args: Any) -> None:
        calls.append((args, timer.time(), threading.get_ident()))

    async with Timer(tick=TICK) as timer:
        start = timer.time()
        handles = [timer.call_later(delay, callback, i, "arg") for i, delay in enumerate(delays)]
        for handle, delay in zip(handles, delays, strict=True):
            assert isinstance(handle, twins.timer.TimerHandle)  # the handle of the Timer's core
            if exact:
                assert handle.when() == start + delay
        assert not calls  # nothing runs inline
        await timer.sleep_until(max(handle.when() for handle in handles))

    assert [args for args, _, _ in calls] == [(i, "arg") for i in range(len(delays))]
    for handle, (_, ran_at, thread) in zip(handles, calls, strict=True):
        assert_on_time(handle.when(), ran_at, exact=exact)
        assert thread == threading.get_ident()  # in the loop's thread


async def test_call_at_runs_the_callback_at_the_given_loop_time(backend_name: str) -> None:
    exact = is_virtual(backend_name)
    async with Timer(tick=TICK) as timer:
        if exact:
            assert timer.time() == anyio.current_time()  # the loop's clock
        fired = Fired(timer)
        whens = [timer.time() + offset for offset in (0.0201, 0.0005, 0.011, 0.03)]
        handles = [timer.call_at(when, fired, when) for when in whens]
        assert [handle.when() for handle in handles] == whens
        await timer.sleep_until(max(whens))

    assert fired.labels == sorted(whens)
    for when, ran_at in fired.calls:
        assert_on_time(when, ran_at, exact=exact)


async def test_exact_in_virtual_time_with_a_coarse_tick(virtual_time: None) -> None:
    # Deadlines on, just after and just before tick boundaries, with a tick of 1 s.
    async with Timer(tick=1.0, wheel_size=8) as timer:
        fired = Fired(timer)
        start = timer.time()
        whens = [start + offset for offset in (1.0, 1.000001, 0.999999, 7.5, 8.0, 63.2, 64.9, 700)]
        for when in whens:
            timer.call_at(when, fired, when)
        await timer.sleep_until(max(whens))
        stats = timer.stats()

    assert fired.labels == sorted(whens)
    for when, ran_at in fired.calls:
        # Due on the first whole tick at or after its deadline, exactly.
        assert ran_at == math.ceil(when)
    assert 0 <= stats.max_lateness < 1.0


async def test_a_negative_delay_or_past_time_is_due_at_once_but_not_inline(
    backend_name: str,
) -> None:
    async with Timer() as timer:
        fired = Fired(timer)
        start = timer.time()
        late = timer.call_later(-5, fired, "negative")
        past = timer.call_at(start - 100, fired, "past")
        zero = timer.call_later(0, fired, "zero")
        assert not fired.calls
        await timer.sleep(0)

    # In (deadline, scheduling order), at the next driver pass.
    assert fired.labels == ["past", "negative", "zero"]
    assert past.when() == start - 100
    if is_virtual(backend_name):  # (uvloop's clock moves while the test schedules)
        assert (late.when(), zero.when()) == (start - 5, start)
        assert [ran_at for _, ran_at in fired.calls] == [start] * 3  # the clock did not move


async def test_arguments_reach_the_callback_as_given() -> None:
    """However the handle stores them (the compiled one keeps a lone argument without its tuple),
    the callback gets exactly the arguments given, and ``_args`` and the error report show their
    tuple."""
    calls: list[tuple[Any, ...]] = []

    def record(*args: Any) -> None:
        calls.append(args)

    given: list[tuple[Any, ...]] = [(), (None,), ((1, 2),), ((),), ([3],), (4, 5), (6, 7, 8)]
    async with Timer() as timer:
        handles = [timer.call_later(0.001, record, *args) for args in given]
        assert [handle._args for handle in handles] == given
        await timer.sleep(0.002)
    assert calls == given


# -- ordering: (deadline, scheduling order) -------------------------------------------------------


async def test_equal_deadlines_run_in_scheduling_order(backend_name: str) -> None:
    async with Timer() as timer:
        fired = Fired(timer)
        when = timer.time() + 0.01
        for i in range(30):
            # call_later(0.01) means the same deadline only while the clock stands still.
            if i % 2 and is_virtual(backend_name):
                timer.call_later(0.01, fired, i)
            else:
                timer.call_at(when, fired, i)
        await timer.sleep_until(when)
    assert fired.labels == list(range(30))


async def test_sub_tick_deadlines_in_one_bucket_run_by_deadline_then_scheduling_order() -> None:
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        base = (math.floor(timer.time() / TICK) + 10) * TICK
        offsets = [0.0009, 0.0001, 0.0005, 0.0001, 0.00095, 0.0005]
        handles = [
            timer.call_at(base + offset, fired, (offset, i)) for i, offset in enumerate(offsets)
        ]
        # All in the same bucket -- on level 0, within one tick -- added out of deadline order.
        assert timer.stats().pending_per_level[0] == len(handles)
        assert len({math.ceil(handle.when() / TICK) for handle in handles}) == 1
        await timer.sleep_until(base + max(offsets))
    assert fired.labels == sorted((offset, i) for i, offset in enumerate(offsets))


async def test_random_deadlines_run_in_deadline_then_scheduling_order(backend_name: str) -> None:
    rng = random.Random(42)
    exact = is_virtual(backend_name)
    horizon = 60.0 if exact else 0.03
    async with Timer(tick=TICK, wheel_size=8) as timer:
        fired = Fired(timer)
        start = timer.time()
        # Rounded offsets give many equal deadlines.
        whens = [start + round(rng.uniform(-0.002, horizon), 4) for _ in range(300)]
        for i, when in enumerate(whens):
            timer.call_at(when, fired, i)
        await timer.sleep_until(max(whens))
    assert fired.labels == sorted(range(len(whens)), key=lambda i: (whens[i], i))
    for i, ran_at in fired.calls:
        assert_on_time(max(whens[i], start), ran_at, exact=exact)


async def test_cascaded_and_directly_added_timers_with_one_deadline_keep_scheduling_order(
    virtual_time: None,
) -> None:
    # tick 1 s, wheel size 4: level 0 spans 4 s, level 1 slots are 4 s wide.
    async with Timer(tick=1.0, wheel_size=4) as timer:
        base = (math.floor(timer.time() / 16) + 1) * 16
        await timer.sleep_until(base)  # the wheel's clock is now aligned at base
        fired = Fired(timer)
        # Filed on level 1 (base + 10 is beyond level 0's range): cascaded down later.
        cascaded = timer.call_at(base + 10, fired, "cascaded")
        levels: list[tuple[int, ...]] = []

        def add_direct() -> None:
            # Runs at base + 7: base + 10 is now inside level 0's range, so these go straight
            # into level 0 while "cascaded" (and the sleep's job) still wait on level 1.
            levels.append(timer.stats().pending_per_level)
            timer.call_at(base + 9.5, fired, "direct, earlier in the tick")
            timer.call_at(base + 10, fired, "direct")
            levels.append(timer.stats().pending_per_level)

        timer.call_at(base + 7, add_direct)
        await timer.sleep_until(base + 10)

    assert cascaded.when() == base + 10
    assert [per_level[:2] for per_level in levels] == [(0, 2), (2, 2)]  # (level 0, level 1)
    assert fired.labels == ["direct, earlier in the tick", "cascaded", "direct"]
    assert [ran_at for _, ran_at in fired.calls] == [base + 10] * 3


# -- re-entrancy ----------------------------------------------------------------------------------


async def test_a_timer_cancelled_by_an_earlier_callback_of_the_batch_does_not_run() -> None:
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        base = (math.floor(timer.time() / TICK) + 5) * TICK
        victims: list[TimerHandle] = []

        def cancel_victims() -> None:
            fired("canceller")
            for victim in victims:
                victim.cancel()

        timer.call_at(base + 0.0002, cancel_victims)
        victims.append(timer.call_at(base + 0.0002, fired, "same deadline"))
        victims.append(timer.call_at(base + 0.0008, fired, "later in the tick"))
        job = timer.schedule_at(base + 0.0005, fired, "job")
        victims.append(job)
        timer.call_at(base + 0.0009, fired, "survivor")
        await timer.sleep_until(base + 0.001)
        stats = timer.stats()

    assert fired.labels == ["canceller", "survivor"]
    assert all(victim.cancelled() for victim in victims)
    assert stats.cancelled == 3
    assert stats.fired == 3  # canceller, survivor and the sleep
    assert job.done()


async def test_timers_scheduled_from_a_callback_run_in_a_later_pass(backend_name: str) -> None:
    async with Timer() as timer:
        runs: list[tuple[str, int]] = []

        def record(label: str) -> None:
            runs.append((label, timer.stats().driver_wakeups))

        def schedule_more() -> None:
            record("first")
            timer.call_later(0, record, "zero")
            timer.call_later(-1, record, "negative")
            timer.call_at(timer.time() - 5, record, "past")

        when = timer.time() + 0.001
        timer.call_at(when, schedule_more)
        timer.call_at(when, record, "second")
        await timer.sleep_until(when)
        await timer.sleep(0)

    # After the rest of the first batch, in (deadline, scheduling order).
    assert [label for label, _ in runs] == ["first", "second", "past", "negative", "zero"]
    first_pass = runs[0][1]
    passes = dict(runs)
    assert passes["second"] == first_pass
    # Already due: the very next pass, not this one.
    assert passes["past"] == passes["negative"] == first_pass + 1
    # Due now: the next pass too in virtual time, where the driver woke on a tick boundary; in
    # real time "now" may fall inside a tick, rounded up to the tick's end (never early).
    if is_virtual(backend_name):
        assert passes["zero"] == first_pass + 1
    else:
        assert passes["zero"] >= first_pass + 1


async def test_a_callback_rescheduling_itself_at_once_does_not_starve_the_loop() -> None:
    async with Timer() as timer:
        runs = 0
        current: list[TimerHandle] = []

        def again() -> None:
            nonlocal runs
            runs += 1
            current[:] = [timer.call_later(-1, again)]  # due at once, every time

        current.append(timer.call_later(-1, again))
        with anyio.fail_after(HANG):
            while runs < 5:
                await anyio.sleep(0)  # would never return if the driver kept the loop busy
        current[0].cancel()
        runs_at_cancel = runs
        await timer.sleep(0.002)
    assert runs == runs_at_cancel  # the chain stopped


async def test_a_callback_may_cancel_itself_while_running() -> None:
    async with Timer() as timer:
        handles: list[TimerHandle] = []

        def cancel_myself() -> None:
            handles[0].cancel()

        handles.append(timer.call_later(0.001, cancel_myself))
        await timer.sleep(0.002)
        stats = timer.stats()
    assert handles[0].cancelled()
    assert (stats.fired, stats.cancelled) == (2, 0)
