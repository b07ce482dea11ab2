"""Test support: an asyncio event loop that runs in virtual time.

:class:`VirtualTimeLoop` is an ordinary selector event loop whose clock is a number it owns. When
the loop has nothing ready to run and would block waiting for its next timer, it jumps the clock
straight to that timer instead of sleeping -- trio's ``MockClock(autojump_threshold=0)`` for
asyncio. So a test that waits an hour finishes in milliseconds, and timing assertions can be
exact: there is no real time, hence no tolerance window, in the result.

Everything on the loop sees virtual time: ``loop.time()``, ``asyncio.sleep``,
``asyncio.timeout``, and an :class:`aiowheel.Timer` entered on it. Real I/O still works (the
loop polls its selector without blocking before each jump), but a test that waits on real
sockets while timers are pending will see virtual time race ahead of the network; keep such
tests on a real loop.

uvloop's clock cannot be replaced, so there is no virtual uvloop; trio has ``MockClock``.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run"]

T = TypeVar("T")

# asyncio.base_events.MAXIMUM_SELECT_TIMEOUT: the longest asyncio ever waits in select().
_MAXIMUM_SELECT_TIMEOUT = 24 * 3600


class _JumpingSelector(selectors.DefaultSelector):
    """A selector whose blocking ``select(timeout)`` advances the loop's clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout is None or timeout <= 0 or self.loop is None:
            # No timer is pending (timeout None) -> the loop can only be woken by I/O: block.
            return ready if ready or timeout is not None else super().select(None)
        self.loop._jump(timeout)
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual and jumps to the next timer when idle.

    Args:
        start: the clock's initial value, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_now = float(start)

    def time(self) -> float:
        return self._virtual_now

    # asyncio runs a timer once ``when < time() + clock_resolution``: with the monotonic clock's
    # resolution that is up to a nanosecond early, which in virtual time would run a timer before
    # the clock reaches it. One ulp of the current time makes the condition ``when <= time()``.
    @property
    def _clock_resolution(self) -> float:
        return math.ulp(self._virtual_now)

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # BaseEventLoop.__init__ sets it; virtual time has its own

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (timers due by then run on the next iteration)."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        self._virtual_now += seconds

    def _jump(self, timeout: float) -> None:
        # Jump to exactly the next timer's time: now + (when - now) may round to either side of
        # it. asyncio caps its select timeout at a day; then jump by the cap, as a real loop
        # would wake up.
        target = self._virtual_now + timeout
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled and timeout < _MAXIMUM_SELECT_TIMEOUT:
            target = scheduled[0].when()
        self._virtual_now = max(self._virtual_now, target)


def run(main: Coroutine[Any, Any, T], *, start: float = 0.0, debug: bool | None = None) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop`, like ``asyncio.run``."""
    with asyncio.Runner(debug=debug, loop_factory=lambda: VirtualTimeLoop(start)) as runner:
        return runner.run(main)
