"""The uvloop base: ``WheelUVLoop``, ``uvloop.Loop`` plus the wheel.

The only module of the package that imports uvloop; :mod:`aiowheel.loop` imports it only when a
uvloop-based loop is asked for. Due timers run from the driver callback, in order, as on every base
(see :mod:`aiowheel.loop`).

uvloop's clock counts whole milliseconds (``loop.time()`` is ``uv_now / 1000``) and it rounds a
delay to the *nearest* millisecond, so its own timers can run up to half a millisecond before
their ``when``. Every timer this loop hands to uvloop -- the driver and the short timers left on
the base loop -- is armed instead for the first millisecond of uvloop's clock at or after its
``when`` (:func:`delay_to_ms_at_or_after`): never early, at most a millisecond later than uvloop
would run it. (The alternative, re-checking the clock when a short timer fires and re-arming the
remainder, is as late and dearer: under callgrind, about 7,200 more instructions per short timer
scheduled and fired against 4,000 for rounding up, and one more wake-up for each early one.)
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
from collections.abc import Callable
from typing import Any, Literal, SupportsFloat, SupportsIndex

import uvloop

from aiowheel._defaults import DEFAULT_TICK, DEFAULT_WHEEL_SIZE
from aiowheel.loop._wheelloop import FAR_DELAY, WheelLoop

__all__ = ["WheelUVLoop", "delay_to_ms_at_or_after"]

# asyncio's own logger: where its loops report slow callbacks.
_logger = logging.getLogger("asyncio")

# uvloop's stubs do not declare Loop an AbstractEventLoop; at run time it is one.
_UVLoop: type[asyncio.AbstractEventLoop] = uvloop.Loop


def delay_to_ms_at_or_after(when: float, now: float) -> float:
    """The delay to give uvloop at ``now`` (its ``loop.time()``) for a timer to run at the first
    millisecond of its clock ``m`` with ``m / 1000 >= when`` (the float division ``loop.time()``
    makes): a whole number of milliseconds, in seconds, 0.0 if ``when`` is not after ``now``.

    uvloop turns the delay back into ``round(delay * 1000)`` milliseconds from ``now``'s (or a
    later) millisecond, so the timer runs no earlier than ``m``. ``when`` and ``now`` are finite.
    """
    due_ms = math.ceil(when * 1000)
    # when * 1000 is rounded: correct by one step so that due_ms is the smallest millisecond
    # whose loop.time() is >= when. (Subtracting first, as in ceil((when - now) * 1000), loses
    # this: 22.000000000048203 ms is 23 ms, a whole millisecond late.)
    if due_ms / 1000 < when:
        due_ms += 1
    elif (due_ms - 1) / 1000 >= when:
        due_ms -= 1
    delay_ms = due_ms - round(now * 1000)
    return delay_ms / 1000 if delay_ms > 0 else 0.0


class WheelUVLoop(WheelLoop, _UVLoop):  # type: ignore[valid-type,misc]  # runtime base
    """``uvloop.Loop`` with its timers on a hierarchical wheel; see :class:`WheelEventLoop`."""

    # The loop core's call_later / call_at, bound by _init_wheel (see WheelLoop).
    __slots__ = ("call_at", "call_later")

    def __init__(
        self,
        *,
        tick: SupportsFloat = DEFAULT_TICK,
        wheel_size: SupportsIndex = DEFAULT_WHEEL_SIZE,
        min_delay: SupportsFloat | None = None,
        implementation: Literal["compiled", "pure"] | None = None,
    ) -> None:
        super().__init__()
        try:
            self._init_wheel(
                tick=tick, wheel_size=wheel_size, min_delay=min_delay, implementation=implementation
            )
        except BaseException:
            # Bad options: close the libuv loop, or uvloop logs an error when collected.
            _UVLoop.close(self)
            raise

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
        if -FAR_DELAY <= delay <= FAR_DELAY:
            # Never early, like the wheel's timers. (Further away uvloop caps the delay, or
            # runs the timer soon; NaN it refuses: left to it.) when - delay is the clock that
            # routed the timer, within a rounding error that round() in the helper absorbs.
            delay = delay_to_ms_at_or_after(when, when - delay)
        # uvloop's call_at calls self.call_later, which is ours: go to its call_later.
        handle: asyncio.TimerHandle = _UVLoop.call_later(
            self, delay, callback, *args, context=context
        )
        return handle

    def _arm_driver(self, deadline: float) -> asyncio.Handle:
        # At the bucket's millisecond: earlier, the driver would find nothing due and re-arm;
        # later, every timer of the bucket would be a millisecond late.
        delay = delay_to_ms_at_or_after(deadline, self.time())
        return _UVLoop.call_later(self, delay, self._on_wheel_due, context=self._driver_context)

    def _call_soon_on_base(
        self, callback: Callable[[], object], context: contextvars.Context
    ) -> asyncio.Handle:
        return _UVLoop.call_soon(self, callback, context=context)
