"""The loop core: what the loop hands it (its hooks) and what it gives back (timers due, errors,
timers for the base loop), on both implementations.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import subprocess
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from loop_support import TICK, Callback
from support import START, needs_uvloop

import aiowheel
import aiowheel._impl
import aiowheel.loop
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- the loop core: what the loop hands it, what it gives back ------------------------------------


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


def make_core(implementation: str, host: Host, hooks: Hooks, **options: Any) -> Any:
    """A loop core of the implementation named, held by no loop: ``host`` and ``hooks`` are all
    it is given."""
    loop_core = aiowheel._impl.implementation_named(implementation).loop.LoopCore
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


def test_the_core_arms_the_driver_through_its_hook_only_when_the_time_changes(
    implementation: str,
) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(implementation, host, hooks)
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


def test_the_core_hands_due_timers_back_and_disarms_when_empty(implementation: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(implementation, host, hooks)
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


def test_the_core_reports_a_callbacks_error_to_its_loop(implementation: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(implementation, host, hooks)
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
    implementation: str,
) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(implementation, host, hooks, far_delay=100.0)
    context = contextvars.Context()
    handle = loop_core.call_later(101.0, print, "far", context=context)
    assert hooks.on_base == [(START + 101.0, 101.0, print, ("far",), context)]
    assert isinstance(handle, asyncio.TimerHandle)  # what call_on_base returned
    loop_core.call_at(math.inf, print)
    loop_core.call_later(math.nan, print)
    assert len(hooks.on_base) == 3
    assert hooks.on_base[1][0] == math.inf and math.isnan(hooks.on_base[2][1])
    assert hooks.armed == [] and loop_core.pending() == 0


def test_the_core_checks_callbacks_through_its_hook_in_debug_mode(implementation: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    host.debug = True
    loop_core = make_core(implementation, host, hooks)
    assert loop_core.debug  # read from the loop when made; the loop's set_debug keeps it
    loop_core.call_later(1.0, print)
    loop_core.debug = False
    loop_core.call_later(1.0, repr)
    assert hooks.checked == [print]


def test_a_closed_core_refuses_timers_and_lets_go_of_its_own(implementation: str) -> None:
    host = Host(START)
    hooks = Hooks(host)
    loop_core = make_core(implementation, host, hooks)
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
def test_a_loop_holds_the_core_it_is_made_with(implementation: str, use_uvloop_base: bool) -> None:
    handle_class = aiowheel._impl.implementation_named(implementation).loop.LoopTimerHandle
    make = new_uvloop_event_loop if use_uvloop_base else new_event_loop
    loop = make(implementation=implementation)
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
def test_a_bad_implementation_name_is_refused_by_name(make: Callable[..., WheelLoop]) -> None:
    with pytest.raises(
        ValueError, match="implementation must be 'compiled', 'pure' or None, got 'c'"
    ):
        make(implementation="c")


def test_asking_for_the_compiled_implementation_without_it_says_so() -> None:
    code = "import aiowheel.loop; aiowheel.loop.new_event_loop(implementation='compiled')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "AIOWHEEL_NO_EXTENSIONS": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert (
        "RuntimeError: implementation='compiled': the compiled implementation is not built"
        in result.stderr
    )
