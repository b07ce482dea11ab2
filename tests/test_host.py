"""The host interface (:class:`aiowheel.TimerHost`) and the Timer's choice of core.

The features built on a Timer -- idle expiry, timeouts -- use it only through
:class:`~aiowheel.TimerHost`; these tests hold the Timer to it, name by name and behaviour
by behaviour, on both twins of the core (``core`` fixture), and check ``Timer(core=...)``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from aiowheel import IdleTimeouts, Timer, TimerHost

if TYPE_CHECKING:
    from twins import Impl

pytestmark = pytest.mark.usefixtures("core")

TICK = 0.001


def _noop() -> None:
    pass


def host_members() -> list[str]:
    return sorted(
        name
        for name in vars(TimerHost)
        if not name.startswith("_") and name not in vars(object) and name != "mro"
    )


def test_the_host_interface_is_public_and_small() -> None:
    assert host_members() == [
        "call_at",
        "closed",
        "open_cancel_scope",
        "refile_at",
        "run_now",
        "tick",
        "time",
    ]


def test_the_timer_implements_every_member_with_the_same_parameters() -> None:
    timer: TimerHost = Timer()  # mypy checks the Protocol; this checks the names at run time
    for name in host_members():
        specified = inspect.getattr_static(TimerHost, name)
        if isinstance(specified, property):  # an attribute or a property of the Timer's
            assert hasattr(timer, name), name
            continue
        implemented = inspect.getattr_static(Timer, name)
        expected = list(inspect.signature(specified).parameters)
        assert list(inspect.signature(implemented).parameters) == expected, name
    assert not timer.closed


@pytest.mark.anyio
async def test_time_is_the_loops_clock_itself_once_started(backend_name: str) -> None:
    timer = Timer(tick=TICK)

    def assert_read_from_the_loops_clock() -> None:
        # Read in one step with two of the loop's own readings around it. In virtual time the
        # loop's clock stands still between them, so the three are equal; uvloop's runs (a stall
        # of the process moves it between any two reads), so there the Timer's lies between.
        before, now, after = anyio.current_time(), timer.time(), anyio.current_time()
        if backend_name == "uvloop":
            assert before <= now <= after
        else:
            assert before == now == after

    with pytest.raises(RuntimeError, match="Timer is not running"):
        timer.time()
    async with timer:
        assert_read_from_the_loops_clock()
        clock = timer.time
        assert timer.time is clock  # the same callable at every read: no bound method made
        assert getattr(clock, "__self__", None) is not timer  # and no frame of the Timer's
    assert_read_from_the_loops_clock()  # still the loop's, once closed


@pytest.mark.anyio
async def test_scheduling_methods_are_the_cores_own(impl: Impl) -> None:
    """``call_later``, ``call_at`` and ``refile_at`` run no frame of the Timer's: they are the
    core's methods, bound on the Timer (the class's documented ones stand behind them)."""
    async with Timer(tick=TICK) as timer:
        for name in ("call_later", "call_at", "refile_at"):
            method = getattr(timer, name)
            assert type(method.__self__) is impl.timer.TimerCore, name
            handle = method(1.0, _noop)
            assert isinstance(handle, impl.timer.TimerHandle)
            # The class's method does the same, one frame later.
            assert isinstance(getattr(Timer, name)(timer, 1.0, _noop), impl.timer.TimerHandle)


@pytest.mark.anyio
async def test_run_now_reports_errors_and_runs_coroutines_as_tasks(virtual_time: None) -> None:
    errors: list[dict[str, Any]] = []
    ran: list[str] = []

    def fails(label: str) -> None:
        raise ValueError(label)

    async def job(label: str) -> None:
        await anyio.sleep(0.01)
        ran.append(label)
        raise LookupError(label)

    async with Timer(tick=TICK, exception_handler=errors.append) as timer:
        timer.run_now(fails, ("plain",))
        timer.run_now(job, ("coroutine",))
        assert ran == []
        await anyio.sleep(0.02)
        assert ran == ["coroutine"]
        with pytest.raises(KeyboardInterrupt):
            timer.run_now(_interrupt, ())
    assert [type(error["exception"]) for error in errors] == [ValueError, LookupError]
    assert errors[0]["message"].startswith("Exception in callback")

    async def never(label: str) -> None:
        raise AssertionError("a closed Timer runs no coroutine")

    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.run_now(never, ("late",))


def _interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.anyio
async def test_open_cancel_scope_needs_a_running_timer() -> None:
    timer = Timer(tick=TICK)
    with pytest.raises(RuntimeError, match="Timer is not running"):
        timer.open_cancel_scope()
    async with timer:
        scope = timer.open_cancel_scope()
        assert scope.close(None) is False
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.open_cancel_scope()


# -- the twin a Timer runs ----------------------------------------------------------------------


def test_a_timer_runs_the_core_it_is_given(core: str) -> None:
    assert Timer().core == core  # the fixture's: what None means for the test
    assert Timer(core=core).core == core  # type: ignore[arg-type]
    assert Timer(core="pure").core == "pure"  # always there


@pytest.mark.anyio
async def test_idle_timeouts_run_the_idle_core_of_their_timers_twin(impl: Impl) -> None:
    expired: list[str] = []
    async with Timer(tick=TICK) as timer:
        with IdleTimeouts(timer, 0.01, expired.append) as idle:
            assert type(idle.touch.__self__) is impl.idle.IdleCore  # type: ignore[attr-defined]
            idle.touch("a")
            await anyio.sleep(0.02)
    assert expired == ["a"]


def test_a_core_not_named_is_refused() -> None:
    with pytest.raises(ValueError, match="core must be 'compiled', 'pure' or None, got 'fast'"):
        Timer(core="fast")  # type: ignore[arg-type]


def test_the_compiled_core_asked_for_where_it_is_not_loaded_is_a_clear_error() -> None:
    code = (
        "from aiowheel import Timer\n"
        "try:\n    Timer(core='compiled')\nexcept RuntimeError as exc:\n    print(exc)\n"
        "print(Timer().core, Timer(core='pure').core)\n"
    )
    environ = os.environ | {"AIOWHEEL_NO_EXTENSIONS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        "core='compiled': the compiled core is not built for this interpreter (no C compiler at "
        "install time) or AIOWHEEL_NO_EXTENSIONS is set; use core='pure' or None",
        "pure pure",
    ]


def test_time_is_monotonic_on_asyncios_own_loop() -> None:
    async def main() -> object:
        async with Timer() as timer:
            return timer.time

    assert asyncio.run(main()) is time.monotonic
