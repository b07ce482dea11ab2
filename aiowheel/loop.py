"""The wheel-backed event loop: asyncio's own loop, or uvloop, with its timers on a wheel.

This module owns one thing: event loop classes whose ``call_later`` / ``call_at`` file timers on a
:class:`~aiowheel.wheel.HierarchicalWheel` instead of the loop's binary heap, so that existing
asyncio code (``asyncio.sleep``, ``asyncio.timeout``, ``asyncio.wait_for``, websockets' pings,
aiohttp's timeouts -- everything that calls ``loop.call_later`` / ``loop.call_at``) gets the
wheel's O(1) cancellation, which frees a timer at once, and firing without heap sifts, without
being rewritten. It imports only the wheel (from :mod:`aiowheel._impl`: the compiled one if
built) and the checks of :mod:`aiowheel._checks`: the loop *is* the driver, so it needs none of
:mod:`aiowheel.timer`'s machinery. The wheel tells it, on each cancellation, whether its next
deadline may have moved (``HierarchicalWheel.remove_entry``).

Entry points: :func:`new_event_loop`, :func:`loop_factory` (for ``asyncio.Runner`` and anyio),
:func:`run` (like ``asyncio.run``); the classes :class:`WheelEventLoop` (asyncio's default loop
plus the wheel) and, built lazily when uvloop is asked for, a ``WheelUVLoop`` (``uvloop.Loop``
plus the wheel); :class:`WheelLoop` is what both have in common.

Routing. A timer whose delay (``when - loop.time()`` at the call) is at least ``min_delay`` goes
on the wheel and its handle is this module's :class:`TimerHandle`, a subclass of
``asyncio.TimerHandle``. Every other timer goes to the base loop unchanged and gets the base
loop's own handle:

* shorter than ``min_delay`` (default ``4 * tick``): rounding a deadline up to a whole tick would
  add up to 25 % or more to such a delay, and short timers are almost all sleeps and back-offs
  that fire, so they leave the heap quickly anyway. The timers that pile up in a heap -- long
  timeouts that are almost always cancelled -- are the ones the wheel is for;
* further away than :data:`FAR_DELAY` (100 years, uvloop's own cap), beyond the wheel's range
  (``2**50`` ticks from the clock's zero: only reachable with a tiny ``tick``), infinite or
  NaN: they will never fire, and on a wheel they would only add levels.

Driving. The wheel is advanced from inside the loop's own iteration by one *driver*: a single
ordinary timer on the base loop, armed for the wheel's ``next_deadline()`` (its earliest
non-empty bucket). The base loop therefore sleeps until the earlier of its own next timer and the
wheel's next bucket, with no task per timer and no wakeup while nothing on the wheel is due. The
driver is re-armed only when that can change: a new timer is due before it (a later one may sit
in a higher-level bucket that expires earlier, but the driver's pass cascades every bucket
expired by then, so it is still on time), a cancellation empties a bucket (the wheel emptied
disarms it), or the driver has run. When it runs it advances the wheel to ``loop.time()`` -- the
actual time, never the time it was armed for, since asyncio may run a timer up to
``clock_resolution`` early and uvloop up to a millisecond early -- and hands the due handles over
in (deadline, scheduling order):

* on the selector loop by appending them to the loop's ready queue (``_ready``), so they run in
  the next iteration exactly like ``call_soon`` callbacks: exceptions go to the exception
  handler, debug mode times each one and logs slow callbacks, and if ``stop()`` takes effect
  first they run when the loop runs again. This relies on ``_ready`` and the base ``call_at``
  only, which have been stable since Python 3.4, rather than on overriding ``_run_once``, which
  changes between Python versions;
* on uvloop, whose ready queue is not reachable from Python, by running them from the driver
  callback, in order, skipping any that an earlier callback in the batch cancelled. In debug mode
  each is timed and a slow one is logged with asyncio's message. If a callback raises
  ``SystemExit`` or ``KeyboardInterrupt``, the rest of the batch runs at the loop's next pass.

Timers scheduled while a batch runs are never part of that batch; they run in a later pass.

If the wheel's clock lags the loop's by more than level 0's span when a timer is added (an idle
wheel, or one holding only far timers), it is first moved up to ``loop.time()`` -- only when
nothing on it is due, so this never fires anything -- so that a near timer lands on level 0
rather than cascading down through several extra driver passes.

Guarantees, compared with asyncio's:

* **Never early**, for every wheel timer: its callback runs only once ``loop.time() >=
  handle.when()``. (asyncio runs a timer up to ``clock_resolution`` early, uvloop up to about a
  millisecond early.) The price is lateness of up to one ``tick`` plus the base loop's own wakeup
  granularity (1 ms for epoll and for uvloop's clock). Timers routed to the base loop keep the
  base loop's behaviour.
* **Total order** among wheel timers: by deadline, equal deadlines in scheduling order. asyncio
  leaves equal deadlines unordered. There is no order *between* a wheel timer and a base-loop
  timer due in the same iteration: on the selector loop the wheel timer runs one iteration later.
* **Cancellation frees at once**: ``cancel()`` takes the timer off the wheel in O(1), so the
  handle, its callback and its context are released immediately; asyncio keeps cancelled handles
  in its heap until they reach the top or make up half of it.
* ``loop.time()``, ``call_soon``, I/O, debug mode and the exception handler are the base loop's.
* Closing the loop drops its pending wheel timers, as asyncio drops its heap (uvloop cancels its
  own): the wheel is emptied and no reference cycle is left behind.

Not thread-safe, like every asyncio loop: call ``call_later`` / ``call_at`` / ``cancel`` from the
loop's thread (``call_soon_threadsafe`` is the way in from other threads).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import math
import selectors
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, SupportsFloat, SupportsIndex, TypeVar, TypeVarTuple, Unpack

from aiowheel._checks import check_deadline, check_length, deadline_after
from aiowheel._impl import Entry, HierarchicalWheel

__all__ = [
    "FAR_DELAY",
    "TimerHandle",
    "WheelEventLoop",
    "WheelLoop",
    "WheelStats",
    "loop_factory",
    "new_event_loop",
    "new_uvloop_event_loop",
    "run",
]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

#: Timers further away than this (seconds) stay on the base loop: 100 years, uvloop's own cap.
FAR_DELAY = 100 * 365 * 24 * 3600.0

# HierarchicalWheel refuses deadlines 2**52 ticks or more from zero; stay well inside that.
_WHEEL_TICKS = 2**50

# Default min_delay, in ticks: below 4 ticks, rounding up to a tick would add >= 25 %.
_MIN_DELAY_TICKS = 4

# asyncio's own logger: where its loops report slow callbacks.
_logger = logging.getLogger("asyncio")

if sys.platform == "win32":  # pragma: no cover - asyncio's default loop there is the Proactor
    _BaseLoop = asyncio.ProactorEventLoop
else:
    _BaseLoop = asyncio.SelectorEventLoop


class TimerHandle(asyncio.TimerHandle):
    """The handle of a timer on the wheel: an ``asyncio.TimerHandle`` in every respect.

    ``when()``, ``cancel()``, ``cancelled()``, ordering, hashing and ``repr`` are asyncio's own.
    ``cancel()`` reaches the loop through ``loop._timer_handle_cancelled``, as asyncio's does,
    and the loop takes the timer off the wheel there.
    """

    __slots__ = ("_entry",)

    # The timer's place on the wheel; None once cancelled. Inert (not pending) once it fired.
    _entry: Entry[TimerHandle] | None


class WheelStats(NamedTuple):
    """Counters of a :class:`WheelLoop`, since it was created (``pending`` and ``levels``: now)."""

    #: Timers filed on the wheel.
    wheel_timers: int
    #: Timers left to the base loop: shorter than ``min_delay``, beyond ``FAR_DELAY`` or the
    #: wheel's range, or NaN.
    base_timers: int
    #: Timers on the wheel now.
    pending: int
    #: Wheel timers cancelled before they were due (each taken off the wheel at once).
    cancelled: int
    #: Wheel timers found due and handed over to run (a later cancel still stops them).
    fired: int
    #: Times the driver ran (each advanced the wheel once).
    driver_wakeups: int
    #: Levels the wheel has grown so far.
    levels: int


def _resolve_min_delay(min_delay: SupportsFloat | None, tick: float) -> float:
    """``min_delay``, or its default ``4 * tick`` (``tick`` is the wheel's), checked to be a
    finite real number >= 0, as a float."""
    if min_delay is None:
        return float(_MIN_DELAY_TICKS * tick)
    return float(check_length(min_delay, "min_delay", zero_ok=True, optional=True))


class WheelLoop(asyncio.AbstractEventLoop):
    """What every wheel-backed loop adds to its base loop; not instantiated on its own.

    A concrete class puts this first in its bases, before the base loop, calls
    :meth:`_init_wheel` once the base loop is set up, and provides the hooks that differ between
    base loops: :meth:`_check_in_debug`, :meth:`_call_on_base`, :meth:`_base_timer_cancelled`,
    :meth:`_arm_driver` and :meth:`_dispatch`.
    """

    # The wheel; its payloads are the handles this loop returned.
    _wheel: HierarchicalWheel[TimerHandle]
    # Timers with a delay below this stay on the base loop.
    _min_delay: float
    # The base-loop timer that will advance the wheel, or None while the wheel is empty.
    _driver: asyncio.Handle | None
    # The time _driver is armed for, inf when it is not. No level-0 bucket expires before it;
    # a higher-level bucket may, and is cascaded when the driver runs (see _call_on_wheel).
    _driver_when: float
    # The context the driver runs in: empty, so that it keeps no caller's context alive.
    _driver_context: contextvars.Context
    # loop.time() of the last wheel.advance; the wheel's clock is at most one tick behind it.
    _advanced_to: float
    # How far the wheel's clock may lag before an add moves it up: level 0's span.
    _catch_up_after: float
    # Deadlines from here on are beyond what the wheel takes (with a tiny tick, the loop's
    # clock plus FAR_DELAY can be); they go to the base loop like far timers.
    _latest_deadline: float
    _wheel_timers: int
    _base_timers: int
    _cancelled_timers: int
    _fired_timers: int
    _driver_wakeups: int

    def _init_wheel(
        self,
        *,
        tick: SupportsFloat = 0.001,
        wheel_size: SupportsIndex = 64,
        min_delay: SupportsFloat | None = None,
    ) -> None:
        """Set up the wheel; called by the concrete class once the base loop is initialised
        (its ``time()`` must work)."""
        wheel: HierarchicalWheel[TimerHandle] = HierarchicalWheel(
            tick, wheel_size, start=self.time()
        )
        self._wheel = wheel
        self._min_delay = _resolve_min_delay(min_delay, wheel.tick)
        self._driver = None
        self._driver_when = math.inf
        self._driver_context = contextvars.Context()
        self._advanced_to = self.time()
        self._catch_up_after = wheel.wheel_size * wheel.tick
        self._latest_deadline = _WHEEL_TICKS * wheel.tick
        self._wheel_timers = 0
        self._base_timers = 0
        self._cancelled_timers = 0
        self._fired_timers = 0
        self._driver_wakeups = 0

    # -- the asyncio API --------------------------------------------------------------------

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """asyncio's ``call_later``, with the timer on the wheel if ``delay >= min_delay``.

        On the wheel, a delay that is not an int or a float (a Fraction, a numpy scalar) is
        added to the clock exactly, and the sum rounded up: the callback never runs before
        ``loop.time() + delay``.
        """
        if delay is None:
            raise TypeError("delay must not be None")
        now = self.time()
        when = now + delay
        # Written so that NaN fails the test and goes to the base loop, as asyncio accepts it.
        if self._min_delay <= delay <= FAR_DELAY and when < self._latest_deadline:
            deadline = when if type(delay) is float else deadline_after(now, delay)
            timer: asyncio.TimerHandle = self._call_on_wheel(
                now, when, deadline, callback, args, context=context
            )
        else:
            timer = self._call_on_base(when, delay, callback, args, context)
        # Drop this frame and the _call_on_* frame: the traceback ends at the caller.
        traceback = timer._source_traceback  # type: ignore[attr-defined]  # private in typeshed
        if traceback:
            del traceback[-2:]
        return timer

    def call_at(
        self,
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
        now = self.time()
        delay = when - now
        if self._min_delay <= delay <= FAR_DELAY and when < self._latest_deadline:
            deadline = when if type(when) is float else check_deadline(when, "when")
            timer: asyncio.TimerHandle = self._call_on_wheel(
                now, when, deadline, callback, args, context=context
            )
        else:
            timer = self._call_on_base(when, delay, callback, args, context)
        traceback = timer._source_traceback  # type: ignore[attr-defined]  # private in typeshed
        if traceback:
            del traceback[-2:]
        return timer

    def close(self) -> None:
        """Close the base loop, then empty the wheel: pending timers are dropped, not run."""
        super().close()  # the base loop's: next in the MRO
        self._driver = None
        self._driver_when = math.inf
        # Dropping each entry's payload breaks the handle -> entry -> handle cycle, so the
        # handles go now rather than at the next garbage collection.
        for entry in self._wheel.remove_all():
            entry.payload = None

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        """Called by ``asyncio.TimerHandle.cancel``: take a wheel timer off the wheel at once.

        Any other handle is the base loop's: see :meth:`_base_timer_cancelled`.
        """
        if not isinstance(handle, TimerHandle):
            self._base_timer_cancelled(handle)
            return
        entry = handle._entry
        if entry is None:
            return
        handle._entry = None
        emptied = self._wheel.remove_entry(entry)
        if emptied is None:  # it had fired already
            return
        self._cancelled_timers += 1
        if emptied:
            # The last entry of its bucket: that may have been the bucket the driver is armed
            # for. Any other cancellation leaves the next deadline where it was.
            self._rearm()

    def wheel_stats(self) -> WheelStats:
        """Counters for tests and observability; see :class:`WheelStats`."""
        return WheelStats(
            wheel_timers=self._wheel_timers,
            base_timers=self._base_timers,
            pending=len(self._wheel),
            cancelled=self._cancelled_timers,
            fired=self._fired_timers,
            driver_wakeups=self._driver_wakeups,
            levels=self._wheel.levels,
        )

    @property
    def wheel(self) -> HierarchicalWheel[TimerHandle]:
        """The wheel itself, for inspection; changing it bypasses the loop's bookkeeping."""
        return self._wheel

    @property
    def min_delay(self) -> float:
        """Timers with a shorter delay stay on the base loop."""
        return self._min_delay

    # -- scheduling -------------------------------------------------------------------------

    def _call_on_wheel(
        self,
        now: float,
        when: float,
        deadline: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        *,
        context: contextvars.Context | None,
    ) -> TimerHandle:
        """File a timer for ``when`` (``deadline`` is the same time as a float) on the wheel."""
        # The checks asyncio's call_at makes (the base loop makes them for its own timers).
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        if self.get_debug():
            self._check_in_debug(callback)
        timer = TimerHandle(when, callback, args, self, context)
        wheel = self._wheel
        if now - self._advanced_to >= self._catch_up_after:
            next_deadline = wheel.next_deadline()
            if next_deadline is None or next_deadline > now:
                # Nothing is due, so this advance returns nothing: it only moves the clock.
                wheel.advance(now)
                self._advanced_to = now
        # The routing keeps `deadline` finite and in the wheel's range: add's check is redundant.
        timer._entry = wheel.add_entry(Entry(deadline, timer))
        self._wheel_timers += 1
        if deadline < self._driver_when:
            # Only then can the driver be armed too late. A timer due at or after the driver
            # may sit in a higher-level bucket that expires earlier, but the driver's pass
            # cascades every bucket expired by then, so it still comes out on time.
            next_deadline = wheel.next_deadline()
            if next_deadline is not None and next_deadline < self._driver_when:
                self._arm(next_deadline)
        return timer

    # -- driving ----------------------------------------------------------------------------

    def _arm(self, deadline: float) -> None:
        """Point the driver at ``deadline``, replacing any driver armed for another time."""
        driver = self._driver
        if driver is not None:
            driver.cancel()
        self._driver = self._arm_driver(deadline)
        self._driver_when = deadline

    def _rearm(self) -> None:
        """Point the driver at the wheel's next deadline, or disarm it if the wheel is empty."""
        deadline = self._wheel.next_deadline()
        if deadline is None:
            if self._driver is not None:
                self._driver.cancel()
                self._driver = None
                self._driver_when = math.inf
        elif deadline != self._driver_when:
            self._arm(deadline)

    def _on_wheel_due(self) -> None:
        """The driver: advance the wheel to now, re-arm, hand over what is due."""
        self._driver = None
        self._driver_when = math.inf
        self._driver_wakeups += 1
        now = self.time()
        due = self._wheel.advance(now)
        self._advanced_to = now
        # Armed before anything runs, so that timers scheduled by the callbacks below can only
        # move the driver earlier, as they would at any other time.
        self._rearm()
        if due:
            self._fired_timers += len(due)
            self._dispatch(due)

    # -- hooks for the base loop ------------------------------------------------------------

    def _check_in_debug(self, callback: Callable[..., object]) -> None:
        """asyncio's debug-mode checks of ``call_at``: the loop's thread, a plain callable."""
        raise NotImplementedError

    def _base_timer_cancelled(self, handle: asyncio.TimerHandle) -> None:
        """An ``asyncio.TimerHandle`` of the base loop's own was cancelled; by default, nothing
        to do (uvloop's own handles never call back)."""

    def _call_on_base(
        self,
        when: float,
        delay: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> asyncio.TimerHandle:
        """Schedule a timer the base loop's own way."""
        raise NotImplementedError

    def _arm_driver(self, deadline: float) -> asyncio.Handle:
        """Schedule ``_on_wheel_due`` on the base loop, to run no earlier than ``deadline``."""
        raise NotImplementedError

    def _dispatch(self, due: list[TimerHandle]) -> None:
        """Run the handles in ``due`` in order, skipping cancelled ones, like ready callbacks."""
        raise NotImplementedError


class WheelEventLoop(WheelLoop, _BaseLoop):
    """asyncio's default event loop with its timers on a hierarchical wheel.

    A ``SelectorEventLoop`` (the Proactor on Windows); ``selector`` is passed to it.

    Args:
        tick: width of a level-0 slot, in seconds; the most a wheel timer can be late by, on
            top of the base loop's own wakeup granularity.
        wheel_size: slots per level.
        min_delay: timers with a shorter delay stay on the base loop's heap; default
            ``4 * tick``.
    """

    def __init__(
        self,
        selector: selectors.BaseSelector | None = None,
        *,
        tick: SupportsFloat = 0.001,
        wheel_size: SupportsIndex = 64,
        min_delay: SupportsFloat | None = None,
    ) -> None:
        super().__init__(selector)
        try:
            self._init_wheel(tick=tick, wheel_size=wheel_size, min_delay=min_delay)
        except BaseException:
            # Bad options: close what the base loop opened, or it warns when collected.
            _BaseLoop.close(self)
            raise

    def _base_timer_cancelled(self, handle: asyncio.TimerHandle) -> None:
        # A timer on the heap (or the driver): asyncio counts cancelled ones to purge its heap.
        _BaseLoop._timer_handle_cancelled(self, handle)  # type: ignore[attr-defined]

    def _check_in_debug(self, callback: Callable[..., object]) -> None:
        # asyncio's own checks, so that messages and behaviour follow the running Python.
        self._check_thread()  # type: ignore[attr-defined]  # private in typeshed
        self._check_callback(callback, "call_at")  # type: ignore[attr-defined]

    def _call_on_base(
        self,
        when: float,
        delay: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> asyncio.TimerHandle:
        self._base_timers += 1
        return _BaseLoop.call_at(self, when, callback, *args, context=context)

    def _arm_driver(self, deadline: float) -> asyncio.Handle:
        return _BaseLoop.call_at(self, deadline, self._on_wheel_due, context=self._driver_context)

    def _dispatch(self, due: list[TimerHandle]) -> None:
        # Run next iteration, like call_soon callbacks (debug timing, exception handler); a
        # handle cancelled in the meantime is skipped by the loop itself.
        self._ready.extend(due)  # type: ignore[attr-defined]  # private in typeshed


def _uvloop_module() -> Any:
    try:
        import uvloop  # optional: imported only when asked for
    except ImportError as exc:
        raise ImportError(
            "uvloop=True needs uvloop, which is not installed: pip install 'aiowheel[uvloop]'"
        ) from exc
    return uvloop


@functools.cache
def _uvloop_class() -> Callable[..., WheelLoop]:
    """Build the uvloop variant, importing uvloop on first use."""
    uvloop = _uvloop_module()
    base: type[asyncio.AbstractEventLoop] = uvloop.Loop

    class WheelUVLoop(WheelLoop, base):  # type: ignore[valid-type,misc]  # runtime base
        """``uvloop.Loop`` with its timers on a hierarchical wheel; see :class:`WheelEventLoop`."""

        # Handles found due but not run yet: only non-empty while a batch runs, or after a
        # callback raised SystemExit / KeyboardInterrupt out of the middle of one.
        _batch: deque[TimerHandle]

        def __init__(
            self,
            *,
            tick: SupportsFloat = 0.001,
            wheel_size: SupportsIndex = 64,
            min_delay: SupportsFloat | None = None,
        ) -> None:
            super().__init__()
            self._batch = deque()
            try:
                self._init_wheel(tick=tick, wheel_size=wheel_size, min_delay=min_delay)
            except BaseException:
                # Bad options: close the libuv loop, or uvloop logs an error when collected.
                base.close(self)
                raise

        def close(self) -> None:
            super().close()
            self._batch.clear()

        def _check_in_debug(self, callback: Callable[..., object]) -> None:
            # uvloop makes neither check; these are asyncio's, with asyncio's messages.
            if self.is_running() and asyncio.events._get_running_loop() is not self:
                raise RuntimeError(
                    "Non-thread-safe operation invoked on an event loop other than the current one"
                )
            # inspect's test: asyncio.iscoroutinefunction is deprecated from Python 3.14 on.
            if asyncio.iscoroutine(callback) or inspect.iscoroutinefunction(callback):
                raise TypeError("coroutines cannot be used with call_at()")
            if not callable(callback):
                raise TypeError(f"a callable object was expected by call_at(), got {callback!r}")

        def _call_on_base(
            self,
            when: float,
            delay: float,
            callback: Callable[..., object],
            args: tuple[Any, ...],
            context: contextvars.Context | None,
        ) -> asyncio.TimerHandle:
            if self.get_debug() and not self.is_closed():
                self._check_in_debug(callback)  # uvloop itself checks only the thread
            self._base_timers += 1
            # uvloop's call_at calls self.call_later, which is ours: go to its call_later.
            handle: asyncio.TimerHandle = base.call_later(
                self, delay, callback, *args, context=context
            )
            return handle

        def _arm_driver(self, deadline: float) -> asyncio.Handle:
            # uvloop counts whole milliseconds and rounds to the nearest; round up instead, so
            # that it does not fire before the bucket is due (it would only be re-armed).
            delay = math.ceil((deadline - self.time()) * 1000) / 1000
            return base.call_later(
                self, max(delay, 0.0), self._on_wheel_due, context=self._driver_context
            )

        def _dispatch(self, due: list[TimerHandle]) -> None:
            self._batch.extend(due)
            self._run_batch()

        def _run_batch(self) -> None:
            batch = self._batch
            debug = self.get_debug()
            try:
                while batch:
                    timer = batch.popleft()
                    if timer._cancelled:
                        continue
                    if debug:
                        started = time.monotonic()
                        timer._run()
                        took = time.monotonic() - started
                        if took >= self.slow_callback_duration:
                            _logger.warning("Executing %r took %.3f seconds", timer, took)
                    else:
                        timer._run()
            finally:
                if batch:
                    # A callback raised SystemExit or KeyboardInterrupt: the rest run next pass.
                    base.call_soon(self, self._run_batch, context=self._driver_context)

    return WheelUVLoop


def new_event_loop(
    *,
    uvloop: bool = False,
    tick: SupportsFloat = 0.001,
    wheel_size: SupportsIndex = 64,
    min_delay: SupportsFloat | None = None,
) -> WheelLoop:
    """A new event loop whose ``call_later`` / ``call_at`` put timers on a hierarchical wheel.

    Args:
        uvloop: subclass ``uvloop.Loop`` instead of asyncio's default loop (needs
            ``pip install 'aiowheel[uvloop]'``).
        tick: width of a level-0 slot in seconds, a finite real number > 0: wheel timers fire
            up to one tick late (never early).
        wheel_size: slots per level, a whole number from 2 to ``2**40``.
        min_delay: timers with a delay below this (seconds, a finite real number >= 0) stay on
            the base loop's own timers; None means ``4 * tick``.

    Raises:
        TypeError, ValueError: for a bad ``tick``, ``wheel_size`` or ``min_delay``, naming it.
        ImportError: ``uvloop=True`` without uvloop installed.
    """
    if uvloop:
        return _uvloop_class()(tick=tick, wheel_size=wheel_size, min_delay=min_delay)
    return WheelEventLoop(tick=tick, wheel_size=wheel_size, min_delay=min_delay)


def new_uvloop_event_loop() -> WheelLoop:
    """A new wheel-backed loop on uvloop, with the defaults: ``new_event_loop(uvloop=True)``.

    A zero-argument loop factory under a name that can be typed where a ``module:callable`` is
    expected, as in ``uvicorn app:app --loop aiowheel.loop:new_uvloop_event_loop``, the uvloop
    twin of ``--loop aiowheel.loop:new_event_loop``.

    Raises:
        ImportError: uvloop is not installed (naming the extra that installs it).
    """
    try:
        return new_event_loop(uvloop=True)
    except ImportError as exc:
        raise ImportError(
            "new_uvloop_event_loop() runs on uvloop, which is not installed: "
            "pip install 'aiowheel[uvloop]' (or use new_event_loop, on asyncio's own loop)"
        ) from exc


def loop_factory(
    *,
    uvloop: bool = False,
    tick: SupportsFloat = 0.001,
    wheel_size: SupportsIndex = 64,
    min_delay: SupportsFloat | None = None,
) -> Callable[[], WheelLoop]:
    """A zero-argument loop factory for ``asyncio.Runner(loop_factory=...)`` and anyio's
    ``anyio.run(..., backend_options={"loop_factory": ...})``.

    The options are those of :func:`new_event_loop`, and are checked now rather than when the
    first loop is made.
    """
    wheel: HierarchicalWheel[Any] = HierarchicalWheel(tick, wheel_size)  # checks them
    _resolve_min_delay(min_delay, wheel.tick)
    if uvloop:
        _uvloop_class()
    return functools.partial(
        new_event_loop, uvloop=uvloop, tick=tick, wheel_size=wheel_size, min_delay=min_delay
    )


def run(
    main: Coroutine[Any, Any, _T],
    *,
    uvloop: bool = False,
    debug: bool | None = None,
    tick: SupportsFloat = 0.001,
    wheel_size: SupportsIndex = 64,
    min_delay: SupportsFloat | None = None,
) -> _T:
    """Run ``main`` on a new wheel-backed loop and return its result, like ``asyncio.run``.

    The loop is made by :func:`new_event_loop` with the given options and closed afterwards;
    ``debug`` is ``asyncio.run``'s.
    """
    factory = loop_factory(uvloop=uvloop, tick=tick, wheel_size=wheel_size, min_delay=min_delay)
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)
