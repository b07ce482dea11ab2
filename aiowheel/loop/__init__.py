"""The wheel-backed event loop: asyncio's own loop, or uvloop, with its timers on a wheel.

This package owns one thing: event loop classes whose ``call_later`` / ``call_at`` file timers on a
:class:`~aiowheel.HierarchicalWheel` instead of the loop's binary heap, so that existing
asyncio code (``asyncio.sleep``, ``asyncio.timeout``, ``asyncio.wait_for``, websockets' pings,
aiohttp's timeouts -- everything that calls ``loop.call_later`` / ``loop.call_at``) gets the
wheel's O(1) cancellation, which frees a timer at once, and firing without heap sifts, without
being rewritten. It imports only the wheel and the loop core (from :mod:`aiowheel._impl`: the
compiled ones if built) and the checks of :mod:`aiowheel._checks`: the loop *is* the driver, so
it needs none of :mod:`aiowheel.timer`'s machinery. The wheel tells it, on each cancellation,
whether its next deadline may have moved (``HierarchicalWheel.remove_entry``; in C, its
``_unfile``).

Entry points, one per task (the names asyncio and uvloop use):

* make a loop: :func:`new_event_loop` (asyncio's default loop plus the wheel) or
  :func:`new_uvloop_event_loop` (``uvloop.Loop`` plus the wheel), each with the wheel's options;
* run a main on one: :func:`run`, the wheel's ``asyncio.run`` in ``uvloop.run``'s shape
  (``loop_factory=new_uvloop_event_loop`` for uvloop underneath, the wheel's options as keywords);
  or ``asyncio.Runner(loop_factory=aiowheel.loop.new_event_loop)`` itself, with options bound by
  ``functools.partial``;
* ask a running loop: :class:`WheelLoop`, what every wheel-backed loop is an instance of
  (``wheel_stats()``, ``wheel``, ``min_delay``), and :class:`WheelStats`, its counters.

One module per base loop, as anyio keeps one per backend: ``_wheelloop`` holds what every base
shares (:class:`WheelLoop`, the routing, the driver), ``_selector`` the selector base and
``_uvloop`` the uvloop base, which alone imports uvloop. This module chooses between them and is
the public API. The wheel timers themselves -- their handle, filing, cancelling, advancing -- are
a ``LoopCore`` from :mod:`aiowheel._impl`, which the loop holds: compiled if the extension is
built, else the pure specification :mod:`aiowheel._loopcore` (``core=`` names one). The core's
docstring is the contract between the two: what the loop hands it, what it gives back.

Routing. A timer whose delay (``when - loop.time()`` at the call) is at least ``min_delay`` goes
on the wheel; a shorter one (an overdue one too) goes straight into the loop core's *near queue*,
a small binary heap ordered by (deadline, scheduling order). Both get a
:class:`LoopTimerHandle`, with either core an object with ``asyncio.TimerHandle``'s API (like
uvloop's handles, not an instance of it). Only timers that will never fire stay on the base
loop, with its own handle: further away than :data:`FAR_DELAY` (100 years, uvloop's own cap; or
as far overdue), beyond the wheel's range (``2**50`` ticks from the clock's zero: only reachable
with a tiny ``tick``), infinite or NaN; on a wheel they would only add levels.

Short timers are nearly all sleeps and back-offs that fire soon; the timers that pile up --
long timeouts that are almost always cancelled -- are the ones the wheel is for.

Driving. Every timer the core holds is run by one *driver*: a single ordinary timer on the base
loop, armed for ``LoopCore.next_due()`` -- the near queue's earliest deadline, or just after the
start of the wheel's next non-empty bucket, a tick before it expires (every deadline in that
bucket is later), whichever comes first. The base loop therefore sleeps until then, with no task
per timer and no wakeup while nothing is due. The driver is re-armed only when that can change: a
new timer is due before it, a cancellation empties a bucket (cancelling the last timer disarms
it), or it has run.
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
in its tick can cost one extra driver pass, at the start of its tick, to find its exact deadline;
not on uvloop, whose clock counts whole milliseconds (the default tick): there the pass just after
the tick's start is the tick's own millisecond.

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
from collections.abc import Callable, Coroutine
from typing import Any, Literal, SupportsFloat, SupportsIndex, TypedDict, TypeVar, Unpack

from aiowheel.loop import _selector
from aiowheel.loop._wheelloop import (
    FAR_DELAY,
    LoopTimerHandle,
    WheelLoop,
    WheelStats,
)

__all__ = [
    "FAR_DELAY",
    "LoopTimerHandle",
    "WheelLoop",
    "WheelStats",
    "new_event_loop",
    "new_uvloop_event_loop",
    "run",
]

_T = TypeVar("_T")

# The public classes are documented, and named in annotations, as this package's. (Not the
# handle: it is aiowheel._impl's, and the compiled one's type cannot be changed.)
for _public in (WheelLoop, WheelStats):
    _public.__module__ = __name__
del _public


@functools.cache
def _uvloop_class() -> Callable[..., WheelLoop]:
    """The uvloop variant, importing uvloop (and :mod:`aiowheel.loop._uvloop`) on first use."""
    try:
        import uvloop  # noqa: F401  # optional: imported only when asked for
    except ImportError as exc:
        raise ImportError(
            "new_uvloop_event_loop() runs on uvloop, which is not installed: "
            "pip install 'aiowheel[uvloop]' (or use new_event_loop, on asyncio's own loop)"
        ) from exc
    from aiowheel.loop._uvloop import WheelUVLoop

    return WheelUVLoop


def new_event_loop(
    *,
    tick: SupportsFloat = 0.001,
    wheel_size: SupportsIndex = 64,
    min_delay: SupportsFloat | None = None,
    core: Literal["compiled", "pure"] | None = None,
) -> WheelLoop:
    """A new event loop -- asyncio's default one -- whose ``call_later`` / ``call_at`` put timers
    on a hierarchical wheel: the wheel's ``asyncio.new_event_loop``.

    A zero-argument loop factory as it stands, for ``asyncio.Runner(loop_factory=...)``, anyio's
    ``backend_options={"loop_factory": ...}`` and uvicorn's ``--loop
    aiowheel.loop:new_event_loop``; with options, bind them with ``functools.partial`` (they
    are checked when the first loop is made).

    Args:
        tick: width of a level-0 slot in seconds, a finite real number > 0. It decides how
            timers are stored, not when they run: each runs once ``loop.time()`` reaches its
            ``when()``, never early.
        wheel_size: slots per level, a whole number from 2 to ``2**40``.
        min_delay: timers with a delay below this (seconds, a finite real number >= 0) skip
            the wheel, into the loop's queue of imminent timers; None means ``4 * tick``.
        core: the loop core that holds the timers, ``"compiled"`` or ``"pure"`` (the same
            behaviour; for tests and comparisons); None means the compiled one if it is built,
            else the pure one.

    Raises:
        TypeError, ValueError: for a bad ``tick``, ``wheel_size``, ``min_delay`` or ``core``,
            naming it.
        RuntimeError: ``core="compiled"`` when the compiled core is not built.
    """
    return _selector.WheelEventLoop(
        tick=tick, wheel_size=wheel_size, min_delay=min_delay, core=core
    )


def new_uvloop_event_loop(
    *,
    tick: SupportsFloat = 0.001,
    wheel_size: SupportsIndex = 64,
    min_delay: SupportsFloat | None = None,
    core: Literal["compiled", "pure"] | None = None,
) -> WheelLoop:
    """A new wheel-backed event loop on ``uvloop.Loop``: the wheel's ``uvloop.new_event_loop``.

    The same options and checks as :func:`new_event_loop`, and used the same way (``--loop
    aiowheel.loop:new_uvloop_event_loop`` for uvicorn). Needs ``pip install 'aiowheel[uvloop]'``.

    Raises:
        TypeError, ValueError: for a bad ``tick``, ``wheel_size``, ``min_delay`` or ``core``,
            naming it.
        ImportError: uvloop is not installed (naming the extra that installs it).
        RuntimeError: ``core="compiled"`` when the compiled core is not built.
    """
    return _uvloop_class()(tick=tick, wheel_size=wheel_size, min_delay=min_delay, core=core)


class _LoopOptions(TypedDict, total=False):
    """The wheel's options, as :func:`new_event_loop` and :func:`new_uvloop_event_loop` take."""

    tick: SupportsFloat
    wheel_size: SupportsIndex
    min_delay: SupportsFloat | None
    core: Literal["compiled", "pure"] | None


def run(
    main: Coroutine[Any, Any, _T],
    *,
    loop_factory: Callable[..., asyncio.AbstractEventLoop] = new_event_loop,
    debug: bool | None = None,
    **options: Unpack[_LoopOptions],
) -> _T:
    """Run the coroutine ``main`` on a new wheel-backed loop and return its result: the wheel's
    ``asyncio.run``, in ``uvloop.run``'s shape.

    ``aiowheel.loop.run(main())`` is ``asyncio.Runner(loop_factory=new_event_loop)``'s
    ``run(main())``, with what ``asyncio.run`` does around it: the loop is closed at the end,
    after the tasks still pending are cancelled and the async generators and the default
    executor shut down.

    Args:
        main: a coroutine object, ``main()`` (not the function); from Python 3.14 any
            awaitable, as ``asyncio.run`` takes. Anything else raises what ``asyncio.run``
            raises for it.
        loop_factory: the loop maker, called with ``options``: :func:`new_event_loop` (asyncio's
            loop underneath, the default) or :func:`new_uvloop_event_loop` (uvloop underneath),
            as ``uvloop.run`` takes its own.
        debug: asyncio's debug mode for the loop, as ``asyncio.run``'s; None leaves the default
            (``PYTHONASYNCIODEBUG``, ``-X dev``).
        **options: the wheel's options, ``tick``, ``wheel_size``, ``min_delay``, ``core``, given
            to ``loop_factory`` as :func:`new_event_loop` documents them.

    Raises:
        ValueError: ``main`` is not a coroutine object (up to Python 3.13, as ``asyncio.run``).
        TypeError: ``main`` is not awaitable (from Python 3.14, as ``asyncio.run``).
        RuntimeError: called from a running event loop.
        TypeError, ValueError: for a bad option, naming it (before ``main`` starts).
    """
    if asyncio._get_running_loop() is not None:
        # asyncio.run's check, in its words (asyncio.Runner's would name the runner).
        raise RuntimeError("aiowheel.loop.run() cannot be called from a running event loop")
    factory = functools.partial(loop_factory, **options) if options else loop_factory
    with asyncio.Runner(loop_factory=factory, debug=debug) as runner:
        return runner.run(main)
