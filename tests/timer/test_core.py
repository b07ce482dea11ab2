"""Tests for :mod:`aiowheel.timer`: every guarantee of ``Timer`` in the spec, one section each.

Every async test runs three times (see conftest.py): asyncio on a virtual clock, uvloop in real
time, trio on ``MockClock``. In virtual time the assertions are exact: a callback due at ``when``
with tick ``t`` sees ``when <= timer.time() < when + t``. On uvloop (real time) the tests use
delays of at most 50 ms and assert only order, never-early and completion, never an upper time
bound; tests that need long waits or exact times ask for the ``virtual_time`` fixture.

A handy synchronisation point: ``await timer.sleep_until(when)`` returns only after every timer
due at or before ``when`` and scheduled before the sleep has run, because the sleep is itself a
wheel timer and due timers run in (deadline, scheduling order).
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
from typing import Any

import anyio
import pytest
from support import HANG

from aiowheel import (
    JobCancelled,
    LatenessHistogram,
    PendingLimitError,
    Timer,
    TimerHandle,
    TimerStats,
)
from aiowheel._lateness import LATENESS_BOUNDS
from aiowheel.testing import VirtualTimeLoop

pytestmark = pytest.mark.anyio

TICK = 0.001


# -- helpers -----------------------------------------------------------------------------------


def _noop(*args: Any) -> None:
    return None


class Fired:
    """A callback that records each call's label and the Timer's time when it ran."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.calls: list[tuple[Any, float]] = []

    def __call__(self, label: Any = None) -> None:
        self.calls.append((label, self.timer.time()))

    @property
    def labels(self) -> list[Any]:
        return [label for label, _ in self.calls]


class Target:
    """A callable that can be weakly referenced, to see when the Timer lets go of it."""

    def __call__(self, *args: Any) -> None:
        return None


def is_virtual(backend_name: str) -> bool:
    """True on the backends with a virtual clock, where timing assertions are exact."""
    return backend_name != "uvloop"


def assert_on_time(when: float, ran_at: float, *, exact: bool, tick: float = TICK) -> None:
    """Never early; in virtual time also less than one tick late."""
    assert ran_at >= when, f"ran at {ran_at!r}, before its deadline {when!r}"
    if exact:
        assert ran_at < when + tick, f"ran at {ran_at!r}, a tick or more after {when!r}"


def cancellation(backend_name: str) -> type[BaseException]:
    """What awaiting a cancelled job raises on this backend."""
    return JobCancelled if backend_name == "trio" else asyncio.CancelledError


def running_tasks(backend_name: str) -> set[object]:
    """Every task alive on the running loop."""
    if backend_name != "trio":
        return set(asyncio.all_tasks())
    import trio

    tasks: set[object] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        tasks.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return tasks


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


# -- call_later / call_at: on time, with their arguments ---------------------------------------


async def test_call_later_runs_the_callback_with_its_args_on_time(backend_name: str) -> None:
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
            assert isinstance(handle, TimerHandle)
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
    assert stats.early == 0
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


# -- never early, also when the driver is woken early ------------------------------------------


async def test_never_early_when_the_driver_is_woken_early(
    backend_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Timer(tick=TICK) as timer:
        backend = timer._backend
        real_arm = backend.arm
        early_arms = 0

        def arm_early(when: float | None) -> None:
            # Wake the driver halfway to the time it asked for, until it is very close: every
            # deadline is approached by several early wake-ups.
            nonlocal early_arms
            if when is not None and when - timer.time() > TICK / 8:
                early_arms += 1
                when = timer.time() + (when - timer.time()) / 2
            real_arm(when)

        monkeypatch.setattr(backend, "arm", arm_early)
        fired = Fired(timer)
        whens = [timer.time() + offset for offset in (0.0105, 0.0203, 0.02035, 0.04)]
        for when in whens:
            timer.call_at(when, fired, when)
        await timer.sleep_until(max(whens))
        stats = timer.stats()

    assert early_arms > 0
    if is_virtual(backend_name):
        # More wake-ups than due buckets (the sleep shares the last one): it was woken early.
        assert stats.driver_wakeups > 3
    assert fired.labels == whens
    for when, ran_at in fired.calls:
        assert_on_time(when, ran_at, exact=is_virtual(backend_name))
    assert stats.early == 0


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
        # All in the same bucket (the same tick), added out of deadline order.
        assert len({timer._wheel.locate(handle) for handle in handles}) == 1
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
        where: dict[str, tuple[int, int] | None] = {}

        def add_direct() -> None:
            # Runs at base + 7: base + 10 is now inside level 0's range, so these go straight
            # into level 0 while "cascaded" still waits on level 1.
            early = timer.call_at(base + 9.5, fired, "direct, earlier in the tick")
            direct = timer.call_at(base + 10, fired, "direct")
            where.update(
                cascaded=timer._wheel.locate(cascaded),
                early=timer._wheel.locate(early),
                direct=timer._wheel.locate(direct),
            )

        timer.call_at(base + 7, add_direct)
        await timer.sleep_until(base + 10)

    assert where["cascaded"] is not None and where["cascaded"][0] == 1
    assert where["early"] is not None and where["early"][0] == 0
    assert where["direct"] is not None and where["direct"][0] == 0
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


class Boom(Exception):
    pass


def boom(*args: Any) -> None:
    raise Boom(*args)


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


class Fatal(BaseException):
    """Not an Exception, but not SystemExit/KeyboardInterrupt either: reported, as in asyncio."""


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


async def test_stats_in_a_callback_add_up_and_an_unprintable_argument_is_reported() -> None:
    """A callback reading stats() mid-pass sees fired equal to the histogram's count; a callback
    that raises with an argument whose repr raises too is still reported, and the Timer carries
    on (before, the failing report stopped the driver's re-arming for good)."""

    class Unprintable:
        def __repr__(self) -> str:
            raise ValueError("no repr")

    def fails(_: object) -> None:
        raise RuntimeError("callback failed")

    reported: list[dict[str, Any]] = []
    seen: list[tuple[int, int]] = []
    async with Timer(exception_handler=reported.append) as timer:

        def look() -> None:
            stats = timer.stats()
            seen.append((stats.fired, stats.lateness.count))

        when = timer.time() + 0.002
        for _ in range(5):
            timer.call_at(when, lambda: None)
        timer.call_at(when, look)
        timer.call_at(when, fails, Unprintable())
        after = timer.call_later(0.01, look)
        await timer.sleep(0.02)
    assert seen[0] == (6, 6)  # itself included: counted as it starts
    assert seen[1] == (8, 8) and after.cancelled() is False
    [context] = reported
    assert isinstance(context["exception"], RuntimeError)
    assert "repr failed" in context["message"]


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


# -- schedule: jobs ----------------------------------------------------------------------------


async def test_schedule_a_plain_function(backend_name: str) -> None:
    async with Timer(tick=TICK) as timer:
        start = timer.time()
        job = timer.schedule(0.01, lambda a, b: (a + b, timer.time()), 2, 3)
        assert not job.done()
        with pytest.raises(RuntimeError, match="Job is not done yet"):
            job.result()
        result, ran_at = await job
    assert result == 5
    assert job.done()
    assert not job.cancelled()
    assert job.result() == (5, ran_at)
    assert_on_time(start + 0.01, ran_at, exact=is_virtual(backend_name))


async def test_schedule_a_coroutine_function(backend_name: str) -> None:
    async def fetch(key: str) -> tuple[str, float]:
        started = timer.time()
        await anyio.sleep(0.005)
        return key.upper(), started

    async with Timer(tick=TICK) as timer:
        start = timer.time()
        job = timer.schedule(0.01, fetch, "key")
        result, started = await job
    assert result == "KEY"
    assert job.result() == ("KEY", started)
    assert_on_time(start + 0.01, started, exact=is_virtual(backend_name))


async def test_await_schedule_pattern_in_virtual_time(virtual_time: None) -> None:
    async def fetch() -> str:
        return "fetched"

    async with Timer(tick=TICK) as timer:
        start = timer.time()
        result = await timer.schedule(5, fetch)
        assert result == "fetched"
        assert start + 5 <= timer.time() < start + 5 + TICK
        result = await timer.schedule_at(start + 65.5, str.upper, "at")
        assert result == "AT"
        assert start + 65.5 <= timer.time() < start + 65.5 + TICK


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
async def test_a_job_error_propagates_through_await(kind: str) -> None:
    async def async_boom(*args: Any) -> None:
        await anyio.sleep(0)
        raise Boom(*args)

    async with Timer() as timer:
        job = timer.schedule(0.001, boom if kind == "plain" else async_boom, kind)
        with pytest.raises(Boom, match=kind):
            await job
        assert job.done()
        assert not job.cancelled()
        with pytest.raises(Boom):
            job.result()


async def test_cancel_a_job_before_it_fires(backend_name: str) -> None:
    called: list[str] = []
    async with Timer() as timer:
        job = timer.schedule(0.002, called.append, "ran")
        job.cancel()
        assert job.cancelled()
        assert job.done()
        assert len(timer) == 0
        with pytest.raises(cancellation(backend_name)):
            await job
        with pytest.raises(cancellation(backend_name)):
            job.result()
        job.cancel()  # again: no-op
        await timer.sleep(0.003)
        stats = timer.stats()
    assert called == []
    assert stats.cancelled == 1


async def test_cancel_a_running_coroutine_job_cancels_its_task(backend_name: str) -> None:
    started = anyio.Event()
    finalised: list[bool] = []

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            finalised.append(True)

    async with Timer() as timer:
        job = timer.schedule(0.001, work)
        await started.wait()
        assert not job.done()
        job.cancel()
        with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
            await job  # fail_after: a job left running would hang here
        assert finalised == [True]
        assert job.cancelled()
        assert job.done()


async def test_cancelling_the_awaiting_task_cancels_a_pending_job() -> None:
    async with Timer() as timer:
        job = timer.schedule(10, _noop)
        with anyio.move_on_after(0.005):
            await job
        assert job.cancelled()
        assert job.done()
        assert len(timer) == 0


async def test_cancelling_the_awaiting_task_cancels_a_running_job(backend_name: str) -> None:
    started = anyio.Event()
    finalised: list[bool] = []

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            finalised.append(True)

    async with Timer() as timer:
        job = timer.schedule(0, work)
        await started.wait()
        with anyio.move_on_after(0.005):
            await job
        with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
            await job  # once its task has ended; fail_after: a job left running would hang
        assert finalised == [True]
        assert job.cancelled()


async def test_cancel_a_coroutine_job_spawned_but_not_started_yet(backend_name: str) -> None:
    # A later callback of the batch that spawned the job's task cancels it before the task's
    # first step: the job must still end cancelled (on asyncio a task cancelled that early never
    # runs its coroutine at all).
    async def work() -> None:
        await anyio.sleep_forever()

    async with Timer() as timer:
        when = timer.time() + 0.001
        job = timer.schedule_at(when, work)
        timer.call_at(when, job.cancel)
        with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
            await job  # fail_after: a job stuck "running" would hang here
        assert job.cancelled()
        assert job.done()


async def test_closing_right_after_a_coroutine_job_was_spawned_ends_it(backend_name: str) -> None:
    async def work() -> None:
        await anyio.sleep_forever()

    async with Timer() as timer:
        when = timer.time() + 0.001
        first = timer.schedule_at(when, _noop)
        job = timer.schedule_at(when, work)
        # Resumes in the pass that spawns the job's task, before that task's first step.
        await first
    with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
        await job
    assert job.cancelled()


class NotAnException(BaseException):
    pass


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
async def test_a_job_raising_a_base_exception_finishes_with_it(kind: str) -> None:
    """Not only Exception subclasses: awaiters must not hang on any error but SystemExit and
    KeyboardInterrupt (which propagate, as from a loop callback)."""

    def plain() -> None:
        raise NotAnException("plain")

    async def coroutine() -> None:
        await anyio.sleep(0)
        raise NotAnException("coroutine")

    async with Timer() as timer:
        job = timer.schedule(0.001, plain if kind == "plain" else coroutine)
        with pytest.raises(NotAnException, match=kind):
            await job
        assert job.done()


async def test_a_failed_job_nobody_awaited_is_reported_when_it_dies() -> None:
    reported: list[dict[str, Any]] = []
    async with Timer(exception_handler=reported.append) as timer:
        timer.schedule(0.001, boom, "unseen")
        await timer.sleep(0.01)
        gc.collect()
        assert [context["message"] for context in reported] == ["Job exception was never retrieved"]
        assert isinstance(reported[0]["exception"], Boom)
        seen = timer.schedule(0.001, boom, "seen")
        with pytest.raises(Boom):
            await seen
        del seen
        gc.collect()
        assert len(reported) == 1


async def test_a_plain_job_cannot_cancel_itself_while_it_runs() -> None:
    async with Timer() as timer:

        def cancel_self() -> str:
            job.cancel()
            return "ran"

        job = timer.schedule(0.001, cancel_self)
        assert await job == "ran"
        assert not job.cancelled()


@pytest.mark.parametrize("value", [1.5, True, "3"])
def test_max_pending_must_be_an_int(value: object) -> None:
    with pytest.raises(
        TypeError, match=re.escape(f"max_pending must be an int or None, got {value!r}")
    ):
        Timer(max_pending=value)  # type: ignore[arg-type]


async def test_cancel_after_a_job_finished_is_a_no_op() -> None:
    async with Timer() as timer:
        job = timer.schedule(0, int, "7")
        assert await job == 7
        job.cancel()
        assert not job.cancelled()
        assert job.result() == 7
        assert await job == 7  # awaiting a done job again


async def test_many_awaiters_of_one_job() -> None:
    results: list[int] = []

    async def wait_for(job: Awaitable[int]) -> None:
        results.append(await job)

    async with Timer() as timer:
        job = timer.schedule(0.002, int, "9")
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(wait_for, job)
    assert results == [9, 9, 9]


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
            pending = timer.schedule(10, _noop)
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
        timer.call_later(10, _noop)
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
    handle = timer.call_later(0.001, _noop)
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
            pending = timer.call_later(10, _noop)
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
                timer.call_later(0, _noop)
        await timer.aclose()  # still idempotent
    assert running_tasks(backend_name) == before


async def test_aclose_inside_a_cancel_scope_entered_after_the_timer() -> None:
    """From the block's own task but inside a timeout block (on trio, a cancel scope entered
    after the Timer's nursery, which therefore cannot be exited yet): it closes the Timer; the
    block's end exits the nursery. (trio broke the task's cancel scopes.)"""
    async with Timer() as timer:
        pending = timer.call_later(10, _noop)
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
        partial(timer.call_later, 1, _noop),
        partial(timer.call_at, 1, _noop),
        partial(timer.schedule, 1, _noop),
        partial(timer.schedule_at, 1, _noop),
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
        partial(timer.call_later, 1, _noop),
        partial(timer.call_at, 1, _noop),
        partial(timer.schedule, 1, _noop),
        partial(timer.schedule_at, 1, _noop),
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
        timer.call_later(1, _noop)
    with pytest.raises(RuntimeError, match="Timer is closed"):
        await timer.__aenter__()


async def test_a_running_timer_cannot_be_entered_twice() -> None:
    async with Timer() as timer:
        with pytest.raises(RuntimeError, match="Timer is already running"):
            await timer.__aenter__()
        timer.call_later(0, _noop)  # still usable
        await timer.sleep(0)


# -- interrupts: KeyboardInterrupt and SystemExit from a callback or a job ---------------------
#
# asyncio lets an interrupt raised by a loop callback leave run_forever() once and keeps every
# other timer; the Timer must do the same (its driver survives and is re-armed). trio ends the
# task tree instead: the interrupt leaves the block that entered the Timer, which is closed.

INTERRUPTS = [KeyboardInterrupt, SystemExit]


def raise_(exc_type: type[BaseException]) -> None:
    raise exc_type


async def raise_soon(exc_type: type[BaseException]) -> None:
    await anyio.sleep(0)
    raise exc_type


def schedule_interrupt(
    timer: Timer, source: str, when: float, interrupt: type[BaseException]
) -> None:
    """Make ``source`` -- "callback", "plain job" or "coroutine job" -- raise ``interrupt`` at
    ``when``."""
    if source == "callback":
        timer.call_at(when, raise_, interrupt)
    elif source == "plain job":
        timer.schedule_at(when, raise_, interrupt)
    else:
        timer.schedule_at(when, raise_soon, interrupt)


def new_loop(loop_name: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop to drive by hand: asyncio in virtual time, or uvloop."""
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return VirtualTimeLoop()


async def _entered_timer() -> Timer:
    timer = Timer()
    await timer.__aenter__()
    return timer


@pytest.mark.parametrize("interrupt", INTERRUPTS)
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize("source", ["callback", "plain job", "coroutine job"])
def test_an_interrupt_propagates_once_and_the_timer_keeps_working(
    loop_name: str, interrupt: type[BaseException], source: str
) -> None:
    """As with loop.call_later: the interrupt leaves run_until_complete once; the rest of the
    batch, later timers and timers scheduled after the recovery all run; aclose() is clean."""

    loop = new_loop(loop_name)
    try:
        timer = loop.run_until_complete(_entered_timer())
        ran: list[str] = []
        when = timer.time() + 0.002
        timer.call_at(when, ran.append, "before")
        schedule_interrupt(timer, source, when, interrupt)
        timer.call_at(when, ran.append, "same batch")
        timer.call_at(when + 0.004, ran.append, "later")
        with pytest.raises(interrupt):
            loop.run_until_complete(asyncio.sleep(5))  # ends at the interrupt
        if source == "callback":
            assert ran == ["before"]  # the interrupt left at once, as asyncio's does
        timer.call_later(0.001, ran.append, "after recovery")
        # No second interrupt; the bound only turns a dead driver into a failure, not a hang.
        loop.run_until_complete(asyncio.wait_for(timer.sleep(0.01), HANG))
        assert ran[:2] == ["before", "same batch"]
        assert sorted(ran[2:]) == ["after recovery", "later"]
        assert len(timer) == 0
        loop.run_until_complete(timer.aclose())  # does not re-raise the old interrupt
        assert timer.closed
    finally:
        loop.close()


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

    runner = asyncio.Runner(loop_factory=partial(new_loop, loop_name))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(SystemExit) as info:
            runner.run(main())
        assert info.value.code == 3
        runner.close()  # cancels main(), which closes the Timer: no second SystemExit
        gc.collect()
    assert closed == [True]
    assert [record.getMessage() for record in caplog.records] == []


@pytest.mark.parametrize("interrupt", INTERRUPTS)
@pytest.mark.parametrize("source", ["callback", "plain job", "coroutine job"])
async def test_an_interrupt_on_trio_ends_the_block_and_closes_the_timer(
    backend_name: str, interrupt: type[BaseException], source: str
) -> None:
    """trio has no loop to resume: the interrupt ends the Timer's task tree and leaves the block
    that entered the Timer -- bare, not in an exception group -- and the Timer is closed."""
    if backend_name != "trio":
        pytest.skip("asyncio and uvloop: see test_an_interrupt_propagates_once_...")
    import trio

    ran: list[str] = []
    with pytest.raises(interrupt):
        async with Timer() as timer:
            when = timer.time() + 0.002
            schedule_interrupt(timer, source, when, interrupt)
            pending = timer.call_at(when + 0.001, ran.append, "later")
            await trio.sleep(1)
    assert ran == []
    assert timer.closed
    assert pending.cancelled()
    assert len(timer) == 0
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.call_later(0, _noop)


# -- the driver: no ticking, one wake-up per bucket, re-arming ---------------------------------


async def test_the_driver_does_not_wake_for_timers_an_hour_away(virtual_time: None) -> None:
    async with Timer(tick=TICK, wheel_size=64) as timer:
        start = timer.time()
        for i in range(10_000):
            timer.call_later(3600 + i * 0.001, _noop)
        await anyio.sleep(600)  # ten virtual minutes, not on the wheel
        assert timer.time() == start + 600
        stats = timer.stats()
    assert stats.driver_wakeups == 0
    assert stats.fired == 0
    assert stats.pending == 10_000


async def test_one_wakeup_per_non_empty_bucket(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        base = (math.floor(timer.time() / TICK) + 10) * TICK
        # 100 timers within one tick: one bucket, one wake-up.
        for i in range(100):
            timer.call_at(base + 0.0001 + i * 0.000008, fired, i)  # ticks: base + 1
        await anyio.sleep(base + 0.01 - timer.time())
        assert timer.stats().driver_wakeups == 1
        assert fired.labels == list(range(100))
        # Five more buckets, some cancelled timers in a sixth: five wake-ups.
        later = (math.floor(timer.time() / TICK) + 10) * TICK
        for bucket in range(5):
            for i in range(10):
                timer.call_at(later + 0.0001 + bucket * 0.003 + i * 0.00005, fired, (bucket, i))
        cancelled = [timer.call_at(later + 0.0205, fired, "cancelled") for _ in range(10)]
        for handle in cancelled:
            handle.cancel()
        await anyio.sleep(later + 0.03 - timer.time())
        stats = timer.stats()
    assert stats.driver_wakeups == 1 + 5
    assert stats.fired == 150


async def test_the_driver_rearms_for_earlier_and_earlier_timers(backend_name: str) -> None:
    exact = is_virtual(backend_name)
    delays = [2.0, 1.0, 0.5, 0.25, 0.04, 0.02, 0.01, 0.005] if exact else [0.04, 0.02, 0.01]
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        handles: dict[float, TimerHandle] = {}
        for delay in delays:
            handles[delay] = timer.call_later(delay, fired, delay)
            await anyio.sleep(0)  # let the driver sleep on the current earliest timer
        await timer.sleep_until(max(handle.when() for handle in handles.values()))
    assert fired.labels == sorted(delays)
    for delay, ran_at in fired.calls:
        assert_on_time(handles[delay].when(), ran_at, exact=exact)


# -- max_pending -------------------------------------------------------------------------------


async def test_max_pending_refuses_beyond_the_limit_then_recovers() -> None:
    assert issubclass(PendingLimitError, RuntimeError)
    async with Timer(max_pending=3) as timer:
        done = anyio.Event()
        when = timer.time() + 0.002
        handles = [timer.call_at(when, _noop) for _ in range(2)]
        handles.append(timer.call_at(when, done.set))
        message = re.escape("3 timers are pending, the limit is max_pending=3")
        for schedule in [
            partial(timer.call_later, 0.001, _noop),
            partial(timer.call_at, timer.time(), _noop),
            partial(timer.schedule, 0.001, _noop),
            partial(timer.schedule_at, timer.time(), _noop),
        ]:
            with pytest.raises(PendingLimitError, match=message):
                schedule()
        with pytest.raises(PendingLimitError, match=message):
            await timer.sleep(0.001)
        assert len(timer) == 3

        handles[0].cancel()  # a cancel frees a slot
        handles[0] = timer.call_at(when, _noop)
        with pytest.raises(PendingLimitError):
            timer.call_at(when, _noop)

        await done.wait()  # fired timers free their slots (all ran in done.set's batch)
        assert len(timer) == 0
        jobs = [timer.schedule(0.001, int, str(i)) for i in range(3)]
        with pytest.raises(PendingLimitError):
            timer.call_later(0, _noop)
        assert [await job for job in jobs] == [0, 1, 2]
        await timer.sleep(0)


async def test_the_librarys_own_re_filing_is_never_refused_by_max_pending() -> None:
    """``_refile_at``, the hook aiowheel.idle and aiowheel.timeouts re-file their entries with:
    work already accepted must not be refused inside the driver's pass, where it would be lost.
    """
    async with Timer(max_pending=1) as timer:
        fired = Fired(timer)
        when = timer.time() + 0.002
        timer.call_at(when, fired, "new work")
        handle = timer._refile_at(when, fired, "re-filed")
        assert isinstance(handle, TimerHandle) and handle.when() == when
        assert len(timer) == 2
        with pytest.raises(PendingLimitError):
            timer.call_at(when, fired, "refused")
        await anyio.sleep(0.005)
        assert fired.labels == ["new work", "re-filed"]
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer._refile_at(1, _noop)


# -- bad input ---------------------------------------------------------------------------------

TIME_ARGUMENT_USERS: dict[str, Callable[[Timer, Any], object]] = {
    "call_later": lambda timer, value: timer.call_later(value, _noop),
    "call_at": lambda timer, value: timer.call_at(value, _noop),
    "schedule": lambda timer, value: timer.schedule(value, _noop),
    "schedule_at": lambda timer, value: timer.schedule_at(value, _noop),
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
        handle = timer.call_later(10 * 365 * 86400, _noop)
        assert len(timer) == 1
        handle.cancel()
        assert len(timer) == 0


# -- observability: stats, len, repr -----------------------------------------------------------


async def test_stats_count_what_happened(virtual_time: None) -> None:
    async with Timer(tick=TICK, wheel_size=64) as timer:
        assert timer.stats() == TimerStats(
            pending=0,
            fired=0,
            cancelled=0,
            early=0,
            max_lateness=0.0,
            driver_wakeups=0,
            levels=1,
            lateness=LatenessHistogram(tuple((b, 0) for b in (*LATENESS_BOUNDS, math.inf)), 0.0),
            pending_per_level=(0,),
        )
        fired = Fired(timer)
        base = (math.floor(timer.time() / TICK) + 10) * TICK
        whens = [base + 0.0005, base + 0.0006, base + 0.0009, base + 0.02]
        for when in whens:
            timer.call_at(when, fired, when)
        timer.call_at(base + 0.03, fired).cancel()
        timer.call_later(100, fired)  # 100 000 ticks away: level 2 of a 64-slot wheel
        assert len(timer) == 5
        await anyio.sleep(base + 0.05 - timer.time())
        stats = timer.stats()

    assert stats.pending == 1
    assert stats.fired == 4
    assert stats.cancelled == 1
    assert stats.early == 0
    # The largest (run time - deadline), exactly, and less than a tick.
    assert stats.max_lateness == max(ran_at - when for when, ran_at in fired.calls)  # type: ignore[operator]
    assert 0 < stats.max_lateness < TICK
    assert stats.driver_wakeups == 2  # two non-empty buckets came due
    assert stats.levels == 3
    assert stats.pending_per_level == (0, 0, 1)
    assert stats.lateness.count == stats.fired
    assert timer.stats().cancelled == 2  # leaving cancelled the last one


async def test_len_counts_pending_timers_and_jobs() -> None:
    async with Timer() as timer:
        assert len(timer) == 0
        handle = timer.call_later(0.001, _noop)
        job = timer.schedule(0.001, _noop)
        far = timer.call_later(10, _noop)
        assert len(timer) == 3
        handle.cancel()
        assert len(timer) == 2
        await job
        assert len(timer) == 1
        far.cancel()
        assert len(timer) == 0


async def test_reprs() -> None:
    timer = Timer(tick=0.002, wheel_size=16)
    assert repr(timer) == "<Timer tick=0.002 wheel_size=16 idle pending=0>"
    async with timer:
        when = timer.time() + 5
        handle = timer.call_at(when, _noop)
        assert repr(timer) == "<Timer tick=0.002 wheel_size=16 running pending=1>"
        assert repr(handle).startswith(f"<TimerHandle when={when!r} pending <function _noop")
        handle.cancel()
        assert repr(handle) == f"<TimerHandle when={when!r} cancelled None>"
        done = timer.call_at(when - 10, _noop)
        job = timer.schedule_at(when, _noop)
        assert repr(job).startswith(f"<Job when={when!r} pending <function _noop")
        await timer.sleep(0)
        assert repr(done).startswith(f"<TimerHandle when={when - 10!r} done ")
    assert repr(timer) == "<Timer tick=0.002 wheel_size=16 closed pending=0>"
    assert repr(job).startswith(f"<Job when={when!r} cancelled ")


async def test_a_time_too_large_for_a_float_is_a_value_error() -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match="when 1000"):
            timer.call_at(10**400, print)
        with pytest.raises(ValueError, match="delay 1000"):
            timer.call_later(10**400, print)
