"""Tests of the wheel-backed event loop (aiowheel.loop).

The timer contract is tested on both variants: the selector loop in virtual time (see
``support.VirtualLoop``; exact, no tolerances) and uvloop with small real delays, where only
order, never-early and completion are asserted, never an upper time bound. The compatibility
tests run real asyncio, websockets and anyio code and the idle-expiry example unchanged on real
loops, on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import importlib.util
import logging
import math
import os
import random
import re
import subprocess
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import HANG, START, VirtualLoop, make_loop, needs_uvloop, run_until
from twins import is_loop_handle

import aiowheel
import aiowheel._impl
import aiowheel.loop
from aiowheel.loop import (
    FAR_DELAY,
    WheelLoop,
    new_event_loop,
    new_uvloop_event_loop,
)
from aiowheel.loop._selector import WheelEventLoop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

T = TypeVar("T")

# Every test on both loop cores, in one pytest run: a loop made without core= holds the one
# the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("core")

TICK = 0.001
REPO = Path(__file__).resolve().parent.parent


def run(main: Coroutine[Any, Any, T], *, uvloop: bool, debug: bool | None = None) -> T:
    """Run ``main`` on a new wheel-backed loop, the documented way: asyncio's Runner."""
    factory = new_uvloop_event_loop if uvloop else new_event_loop
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)


@pytest.fixture(params=["virtual", pytest.param("uvloop", marks=needs_uvloop)])
def kind(request: pytest.FixtureRequest) -> str:
    """The variants the timer contract is tested on."""
    return str(request.param)


@pytest.fixture
def loop(kind: str) -> Iterator[WheelLoop]:
    loop = make_loop(kind)
    yield loop
    loop.close()


@pytest.fixture(params=["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
def use_uvloop(request: pytest.FixtureRequest) -> bool:
    """Real-time variants, for the compatibility tests."""
    return request.param == "uvloop"


def uvloop_class() -> type:
    """The uvloop base class, or a class no loop is an instance of."""
    return uvloop.Loop if uvloop is not None else type("NoUVLoop", (), {})


class Callback:
    """A callable that can be weakly referenced, to see when a loop lets go of it."""

    def __call__(self) -> None:
        pass


def run_for(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    """Run ``loop`` until ``seconds`` after now (a timer on the loop stops it)."""
    loop.run_until_complete(asyncio.sleep(seconds))


# -- construction ----------------------------------------------------------------------------


def test_default_loop_is_asyncios_selector_loop_with_a_wheel() -> None:
    loop = new_event_loop()
    try:
        assert isinstance(loop, WheelEventLoop)
        assert isinstance(loop, asyncio.SelectorEventLoop)
        assert isinstance(loop, WheelLoop)
        assert loop.wheel.tick == 0.001
        assert loop.wheel.wheel_size == 64
        assert loop.min_delay == 4 * 0.001
        # loop.time() is the base loop's own clock.
        assert type(loop).time is asyncio.SelectorEventLoop.time
    finally:
        loop.close()


@needs_uvloop
def test_uvloop_variant_is_a_uvloop_loop() -> None:
    loop = new_uvloop_event_loop(tick=0.002, wheel_size=32, min_delay=0.01)
    try:
        assert isinstance(loop, uvloop.Loop)
        assert isinstance(loop, WheelLoop)
        assert type(loop).time is uvloop.Loop.time
        assert (loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay) == (0.002, 32, 0.01)
        assert "WheelUVLoop" in repr(loop)
    finally:
        loop.close()


def test_missing_uvloop_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    aiowheel.loop._uvloop_class.cache_clear()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` fail
    try:
        # It says which extra, and where to go without it.
        with pytest.raises(ImportError, match=r"pip install 'aiowheel\[uvloop\]'.*new_event_loop"):
            new_uvloop_event_loop()
        with pytest.raises(ImportError, match=re.escape("pip install 'aiowheel[uvloop]'")):
            new_uvloop_event_loop(tick=0.002)
    finally:
        aiowheel.loop._uvloop_class.cache_clear()


def test_new_uvloop_event_loop_is_the_uvloop_twin_with_the_defaults() -> None:
    pytest.importorskip("uvloop")
    import uvloop

    loop = new_uvloop_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert isinstance(loop, WheelLoop)
        reference = new_event_loop()
        try:
            assert (loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay) == (
                reference.wheel.tick,
                reference.wheel.wheel_size,
                reference.min_delay,
            )
        finally:
            reference.close()
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"tick": 0}, ValueError, "tick must be finite and > 0, got 0"),
        ({"tick": "1ms"}, TypeError, "tick must be a real number, got '1ms'"),
        ({"wheel_size": 1}, ValueError, "wheel_size must be >= 2, got 1"),
        ({"min_delay": -0.5}, ValueError, "min_delay must be finite and >= 0, got -0.5"),
        ({"min_delay": math.nan}, ValueError, "min_delay must be finite and >= 0, got nan"),
        ({"min_delay": True}, TypeError, "min_delay must be a real number or None, got True"),
    ],
)
def test_bad_options_are_refused_by_name(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    makers = [new_event_loop] + ([new_uvloop_event_loop] if uvloop is not None else [])
    for make in makers:
        with pytest.raises(error, match=re.escape(message)):
            make(**options)


# -- the loop core: what the loop hands it, what it gives back ---------------------------------


class Host:
    """All a loop core may read of its loop (see ``LoopCore``): ``time()``, ``get_debug()`` and
    ``call_exception_handler``. Any other attribute is missing, so a core that reached for
    the loop's private methods would fail here."""

    __slots__ = ("debug", "now", "reports")

    def __init__(self, now: float) -> None:
        self.now = now
        self.debug = False
        self.reports: list[dict[str, Any]] = []

    def time(self) -> float:
        return self.now

    def get_debug(self) -> bool:
        return self.debug

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.reports.append(context)


class Hooks:
    """The loop's side of the interface, recording each call."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.armed: list[float] = []
        self.checked: list[Callable[..., object]] = []
        self.on_base: list[tuple[Any, ...]] = []

    def arm(self, when: float) -> None:
        self.armed.append(when)

    def check_in_debug(self, callback: Callable[..., object]) -> None:
        self.checked.append(callback)

    def call_on_base(self, *timer: Any) -> asyncio.TimerHandle:
        self.on_base.append(timer)
        when, _, callback, args, context = timer
        return asyncio.TimerHandle(when, callback, args, self.host, context)  # type: ignore[arg-type]


def make_core(core: str, host: Host, hooks: Hooks, **options: Any) -> Any:
    """A loop core of the side ``core`` names, held by no loop: ``host`` and ``hooks`` are all
    it is given."""
    loop_core = aiowheel._impl.impl_named(core).loop.LoopCore
    options = {"tick": TICK, "wheel_size": 64, "min_delay": 4 * TICK, "far_delay": 100.0} | options
    return loop_core(
        host,
        options["tick"],
        options["wheel_size"],
        options["min_delay"],
        options["far_delay"],
        arm=hooks.arm,
        check_in_debug=hooks.check_in_debug,
        call_on_base=hooks.call_on_base,
    )


def test_the_core_arms_the_driver_through_its_hook_only_when_the_time_changes(core: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(core, host, hooks)
    later = loop_core.call_later(1.0, print)  # a wheel timer: the driver at its bucket's start
    assert hooks.armed == [loop_core.driver_when] and loop_core.driver_when < later.when()
    loop_core.call_later(2.0, print)  # later: the driver stays where it is
    assert len(hooks.armed) == 1
    soon = loop_core.call_later(0.002, print)  # below min_delay: the near queue, due first
    assert hooks.armed[-1] == soon.when() == loop_core.driver_when
    soon.cancel()  # the near queue keeps it until its time: no re-arming
    assert len(hooks.armed) == 2
    later.cancel()  # its bucket emptied: the driver moves to the next one
    assert len(hooks.armed) == 3 and loop_core.driver_when == loop_core.next_due()
    # The driver's pass: nothing due at the near timer's time (it was cancelled); re-armed for
    # the next bucket before advance returns.
    host.now = soon.when()
    assert loop_core.advance(host.now) == []
    assert hooks.armed[-1] == loop_core.driver_when == loop_core.next_due() > host.now
    assert loop_core.pending() == 1
    assert hooks.checked == [] and hooks.on_base == []


def test_the_core_hands_due_timers_back_and_disarms_when_empty(core: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(core, host, hooks)
    ran: list[str] = []
    first = loop_core.call_at(START + 0.5, ran.append, "first")
    second = loop_core.call_at(START + 0.5, ran.append, "second")
    host.now = START + 0.5
    due = loop_core.advance(host.now)
    assert len(due) == 2 and due[0] is first and due[1] is second
    # Nothing left: the driver, which has just run, is not armed again.
    assert len(hooks.armed) == 1 and loop_core.driver_when == math.inf
    for handle in due:
        handle._run()
    assert ran == ["first", "second"]
    assert (loop_core.fired, loop_core.wheel_timers, loop_core.pending()) == (2, 2, 0)


def test_the_core_reports_a_callbacks_error_to_its_loop(core: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(core, host, hooks)
    error = ValueError("boom")

    def fail() -> None:
        raise error

    handle = loop_core.call_later(0.5, fail)
    host.now = handle.when()
    (due,) = loop_core.advance(host.now)
    due._run()
    (report,) = host.reports
    assert report["exception"] is error and report["handle"] is handle


def test_the_core_sends_timers_that_never_fire_to_the_base_loop_through_its_hook(
    core: str,
) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(core, host, hooks, far_delay=100.0)
    context = contextvars.Context()
    handle = loop_core.call_later(101.0, print, "far", context=context)
    assert hooks.on_base == [(START + 101.0, 101.0, print, ("far",), context)]
    assert isinstance(handle, asyncio.TimerHandle)  # what call_on_base returned
    loop_core.call_at(math.inf, print)
    loop_core.call_later(math.nan, print)
    assert len(hooks.on_base) == 3
    assert hooks.on_base[1][0] == math.inf and math.isnan(hooks.on_base[2][1])
    assert hooks.armed == [] and loop_core.pending() == 0


def test_the_core_checks_callbacks_through_its_hook_in_debug_mode(core: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    host.debug = True
    loop_core = make_core(core, host, hooks)
    assert loop_core.debug  # read from the loop when made; the loop's set_debug keeps it
    loop_core.call_later(1.0, print)
    loop_core.debug = False
    loop_core.call_later(1.0, repr)
    assert hooks.checked == [print]


def test_a_closed_core_refuses_timers_and_lets_go_of_its_own(core: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(core, host, hooks)
    callback = Callback()
    callback_ref = weakref.ref(callback)
    handles = [loop_core.call_later(delay, callback) for delay in (0.001, 1.0)]
    del callback
    loop_core.close()
    assert callback_ref() is None and loop_core.pending() == 0
    assert all(handle.get_context() is None for handle in handles)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop_core.call_later(1.0, print)


@pytest.mark.parametrize("use_uvloop_base", [False, pytest.param(True, marks=needs_uvloop)])
def test_a_loop_holds_the_core_it_is_made_with(core: str, use_uvloop_base: bool) -> None:
    handle_class = aiowheel._impl.impl_named(core).loop.TimerHandle
    make = new_uvloop_event_loop if use_uvloop_base else new_event_loop
    loop = make(core=core)
    try:

        async def main() -> list[bool]:
            running = asyncio.get_running_loop()
            handles = [running.call_later(delay, print) for delay in (0.001, 0.05, 3600)]
            await asyncio.sleep(0.01)
            return [type(handle) is handle_class for handle in handles]

        assert loop.run_until_complete(main()) == [True, True, True]
        assert loop.wheel_stats().fired >= 2
    finally:
        loop.close()


@pytest.mark.parametrize(
    "make", [new_event_loop, pytest.param(new_uvloop_event_loop, marks=needs_uvloop)]
)
def test_a_bad_core_name_is_refused_by_name(make: Callable[..., WheelLoop]) -> None:
    with pytest.raises(ValueError, match="core must be 'compiled', 'pure' or None, got 'c'"):
        make(core="c")


def test_asking_for_the_compiled_core_without_it_says_so() -> None:
    code = "import aiowheel.loop; aiowheel.loop.new_event_loop(core='compiled')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "AIOWHEEL_NO_EXTENSIONS": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "RuntimeError: core='compiled': the compiled core is not built" in result.stderr


# -- the timer contract ----------------------------------------------------------------------


def test_never_early_and_in_deadline_then_scheduling_order(loop: WheelLoop) -> None:
    rng = random.Random(4)
    ran: list[tuple[float, int]] = []
    handles: list[asyncio.TimerHandle] = []
    base = loop.time()
    for i in range(300):
        if i % 3:
            handle = loop.call_later(
                rng.uniform(0.005, 0.04), lambda i=i: ran.append((loop.time(), i))
            )
        else:
            # A handful of shared deadlines, each scheduled many times over.
            when = base + 0.03 + (i % 5) * 0.0037
            handle = loop.call_at(when, lambda i=i: ran.append((loop.time(), i)))
        handles.append(handle)
    # In real time (uvloop) a stalled machine could make a shared deadline too near for the
    # wheel; the contract below is the wheel's, so it is checked on the wheel's timers.
    on_wheel = {i for i, handle in enumerate(handles) if is_loop_handle(handle)}
    assert len(on_wheel) >= 200  # the call_later ones at least: 5 ms >= min_delay
    run_until(loop, lambda: len(ran) == len(handles))

    assert len(ran) == len(handles)
    for ran_at, i in ran:
        if i in on_wheel:
            assert ran_at >= handles[i].when()
    order = [i for _, i in ran if i in on_wheel]
    assert order == sorted(order, key=lambda i: (handles[i].when(), i))
    assert loop.wheel_stats().pending == 0


def test_lateness_is_at_most_one_tick_in_virtual_time() -> None:
    loop = VirtualLoop()
    rng = random.Random(7)
    lateness: list[float] = []
    for _ in range(500):
        # From 4 ms to 10 minutes: every level from 0 to 3.
        handle = loop.call_later(10 ** rng.uniform(-2.4, 2.8), lambda: None)
        handle._callback = lambda h=handle: lateness.append(loop.time() - h.when())
    run_for(loop, 700)
    loop.close()
    assert len(lateness) == 500
    assert min(lateness) >= 0
    assert max(lateness) <= TICK * (1 + 1e-9)


def test_equal_deadlines_keep_scheduling_order_across_levels() -> None:
    loop = VirtualLoop()
    deadline = START + 10.0
    order: list[str] = []
    loop.call_at(deadline, order.append, "first")
    assert loop.wheel.levels == 3  # 10 000 ticks ahead: on level 2, the only timer
    # The same deadline, scheduled later on, when it is on level 1 and then on level 0.
    loop.call_at(deadline - 3.0, lambda: loop.call_at(deadline, order.append, "second"))
    loop.call_at(deadline - 0.01, lambda: loop.call_at(deadline, order.append, "third"))
    loop.call_at(deadline + 0.01, loop.stop)
    loop.run_forever()
    loop.close()
    assert order == ["first", "second", "third"]


def test_an_earlier_callback_in_the_batch_can_cancel_a_later_one(loop: WheelLoop) -> None:
    ran: list[int] = []
    when = loop.time() + 0.01
    handles: list[asyncio.TimerHandle] = []

    def first() -> None:
        ran.append(1)
        handles[1].cancel()

    handles.append(loop.call_at(when, first))
    handles.append(loop.call_at(when, ran.append, 2))
    handles.append(loop.call_at(when, ran.append, 3))
    run_until(loop, lambda: 3 in ran)
    assert ran == [1, 3]
    assert handles[1].cancelled()
    # It was already off the wheel, handed over to run: not counted as a wheel cancellation.
    assert loop.wheel_stats().cancelled == 0


def test_timers_scheduled_from_a_callback_run_in_a_later_pass(loop: WheelLoop) -> None:
    order: list[str] = []
    when = loop.time() + 0.01

    def first() -> None:
        order.append("first")
        loop.call_later(0, order.append, "zero")
        loop.call_later(-1, order.append, "negative")
        loop.call_soon(order.append, "soon")
        loop.call_later(loop.min_delay, order.append, "wheel")

    loop.call_at(when, first)
    loop.call_at(when, order.append, "second")
    run_until(loop, lambda: "wheel" in order)
    assert order[:2] == ["first", "second"]
    assert set(order[2:5]) == {"zero", "negative", "soon"}
    assert order[5:] == ["wheel"]


def test_zero_delay_on_the_wheel_runs_in_a_later_pass(kind: str) -> None:
    loop = make_loop(kind, min_delay=0)
    order: list[str] = []
    when = loop.time() + 0.01

    def first() -> None:
        order.append("first")
        handle = loop.call_later(0, order.append, "zero")
        assert is_loop_handle(handle)  # min_delay=0: even this is on the wheel

    loop.call_at(when, first)
    loop.call_at(when, order.append, "second")
    run_until(loop, lambda: "zero" in order)
    loop.close()
    assert order == ["first", "second", "zero"]


def test_stop_from_a_wheel_callback_lets_its_batch_finish(loop: WheelLoop) -> None:
    ran: list[str] = []
    when = loop.time() + 0.01

    def stopper() -> None:
        ran.append("stopper")
        loop.stop()
        # A timer scheduled in a pass runs in a later one, even if it is due at once: in real
        # time (uvloop) a stalled machine could find a timer filed beforehand due in this pass.
        loop.call_later(loop.min_delay, ran.append, "later")

    loop.call_at(when, stopper)
    loop.call_at(when, ran.append, "same batch")
    loop.run_forever()
    assert ran == ["stopper", "same batch"]
    assert loop.wheel_stats().pending == 1
    run_until(loop, lambda: "later" in ran)
    assert ran == ["stopper", "same batch", "later"]


def test_run_until_complete_with_a_future_set_by_a_wheel_timer(loop: WheelLoop) -> None:
    future = loop.create_future()
    loop.call_later(0.01, future.set_result, 42)
    assert loop.run_until_complete(future) == 42
    # Again, on the same loop, after it stopped.
    future = loop.create_future()
    loop.call_at(loop.time() + 0.01, future.set_result, "again")
    assert loop.run_until_complete(future) == "again"


def test_handles_behave_as_asyncio_timer_handles(loop: WheelLoop) -> None:
    def tick() -> None:
        pass

    when = loop.time() + 1.0
    handle = loop.call_at(when, tick)
    later = loop.call_at(when + 1.0, tick)
    assert is_loop_handle(handle)
    # On both cores it has asyncio's API but is not an asyncio.TimerHandle, as uvloop's
    # handles are not (docs/loop.md's table says so).
    assert not isinstance(handle, asyncio.TimerHandle)
    assert handle.when() == when
    assert handle < later and handle <= later and later > handle and later >= handle
    assert handle != later
    assert handle == loop.call_at(when, tick)  # asyncio's equality: same time and callback
    assert hash(handle) == hash(when)
    # The very repr asyncio gives the same timer.
    assert repr(handle) == repr(asyncio.TimerHandle(when, tick, (), loop))
    assert re.fullmatch(r"<TimerHandle when=\S+ .*tick\(\) at .*test_loop\.py:\d+>", repr(handle))
    assert not handle.cancelled()
    handle.cancel()
    handle.cancel()  # idempotent
    assert handle.cancelled()
    assert repr(handle).startswith("<TimerHandle cancelled when=")
    assert loop.wheel_stats().cancelled == 1
    later.cancel()


def test_a_wheel_callbacks_error_goes_to_the_exception_handler(loop: WheelLoop) -> None:
    # As asyncio's Handle._run: the message names the callback, the context carries the
    # exception and the handle, and the other timers still run.
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    ran: list[str] = []
    error = ValueError("boom")

    def fail() -> None:
        raise error

    handle = loop.call_later(0.01, fail)
    loop.call_later(0.01, ran.append, "after")
    assert is_loop_handle(handle)
    run_until(loop, lambda: "after" in ran)
    (report,) = reports
    assert report["exception"] is error
    assert report["handle"] is handle
    reference = asyncio.TimerHandle(handle.when(), fail, (), loop)
    assert report["message"] == f"Exception in callback {reference._repr_info()[2]}"
    assert ran == ["after"]


def test_wheel_callbacks_run_in_their_context(loop: WheelLoop) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    def read_and_set() -> None:
        seen.append(var.get())
        var.set("set by the callback")  # in the handle's context only

    given = contextvars.Context()
    given.run(var.set, "given")
    explicit = loop.call_later(0.01, read_and_set, context=given)
    var.set("current")
    implicit = loop.call_later(0.01, read_and_set)
    var.set("changed after scheduling")

    # get_context() is asyncio's from Python 3.12 on; the compiled handle has it on every version.
    def context_of(handle: asyncio.TimerHandle) -> contextvars.Context:
        get = getattr(handle, "get_context", None)
        return get() if get is not None else handle._context  # type: ignore[attr-defined,no-any-return]

    assert context_of(explicit) is given
    assert context_of(implicit).get(var) == "current"  # a copy made when scheduled
    run_until(loop, lambda: len(seen) == 2)
    assert seen == ["given", "current"]
    assert var.get() == "changed after scheduling"
    assert given.get(var) == "set by the callback"


def test_wheel_handles_compare_with_asyncios(loop: WheelLoop) -> None:
    def tick() -> None:
        pass

    when = loop.time() + 1.0
    handle = loop.call_at(when, tick)
    assert handle < asyncio.TimerHandle(when + 1, tick, (), loop)
    assert handle > asyncio.TimerHandle(when - 1, tick, (), loop)
    assert handle == asyncio.TimerHandle(when, tick, (), loop)
    assert handle != asyncio.TimerHandle(when, print, (), loop)
    assert handle != "not a handle"
    with pytest.raises(TypeError):
        handle < 1.0  # noqa: B015  # unordered, as asyncio's handles are
    handle.cancel()


def test_a_cancelled_wheel_handle_keeps_its_repr_in_debug_mode(loop: WheelLoop) -> None:
    def tick() -> None:
        pass

    loop.set_debug(True)
    handle = loop.call_later(1.0, tick)
    handle.cancel()
    # asyncio's Handle.cancel: in debug mode the repr is kept, callback and all.
    assert re.fullmatch(
        r"<TimerHandle cancelled when=\S+ .*tick\(\) at .*created at .*>", repr(handle)
    )
    loop.set_debug(False)


def test_cancel_frees_the_timer_at_once(loop: WheelLoop) -> None:
    gc.disable()
    try:
        callback = Callback()
        callback_ref = weakref.ref(callback)
        handle = loop.call_later(10, callback)
        handle_ref = weakref.ref(handle)
        del callback
        assert loop.wheel_stats().pending == 1
        handle.cancel()
        assert callback_ref() is None
        assert loop.wheel_stats().pending == 0
        del handle
        assert handle_ref() is None  # nothing on the loop holds the cancelled timer
    finally:
        gc.enable()


def test_asyncio_keeps_cancelled_handles_for_contrast() -> None:
    """What the wheel loop does differently: asyncio's heap holds a cancelled handle."""
    loop = asyncio.SelectorEventLoop()
    gc.disable()
    try:
        handle = loop.call_later(10, Callback())
        handle_ref = weakref.ref(handle)
        handle.cancel()
        del handle
        assert handle_ref() is not None
    finally:
        gc.enable()
        loop.close()


def test_far_and_nan_timers_stay_on_the_base_loop_and_short_ones_skip_the_wheel(
    kind: str,
) -> None:
    loop = make_loop(kind, tick=TICK)
    try:
        assert loop.min_delay == 4 * TICK
        # Below min_delay: the loop's own handles, in its queue of imminent timers.
        near = [loop.call_later(0.003, Callback()), loop.call_at(loop.time() + 0.001, Callback())]
        on_base = [
            loop.call_later(math.inf, Callback()),
            loop.call_later(FAR_DELAY * 2, Callback()),
        ]
        on_wheel = [loop.call_later(0.004, Callback()), loop.call_at(loop.time() + 60, Callback())]
        if kind == "virtual":  # uvloop itself refuses NaN
            on_base.append(loop.call_later(math.nan, Callback()))
        assert not any(is_loop_handle(handle) for handle in on_base)
        assert all(is_loop_handle(handle) for handle in near + on_wheel)
        stats = loop.wheel_stats()
        assert (stats.base_timers, stats.wheel_timers, stats.pending) == (
            len(near) + len(on_base),
            2,
            4,
        )
        assert len(loop.wheel) == 2
        on_base += near
        for handle in on_base + on_wheel:
            handle.cancel()
        assert loop.wheel_stats().pending == 0
    finally:
        loop.close()


def test_min_delay_sets_the_routing(kind: str) -> None:
    loop = make_loop(kind, min_delay=0.05)
    try:
        loop.call_later(0.049, Callback())
        assert len(loop.wheel) == 0
        loop.call_later(0.05, Callback())
        assert len(loop.wheel) == 1
    finally:
        loop.close()


def test_short_timers_keep_the_base_loops_precision() -> None:
    loop = VirtualLoop()
    ran_at: list[float] = []
    handle = loop.call_later(0.0003, lambda: ran_at.append(loop.time()))
    run_for(loop, 0.01)
    loop.close()
    assert ran_at == [handle.when()]  # the heap's exact time, not rounded up to a tick


# -- the uvloop base: never early, driver on time --------------------------------------------


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


# -- driving ---------------------------------------------------------------------------------


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


# -- debug mode, errors, closing -------------------------------------------------------------


def test_slow_wheel_callbacks_are_logged_in_debug_mode(caplog: pytest.LogCaptureFixture) -> None:
    loop = VirtualLoop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.05

    def slow() -> None:
        loop.advance(0.1)

    handle = loop.call_later(0.01, slow)
    assert handle._source_traceback[-1].filename == __file__  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run_for(loop, 0.02)
    loop.close()
    # The timer's own message (asyncio also logs the driver's pass that ran it).
    (message,) = [m for m in caplog.messages if "slow()" in m]
    assert message.startswith("Executing <TimerHandle") and "test_loop.py" in message
    assert message.endswith("took 0.100 seconds")


@needs_uvloop
def test_slow_wheel_callbacks_are_logged_in_debug_mode_on_uvloop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = new_uvloop_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01

    def slow() -> None:
        time.sleep(0.02)

    loop.call_later(0.005, slow)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run_for(loop, 0.01)
    loop.close()
    assert any(
        m.startswith("Executing <TimerHandle when=") and "slow()" in m for m in caplog.messages
    )


def test_source_tracebacks_end_at_the_caller_in_debug_mode(kind: str) -> None:
    loop = make_loop(kind)
    loop.set_debug(True)
    try:
        for handle in (
            loop.call_later(1, Callback()),
            loop.call_at(loop.time() + 1, Callback()),
            loop.call_later(0.001, Callback()),  # on the base loop
        ):
            assert handle._source_traceback[-1].filename == __file__  # type: ignore[attr-defined]
            handle.cancel()
    finally:
        loop.close()


async def a_coroutine_function() -> None:
    pass


BAD_CALLS: list[tuple[str, Callable[[asyncio.AbstractEventLoop], object]]] = [
    ("delay None", lambda loop: loop.call_later(None, print)),  # type: ignore[arg-type]
    ("when None", lambda loop: loop.call_at(None, print)),  # type: ignore[arg-type]
    ("delay str", lambda loop: loop.call_later("1", print)),  # type: ignore[arg-type]
    ("coroutine function", lambda loop: loop.call_later(1, a_coroutine_function)),
    ("coroutine function, at", lambda loop: loop.call_at(loop.time() + 1, a_coroutine_function)),
    ("not callable", lambda loop: loop.call_later(1, 42)),  # type: ignore[arg-type]
]


def outcome(call: Callable[[], object]) -> tuple[type[BaseException], str] | None:
    try:
        handle = call()
    except Exception as exc:
        return type(exc), str(exc)
    assert isinstance(handle, asyncio.Handle) or is_loop_handle(handle)
    handle.cancel()
    return None


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(("name", "bad_call"), BAD_CALLS, ids=[name for name, _ in BAD_CALLS])
def test_bad_calls_fail_as_on_asyncio(
    kind: str, debug: bool, name: str, bad_call: Callable[[asyncio.AbstractEventLoop], object]
) -> None:
    reference = asyncio.SelectorEventLoop()
    loop = make_loop(kind)
    try:
        reference.set_debug(debug)
        loop.set_debug(debug)
        assert outcome(lambda: bad_call(loop)) == outcome(lambda: bad_call(reference))
    finally:
        loop.close()
        reference.close()


def test_calls_on_a_closed_loop_fail_as_on_asyncio(kind: str) -> None:
    loop = make_loop(kind)
    loop.close()
    for call in (lambda: loop.call_later(1, print), lambda: loop.call_at(loop.time() + 1, print)):
        with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
            call()


def test_debug_mode_refuses_calls_from_another_thread(use_uvloop: bool) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(RuntimeError, match="Non-thread-safe operation"):
            await loop.run_in_executor(None, loop.call_later, 1, print)

    run(main(), uvloop=use_uvloop, debug=True)


def test_closing_with_pending_timers_is_clean(kind: str) -> None:
    loop = make_loop(kind)
    callbacks = [Callback() for _ in range(500)]
    refs = [weakref.ref(callback) for callback in callbacks]
    for i, callback in enumerate(callbacks):
        loop.call_later(0.01 + i * 0.5, callback)  # up to 250 s: levels 0 to 2
    del callbacks, callback
    assert loop.wheel_stats().pending == 500
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loop.close()
            loop.close()  # idempotent
        assert loop.wheel_stats().pending == 0
        assert all(ref() is None for ref in refs)  # no reference cycle left for the gc
    finally:
        gc.enable()


# -- real code, unchanged, on the wheel loop -------------------------------------------------


async def asyncio_patterns() -> aiowheel.loop.WheelStats:
    """sleep, timeout, wait_for and TaskGroup, the way applications use them."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, WheelLoop)
    started = loop.time()
    await asyncio.sleep(0.01)
    assert loop.time() >= started + 0.01

    async with asyncio.timeout(HANG):  # a bound on a hang only: the machine may be loaded
        await asyncio.sleep(0.005)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(10) as scope:
            scope.reschedule(loop.time() + 0.01)
            await asyncio.sleep(10)

    assert await asyncio.wait_for(asyncio.sleep(0.005, "in time"), timeout=HANG) == "in time"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(asyncio.sleep(0.005 * i, i)) for i in range(1, 6)]
    assert [task.result() for task in tasks] == [1, 2, 3, 4, 5]

    async def fail_soon() -> None:
        await asyncio.sleep(0.01)
        raise LookupError("boom")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.TaskGroup() as group:
            sleepers = [group.create_task(asyncio.sleep(60)) for _ in range(10)]
            group.create_task(fail_soon())
    assert caught.group_contains(LookupError)
    assert all(task.cancelled() for task in sleepers)
    # The cancelled sleepers' timers left the wheel at once.
    assert loop.wheel_stats().pending == 0
    return loop.wheel_stats()


def test_asyncio_patterns_run_unchanged(use_uvloop: bool) -> None:
    stats = run(asyncio_patterns(), uvloop=use_uvloop)
    assert stats.wheel_timers >= 15
    assert stats.cancelled >= 10


def test_asyncio_patterns_in_virtual_time() -> None:
    with asyncio.Runner(loop_factory=VirtualLoop) as runner:
        stats = runner.run(asyncio_patterns())
    assert stats.wheel_timers >= 15


def test_asyncios_runner_takes_a_loop_maker_with_its_options_bound(use_uvloop: bool) -> None:
    # The documented way to run a main: asyncio's Runner with the loop maker as its factory,
    # options bound with functools.partial, debug the Runner's own.
    async def main() -> tuple[float, float, bool, str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        await asyncio.sleep(0.005)
        return loop.wheel.tick, loop.min_delay, loop.get_debug(), type(loop).__name__

    factory = functools.partial(
        new_uvloop_event_loop if use_uvloop else new_event_loop, tick=0.002, min_delay=0.01
    )
    with asyncio.Runner(loop_factory=factory, debug=True) as runner:
        tick, min_delay, debug, name = runner.run(main())
    assert (tick, min_delay, debug) == (0.002, 0.01, True)
    assert name == ("WheelUVLoop" if use_uvloop else "WheelEventLoop")


def test_websockets_keepalive_pings_go_through_the_wheel(use_uvloop: bool) -> None:
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.asyncio.server import ServerConnection, serve

    pongs = {"client": 0, "server": 0}

    # Observers only: they count the pongs that answer a keepalive ping, then defer to
    # websockets. (Latency would not do: uvloop's clock counts whole milliseconds.)
    class CountingClientConnection(ClientConnection):
        def acknowledge_pings(self, data: bytes) -> None:
            pongs["client"] += data in self.pending_pings
            super().acknowledge_pings(data)

    class CountingServerConnection(ServerConnection):
        def acknowledge_pings(self, data: bytes) -> None:
            pongs["server"] += data in self.pending_pings
            super().acknowledge_pings(data)

    async def echo(websocket: ServerConnection) -> None:
        async for message in websocket:
            await websocket.send(message)

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        # A pong may be late on a loaded machine: the timeout only ends a dead connection.
        keepalive = {"ping_interval": 0.02, "ping_timeout": HANG}
        async with serve(
            echo, "127.0.0.1", 0, create_connection=CountingServerConnection, **keepalive
        ) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(
                f"ws://127.0.0.1:{port}",
                create_connection=CountingClientConnection,
                open_timeout=HANG,
                **keepalive,
            ) as client:
                before = loop.wheel_stats()
                # About ten ping intervals; longer only if the machine is very slow.
                give_up = loop.time() + HANG
                while min(pongs.values()) < 4 and loop.time() < give_up:
                    await asyncio.sleep(0.05)
                await client.send("hello")
                assert await client.recv() == "hello"
                after = loop.wheel_stats()
                return (
                    after.wheel_timers - before.wheel_timers,
                    after.cancelled - before.cancelled,
                )

    wheel_timers, cancelled = run(main(), uvloop=use_uvloop)
    assert pongs["client"] >= 4 and pongs["server"] >= 4
    # Each ping is a sleep and a ping timeout, on both sides; each pong cancelled a timeout.
    assert wheel_timers >= 12
    assert cancelled >= 6


def test_anyio_runs_on_the_wheel_loop(use_uvloop: bool) -> None:
    import anyio

    async def main() -> aiowheel.loop.WheelStats:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        await anyio.sleep(0.01)
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(10)
        assert scope.cancelled_caught
        with pytest.raises(TimeoutError), anyio.fail_after(0.01):
            await anyio.sleep(10)
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(anyio.sleep, 0.005)
        return loop.wheel_stats()

    stats = anyio.run(
        main,
        backend="asyncio",
        backend_options={"loop_factory": new_uvloop_event_loop if use_uvloop else new_event_loop},
    )
    assert stats.wheel_timers >= 8
    assert stats.pending == 0


def test_idle_expiry_example_runs_unchanged(use_uvloop: bool) -> None:
    """examples/idle_tcp_server.py's self-test (an aiowheel.Timer on this loop, a server and
    two clients on 127.0.0.1), run as it is, on the wheel loop."""
    spec = importlib.util.spec_from_file_location(
        "idle_tcp_server", REPO / "examples" / "idle_tcp_server.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    async def main() -> tuple[int, aiowheel.loop.WheelStats]:
        # The talker's lines come timeout / 3 apart: 0.33 s of margin for a loaded machine.
        code = await example.serve(0, timeout=0.5, duration=5.0, self_test=True)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        return code, loop.wheel_stats()

    code, stats = run(main(), uvloop=use_uvloop)
    assert code == 0
    assert stats.wheel_timers > 0 and stats.pending == 0


def test_benchmark_quick_run() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_loop.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "asyncio+wheel" in result.stdout
