"""The wheel-backed loop runs every timer at asyncio's moment and in one deadline order.

A timer runs in the loop pass in which ``loop.time()`` reaches its ``when()`` -- never before,
and not a tick or a pass later -- and the due timers of a pass run in (deadline, scheduling
order) whether they were filed on the wheel or not: on both bases, also after a stall.

The frozen-clock tests are aiohttp's ``test_keepalive_expires_on_time`` in miniature: the loop's
clock is patched to read exactly a timer's ``when`` (as aiohttp's test does with
``mock.patch.object(loop, "time")``) and the loop gets two passes. The stall tests block the
loop in a callback and assert only the order in which timers then run, never a time.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from twins import is_loop_handle

from aiowheel import _impl
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")

# Every test on both loop cores, in one pytest run (see conftest.py).
pytestmark = pytest.mark.usefixtures("core")

# Real-time waits end on the event itself; this only bounds a test that would otherwise hang.
WATCHDOG = 10.0


@pytest.fixture(params=["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
def kind(request: pytest.FixtureRequest) -> str:
    """The base loop: asyncio's selector loop or uvloop."""
    return str(request.param)


@pytest.fixture
def loop(kind: str) -> Iterator[WheelLoop]:
    """A real wheel-backed loop on each base."""
    loop = (new_uvloop_event_loop if kind == "uvloop" else new_event_loop)()
    yield loop
    loop.close()


def run_until(loop: asyncio.AbstractEventLoop, done: asyncio.Future[Any]) -> None:
    """Run ``loop`` until ``done`` completes; fail if it has not after WATCHDOG real seconds
    (stopped from another thread: every timer of the loop may be under test)."""
    watchdog = threading.Timer(WATCHDOG, loop.call_soon_threadsafe, (loop.stop,))
    watchdog.start()
    try:
        loop.run_until_complete(done)
    finally:
        watchdog.cancel()


# -- the frozen clock: aiohttp's keep-alive test ---------------------------------------------


@pytest.mark.parametrize("delay", [10.0, 3630.0])  # level 1 and a higher level of the wheel
@pytest.mark.parametrize("offset", [0.0, 0.0005, 0.002])
def test_a_timer_runs_within_two_passes_of_a_clock_frozen_at_its_when(
    delay: float, offset: float
) -> None:
    loop = new_event_loop()
    ran: list[float] = []

    async def main() -> None:
        now = loop.time()
        with mock.patch.object(loop, "time") as loop_time:
            loop_time.return_value = now
            handle = loop.call_at(now + delay, lambda: ran.append(loop.time()))
            assert is_loop_handle(handle) and len(loop.wheel) == 1
            await asyncio.sleep(0)  # a pass at the old time: nothing is due
            assert ran == []
            loop_time.return_value = handle.when() + offset
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert ran == [handle.when() + offset]

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_timer_never_runs_while_a_frozen_clock_is_before_its_when() -> None:
    loop = new_event_loop()
    ran: list[str] = []

    async def main() -> None:
        now = loop.time()
        with mock.patch.object(loop, "time") as loop_time:
            loop_time.return_value = now
            handle = loop.call_at(now + 10, ran.append, "timer")
            short = loop.call_at(now + 0.001, ran.append, "short")  # below min_delay
            # Between the start of their ticks and their when(): no pass may run them.
            for when in (handle.when(), short.when()):
                loop_time.return_value = when - 1e-9
                for _ in range(5):
                    await asyncio.sleep(0)
            assert ran == ["short"]
            loop_time.return_value = handle.when()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert ran == ["short", "timer"]

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_timer_runs_on_the_first_driver_pass_at_a_frozen_clock(loop: WheelLoop) -> None:
    # On uvloop the driver is a libuv timer, which only real time fires: the clock is frozen at
    # the timer's when() and the driver's first pass must run it. (Before, the driver found
    # nothing due short of the tick boundary, which a frozen clock never reaches, and re-armed
    # every millisecond for ever.)
    async def main() -> None:
        fired: asyncio.Future[float] = loop.create_future()
        now = loop.time()
        with mock.patch.object(loop, "time") as loop_time:
            loop_time.return_value = now
            handle = loop.call_at(now + 0.0205, lambda: fired.set_result(loop.time()))
            assert is_loop_handle(handle) and len(loop.wheel) == 1
            loop_time.return_value = handle.when()
            assert await fired == handle.when()

    run_until(loop, asyncio.ensure_future(main(), loop=loop))


# -- a stalled loop --------------------------------------------------------------------------


def test_a_wheel_timer_and_a_short_one_scheduled_during_a_stall_run_in_deadline_order(
    loop: WheelLoop,
) -> None:
    # The case: A on the wheel due at t0 + 30 ms; a callback blocks 35 ms, then
    # schedules B due at t0 + 32 ms -- by then below min_delay, so not filed on the wheel.
    # asyncio runs A then B; so must the wheel loop, on both bases.
    order: list[str] = []
    done: asyncio.Future[None] = loop.create_future()
    t0 = loop.time()

    def stall() -> None:
        time.sleep(0.035)
        b = loop.call_at(t0 + 0.032, order.append, "B")
        assert loop.time() >= t0 + 0.032 and b.when() - loop.time() < loop.min_delay
        loop.call_at(t0 + 0.033, done.set_result, None)

    a = loop.call_at(t0 + 0.030, order.append, "A")
    assert len(loop.wheel) == 1 and a.when() == t0 + 0.030
    loop.call_soon(stall)
    run_until(loop, done)
    assert order == ["A", "B"]


def test_due_timers_run_in_scheduling_order_when_deadlines_are_equal(loop: WheelLoop) -> None:
    # Equal deadlines, one timer filed on the wheel and one not (scheduled after a stall):
    # scheduling order, whichever structure holds them.
    order: list[str] = []
    done: asyncio.Future[None] = loop.create_future()
    t0 = loop.time()
    when = t0 + 0.020

    def stall() -> None:
        time.sleep(0.025)
        loop.call_at(when, order.append, "second, short")
        loop.call_at(when, done.set_result, None)

    loop.call_at(when, order.append, "first, on the wheel")
    loop.call_soon(stall)
    run_until(loop, done)
    assert order == ["first, on the wheel", "second, short"]


def test_random_timers_and_stalls_keep_one_deadline_order(loop: WheelLoop) -> None:
    # Timers on both sides of min_delay, scheduled from a task (never from a timer callback),
    # with stalls in the task and in the callbacks. Whenever a timer runs, no pending timer
    # that comes before it in (when, scheduling order) may be due, and its own when() has come.
    rng = random.Random(20)
    count = 400
    keys: dict[int, tuple[float, int]] = {}
    pending: set[int] = set()
    ran: list[int] = []
    faults: list[str] = []
    done: asyncio.Future[None] = loop.create_future()

    def fire(i: int) -> None:
        now = loop.time()
        key = keys[i]
        if now < key[0]:
            faults.append(f"timer {i} ran at {now}, before its when {key[0]}")
        pending.discard(i)
        faults.extend(
            f"timer {i} {key} ran before timer {j} {keys[j]}, due at {now}"
            for j in pending
            if keys[j] < key and keys[j][0] <= now
        )
        ran.append(i)
        if rng.random() < 0.05:
            time.sleep(rng.uniform(0.001, 0.01))
        if len(ran) == count and not done.done():
            done.set_result(None)

    async def schedule() -> None:
        for i in range(count):
            delay = rng.choice([rng.uniform(-0.002, 0.004), rng.uniform(0.004, 0.05)])
            handle = loop.call_later(delay, fire, i)
            keys[i] = (handle.when(), i)
            pending.add(i)
            if rng.random() < 0.1:
                await asyncio.sleep(0)
            if rng.random() < 0.02:
                time.sleep(rng.uniform(0.005, 0.04))  # a stall between reading and scheduling

    task = loop.create_task(schedule())
    run_until(loop, done)
    assert task.done() and faults == []
    assert sorted(ran) == list(range(count))
    stats = loop.wheel_stats()
    assert stats.wheel_timers > 0 and stats.base_timers > 0  # both routes were taken


# -- bools as delays and deadlines, as asyncio takes them -------------------------------------


@pytest.mark.parametrize("delay", [True, False])
def test_a_bool_delay_is_the_int_it_is(loop: WheelLoop, delay: bool) -> None:
    # The deadline lies between the clock read just before the call and just after it, plus
    # the int: no real-time window (a stall of the process between the reads widens it).
    reference = asyncio.new_event_loop()
    try:
        before = reference.time()
        expected = reference.call_later(delay, print)
        after = reference.time()
        assert before + int(delay) <= expected.when() <= after + int(delay)  # asyncio: 1 or 0 s
    finally:
        reference.close()
    ran: list[float] = []
    done: asyncio.Future[None] = loop.create_future()

    def record(called: float) -> None:
        ran.append(loop.time())
        done.set_result(None)

    before = loop.time()
    handle = loop.call_later(delay, record, 0.0)
    after = loop.time()
    assert before + int(delay) <= handle.when() <= after + int(delay)
    assert is_loop_handle(handle)
    assert len(loop.wheel) == int(delay)  # 1 s goes on the wheel, 0 s next to it
    run_until(loop, done)
    assert ran[0] >= handle.when()


def test_a_bool_deadline_is_the_int_it_is(loop: WheelLoop) -> None:
    # call_at(True): one second after the clock's zero, long past: it runs in the next pass.
    done: asyncio.Future[None] = loop.create_future()
    handle = loop.call_at(True, done.set_result, None)
    assert handle.when() == 1
    run_until(loop, done)


def test_call_at_with_a_bool_matches_asyncio() -> None:
    calls: list[Callable[[asyncio.AbstractEventLoop], asyncio.TimerHandle]] = [
        lambda loop: loop.call_at(True, print),
        lambda loop: loop.call_later(True, print),
    ]
    for call in calls:
        reference = asyncio.new_event_loop()
        loop = new_event_loop()
        try:
            assert call(loop).when() - loop.time() == pytest.approx(
                call(reference).when() - reference.time(), abs=0.01
            )
        finally:
            reference.close()
            loop.close()


# -- handles the cyclic collector need not visit ----------------------------------------------


class Connection:
    """The classic cycle: an object holding its own timer, whose callback is its bound method."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.handle = loop.call_later(delay, self.expire)

    def expire(self) -> None:
        pass


def collected(make: Callable[[], Connection]) -> bool:
    """Whether the Connection ``make`` returns is freed once dropped and collected."""
    ref = weakref.ref(make())
    gc.collect()
    return ref() is None


def test_the_compiled_handle_is_not_tracked_by_the_cyclic_collector(
    loop: WheelLoop, core: str
) -> None:
    handle = loop.call_later(10, print)
    short = loop.call_later(0, print)
    # The pure handle is a Python object with slots, which CPython tracks: nothing to spare;
    # nor in the CPython fallback build, whose handles keep their GC support.
    tracked = core == "pure" or _impl.CPYTHON_FALLBACK
    assert gc.is_tracked(handle) is tracked and gc.is_tracked(short) is tracked
    handle.cancel()
    short.cancel()


@pytest.mark.parametrize("delay", [0.05, 0.0])  # on the wheel, in the near queue
def test_a_handle_cycle_is_freed_after_the_handle_runs(loop: WheelLoop, delay: float) -> None:
    done: asyncio.Future[None] = loop.create_future()

    def make() -> Connection:
        connection = Connection(loop, delay)
        loop.call_later(delay + 0.01, done.set_result, None)
        return connection

    ref = weakref.ref(make())
    run_until(loop, done)
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("delay", [10.0, 0.0])
def test_a_handle_cycle_is_freed_after_cancel(loop: WheelLoop, delay: float) -> None:
    def make() -> Connection:
        connection = Connection(loop, delay)
        connection.handle.cancel()
        return connection

    assert collected(make)


@pytest.mark.parametrize("delay", [10.0, 0.0])
def test_a_handle_cycle_is_freed_after_the_loop_closes_with_it_pending(
    kind: str, delay: float
) -> None:
    loop = (new_uvloop_event_loop if kind == "uvloop" else new_event_loop)()
    connection = Connection(loop, delay)
    handle = connection.handle  # still referenced after close
    loop.close()
    ref = weakref.ref(connection)
    del connection
    gc.collect()
    assert ref() is None
    assert not handle.cancelled()  # dropped, not cancelled, as asyncio drops its heap


# -- context snapshots ------------------------------------------------------------------------

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


def test_each_callback_runs_in_the_context_of_its_scheduling_and_leaks_nothing(
    loop: WheelLoop,
) -> None:
    seen: list[tuple[str, str]] = []
    done: asyncio.Future[None] = loop.create_future()

    def callback(name: str) -> None:
        seen.append((name, request_id.get()))
        request_id.set(f"set by {name}")  # must be seen by no other callback

    def schedule() -> None:
        request_id.set("a")
        first = loop.call_later(0.01, callback, "first")
        second = loop.call_later(0.01, callback, "second")
        short = loop.call_later(0, callback, "short")
        request_id.set("b")
        third = loop.call_later(0.01, callback, "third")
        loop.call_later(0.02, done.set_result, None)
        # Equal to the context at scheduling time, whatever the handles share. (_context:
        # asyncio's handles have get_context() only from Python 3.12.)
        handles = (first, second, short, third)
        assert [h._context[request_id] for h in handles] == [  # type: ignore[attr-defined]
            "a",
            "a",
            "a",
            "b",
        ]

        # The order they run in: by deadline, read from the handles. Not "short" first by
        # assumption: on uvloop, whose clock moves between two calls, a stall of the process
        # after "first" is scheduled can put "short"'s deadline after it.
        by_deadline = sorted(enumerate(handles), key=lambda item: (item[1].when(), item[0]))
        order.extend(["first", "second", "short", "third"][i] for i, _ in by_deadline)

    order: list[str] = []
    contextvars.Context().run(schedule)
    run_until(loop, done)
    contexts = {"first": "a", "second": "a", "short": "a", "third": "b"}
    assert seen == [(name, contexts[name]) for name in order]
    assert request_id.get() == "none"


def test_a_context_passed_in_is_the_one_the_callback_runs_in(loop: WheelLoop) -> None:
    context = contextvars.Context()
    done: asyncio.Future[None] = loop.create_future()
    handle = loop.call_later(0.01, request_id.set, "kept", context=context)
    assert handle._context is context  # type: ignore[attr-defined]
    loop.call_later(0.02, done.set_result, None)
    run_until(loop, done)
    assert context[request_id] == "kept"  # as asyncio: the change stays in that context
