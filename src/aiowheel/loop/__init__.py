"""The wheel-backed event loop: asyncio's own loop, or uvloop, with its timers on a wheel.

This package owns one thing: event loop classes whose ``call_later`` / ``call_at`` file timers on a
:class:`~aiowheel.wheel.HierarchicalWheel` instead of the loop's binary heap, so that existing
asyncio code (``asyncio.sleep``, ``asyncio.timeout``, ``asyncio.wait_for``, websockets' pings,
aiohttp's timeouts -- everything that calls ``loop.call_later`` / ``loop.call_at``) gets the
wheel's O(1) cancellation, which frees a timer at once, and firing without heap sifts, without
being rewritten. It imports only the wheel and the loop core (from :mod:`aiowheel._impl`: the
compiled ones if built) and the checks of :mod:`aiowheel._checks`: the loop *is* the driver, so
it needs none of :mod:`aiowheel.timer`'s machinery. The wheel tells it, on each cancellation,
whether its next deadline may have moved (``HierarchicalWheel.remove_entry``; in C, its
``_unfile``).

Entry points: :func:`new_event_loop`, :func:`new_uvloop_event_loop`, :func:`loop_factory` (for
``asyncio.Runner`` and anyio), :func:`run` (like ``asyncio.run``); the classes
:class:`WheelEventLoop` (asyncio's default loop plus the wheel) and, imported only when uvloop is
asked for, a ``WheelUVLoop`` (``uvloop.Loop`` plus the wheel); :class:`WheelLoop` is what both
have in common.

One module per base loop, as anyio keeps one per backend: ``_wheelloop`` holds what every base
shares (:class:`WheelLoop`, the routing, the driver), ``_selector`` the selector base and
``_uvloop`` the uvloop base, which alone imports uvloop. This module chooses between them and is
the public API. The wheel timers themselves -- their handle, filing, cancelling, advancing -- are
a ``LoopCore`` from :mod:`aiowheel._impl`: compiled if the extension is built, else the pure
specification :mod:`aiowheel._loopcore`.

Routing. A timer whose delay (``when - loop.time()`` at the call) is at least ``min_delay`` goes
on the wheel; a shorter one (an overdue one too) goes straight into the loop core's *near queue*,
a small binary heap ordered by (deadline, scheduling order). Both get a
:class:`LoopTimerHandle`: with the compiled core a C object with ``asyncio.TimerHandle``'s API
(like uvloop's handles, not an instance of it), with the pure one a subclass of
``asyncio.TimerHandle``. Only timers that will never fire stay on the base loop, with its own
handle: further away than :data:`FAR_DELAY` (100 years, uvloop's own cap; or as far overdue),
beyond the wheel's range (``2**50`` ticks from the clock's zero: only reachable with a tiny
``tick``), infinite or NaN; on a wheel they would only add levels.

Short timers are nearly all sleeps and back-offs that fire soon; the timers that pile up --
long timeouts that are almost always cancelled -- are the ones the wheel is for.

Driving. Every timer the core holds is run by one *driver*: a single ordinary timer on the base
loop, armed for ``LoopCore.next_due()`` -- the near queue's earliest deadline, or a tick before
the wheel's next non-empty bucket expires (no deadline in that bucket is earlier), whichever
comes first. The base loop therefore sleeps until then, with no task per timer and no wakeup
while nothing is due. The driver is re-armed only when that can change: a new timer is due
before it, a cancellation empties a bucket (cancelling the last timer disarms it), or it has run.
When it runs, at the actual ``loop.time()`` (never the time it was armed for), the core moves
every wheel timer that could be due within two ticks into the near queue, takes out of the queue
exactly those whose deadline ``loop.time()`` has reached, and the driver runs them in (deadline,
scheduling order), in that same loop pass, skipping any that an earlier one cancelled. Each runs
like a ready callback: an exception goes to the exception handler; in debug mode each is timed
and a slow one is logged with asyncio's message (the base loop may also log the driver's pass
that ran it). If a callback raises ``SystemExit`` or ``KeyboardInterrupt``, the rest of the
batch runs at the loop's next pass.

So a timer runs in the pass in which ``loop.time()`` reaches its ``when()``, as asyncio's do, and
the wheel's tick only decides how timers are stored, never when they run. Timers scheduled while
a batch runs are never part of that batch; they run in a later pass, as in asyncio. A timer alone
in its tick costs one extra driver pass, at the start of its tick, to find its exact deadline.

If the wheel's clock lags the loop's by more than level 0's span when a timer is added (an idle
wheel, or one holding only far timers), it is first moved up to ``loop.time()``, so that a near
timer lands on level 0 rather than cascading down through several extra driver passes.

Guarantees, compared with asyncio's:

* **Never early**, for every timer the loop hands out: a callback runs only once ``loop.time() >=
  when``. (asyncio runs a timer up to ``clock_resolution`` early, uvloop up to half a
  millisecond early, as it rounds delays to the nearest millisecond.) On uvloop the driver is
  armed for the first millisecond of uvloop's clock at or after its deadline.
* **asyncio's moment**: a timer runs in the first pass whose ``loop.time()`` is at or after its
  ``when()``, also with a clock frozen or set by hand; late only by the base loop's own wakeup
  granularity (1 ms for epoll and for uvloop's clock).
* **One order**: due timers run by deadline, equal deadlines in scheduling order, whether they
  were on the wheel or not, also after a stall; asyncio leaves equal deadlines unordered, and
  uvloop can run a zero-delay timer scheduled during a stall before an earlier one.
* **Cancellation frees at once** for a wheel timer: ``cancel()`` takes it off the wheel in O(1),
  so the handle, its callback and its context are released immediately; a timer in the near
  queue releases its callback and arguments at once and leaves the queue when it reaches the
  top. asyncio keeps cancelled handles in its heap until they reach the top or make up half of
  it.
* ``loop.time()``, ``call_soon``, I/O, debug mode and the exception handler are the base loop's.
* Closing the loop drops its pending timers, as asyncio drops its heap (uvloop cancels its own):
  the wheel and the near queue are emptied and no reference cycle is left behind.

Not thread-safe, like every asyncio loop: call ``call_later`` / ``call_at`` / ``cancel`` from the
loop's thread (``call_soon_threadsafe`` is the way in from other threads).
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, SupportsFloat, SupportsIndex, TypeVar

from aiowheel._impl import HierarchicalWheel
from aiowheel.loop._selector import WheelEventLoop
from aiowheel.loop._wheelloop import (
    FAR_DELAY,
    LoopTimerHandle,
    WheelLoop,
    WheelStats,
    resolve_min_delay,
)

__all__ = [
    "FAR_DELAY",
    "LoopFactory",
    "LoopTimerHandle",
    "WheelEventLoop",
    "WheelLoop",
    "WheelStats",
    "loop_factory",
    "new_event_loop",
    "new_uvloop_event_loop",
    "run",
]

_T = TypeVar("_T")

# The public classes are documented, and named in annotations, as this package's. (Not the
# handle: it is aiowheel._impl's, and the compiled one's type cannot be changed.)
for _public in (WheelEventLoop, WheelLoop, WheelStats):
    _public.__module__ = __name__
del _public


def __getattr__(name: str) -> object:
    """``TimerHandle``, the handle's name before 0.2: an alias of :class:`LoopTimerHandle` for
    one release, with a DeprecationWarning (the Timer's handle is ``aiowheel.TimerHandle``; two
    public classes of one name made every mention ambiguous)."""
    if name == "TimerHandle":
        warnings.warn(
            "aiowheel.loop.TimerHandle is renamed aiowheel.loop.LoopTimerHandle; "
            "the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return LoopTimerHandle
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _uvloop_class() -> Callable[..., WheelLoop]:
    """The uvloop variant, importing uvloop (and :mod:`aiowheel.loop._uvloop`) on first use."""
    try:
        import uvloop  # noqa: F401  # optional: imported only when asked for
    except ImportError as exc:
        raise ImportError(
            "uvloop=True needs uvloop, which is not installed: pip install 'aiowheel[uvloop]'"
        ) from exc
    from aiowheel.loop._uvloop import WheelUVLoop

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
        tick: width of a level-0 slot in seconds, a finite real number > 0. It decides how
            timers are stored, not when they run: each runs once ``loop.time()`` reaches its
            ``when()``, never early.
        wheel_size: slots per level, a whole number from 2 to ``2**40``.
        min_delay: timers with a delay below this (seconds, a finite real number >= 0) skip
            the wheel, into the loop's queue of imminent timers; None means ``4 * tick``.

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


class LoopFactory:
    """A zero-argument loop factory with the options of :func:`new_event_loop` bound: what
    :func:`loop_factory` returns. Calling it makes a new :class:`WheelLoop`.

    It is not itself an event loop. Where a loop factory is *named* rather than built -- uvicorn's
    ``--loop aiowheel.loop:new_event_loop``, for instance, which calls the name with no argument
    and expects a loop back -- name :func:`new_event_loop` or :func:`new_uvloop_event_loop`. A
    ``LoopFactory`` used where a loop was expected raises an AttributeError that says so, rather
    than one about a missing ``run_until_complete``.
    """

    __slots__ = ("_options",)

    def __init__(self, **options: Any) -> None:
        self._options = options

    def __call__(self) -> WheelLoop:
        return new_event_loop(**self._options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocols probed by copy, pickle, inspect...: the usual error
            raise AttributeError(name)
        raise AttributeError(
            f"{self!r} is a loop factory, not an event loop (it has no {name!r}): call it to make "
            "a loop. Where a zero-argument factory is named, as in uvicorn's --loop, name "
            "aiowheel.loop:new_event_loop or aiowheel.loop:new_uvloop_event_loop instead of "
            "loop_factory, or a LoopFactory made at module level: "
            "my_app:loop_factory = aiowheel.loop.loop_factory(tick=0.005)"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoopFactory):
            return NotImplemented
        return self._options == other._options

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._options.items())))

    def __repr__(self) -> str:
        options = ", ".join(f"{name}={value!r}" for name, value in self._options.items())
        return f"aiowheel.loop.loop_factory({options})"


def loop_factory(
    *,
    uvloop: bool = False,
    tick: SupportsFloat = 0.001,
    wheel_size: SupportsIndex = 64,
    min_delay: SupportsFloat | None = None,
) -> LoopFactory:
    """A zero-argument loop factory for ``asyncio.Runner(loop_factory=...)`` and anyio's
    ``anyio.run(..., backend_options={"loop_factory": ...})``.

    The options are those of :func:`new_event_loop`, and are checked now rather than when the
    first loop is made. The factory is a :class:`LoopFactory`, not a loop: to name a loop factory
    in a string (uvicorn's ``--loop module:attribute``), name :func:`new_event_loop`,
    :func:`new_uvloop_event_loop`, or a ``LoopFactory`` made at module level.
    """
    wheel: HierarchicalWheel[Any] = HierarchicalWheel(tick, wheel_size)  # checks them
    resolve_min_delay(min_delay, wheel.tick)
    if uvloop:
        _uvloop_class()
    return LoopFactory(uvloop=uvloop, tick=tick, wheel_size=wheel_size, min_delay=min_delay)


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
