"""The same raising KeyboardInterrupt or SystemExit (:data:`INTERRUPTING`): on asyncio and uvloop
the interrupt leaves the loop once and the Timer keeps working; on trio it ends the block that
entered the Timer, which closes it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import anyio.abc
import pytest
from faults_support import raising_on_expire
from support import HANG, Boom, noop, raise_, raise_soon

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts
from aiowheel.testing import VirtualTimeLoop

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- interrupting: KeyboardInterrupt, SystemExit --------------------------------------------------

INTERRUPTS = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}
# Outcomes, by backend.
LEAVES_ONCE = "leaves run_until_complete once; everything else runs after; aclose() is clean"
ENDS_BLOCK = "leaves the block bare (no exception group); the Timer is closed, pending cancelled"

INTERRUPTING_ENTRIES = [
    "callback",
    "plain job",
    "coroutine job",
    "plain on_expire",
    "coroutine on_expire",
    # A callback raises Boom; the exception_handler it goes to raises the interrupt.
    "exception_handler",
]
INTERRUPTING = [
    (entry, name, {"asyncio": LEAVES_ONCE, "uvloop": LEAVES_ONCE, "trio": ENDS_BLOCK})
    for entry in INTERRUPTING_ENTRIES
    for name in INTERRUPTS
]


def _arm_fault(timer: Timer, entry: str, exc_type: type[BaseException], ran: list[str]) -> Any:
    """Make ``entry`` raise ``exc_type`` 2 ms from now -- a callback or a job between one timer
    "before" it and one in the "same batch" after it; return the IdleTimeouts, if any."""
    when = timer.time() + 0.002
    if entry.endswith("on_expire"):
        idle = IdleTimeouts(timer, 0.002, raising_on_expire(entry, ran, "interrupting", exc_type))
        for key in ("first", "interrupting", "last"):
            idle.touch(key)
        return idle
    timer.call_at(when, ran.append, "before")
    if entry in ("callback", "exception_handler"):
        timer.call_at(when, raise_, exc_type if entry == "callback" else Boom)
    elif entry == "plain job":
        timer.schedule_at(when, raise_, exc_type)
    else:
        timer.schedule_at(when, raise_soon, exc_type)
    timer.call_at(when, ran.append, "same batch")
    return None


def _interrupting_handler(exc_type: type[BaseException]) -> Callable[[dict[str, Any]], None]:
    def handler(context: dict[str, Any]) -> None:
        raise exc_type

    return handler


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize(("entry", "interrupt", "expected"), INTERRUPTING)
def test_interrupting_on_asyncio(
    loop_name: str, entry: str, interrupt: str, expected: dict[str, str]
) -> None:
    assert expected[loop_name] == LEAVES_ONCE
    exc_type = INTERRUPTS[interrupt]
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop = uvloop.new_event_loop()
    else:
        loop = VirtualTimeLoop()

    async def enter() -> Timer:
        handler = _interrupting_handler(exc_type) if entry == "exception_handler" else None
        timer = Timer(exception_handler=handler)
        await timer.__aenter__()
        return timer

    try:
        timer = loop.run_until_complete(enter())
        ran: list[str] = []
        idle = _arm_fault(timer, entry, exc_type, ran)
        timer.call_later(0.004, ran.append, "later")
        with pytest.raises(exc_type):
            loop.run_until_complete(asyncio.sleep(5))  # ends at the interrupt
        if entry == "callback" and loop_name == "asyncio":
            assert ran == ["before"]  # the interrupt left at once, as asyncio's does
        elif entry == "callback":
            # uvloop leaves run_until_complete only at the end of its libuv iteration (its own
            # timers show it: one due with the interrupting one still runs), and a stall of the
            # process during the iteration makes more come due in it: the rest of the batch, the
            # "later" timer. What holds: the interrupt left after "before", and below, everything
            # runs once.
            assert ran[0] == "before"
        timer.call_later(0.001, ran.append, "after recovery")
        # Once: no second interrupt. (The bound turns a dead driver into a failure, not a hang.)
        loop.run_until_complete(asyncio.wait_for(timer.sleep(0.01), HANG))
        expected_ran = ["after recovery", "later"]
        if idle is None:
            assert ran[:2] == ["before", "same batch"]  # the rest of the batch first
            expected_ran += ["before", "same batch"]
        else:
            expected_ran += ["first", "interrupting", "last"]
        assert sorted(ran) == sorted(expected_ran)  # nothing lost, nothing twice
        assert len(timer) == 0 and (idle is None or len(idle) == 0)
        loop.run_until_complete(timer.aclose())  # does not raise the interrupt again
    finally:
        loop.close()


@pytest.mark.parametrize(("entry", "interrupt", "expected"), INTERRUPTING)
async def test_interrupting_on_trio(
    backend_name: str, entry: str, interrupt: str, expected: dict[str, str]
) -> None:
    if backend_name != "trio":
        pytest.skip("asyncio and uvloop: test_interrupting_on_asyncio drives the loop by hand")
    assert expected[backend_name] == ENDS_BLOCK
    exc_type = INTERRUPTS[interrupt]
    handler = _interrupting_handler(exc_type) if entry == "exception_handler" else None
    ran: list[str] = []
    with pytest.raises(exc_type):
        async with Timer(exception_handler=handler) as timer:
            _arm_fault(timer, entry, exc_type, ran)
            later = timer.call_later(0.004, ran.append, "later")
            await anyio.sleep(1)
    assert "later" not in ran and later.cancelled()
    assert timer.closed and len(timer) == 0
    with pytest.raises(RuntimeError, match="Timer is closed"):
        timer.call_later(0, noop)


def new_loop(loop_name: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop to drive by hand: asyncio in virtual time, or uvloop."""
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return VirtualTimeLoop()


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

    # Earlier tests' garbage first: a pending task of theirs collected during this test (when
    # the collector runs depends on what ran before, and how long) would log "Task was destroyed
    # but it is pending!" here, with this test's Timer not at fault.
    gc.collect()
    runner = asyncio.Runner(loop_factory=partial(new_loop, loop_name))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(SystemExit) as info:
            runner.run(main())
        assert info.value.code == 3
        runner.close()  # cancels main(), which closes the Timer: no second SystemExit
        gc.collect()
    assert closed == [True]
    assert [record.getMessage() for record in caplog.records] == []
