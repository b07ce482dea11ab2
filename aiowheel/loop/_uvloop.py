"""The uvloop base: ``WheelUVLoop``, ``uvloop.Loop`` plus the wheel.

The only module of the package that imports uvloop; :mod:`aiowheel.loop` imports it only when a
uvloop-based loop is asked for. uvloop's ready queue is not reachable from Python, so due wheel
timers run from the driver callback itself, in order (see :mod:`aiowheel.loop`).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any, SupportsFloat, SupportsIndex

import uvloop

from aiowheel.loop._wheelloop import TimerHandle, WheelLoop

__all__ = ["WheelUVLoop"]

# asyncio's own logger: where its loops report slow callbacks.
_logger = logging.getLogger("asyncio")

# uvloop's stubs do not declare Loop an AbstractEventLoop; at run time it is one.
_UVLoop: type[asyncio.AbstractEventLoop] = uvloop.Loop


class WheelUVLoop(WheelLoop, _UVLoop):  # type: ignore[valid-type,misc]  # runtime base
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
            _UVLoop.close(self)
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
        handle: asyncio.TimerHandle = _UVLoop.call_later(
            self, delay, callback, *args, context=context
        )
        return handle

    def _arm_driver(self, deadline: float) -> asyncio.Handle:
        # uvloop counts whole milliseconds and rounds to the nearest; round up instead, so
        # that it does not fire before the bucket is due (it would only be re-armed).
        delay = math.ceil((deadline - self.time()) * 1000) / 1000
        return _UVLoop.call_later(
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
                _UVLoop.call_soon(self, self._run_batch, context=self._driver_context)
