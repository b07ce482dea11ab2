"""What the idle tests compare with and drive: the rule as :mod:`aiowheel.idle` documents it,
the idle core's twins this process can run, a host with a hand-set clock, and the record of
expiries.

Every async test runs on virtual-time asyncio, uvloop and trio (MockClock) -- see conftest.py;
those that assert times ask for ``virtual_time`` (skipped on uvloop) and assert them exactly: in
virtual time the driver wakes at a deadline ``E`` itself, so ``on_expire`` sees
``timer.time() == E``. Times and ticks are binary fractions unless a test is about rounding, so
that trio's MockClock (which jumps by ``deadline - now``) lands on them exactly too.

Two ways to reach a time, because the rule must hold whether or not the Timer's driver has
processed it yet: ``await timer.sleep_until(t)`` lets the driver run first (the sleep is a wheel
timer filed after the key's, and due timers run in scheduling order), ``support.jump`` moves the
clock without letting anything run.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from twins import load_implementation

import aiowheel
from aiowheel import Timer, _impl

if TYPE_CHECKING:
    from aiowheel._impl import Implementation


TICK = 0.25


# -- helpers --------------------------------------------------------------------------------------


def ceil_rule(w: Any, tick: Any) -> Any:
    """The rule's rounding on any numbers: the smallest ``q * tick >= w``."""
    q = math.ceil(w / tick)
    if q * tick < w:
        q += 1
    elif (q - 1) * tick >= w:
        q -= 1
    return q * tick


def expiry(t: float, timeout: float, tick: float) -> float:
    """The rule as the module documents it: ``t + timeout`` rounded up to a multiple of tick."""
    return float(ceil_rule(t + timeout, tick))


def available_twins() -> list[Implementation]:
    """The idle core's twins this process can run: the pure one, and the compiled one when
    :mod:`aiowheel._impl` selected it (it is built and not switched off)."""
    names = _impl.IMPLEMENTATIONS if aiowheel.IMPLEMENTATION == "compiled" else ("pure",)
    return [load_implementation(name) for name in names]


class HandClockHost:
    """A :class:`aiowheel.TimerHost` whose clock is a number the test sets, the rest its
    Timer's: the host interface is all an idle core may use, so this is all it can tell."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.now: Any = 0
        self.call_at = timer.call_at
        self.refile_at = timer.refile_at
        self.run_now = timer.run_now
        self.open_cancel_scope = timer.open_cancel_scope

    @property
    def tick(self) -> float:
        return self.timer.tick

    @property
    def closed(self) -> bool:
        return self.timer.closed

    def time(self) -> Any:
        return self.now


class Expired:
    """An ``on_expire`` that records ``(key, timer.time())`` for each call."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.calls: list[tuple[Hashable, float]] = []

    def __call__(self, key: Hashable) -> None:
        self.calls.append((key, self.timer.time()))
