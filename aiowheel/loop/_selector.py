"""The selector base: :class:`WheelEventLoop`, asyncio's default event loop plus the wheel.

The driver is a timer on asyncio's heap; everything else is asyncio's own.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
import sys
from collections.abc import Callable
from typing import Any, Literal, SupportsFloat, SupportsIndex

from aiowheel._defaults import DEFAULT_TICK, DEFAULT_WHEEL_SIZE
from aiowheel.loop._wheelloop import WheelLoop

__all__ = ["WheelEventLoop"]

if sys.platform == "win32":  # pragma: no cover - asyncio's default loop there is the Proactor
    _BaseLoop = asyncio.ProactorEventLoop
else:
    _BaseLoop = asyncio.SelectorEventLoop


class WheelEventLoop(WheelLoop, _BaseLoop):
    """asyncio's default event loop with its timers on a hierarchical wheel.

    A ``SelectorEventLoop`` (the Proactor on Windows); ``selector`` is passed to it.

    Args:
        tick: width of a level-0 slot, in seconds (how timers are stored, not when they run).
        wheel_size: slots per level.
        min_delay: timers with a shorter delay skip the wheel, into the loop's queue of
            imminent timers; default ``4 * tick``.
        implementation: the implementation of the loop core that holds the wheel timers:
            ``"compiled"``, ``"pure"``, or None for the one :mod:`aiowheel._impl` selected (the
            compiled one if built). RuntimeError for ``"compiled"`` when it is not built.
    """

    # The loop core's call_later / call_at, bound by _init_wheel (see WheelLoop).
    __slots__ = ("call_at", "call_later")

    def __init__(
        self,
        selector: selectors.BaseSelector | None = None,
        *,
        tick: SupportsFloat = DEFAULT_TICK,
        wheel_size: SupportsIndex = DEFAULT_WHEEL_SIZE,
        min_delay: SupportsFloat | None = None,
        implementation: Literal["compiled", "pure"] | None = None,
    ) -> None:
        super().__init__(selector)
        try:
            self._init_wheel(
                tick=tick, wheel_size=wheel_size, min_delay=min_delay, implementation=implementation
            )
        except BaseException:
            # Bad options: close what the base loop opened, or it warns when collected.
            _BaseLoop.close(self)
            raise

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

    def _call_soon_on_base(
        self, callback: Callable[[], object], context: contextvars.Context
    ) -> asyncio.Handle:
        return _BaseLoop.call_soon(self, callback, context=context)
