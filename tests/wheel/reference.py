"""What the wheel's tests compare with: its rounding rule restated, and a wheel driven as the Timer
drives it.

``ceil_ticks`` and ``floor_ticks`` restate the wheel's rounding rule without sharing its code: an
exact rational first guess, then an unbounded search on the float product ``q * tick`` (the value
``next_deadline`` reports and the caller's clock is compared with).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel


# Ticks that stress float rounding in different ways: decimal fractions with no exact binary
# form, a repeating binary fraction, a whole number, and a very fine tick.
TICKS = [0.001, 0.1, 1 / 3, 7, 1e-6]


# -- reference rounding ---------------------------------------------------------------------------


def ceil_ticks(t: float, tick: float) -> int:
    """The smallest q with ``q * tick >= t`` (float product): the tick ``t`` is due on."""
    q = math.ceil(Fraction(t) / Fraction(tick))
    while q * tick < t:
        q += 1
    while (q - 1) * tick >= t:
        q -= 1
    return q


def floor_ticks(t: float, tick: float) -> int:
    """The largest q with ``q * tick <= t`` (float product): how far a clock reading reaches."""
    q = math.floor(Fraction(t) / Fraction(tick))
    while q * tick > t:
        q -= 1
    while (q + 1) * tick <= t:
        q += 1
    return q


def fire_time(deadline: float, tick: float) -> float:
    """The earliest clock reading at which ``deadline`` is due: its tick, as a float."""
    return ceil_ticks(deadline, tick) * tick


def drain(wheel: HierarchicalWheel[Any], limit: int = 10**6) -> list[tuple[float, list[Any]]]:
    """Drive ``wheel`` the way the Timer does: ``advance(next_deadline())`` until it is empty.

    Returns one ``(now, payloads)`` pair per ``advance`` call, including calls that only cascade.
    """
    calls: list[tuple[float, list[Any]]] = []
    while (now := wheel.next_deadline()) is not None:
        calls.append((now, wheel.advance(now)))
        assert len(calls) <= limit, "the wheel does not drain"
    return calls


def queued_buckets(wheel: HierarchicalWheel[Any]) -> dict[tuple[int, int], float]:
    """``{(level, slot): expiration}`` of every bucket the wheel has queued."""
    queued = {}
    for level in range(wheel.levels):
        for slot in range(wheel.wheel_size):
            expiration = wheel.bucket_expiration(level, slot)
            if expiration is not None:
                queued[level, slot] = expiration
    return queued
