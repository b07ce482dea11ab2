"""Tests for :mod:`aiowheel.timer`: the Timer's callbacks -- construction, ``call_later`` and
``call_at`` on time with their arguments, (deadline, scheduling order), contexts, errors,
re-entrant calls, ``cancel`` and letting go of what a handle held, ``sleep`` and
``sleep_until``, and bad input refused naming the value.

Every async test runs three times (see conftest.py): asyncio on a virtual clock, uvloop in real
time, trio on ``MockClock``. In virtual time the assertions are exact: a callback due at ``when``
with tick ``t`` sees ``when <= timer.time() < when + t``. On uvloop (real time) the tests use
delays of at most 50 ms and assert only order, never-early and completion, never an upper time
bound; tests that need long waits or exact times ask for the ``virtual_time`` fixture.

A handy synchronisation point: ``await timer.sleep_until(when)`` returns only after every timer
due at or before ``when`` and scheduled before the sleep has run, because the sleep is itself a
wheel timer and due timers run in (deadline, scheduling order).

The Timer's other tests: ``test_core.py`` (callbacks: on time, in order, in context, cancelled,
refused), ``test_jobs.py`` (``schedule``), ``test_lifecycle.py`` (entering and closing),
``test_driver.py`` (when the driver wakes), ``test_stats.py`` (stats, len, repr);
``tests/test_backends.py`` has what differs by backend and ``tests/test_faults.py`` the
interrupts and ``max_pending`` limits, as fault tables.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import math
import random
import re
import threading
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from support import HANG, TICK, Boom, Fatal, Fired, assert_on_time, boom, is_virtual, noop

from aiowheel import Timer, TimerHandle

if TYPE_CHECKING:
    from aiowheel._impl import Implementation

# Every test on both twins of the cores (the `core` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- helpers -----------------------------------------------------------------------------------


class Target:
    """A callable that can be weakly referenced, to see when the Timer lets go of it."""

    def __call__(self, *args: Any) -> None:
        return None


# -- construction ------------------------------------------------------------------------------


def test_defaults() -> None:
    timer = Timer()
    assert (timer.tick, timer.wheel_size, timer.max_pending) == (0.001, 64, None)
    assert timer.exception_handler is None
    assert not timer.closed
    assert len(timer) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tick": 0}, "tick must be finite and > 0, got 0"),
        ({"tick": -0.001}, "tick must be finite and > 0, got -0.001"),
        ({"tick": math.nan}, "tick must be finite and > 0, got nan"),
        ({"tick": math.inf}, "tick must be finite and > 0, got inf"),
        ({"wheel_size": 1}, "wheel_size must be >= 2, got 1"),
        ({"wheel_size": 0}, "wheel_size must be >= 2, got 0"),
        ({"max_pending": 0}, "max_pending must be >= 1, got 0"),
        ({"max_pending": -3}, "max_pending must be >= 1, got -3"),
    ],
)
def test_bad_construction_arguments_raise_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Timer(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tick": "1ms"}, "tick must be a real number, got '1ms'"),
        ({"wheel_size": 64.0}, "wheel_size must be an int, got 64.0"),
    ],
)
def test_construction_arguments_of_the_wrong_type_raise_type_error(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        Timer(**kwargs)


@pytest.mark.parametrize("value", [1.5, True, "3"])
def test_max_pending_must_be_an_int(value: object) -> None:
    with pytest.raises(
        TypeError, match=re.escape(f"max_pending must be an int or None, got {value!r}")
    ):
        Timer(max_pending=value)  # type: ignore[arg-type]


# -- call_later / call_at: on time, with their arguments ---------------------------------------


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


# -- ordering: (deadline, scheduling order) ----------------------------------------------------


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


# -- context -----------------------------------------------------------------------------------

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


async def test_callback_runs_in_a_copy_of_the_callers_context() -> None:
    seen: list[str] = []

    def callback() -> None:
        seen.append(request_id.get())
        request_id.set("set by the callback")

    async with Timer() as timer:
        token = request_id.set("caller")
        try:
            timer.call_later(0.001, callback)
            request_id.set("changed after scheduling")
            await timer.sleep(0.002)
            assert request_id.get() == "changed after scheduling"  # no leak back
        finally:
            request_id.reset(token)
    assert seen == ["caller"]


async def test_callbacks_from_one_context_do_not_see_each_others_changes() -> None:
    """Each callback gets the caller's values as they were when it was scheduled, in a context
    of its own (the compiled Timer shares one snapshot between such handles: still isolated)."""
    seen: list[tuple[str, str]] = []

    def callback(label: str) -> None:
        seen.append((label, request_id.get()))
        request_id.set(f"set by {label}")

    async with Timer() as timer:
        token = request_id.set("first")
        try:
            when = timer.time() + 0.001
            timer.call_at(when, callback, "a")
            timer.call_at(when, callback, "b")
            request_id.set("second")
            timer.call_at(when, callback, "c")
            timer.call_at(when, callback, "d")
            request_id.set("first")  # the same value again, in a new mapping
            timer.call_at(when, callback, "e")
            await timer.sleep_until(when)
        finally:
            request_id.reset(token)
    assert seen == [
        ("a", "first"),
        ("b", "first"),
        ("c", "second"),
        ("d", "second"),
        ("e", "first"),
    ]


async def test_callback_runs_in_the_given_context() -> None:
    context = contextvars.Context()
    context.run(request_id.set, "given")
    seen: list[str] = []

    def callback() -> None:
        seen.append(request_id.get())
        request_id.set("set by the callback")

    async with Timer() as timer:
        token = request_id.set("caller")
        try:
            timer.call_later(0.001, callback, context=context)
            timer.call_at(timer.time() + 0.001, callback, context=context)
            await timer.sleep(0.002)
        finally:
            request_id.reset(token)
    assert seen == ["given", "set by the callback"]
    assert context[request_id] == "set by the callback"


async def test_coroutine_job_runs_in_a_copy_of_the_callers_context() -> None:
    async def job() -> str:
        await anyio.sleep(0)
        return request_id.get()

    async with Timer() as timer:
        token = request_id.set("scheduler")
        try:
            pending = timer.schedule(0.001, job)
            request_id.set("changed")
            assert await pending == "scheduler"
        finally:
            request_id.reset(token)


# -- errors ------------------------------------------------------------------------------------


def fatal() -> None:
    raise Fatal


async def test_exception_handler_gets_errors_on_every_backend(
    caplog: pytest.LogCaptureFixture,
) -> None:
    contexts: list[dict[str, Any]] = []

    def handler(context: dict[str, Any]) -> None:
        contexts.append(context)
        if isinstance(context["exception"], Fatal):
            raise RuntimeError("the handler itself fails")

    with caplog.at_level(logging.ERROR, logger="aiowheel"):
        async with Timer(exception_handler=handler) as timer:
            fired = Fired(timer)
            failing = timer.call_later(0.001, boom, 3)
            timer.call_later(0.002, fatal)
            timer.call_later(0.003, fired, "later")
            await timer.sleep(0.004)

    assert fired.labels == ["later"]
    assert [type(context["exception"]) for context in contexts] == [Boom, Fatal]
    assert set(contexts[0]) == {"message", "exception", "handle"}
    assert contexts[0]["handle"] is failing
    # A failing handler is logged and does not stop the timer either.
    [record] = [record for record in caplog.records if record.name == "aiowheel"]
    assert "exception_handler" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


async def test_the_error_report_of_a_one_argument_callback_shows_its_tuple(
    backend_name: str,
) -> None:
    if backend_name == "trio":
        pytest.skip("asyncio's exception handler")
    loop = asyncio.get_running_loop()
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))

    def boom(argument: object) -> None:
        raise ValueError(argument)

    try:
        async with Timer() as timer:
            timer.call_later(0.001, boom, (1, 2))
            await timer.sleep(0.002)
    finally:
        loop.set_exception_handler(None)
    [context] = contexts
    assert context["message"].endswith("boom((1, 2),)")
    assert context["exception"].args == ((1, 2),)


# -- re-entrancy -------------------------------------------------------------------------------


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


# -- cancel ------------------------------------------------------------------------------------


async def test_cancel_before_it_runs() -> None:
    async with Timer() as timer:
        fired = Fired(timer)
        handle = timer.call_later(0.002, fired, "cancelled")
        timer.call_later(0.002, fired, "kept")
        assert not handle.cancelled()
        assert len(timer) == 2
        handle.cancel()
        assert handle.cancelled()
        assert len(timer) == 1  # out of the wheel at once
        await timer.sleep(0.003)
        stats = timer.stats()
    assert fired.labels == ["kept"]
    assert stats.cancelled == 1


async def test_cancel_twice_or_after_it_ran_is_a_no_op() -> None:
    async with Timer() as timer:
        fired = Fired(timer)
        twice = timer.call_later(0.002, fired, "twice")
        twice.cancel()
        twice.cancel()
        assert twice.cancelled()
        ran = timer.call_later(0.001, fired, "ran")
        await timer.sleep(0.003)
        assert fired.labels == ["ran"]
        ran.cancel()
        ran.cancel()
        # As asyncio.TimerHandle: cancelled() reports that cancel() was called.
        assert ran.cancelled()
        stats = timer.stats()
    assert (stats.cancelled, stats.fired, stats.pending) == (1, 2, 0)


async def test_cancel_releases_the_callback_and_its_arguments_at_once() -> None:
    gc.disable()  # only reference counting may free them: "at once", not "eventually"
    try:
        async with Timer() as timer:
            objects = [Target() for _ in range(4)]
            refs = [weakref.ref(obj) for obj in objects]
            handle = timer.call_later(10, objects[0], objects[1])
            job = timer.schedule(10, objects[2], objects[3])
            del objects
            assert all(ref() is not None for ref in refs)
            assert len(timer) == 2
            handle.cancel()
            assert [ref() is None for ref in refs] == [True, True, False, False]
            assert len(timer) == 1
            job.cancel()
            assert all(ref() is None for ref in refs)
            assert len(timer) == 0
    finally:
        gc.enable()


async def test_a_callback_and_its_arguments_are_released_once_it_ran() -> None:
    """Also when the callback's object holds the handle (a cycle while pending): once the timer
    ran, reference counting alone frees them."""

    class Connection:
        def __init__(self, timer: Timer) -> None:
            self.handle = timer.call_later(0.001, self.on_timeout, Target())

        def on_timeout(self, argument: Target) -> None:
            self.ran = True

    gc.disable()
    try:
        async with Timer() as timer:
            connection = Connection(timer)
            refs = [weakref.ref(connection), weakref.ref(connection.handle._args[0])]
            handle = connection.handle
            del connection
            await timer.sleep(0.002)
            assert [ref() for ref in refs] == [None, None]
            assert handle.payload is None and handle._args == ()
            assert repr(handle).endswith(" done None>")
    finally:
        gc.enable()


@pytest.mark.parametrize("outcome", ["ran", "cancelled"])
async def test_a_handle_its_own_callback_references_is_freed_by_reference_counting(
    outcome: str,
) -> None:
    """handle -> callback -> handle is a cycle while the timer is pending (the wheel holds the
    handle then anyway); once it ran or was cancelled the handle lets go of its callback, so
    reference counting alone frees all three -- with no help from the garbage collector, which
    does not see the compiled core's handles at all."""

    class Owner:
        def __init__(self, timer: Timer, argument: Target) -> None:
            self.handle = timer.call_later(0.001, self.fire, argument)

        def fire(self, argument: Target) -> None:
            assert isinstance(argument, Target)

    gc.disable()
    try:
        async with Timer() as timer:
            owner = Owner(timer, Target())
            refs = [weakref.ref(owner), weakref.ref(owner.handle._args[0])]
            handle = owner.handle
            del owner
            assert all(ref() is not None for ref in refs)
            if outcome == "cancelled":
                handle.cancel()
            else:
                await timer.sleep(0.002)
            assert [ref() for ref in refs] == [None, None]
            assert (handle.payload, handle._args) == (None, ())
            assert handle.cancelled() == (outcome == "cancelled")
    finally:
        gc.enable()


# -- sleep / sleep_until -----------------------------------------------------------------------


async def test_sleep_and_sleep_until(backend_name: str) -> None:
    exact = is_virtual(backend_name)
    async with Timer(tick=TICK) as timer:
        for delay in [0.0003, 0.001, 0.0125] + ([2.5, 300.0] if exact else []):
            start = timer.time()
            await timer.sleep(delay)
            assert_on_time(start + delay, timer.time(), exact=exact)
        when = timer.time() + 0.0207
        await timer.sleep_until(when)
        assert_on_time(when, timer.time(), exact=exact)
        assert len(timer) == 0


async def test_sleep_zero_and_sleep_until_the_past_still_yield(backend_name: str) -> None:
    others: list[str] = []

    async def other() -> None:
        others.append("ran")

    async with Timer() as timer:
        for sleep in [
            lambda: timer.sleep(0),
            lambda: timer.sleep(-1),
            lambda: timer.sleep_until(timer.time() - 10),
        ]:
            others.clear()
            wakeups = timer.stats().driver_wakeups
            start = timer.time()
            async with anyio.create_task_group() as group:
                group.start_soon(other)
                await sleep()
                assert others == ["ran"]  # another task ran meanwhile
            assert timer.stats().driver_wakeups > wakeups  # through the driver
            if is_virtual(backend_name):
                assert timer.time() == start


async def test_a_cancelled_sleep_leaves_no_timer_behind() -> None:
    async with Timer() as timer:
        with anyio.move_on_after(0.002) as scope:
            await timer.sleep(10)
        assert scope.cancelled_caught
        assert len(timer) == 0
        stats = timer.stats()
    assert stats.cancelled == 1


# -- bad input ---------------------------------------------------------------------------------

TIME_ARGUMENT_USERS: dict[str, Callable[[Timer, Any], object]] = {
    "call_later": lambda timer, value: timer.call_later(value, noop),
    "call_at": lambda timer, value: timer.call_at(value, noop),
    "schedule": lambda timer, value: timer.schedule(value, noop),
    "schedule_at": lambda timer, value: timer.schedule_at(value, noop),
    "sleep": lambda timer, value: timer.sleep(value),
    "sleep_until": lambda timer, value: timer.sleep_until(value),
}


@pytest.mark.parametrize("method", list(TIME_ARGUMENT_USERS))
@pytest.mark.parametrize(
    ("value", "error", "named"),
    [
        (math.nan, ValueError, "nan"),
        (math.inf, ValueError, "inf"),
        (-math.inf, ValueError, "-inf"),
        ("1", TypeError, "'1'"),
        (None, TypeError, "None"),
        # bool is an int subclass, but True seconds is a bug at the call site.
        (True, TypeError, "True"),
    ],
    ids=["nan", "inf", "-inf", "str", "None", "bool"],
)
async def test_a_bad_time_argument_is_refused_naming_the_value(
    method: str, value: object, error: type[Exception], named: str
) -> None:
    async with Timer() as timer:
        with pytest.raises(error, match=re.escape(named)):
            result = TIME_ARGUMENT_USERS[method](timer, value)
            if isinstance(result, Awaitable):
                await result
        assert len(timer) == 0


async def test_a_non_callable_is_refused_naming_it() -> None:
    async with Timer() as timer:
        with pytest.raises(TypeError, match=re.escape("by call_later(), got 42")):
            timer.call_later(1, 42)
        with pytest.raises(TypeError, match=re.escape("by call_at(), got 'x'")):
            timer.call_at(1, "x")
        with pytest.raises(TypeError, match=re.escape("by schedule(), got None")):
            timer.schedule(1, None)
        with pytest.raises(TypeError, match=re.escape("got 3.5")):
            timer.schedule_at(1, 3.5)
        assert len(timer) == 0


class Client:
    async def fetch(self) -> None:
        return None


async def _coroutine_function() -> None:
    return None


@pytest.mark.parametrize("method", ["call_later", "call_at"])
@pytest.mark.parametrize(
    "make_callback",
    [
        lambda: _coroutine_function,
        lambda: Client().fetch,
        lambda: partial(_coroutine_function),
        _coroutine_function,  # a coroutine object
    ],
    ids=["coroutine function", "async method", "partial", "coroutine object"],
)
async def test_coroutines_are_refused_as_callbacks(
    method: str, make_callback: Callable[[], Any]
) -> None:
    callback = make_callback()
    try:
        async with Timer() as timer:
            message = re.escape(f"coroutines cannot be used with {method}()")
            with pytest.raises(TypeError, match=message):
                getattr(timer, method)(1, callback)
            assert len(timer) == 0
            # A coroutine object is not a function to schedule either.
            if asyncio.iscoroutine(callback):
                with pytest.raises(TypeError, match="by schedule"):
                    timer.schedule(1, callback)
    finally:
        if asyncio.iscoroutine(callback):
            callback.close()


async def test_a_deadline_years_away_is_fine() -> None:
    async with Timer() as timer:
        handle = timer.call_later(10 * 365 * 86400, noop)
        assert len(timer) == 1
        handle.cancel()
        assert len(timer) == 0


async def test_a_time_too_large_for_a_float_is_a_value_error() -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match="when 1000"):
            timer.call_at(10**400, print)
        with pytest.raises(ValueError, match="delay 1000"):
            timer.call_later(10**400, print)
