"""The lateness histogram's contract: its buckets, and when a pass reads the clock.

One spec for both twins of the Timer core (:mod:`aiowheel._timercore` and the compiled
``_ctimercore.pyx``), which count every callback they start into one of these buckets, and for
:class:`aiowheel.TimerStats`, which shows the counts. It imports nothing of aiowheel.

**Lateness** is how long after its deadline a callback started: the Timer's clock when it is
about to call the callback, minus ``when()``. The wheel's side of it is under one tick (a bucket
fires at the end of its tick); the rest is the event loop being busy elsewhere, and earlier
callbacks of the same pass.

**Buckets** are fixed in seconds, 1-2-5 per decade from 10 µs to 10 s (the series of a
dashboard's axis and of Prometheus' default buckets), not multiples of the tick: every Timer, of
any tick, in any process, then has the same bucket bounds, so histograms add up across Timers
and machines, and a bound reads as a plain time ("at most 2 ms late"). Three buckets per decade
tell "within a tick" (1 ms by default) from "a few ticks" from "the loop was blocked". Bucket
``i`` counts the lateness ``x`` with ``LATENESS_BOUNDS[i - 1] < x <= LATENESS_BOUNDS[i]``
(Prometheus' ``le``), the first also every ``x`` at or below 10 µs, the last (bound infinity)
everything beyond 10 s.

**The clock** is read when a pass starts and again before every :data:`CLOCK_STRIDE`-th
callback of its batch: a pass of thousands of callbacks counts a callback held up by earlier ones
as late, and reads the clock once per :data:`CLOCK_STRIDE` callbacks, not per callback (a read of
the loop's clock costs about as much as dispatching a short callback). So a callback's lateness
is measured from a reading taken at most ``CLOCK_STRIDE - 1`` callbacks earlier in its pass: it
is exact for a callback that nothing in its pass held up, and may be understated by the time at
most that many callbacks before it took.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["CLOCK_STRIDE", "LATENESS_BOUNDS", "LATENESS_BUCKETS", "lateness_bucket"]

LATENESS_BOUNDS: tuple[float, ...] = (
    *(1e-05, 2e-05, 5e-05),
    *(0.0001, 0.0002, 0.0005),
    *(0.001, 0.002, 0.005),
    *(0.01, 0.02, 0.05),
    *(0.1, 0.2, 0.5),
    *(1.0, 2.0, 5.0),
    10.0,
)
"""The finite upper bounds of the buckets, in seconds, ascending; the last bucket has none."""

LATENESS_BUCKETS = len(LATENESS_BOUNDS) + 1
"""How many buckets: one per bound, and one for everything beyond the last bound."""

CLOCK_STRIDE = 16
"""A pass reads the clock again before the callbacks at positions ``CLOCK_STRIDE``,
``2 * CLOCK_STRIDE``, ... of its due batch (counted from 0)."""


def lateness_bucket(lateness: float) -> int:
    """The index of the bucket that counts ``lateness`` (seconds): the first whose bound is at
    or above it, ``LATENESS_BUCKETS - 1`` beyond the last bound. A lateness at or below zero --
    a callback started on its deadline -- is in bucket 0."""
    return bisect_left(LATENESS_BOUNDS, lateness)
