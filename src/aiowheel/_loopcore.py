"""The wheel-backed event loop's timers: handle, filing, cancelling, advancing; pure Python.

:class:`LoopCore` is what an :class:`aiowheel.loop.WheelLoop` delegates its wheel timers to: it
owns the wheel, makes the handles (:class:`TimerHandle`, an ``asyncio.TimerHandle``), files them,
takes them off the wheel when they are cancelled and hands the due ones to the loop's driver.
It also provides the loop's ``call_later`` and ``call_at`` (:func:`call_later`,
:func:`call_at`: functions the loop class takes as its methods, so that the compiled twin runs
them without a Python frame), which route a timer to the wheel or the base loop. The loop keeps
the driver itself and the base-loop specific parts, and documents the guarantees.

This module is the specification of that hot path; ``aiowheel/_cloop.pxi`` is its compiled twin
(built into ``aiowheel._cwheel``), and :mod:`aiowheel._impl` chooses between the two along with
the wheel. The loop's whole test suite runs on both.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVarTuple, Unpack

from aiowheel._checks import check_deadline, deadline_after, not_copyable
from aiowheel.wheel import Entry, HierarchicalWheel

if TYPE_CHECKING:
    from typing import SupportsFloat, SupportsIndex

__all__ = ["LoopCore", "TimerHandle", "call_at", "call_later"]

_Ts = TypeVarTuple("_Ts")

# HierarchicalWheel refuses deadlines 2**52 ticks or more from zero; stay well inside that.
WHEEL_TICKS = 2**50


class TimerHandle(asyncio.TimerHandle):
    """The handle of a timer on the wheel: an ``asyncio.TimerHandle`` in every respect.

    ``when()``, ``cancel()``, ``cancelled()``, ordering, hashing and ``repr`` are asyncio's own.
    ``cancel()`` reaches the loop through ``loop._timer_handle_cancelled``, as asyncio's does,
    and the loop takes the timer off the wheel there (``LoopCore.cancel``).
    """

    __slots__ = ("_entry",)

    # The timer's place on the wheel; None once cancelled. Inert (not pending) once it fired.
    _entry: Entry[TimerHandle] | None

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refused, unlike asyncio's handle: a copy would share ``_entry`` and could take the
        timer off the wheel (see :func:`aiowheel._checks.not_copyable`)."""
        raise not_copyable("LoopTimerHandle")


class LoopCore:
    """The wheel of one wheel-backed loop and its timers' bookkeeping.

    ``loop`` is the :class:`aiowheel.loop.WheelLoop`; the core calls its ``_arm(deadline)``
    when a new timer needs the driver earlier, its ``_rearm()`` when a cancellation emptied a
    bucket, and its ``_check_in_debug`` in debug mode, as asyncio's ``call_at`` would. The loop
    keeps ``debug`` equal to its ``get_debug()`` and calls :meth:`close` when it closes.
    """

    def __init__(
        self,
        loop: Any,
        tick: SupportsFloat,
        wheel_size: SupportsIndex,
        min_delay: float,
        far_delay: float,
    ) -> None:
        now = loop.time()
        wheel: HierarchicalWheel[TimerHandle] = HierarchicalWheel(tick, wheel_size, start=now)
        self.loop = loop
        # loop.time, or the function it calls: asyncio's own loops read time.monotonic()
        # through a Python method, and calling it directly spares a frame per timer.
        uses_monotonic = getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
        self.clock: Callable[[], float] = time.monotonic if uses_monotonic else loop.time
        self.wheel = wheel
        # Set by close(): asyncio's call_at refuses a closed loop, and so does call_on_wheel.
        self.closed = False
        # loop.get_debug(), kept by the loop's set_debug: read on every schedule.
        self.debug: bool = loop.get_debug()
        # Timers with a delay below min_delay or above far_delay stay on the base loop.
        self.min_delay = min_delay
        self.far_delay = far_delay
        # Deadlines from here on are beyond what the wheel takes (with a tiny tick, the loop's
        # clock plus FAR_DELAY can be); the loop sends them to the base loop like far timers.
        self.latest_deadline = WHEEL_TICKS * wheel.tick
        # The time the driver is armed for, inf when it is not; the loop sets it. No level-0
        # bucket expires before it; a higher-level bucket may, and is cascaded when the driver
        # runs (see call_on_wheel).
        self.driver_when = math.inf
        # loop.time() of the last advance; the wheel's clock is at most one tick behind it.
        self.advanced_to = now
        # How far the wheel's clock may lag before an add moves it up: level 0's span.
        self.catch_up_after = wheel.wheel_size * wheel.tick
        self.wheel_timers = 0
        self.cancelled = 0
        self.fired = 0
        self.driver_wakeups = 0

    def call_on_wheel(  # noqa: PLR0917  # the loop's hot path: no keyword arguments
        self,
        now: float,
        when: float,
        deadline: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> TimerHandle:
        """File a timer for ``when`` (``deadline`` is the same time as a float) on the wheel.

        Called by the loop's ``call_later`` / ``call_at``, whose frames end the handle's source
        traceback in debug mode: it ends at their caller.
        """
        loop = self.loop
        # The checks asyncio's call_at makes (the base loop makes them for its own timers).
        if self.closed:
            raise RuntimeError("Event loop is closed")
        if self.debug:
            loop._check_in_debug(callback)
        timer = TimerHandle(when, callback, args, loop, context)
        traceback = timer._source_traceback  # type: ignore[attr-defined]  # private in typeshed
        if traceback:
            del traceback[-2:]  # this frame and the loop's call_later / call_at
        wheel = self.wheel
        if now - self.advanced_to >= self.catch_up_after:
            next_deadline = wheel.next_deadline()
            if next_deadline is None or next_deadline > now:
                # Nothing is due, so this advance returns nothing: it only moves the clock.
                wheel.advance(now)
                self.advanced_to = now
        # The routing keeps `deadline` finite and in the wheel's range: add's check is redundant.
        timer._entry = wheel.add_entry(Entry(deadline, timer))
        self.wheel_timers += 1
        if deadline < self.driver_when:
            # Only then can the driver be armed too late. A timer due at or after the driver
            # may sit in a higher-level bucket that expires earlier, but the driver's pass
            # cascades every bucket expired by then, so it still comes out on time.
            next_deadline = wheel.next_deadline()
            if next_deadline is not None and next_deadline < self.driver_when:
                loop._arm(next_deadline)
        return timer

    def cancel(self, handle: TimerHandle) -> None:
        """``handle`` was cancelled: take it off the wheel at once (unless it fired already)."""
        entry = handle._entry
        if entry is None:
            return
        handle._entry = None
        emptied = self.wheel.remove_entry(entry)
        if emptied is None:  # it had fired already
            return
        self.cancelled += 1
        if emptied:
            # The last entry of its bucket: that may have been the bucket the driver is armed
            # for. Any other cancellation leaves the next deadline where it was.
            self.loop._rearm()

    def advance(self, now: float) -> list[TimerHandle]:
        """The driver's pass: advance the wheel to ``now``, return the handles now due."""
        self.driver_wakeups += 1
        due = self.wheel.advance(now)
        self.advanced_to = now
        self.fired += len(due)
        return due

    def close(self) -> None:
        """Empty the wheel: its timers are dropped, not run. Called once the loop is closed."""
        self.closed = True
        self.driver_when = math.inf
        # Dropping each entry's payload breaks the handle -> entry -> handle cycle, so the
        # handles go now rather than at the next garbage collection.
        for entry in self.wheel.remove_all():
            entry.payload = None


def call_later(
    loop: Any,
    delay: float,
    callback: Callable[[Unpack[_Ts]], object],
    *args: *_Ts,
    context: contextvars.Context | None = None,
) -> asyncio.TimerHandle:
    """asyncio's ``call_later``, with the timer on the wheel if ``delay >= min_delay``.

    On the wheel, a delay that is not an int or a float (a Fraction, a numpy scalar) is added
    to the clock exactly, and the sum rounded up: the callback never runs before
    ``loop.time() + delay``.
    """
    if delay is None:
        raise TypeError("delay must not be None")
    core: LoopCore = loop._core
    now = core.clock()
    when = now + delay
    # Written so that NaN fails the test and goes to the base loop, as asyncio accepts it.
    if core.min_delay <= delay <= core.far_delay and when < core.latest_deadline:
        deadline = when if type(delay) is float else deadline_after(now, delay)
        return core.call_on_wheel(now, when, deadline, callback, args, context)
    return _on_base(loop, when, delay, callback, args, context)


def call_at(
    loop: Any,
    when: float,
    callback: Callable[[Unpack[_Ts]], object],
    *args: *_Ts,
    context: contextvars.Context | None = None,
) -> asyncio.TimerHandle:
    """asyncio's ``call_at``, with the timer on the wheel if ``when - time() >= min_delay``.

    On the wheel, a ``when`` that is not an int or a float (a Fraction, a numpy scalar) is
    rounded up to a float: the callback never runs before ``when``.
    """
    if when is None:
        raise TypeError("when cannot be None")
    core: LoopCore = loop._core
    now = core.clock()
    delay = when - now
    if core.min_delay <= delay <= core.far_delay and when < core.latest_deadline:
        deadline = when if type(when) is float else check_deadline(when, "when")
        return core.call_on_wheel(now, when, deadline, callback, args, context)
    return _on_base(loop, when, delay, callback, args, context)


def _on_base(  # noqa: PLR0917  # the hot path's arguments, as _call_on_base takes them
    loop: Any,
    when: float,
    delay: float,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    context: contextvars.Context | None,
) -> asyncio.TimerHandle:
    """A timer the base loop's own way, through the loop's ``_call_on_base`` hook."""
    timer: asyncio.TimerHandle = loop._call_on_base(when, delay, callback, args, context)
    # Drop the frames of the hook, of this function and of call_later / call_at: the
    # traceback ends at their caller.
    traceback = timer._source_traceback  # type: ignore[attr-defined]  # private in typeshed
    if traceback:
        del traceback[-3:]
    return timer
