"""The wheel loop used as a hostile user would (:data:`LOOP_FAULTS`): a clock patched by a test,
an exception handler keeping handles, a loop dropped unclosed, a handle's context, numbers of
every type, a ``min_delay`` below a tick.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any
from unittest import mock

import pytest
from support import Boom, VirtualLoop, noop, raise_

from aiowheel._impl import CPYTHON_FALLBACK
from aiowheel.loop import new_event_loop, new_uvloop_event_loop

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- the wheel loop used as a hostile user would (issue 27) ---------------------------------------
#
# Each row is a scenario run on a loop the row's base makes: the wheel loop on it and, where the
# base loop is the reference, the base loop itself (asyncio's selector loop, uvloop), side by
# side: the wheel loop must observe what the base observes. Where asyncio is not the reference
# (it computes float32 deadlines, refuses Decimal), the row names what must hold. Real time on
# both bases, a few milliseconds; only outcomes are compared, never a time bound.

Make = Callable[[], asyncio.AbstractEventLoop]


def _spin(loop: asyncio.AbstractEventLoop, seconds: float = 0.005) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def _patched_clock(make: Make) -> object:
    """A test sets the clock by hand (aiohttp's own tests do): a 10 s timer made then is 10 s
    after the patched clock, and does not run while the patched clock is short of it."""
    loop = make()
    try:
        ran: list[str] = []
        # A whole number of seconds: `now + 10` is then exact, as it is not for a clock within
        # 10 s below a power of two (8185.1 + 10 crosses 8192, and asyncio's own sum gives
        # when() - now = 9.99999999999909 there), which made this test depend on the uptime.
        now = float(int(loop.time()) + 1000)
        with mock.patch.object(loop, "time", return_value=now):
            handle = loop.call_later(10, ran.append, "ran")
            later = loop.call_at(now + 10, ran.append, "ran at")
            for _ in range(3):  # passes of the loop, its driver's included, on the frozen clock
                loop.call_soon(loop.stop)
                loop.run_forever()
            whens = (handle.when() - now, later.when() - now)
        handle.cancel()
        later.cancel()
        return whens, ran
    finally:
        loop.close()


def _clock_class(loop: asyncio.AbstractEventLoop) -> type:
    """A class above the loop's own that a test can patch ``time`` on: asyncio's base loop, or
    uvloop's Python-level ``uvloop.Loop``."""
    if isinstance(loop, asyncio.BaseEventLoop):
        return asyncio.BaseEventLoop
    import uvloop

    return uvloop.Loop


def _clock_patched_every_way(make: Make) -> object:
    """The clock patched after timers were made (the compiled core then reads it without a
    lookup), in every way a test patches it -- on the loop with mock and by hand, on the loop's
    class, on a class above it -- and each patch undone: a timer made while a patch is in place
    is 10 s after the patched clock; one made after it is undone is on the real clock again."""
    loop = make()
    observed: list[object] = []
    try:

        def timer_after_patch() -> float:
            handle = loop.call_later(10, noop)
            handle.cancel()
            return round(handle.when() - loop.time(), 6)

        def timer_on_real_clock(patched: float) -> bool:
            handle = loop.call_later(10, noop)
            handle.cancel()
            return handle.when() < patched

        for _ in range(3):  # timers on the real clock first
            loop.call_later(10, noop).cancel()
        patched = loop.time() + 1000
        with mock.patch.object(loop, "time", return_value=patched):
            observed.append(("mock on the loop", timer_after_patch()))
        observed.append(("undone", timer_on_real_clock(patched)))
        loop.time = lambda: patched  # type: ignore[method-assign]
        observed.append(("set on the loop", timer_after_patch()))
        del loop.time
        observed.append(("deleted", timer_on_real_clock(patched)))
        with mock.patch.object(type(loop), "time", lambda self: patched):
            observed.append(("the loop's class", timer_after_patch()))
        observed.append(("undone", timer_on_real_clock(patched)))
        with mock.patch.object(_clock_class(loop), "time", lambda self: patched):
            observed.append(("a class above", timer_after_patch()))
        observed.append(("undone", timer_on_real_clock(patched)))
        return observed
    finally:
        loop.close()


def _kept_handles(make: Make) -> object:
    """An exception handler keeps context["handle"] of the failing timers (error reporters do):
    once closed, the loop is still freed."""
    loop = make()
    reporter = _Reporter()
    loop.set_exception_handler(reporter)
    loop.call_later(0.001, raise_, Boom)  # on the wheel
    loop.call_later(0, raise_, Boom)  # in the near queue
    _spin(loop)
    loop.close()
    kept = len(reporter.kept)
    freed = weakref.ref(loop)
    del loop, reporter  # the handles are now reachable from the loop only, through the handler
    gc.collect()
    return kept, freed() is None


class _Reporter:
    """An exception handler that keeps the failing handles, as error reporters do."""

    def __init__(self) -> None:
        self.kept: list[object] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.kept.append(context["handle"])


def _freed_by_reference_counting(make: Make) -> object:
    """A closed loop goes when its last reference does, without the cyclic collector (anyio's
    test_asyncio_run_does_not_leak_event_loop)."""
    loop = make()
    loop.call_later(100, noop)
    loop.call_later(0.001, noop)
    _spin(loop)
    loop.close()
    freed = weakref.ref(loop)
    gc.disable()
    try:
        del loop
        return freed() is None
    finally:
        gc.enable()


def _dropped_unclosed(make: Make) -> object:
    """A loop dropped without close() with a timer pending: collected, warning as its base.
    (Not after a re-arm of the driver on uvloop: uvloop keeps a loop alive, unclosed, once any
    of its timers was cancelled, until it runs again; see docs/loop.md.)"""
    loop = make()
    loop.call_later(100, noop)
    freed = weakref.ref(loop)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del loop
        gc.collect()
    unclosed = [w for w in caught if str(w.message).startswith("unclosed event loop")]
    return freed() is None, [w.category.__name__ for w in unclosed]


def _debug_repr_cancelled_after_it_ran(make: Make) -> object:
    loop = make()
    try:
        loop.set_debug(True)
        handle = loop.call_later(0.001, noop)
        _spin(loop)
        handle.cancel()
        return handle.cancelled(), "cancelled" in repr(handle)
    finally:
        loop.close()


_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="unset")


def _a_handles_own_context(make: Make) -> object:
    """What is set in one handle's get_context() is that handle's alone."""
    loop = make()
    try:
        seen: dict[str, str] = {}
        first = loop.call_later(0.001, lambda: seen.update(first=_VAR.get()))
        loop.call_later(0.001, lambda: seen.update(wheel=_VAR.get()))
        loop.call_later(0, lambda: seen.update(near=_VAR.get()))
        first.get_context().run(_VAR.set, "x")  # type: ignore[union-attr]
        _spin(loop)
        return seen
    finally:
        loop.close()


def _numbers(make: Make) -> object:
    """Delays of every real number type: when() is a float at or after the exact clock + delay,
    and the callback runs at or after it."""
    np = pytest.importorskip("numpy")
    loop = make()
    try:
        outcomes = []
        for delay in (np.float32(0.003), np.float16(0.003), Decimal("0.003"), Fraction(3, 1000)):
            ran: list[float] = []
            now = loop.time()
            handle = loop.call_later(delay, lambda ran=ran: ran.append(loop.time()))
            when = handle.when()
            _spin(loop, 0.01)
            exact = Fraction(delay) if isinstance(delay, Decimal | Fraction) else float(delay)
            floor = Fraction(now) + Fraction(exact)
            outcomes.append(
                type(when) is float and when >= floor and len(ran) == 1 and ran[0] >= when
            )
        return outcomes
    finally:
        loop.close()


@dataclass(frozen=True)
class LoopFault:
    name: str
    scenario: Callable[[Make], object]
    # What the wheel loop must observe, or None: what its base loop observes.
    expected: object = None
    # Whether asyncio's loop also observes `expected` (then checked on the asyncio base).
    asyncios_too: bool = False
    # What the compiled core observes where it differs by design (docs/loop.md says why).
    on_compiled: object = None

    def __str__(self) -> str:
        return self.name


HAS_GET_CONTEXT = hasattr(asyncio.Handle, "get_context")  # Python 3.12+

LOOP_FAULTS = [
    LoopFault("a clock patched by a test", _patched_clock, ((10.0, 10.0), []), asyncios_too=True),
    # uvloop's own timers read its C clock, whatever is patched: the wheel loop on either base
    # does as asyncio's does (docs/loop.md).
    LoopFault(
        "a clock patched every way, and undone",
        _clock_patched_every_way,
        [
            ("mock on the loop", 10.0),
            ("undone", True),
            ("set on the loop", 10.0),
            ("deleted", True),
            ("the loop's class", 10.0),
            ("undone", True),
            ("a class above", 10.0),
            ("undone", True),
        ],
        asyncios_too=True,
    ),
    LoopFault("handles kept by the exception handler", _kept_handles),
    LoopFault("a closed loop freed by reference counting", _freed_by_reference_counting),
    # The compiled core's handles are not tracked by the cyclic collector (the price of tracking
    # them: about 180 instructions per timer, docs/loop.md): a loop dropped unclosed with a
    # timer pending is never collected. Close your loops.
    LoopFault("a loop dropped unclosed", _dropped_unclosed, on_compiled=(False, [])),
    LoopFault("debug repr cancelled after it ran", _debug_repr_cancelled_after_it_ran),
    LoopFault(
        "a handle's own context",
        _a_handles_own_context,
        {"first": "x", "wheel": "unset", "near": "unset"},
        asyncios_too=HAS_GET_CONTEXT,
    ),
    LoopFault("numbers of every type", _numbers, [True] * 4),
]


def _makers(base: str) -> tuple[Make, Make]:
    """(the base loop itself, the wheel loop on it)."""
    if base == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.new_event_loop, new_uvloop_event_loop
    return asyncio.SelectorEventLoop, new_event_loop


@pytest.mark.parametrize("base", ["asyncio", "uvloop"])
@pytest.mark.parametrize("row", LOOP_FAULTS, ids=str)
def test_loop_fault(base: str, row: LoopFault, implementation: str) -> None:
    reference, wheel = _makers(base)
    observed = row.scenario(wheel)
    if implementation == "compiled" and row.on_compiled is not None and not CPYTHON_FALLBACK:
        assert observed == row.on_compiled
        return
    if row.expected is None:
        assert observed == row.scenario(reference)
        return
    assert observed == row.expected
    if base == "asyncio" and row.asyncios_too:
        assert row.scenario(reference) == row.expected


@pytest.mark.parametrize("base", ["asyncio", "uvloop"])
def test_the_compiled_core_trusts_its_clock_until_time_is_written(
    base: str, implementation: str
) -> None:
    """The compiled core reads the clock without looking loop.time up while nothing can have
    patched it (no cost per timer: docs/loop.md), stops at any write of ``time`` on the loop or
    its classes, and trusts it again once a timer finds the patch undone."""
    if implementation != "compiled" or CPYTHON_FALLBACK:
        pytest.skip("the compiled core's fast path; the pure core and the fallback build look up")
    loop = _makers(base)[1]()
    try:
        core: Any = loop._core  # type: ignore[attr-defined]
        trusted: list[bool] = []

        def timer() -> None:
            loop.call_later(10, noop).cancel()
            trusted.append(core._clock_trusted)

        timer()
        with mock.patch.object(loop, "time", return_value=0.0):
            trusted.append(core._clock_trusted)
            timer()
        timer()
        with mock.patch.object(type(loop), "time", lambda self: 0.0):
            timer()
        timer()
        assert trusted == [True, False, False, True, False, True]
    finally:
        loop.close()


def test_object_setattr_on_a_wheel_loop() -> None:
    """The compiled ClockWatch is a C-level ``__setattr__`` (it tells the core when ``time`` is
    written): ``setattr`` works on every attribute; ``object.__setattr__(loop, ...)`` is refused
    below Python 3.13, as for any type with its own ``__setattr__``, and allowed from 3.13 on
    (docs/loop.md); on the pure build it is allowed."""
    from aiowheel.loop._wheelloop import ClockWatch

    loop = new_event_loop()
    try:
        loop.anything = 1  # type: ignore[attr-defined]
        del loop.anything  # type: ignore[attr-defined]
        # The loop classes' own ClockWatch, chosen at import.
        if ClockWatch.__module__ == "aiowheel._cloopcore" and sys.version_info < (3, 13):
            with pytest.raises(TypeError, match="can't apply this __setattr__"):
                object.__setattr__(loop, "anything", 1)
        else:
            object.__setattr__(loop, "anything", 1)
    finally:
        loop.close()


@pytest.mark.parametrize("min_delay_ticks", [0, 0.25, 0.5, 0.99, 1, 4])
def test_no_timer_late_whatever_min_delay(min_delay_ticks: float) -> None:
    """A min_delay below a tick once filed a timer made right after a driver pass in a bucket
    that expires with the wheel's clock, late by up to two ticks: every timer runs at its own
    deadline, in virtual time exactly."""
    tick = 0.5
    loop = VirtualLoop(tick=tick, min_delay=min_delay_ticks * tick)
    late: list[float] = []
    handles: list[asyncio.TimerHandle] = []

    def check(index: int) -> None:
        late.append(loop.time() - handles[index].when())

    def after_a_pass() -> None:  # a wheel timer: runs in a driver pass
        for delay in (0.05, 0.2, 0.25, 0.3, 0.45, 0.5, 0.7, 0.99, 1.2):
            handles.append(loop.call_later(delay, check, len(handles)))

    try:
        loop.call_later(3 * tick, after_a_pass)
        _spin(loop, 4.0)
    finally:
        loop.close()
    assert late == [0.0] * 9
