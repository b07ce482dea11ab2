"""What every wheel-backed loop shares, whatever its base loop: :class:`WheelLoop` (the driver
that advances the wheel, the statistics, closing) and :class:`WheelStats`. The wheel timers
themselves -- routing, handles (:class:`LoopTimerHandle`), filing, cancelling -- are a loop core
of :mod:`aiowheel._impl` that the loop holds (compiled if built, or the one ``implementation=``
names), made with the hooks below and reached through its documented methods only.

The base-loop specific parts are hooks (see :class:`WheelLoop`), filled in by
:mod:`aiowheel.loop._selector` and :mod:`aiowheel.loop._uvloop`. The behaviour and guarantees are
described in :mod:`aiowheel.loop`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, SupportsFloat, SupportsIndex

from aiowheel._checks import MAX_WHEEL_SIZE, check_count, check_length
from aiowheel._contract import LoopCore
from aiowheel._defaults import DEFAULT_TICK, DEFAULT_WHEEL_SIZE
from aiowheel._impl import ClockWatch, HierarchicalWheel, LoopTimerHandle, implementation_named

__all__ = ["FAR_DELAY", "LoopTimerHandle", "WheelLoop", "WheelStats", "resolve_min_delay"]

#: Timers further away than this (seconds) stay on the base loop: 100 years, uvloop's own cap.
FAR_DELAY = 100 * 365 * 24 * 3600.0

# asyncio's own logger: where its loops report slow callbacks.
_logger = logging.getLogger("asyncio")

# Default min_delay, in ticks: below 4 ticks, rounding up to a tick would add >= 25 %.
_MIN_DELAY_TICKS = 4


@dataclass(frozen=True, slots=True)
class WheelStats:
    """A snapshot of a :class:`WheelLoop`'s counters, from ``loop.wheel_stats()``.

    The same kind of object as :class:`aiowheel.TimerStats`: the facts both count come first,
    with the same names and meaning (``pending``, ``fired``, ``cancelled``, ``driver_wakeups``,
    ``levels``); the rest is the loop's own. The loop's timers are those on the wheel and in its
    queue of imminent timers; those it leaves to the base loop are counted in ``base_timers``
    only.
    """

    pending: int
    """Timers waiting now, not cancelled."""
    fired: int
    """Timers run since the loop was made. Counted as the driver takes a batch of due timers
    out: one that an earlier timer of the same batch cancels is counted, though it does not run
    (the Timer counts only those it starts)."""
    cancelled: int
    """Timers cancelled before they ran, since the loop was made: on the wheel, counted at once
    (each taken off the wheel then); in the queue of imminent timers, once the driver drops
    them."""
    driver_wakeups: int
    """Times the driver woke to advance the wheel, since the loop was made."""
    levels: int
    """Levels the wheel has grown so far."""
    wheel_timers: int
    """Timers filed on the wheel since the loop was made."""
    base_timers: int
    """Timers not filed on the wheel since the loop was made: shorter than ``min_delay`` (kept in
    the loop's queue of imminent timers), or left to the base loop (beyond ``FAR_DELAY`` or the
    wheel's range, infinite or NaN)."""


def resolve_min_delay(min_delay: SupportsFloat | None, tick: float) -> float:
    """``min_delay``, or its default ``4 * tick`` (``tick`` is the wheel's), checked to be a
    finite real number >= 0, as a float."""
    if min_delay is None:
        return float(_MIN_DELAY_TICKS * tick)
    return float(check_length(min_delay, "min_delay", zero_ok=True, optional=True))


class WheelLoop(asyncio.AbstractEventLoop, ClockWatch):
    """What every wheel-backed loop adds to its base loop; not instantiated on its own.

    A concrete class puts this first in its bases, before the base loop, declares
    ``__slots__ = ("call_at", "call_later")`` (see :meth:`_init_wheel`), calls
    :meth:`_init_wheel` once the base loop is set up, and provides the hooks that differ between
    base loops: :meth:`_check_in_debug`, :meth:`_call_on_base`, :meth:`_arm_driver` and
    :meth:`_call_soon_on_base`.

    The wheel timers are the loop's *core*, a ``LoopCore`` of :mod:`aiowheel._impl` (the
    compiled one if built, or the one ``implementation`` names), which the loop holds: it hands
    the core the hooks it needs when it makes it, and its ``call_later`` / ``call_at`` are the
    core's, bound on the loop instance (for the compiled core, no Python frame runs for a
    timer). ``ClockWatch``, the selected implementation's, tells the core when ``time`` is set
    or deleted on the loop (a test patching its clock), so that the compiled core reads the
    clock as the loop's user sees it without looking ``loop.time`` up for every timer.
    """

    # The wheel's timers: the wheel, their handles and their bookkeeping.
    _core: LoopCore
    # The base-loop timer that will advance the wheel, or None while the wheel is empty; armed
    # for _core.driver_when.
    _driver: asyncio.Handle | None
    # The context the driver runs in: empty, so that it keeps no caller's context alive.
    _driver_context: contextvars.Context
    _base_timers: int
    # Timers found due but not run yet: only non-empty while the driver runs them, or after a
    # callback raised SystemExit / KeyboardInterrupt out of the middle of a batch.
    _batch: deque[LoopTimerHandle]

    def _init_wheel(
        self,
        *,
        tick: SupportsFloat = DEFAULT_TICK,
        wheel_size: SupportsIndex = DEFAULT_WHEEL_SIZE,
        min_delay: SupportsFloat | None = None,
        implementation: Literal["compiled", "pure"] | None = None,
    ) -> None:
        """Set up the wheel; called by the concrete class once the base loop is initialised
        (its ``time()`` must work). ``implementation`` names the loop core's: ``"compiled"``,
        ``"pure"``, or None for the one :mod:`aiowheel._impl` selected."""
        loop_core = implementation_named(implementation).loop.LoopCore
        # The wheel's own checks, and messages, before anything is made: the default min_delay
        # is a multiple of the tick as the wheel keeps it.
        tick = check_length(tick, "tick")
        check_count(wheel_size, "wheel_size", 2, MAX_WHEEL_SIZE)
        self._driver = None
        self._driver_context = contextvars.Context()
        self._base_timers = 0
        self._batch = deque()
        self._core = core_ = loop_core(
            self,
            tick,
            wheel_size,
            resolve_min_delay(min_delay, tick),
            FAR_DELAY,
            arm=self._arm,
            check_in_debug=self._check_in_debug,
            call_on_base=self._call_on_base,
        )
        # asyncio's call_later / call_at, routing each timer to the wheel or the base loop: the
        # core's, bound on the instance, where they come before the base loop's methods. In the
        # concrete class's slots, not in the instance's __dict__: the wheel-backed selector loop
        # already has 29 attributes there, and past 30 (CPython 3.11's limit of shared keys)
        # every attribute of the loop is looked up the slow way (5 % more instructions on
        # bench_loop's app workload).
        self.call_later = core_.call_later  # type: ignore[method-assign, assignment]
        self.call_at = core_.call_at  # type: ignore[method-assign, assignment]

    # -- the asyncio API --------------------------------------------------------------------

    def set_debug(self, enabled: bool) -> None:
        """The base loop's ``set_debug``; the wheel's timers follow it."""
        super().set_debug(enabled)  # the base loop's: next in the MRO
        core: LoopCore | None = getattr(self, "_core", None)  # None while the base loop starts
        if core is not None:
            core.debug = self.get_debug()

    def close(self) -> None:
        """Close the base loop, then empty the wheel: pending timers are dropped, not run."""
        super().close()  # the base loop's: next in the MRO
        self._driver = None
        self._batch.clear()
        self._core.close()

    def wheel_stats(self) -> WheelStats:
        """The loop's counters, as an immutable snapshot (:class:`WheelStats`); O(1)."""
        core = self._core
        return WheelStats(
            pending=core.pending(),
            fired=core.fired,
            cancelled=core.cancelled,
            driver_wakeups=core.driver_wakeups,
            levels=core.wheel.levels,
            wheel_timers=core.wheel_timers,
            base_timers=core.near_timers + self._base_timers,
        )

    @property
    def wheel(self) -> HierarchicalWheel[LoopTimerHandle]:
        """The wheel itself, for inspection; changing it bypasses the loop's bookkeeping."""
        wheel: HierarchicalWheel[LoopTimerHandle] = self._core.wheel
        return wheel

    @property
    def min_delay(self) -> float:
        """Timers with a shorter delay stay on the base loop."""
        min_delay: float = self._core.min_delay
        return min_delay

    # -- driving ----------------------------------------------------------------------------

    def _arm(self, deadline: float) -> None:
        """Point the driver at ``deadline`` (inf: disarm it), replacing any driver armed for
        another time; the core calls it (its ``arm``) when the time it needs changes."""
        driver = self._driver
        if driver is not None:
            driver.cancel()
        self._driver = self._arm_driver(deadline) if deadline != math.inf else None

    def _on_wheel_due(self) -> None:
        """The driver: take the timers due now, run them, in this same loop pass (the core has
        re-armed the driver before they run: timers they schedule run in a later pass)."""
        self._driver = None
        due = self._core.advance(self.time())
        if due:
            self._batch.extend(due)
            self._run_batch()

    def _run_batch(self) -> None:
        """Run the due timers of ``_batch`` in order, skipping cancelled ones, as the base loop
        runs ready callbacks: an exception goes to the exception handler (``_run``), and in
        debug mode a slow one is logged with asyncio's message."""
        batch = self._batch
        debug = self.get_debug()
        try:
            while batch:
                timer = batch.popleft()
                if timer._cancelled:
                    continue
                if debug:
                    # The loop's clock, as asyncio measures its callbacks (a virtual one too).
                    started = self.time()
                    timer._run()
                    took = self.time() - started
                    if took >= self.slow_callback_duration:
                        _logger.warning("Executing %r took %.3f seconds", timer, took)
                else:
                    timer._run()
        finally:
            if batch:
                # A callback raised SystemExit or KeyboardInterrupt: the rest run next pass.
                self._call_soon_on_base(self._run_batch, self._driver_context)

    # -- hooks for the base loop ------------------------------------------------------------

    def _check_in_debug(self, callback: Callable[..., object]) -> None:
        """asyncio's debug-mode checks of ``call_at``: the loop's thread, a plain callable."""
        raise NotImplementedError

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

    def _call_soon_on_base(
        self, callback: Callable[[], object], context: contextvars.Context
    ) -> asyncio.Handle:
        """The base loop's own ``call_soon``."""
        raise NotImplementedError
