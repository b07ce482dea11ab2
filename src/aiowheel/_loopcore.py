"""The wheel-backed event loop's timers: handle, filing, cancelling, advancing; pure Python.

:class:`LoopCore` is what an :class:`aiowheel.loop.WheelLoop` delegates its wheel timers to: it
owns the wheel, makes the handles (:class:`TimerHandle`, an ``asyncio.TimerHandle``), files them,
takes them off the wheel when they are cancelled and hands the due ones to the loop's driver.
It also provides the loop's ``call_later`` and ``call_at`` (:func:`call_later`,
:func:`call_at`: functions the loop class takes as its methods, so that the compiled twin runs
them without a Python frame), which route a timer to the wheel, to the core's queue of imminent
timers, or to the base loop. The loop keeps the driver itself and the base-loop specific parts,
and documents the guarantees.

One deadline order for every timer the core holds. The wheel only stores timers; it never
decides when one runs. Timers shorter than ``min_delay`` go straight into ``near``, a binary
heap ordered by (deadline, scheduling order); each driver pass moves into it every wheel timer
whose bucket could hold a deadline up to two ticks ahead (so the wheel's tick never delays a
timer), then takes out exactly those whose deadline the clock has reached. A timer therefore
runs in the pass in which ``loop.time()`` reaches its ``when()``, never before, and due timers
run in (deadline, scheduling order) whichever structure held them. :meth:`LoopCore.next_due`
tells the loop when to arm its driver: the heap's earliest deadline, or a tick before the
wheel's next bucket expires (no deadline in that bucket is earlier).

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
from heapq import heappop, heappush
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
    """The handle of a loop timer: an ``asyncio.TimerHandle``, with two differences.

    ``when()``, ``cancel()``, ``cancelled()``, ordering, hashing and ``repr`` are asyncio's own.
    ``cancel()`` reaches the loop through ``loop._timer_handle_cancelled``, as asyncio's does,
    and the loop takes the timer off the wheel there (``LoopCore.cancel``). Unlike asyncio's, a
    spent handle lets go of its callback, arguments and context (``get_context()`` is None then),
    and copying or pickling it is refused (``__reduce_ex__``).
    """

    __slots__ = ("_entry", "_order")

    # The timer's place on the wheel; None once cancelled, once taken off the wheel into the
    # core's near queue, or for a timer that never went on the wheel.
    _entry: Entry[TimerHandle] | None
    # Scheduling order among all the core's timers: ties between equal deadlines by it.
    _order: int

    def _run(self) -> None:
        """asyncio's ``Handle._run``; then the handle lets go of its callback, its arguments and
        its context, as the compiled handle does (which the cyclic collector does not track, so
        it must hold nothing once spent): ``get_context()`` is None from then on."""
        fields: Any = self  # asyncio's private fields, not all in typeshed
        if fields._source_traceback and fields._repr is None:
            fields._repr = repr(self)  # debug mode: the repr it had, as cancel() keeps it
        try:
            super()._run()
        finally:
            _release(self)

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refused, unlike asyncio's handle: a copy would share ``_entry`` and could take the
        timer off the wheel (see :func:`aiowheel._checks.not_copyable`)."""
        raise not_copyable("LoopTimerHandle")


def _release(timer: TimerHandle) -> None:
    """Let go of what a pending timer holds: it ran, was cancelled or its loop closed."""
    fields: Any = timer
    fields._callback = fields._args = fields._context = None


class LoopCore:
    """The wheel of one wheel-backed loop, its queue of imminent timers, and their bookkeeping.

    ``loop`` is the :class:`aiowheel.loop.WheelLoop`; the core calls its ``_arm(deadline)``
    when a new timer needs the driver earlier, its ``_rearm()`` when a cancellation emptied a
    bucket, and its ``_check_in_debug`` in debug mode, as asyncio's ``call_at`` would. The loop
    keeps ``debug`` equal to its ``get_debug()``, arms its driver for :meth:`next_due` and calls
    :meth:`close` when it closes.
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
        # A heap of (deadline, order, handle): the timers shorter than min_delay, and the wheel
        # timers taken off the wheel because they are due within two ticks. Cancelled ones stay
        # until they reach the top (their callback and arguments are released at once).
        self.near: list[tuple[float, int, TimerHandle]] = []
        # The scheduling order the next timer gets.
        self.order = 0
        # Set by close(): asyncio's call_at refuses a closed loop, and so does schedule.
        self.closed = False
        # loop.get_debug(), kept by the loop's set_debug: read on every schedule.
        self.debug: bool = loop.get_debug()
        # Timers with a delay below min_delay go to `near` directly; above far_delay they stay
        # on the base loop.
        self.min_delay = min_delay
        self.far_delay = far_delay
        # Deadlines from here on are beyond what the wheel takes (with a tiny tick, the loop's
        # clock plus FAR_DELAY can be); the loop sends them to the base loop like far timers.
        self.latest_deadline = WHEEL_TICKS * wheel.tick
        # The time the driver is armed for, inf when it is not; the loop sets it. No timer the
        # core holds can be due before it.
        self.driver_when = math.inf
        # loop.time() of the last advance; the wheel's clock is at most two ticks ahead of it.
        self.advanced_to = now
        # How far the wheel's clock may lag before an add moves it up: level 0's span.
        self.catch_up_after = wheel.wheel_size * wheel.tick
        self.wheel_timers = 0
        self.near_timers = 0
        self.cancelled = 0
        self.fired = 0
        self.driver_wakeups = 0

    def schedule(  # noqa: PLR0917  # the loop's hot path: no keyword arguments
        self,
        now: float,
        when: float,
        deadline: float,
        on_wheel: bool,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> TimerHandle:
        """A timer for ``when`` (``deadline`` is the same time as a float): on the wheel if
        ``on_wheel``, else straight into the near queue.

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
        timer._order = order = self.order
        self.order = order + 1
        if on_wheel:
            wheel = self.wheel
            if now - self.advanced_to >= self.catch_up_after:
                next_deadline = wheel.next_deadline()
                if next_deadline is None or next_deadline > now:
                    # Only moves the clock up; whatever it returns is not due yet (it was taken
                    # out early, within two ticks), so into the near queue with it.
                    self._take_near(wheel.advance_entries(now))
                    self.advanced_to = now
            # The routing keeps `deadline` finite and in the wheel's range: add's check is
            # redundant.
            timer._entry = wheel.add_entry(Entry(deadline, timer))
            self.wheel_timers += 1
        else:
            timer._entry = None
            heappush(self.near, (deadline, order, timer))
            self.near_timers += 1
        if deadline < self.driver_when:
            # Only then can the driver be armed too late. A wheel timer due at or after the
            # driver may sit in a higher-level bucket that expires earlier, but next_due is
            # a tick before the earliest bucket, so the driver is still armed early enough.
            next_due = self.next_due()
            if next_due < self.driver_when:
                loop._arm(next_due)
        return timer

    def cancel(self, handle: TimerHandle) -> None:
        """``handle`` was cancelled: take it off the wheel at once (unless it left the wheel).

        asyncio's ``cancel`` then releases the callback and arguments; the context goes here.
        """
        fields: Any = handle
        fields._context = None
        entry = handle._entry
        if entry is None:
            return
        handle._entry = None
        emptied = self.wheel.remove_entry(entry)
        if emptied is None:  # pragma: no cover - an entry that left the wheel has _entry None
            return
        self.cancelled += 1
        if emptied:
            # The last entry of its bucket: that may have been the bucket the driver is armed
            # for. Any other cancellation leaves the next deadline where it was.
            self.loop._rearm()

    def next_due(self) -> float:
        """When the driver must run next: the near queue's earliest deadline, or a tick before
        the wheel's next bucket expires (its deadlines are all later), whichever is earlier;
        inf if the core holds no timer. Drops cancelled timers from the top of the queue."""
        near = self.near
        while near and near[0][2]._cancelled:
            heappop(near)
            self.cancelled += 1
        when = near[0][0] if near else math.inf
        next_deadline = self.wheel.next_deadline()
        if next_deadline is not None and next_deadline - self.wheel.tick < when:
            return next_deadline - self.wheel.tick
        return when

    def advance(self, now: float) -> list[TimerHandle]:
        """The driver's pass: the handles due at ``now`` (``deadline <= now``), in (deadline,
        scheduling order); none that a later one could precede is left behind.

        Every wheel timer that could be due within two ticks first moves to the near queue,
        so that the bucket of a timer due at ``now`` is taken even though it expires later
        (the wheel rounds deadlines up to its tick; two ticks, so that a float rounding of
        ``now + tick`` cannot leave that bucket behind).
        """
        self.driver_wakeups += 1
        self._take_near(self.wheel.advance_entries(now + 2 * self.wheel.tick))
        self.advanced_to = now
        near = self.near
        due: list[TimerHandle] = []
        while near and near[0][0] <= now:
            timer = heappop(near)[2]
            if timer._cancelled:
                self.cancelled += 1
            else:
                due.append(timer)
        self.fired += len(due)
        return due

    def _take_near(self, entries: list[Entry[TimerHandle]]) -> None:
        """Move ``entries``, just taken off the wheel, to the near queue."""
        near = self.near
        for entry in entries:
            timer = entry.payload
            assert timer is not None  # an entry that came out of the wheel keeps its payload
            # Off the wheel: no handle -> entry -> handle cycle, and cancel has nothing to do.
            entry.payload = None
            timer._entry = None
            heappush(near, (entry.deadline, timer._order, timer))

    def pending(self) -> int:
        """Timers held and not cancelled: on the wheel or in the near queue."""
        live = sum(not item[2]._cancelled for item in self.near)
        return len(self.wheel) + live

    def close(self) -> None:
        """Empty the wheel and the near queue: their timers are dropped, not run. Called once
        the loop is closed."""
        self.closed = True
        self.driver_when = math.inf
        for _, _, timer in self.near:
            _release(timer)
        self.near.clear()
        # Dropping each entry's payload breaks the handle -> entry -> handle cycle, so the
        # handles go now rather than at the next garbage collection.
        for entry in self.wheel.remove_all():
            assert entry.payload is not None  # a pending entry holds its handle
            _release(entry.payload)
            entry.payload = None


def call_later(
    loop: Any,
    delay: float,
    callback: Callable[[Unpack[_Ts]], object],
    *args: *_Ts,
    context: contextvars.Context | None = None,
) -> asyncio.TimerHandle:
    """asyncio's ``call_later``: on the wheel if ``delay >= min_delay``, in the near queue if
    shorter, on the base loop if further than ``far_delay``, infinite or NaN.

    A bool is taken as the int it is (1 or 0), as asyncio and uvloop take it. A delay that is
    not an int or a float (a Fraction, a numpy scalar) is added to the clock exactly, and the
    sum rounded up: the callback never runs before ``loop.time() + delay``.
    """
    if delay is None:
        raise TypeError("delay must not be None")
    if type(delay) is bool:
        delay = int(delay)
    core: LoopCore = loop._core
    now = core.clock()
    when = now + delay
    # Written so that NaN fails the test and goes to the base loop, as asyncio accepts it.
    if -core.far_delay <= delay <= core.far_delay and when < core.latest_deadline:
        deadline = when if type(delay) is float else deadline_after(now, delay)
        on_wheel = delay >= core.min_delay
        return core.schedule(now, when, deadline, on_wheel, callback, args, context)
    return _on_base(loop, when, delay, callback, args, context)


def call_at(
    loop: Any,
    when: float,
    callback: Callable[[Unpack[_Ts]], object],
    *args: *_Ts,
    context: contextvars.Context | None = None,
) -> asyncio.TimerHandle:
    """asyncio's ``call_at``, routed as :func:`call_later` routes ``when - time()``.

    A bool is taken as the int it is. A ``when`` that is not an int or a float (a Fraction, a
    numpy scalar) is rounded up to a float: the callback never runs before ``when``.
    """
    if when is None:
        raise TypeError("when cannot be None")
    if type(when) is bool:
        when = int(when)
    core: LoopCore = loop._core
    now = core.clock()
    delay = when - now
    if -core.far_delay <= delay <= core.far_delay and when < core.latest_deadline:
        deadline = when if type(when) is float else check_deadline(when, "when")
        on_wheel = delay >= core.min_delay
        return core.schedule(now, when, deadline, on_wheel, callback, args, context)
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
