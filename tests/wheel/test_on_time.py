"""The wheel's timing guarantees: never early (float edges, random deadlines, up to the range
limit) and at most one tick late when driven by ``next_deadline``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import TICKS, drain, fire_time

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# -- never early ----------------------------------------------------------------------------------

# (tick, deadline) pairs where t / tick, q * tick and the decimal literal disagree in the last bit.
FLOAT_EDGES = [
    (0.1, 0.1 + 0.2),
    (0.1, 0.3),
    (0.1, -0.3),
    (0.001, 0.35),
    (0.001, 0.0),
    (0.001, -0.001),
    (0.001, 1e9 + 0.0005),
    (1 / 3, 1.0),
    (1 / 3, 2 / 3),
    (7, 21),
    (7, 21.000000000000004),
    (1e-6, 3e-6),
    (1e-6, 1e9 + 1e-6),
]


@pytest.mark.parametrize(("tick", "deadline"), FLOAT_EDGES)
def test_never_early_on_float_edges(twins: Implementation, tick: float, deadline: float) -> None:
    """Not due one float step before the deadline; due exactly on the tick it rounds up to."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(
        tick, 4, start=deadline - 10 * tick
    )
    wheel.add(deadline, "x")
    assert wheel.advance(math.nextafter(deadline, -math.inf)) == []
    calls = drain(wheel)
    assert calls[-1] == (fire_time(deadline, tick), ["x"])
    assert all(out == [] for _, out in calls[:-1])


TIMES = st.one_of(
    st.floats(-1e4, 1e4),
    st.integers(-(10**4), 10**4),
    st.sampled_from([0.1 + 0.2, 0.3, 0.35, -0.3, 1 / 3, 2 / 3, 1e-6, 1e9 + 0.0005, -1e9]),
)


@settings(max_examples=150, deadline=None)
@given(
    tick=st.sampled_from(TICKS),
    wheel_size=st.sampled_from([2, 3, 16, 64]),
    start=TIMES,
    deadlines=st.lists(TIMES, min_size=1, max_size=25),
    extra_nows=st.lists(TIMES, max_size=10),
)
def test_never_early_property(
    twins: Implementation,
    *,
    tick: float,
    wheel_size: int,
    start: float,
    deadlines: list[float],
    extra_nows: list[float],
) -> None:
    """``advance(now)`` returns nothing due after ``now``, and leaves nothing due by ``now``.

    Probed at each deadline, one float step before it, its fire time, and random times.
    """
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick, wheel_size, start)
    for i, deadline in enumerate(deadlines):
        wheel.add(deadline, i)
    probes = {start, *extra_nows}
    for deadline in deadlines:
        probes |= {deadline, math.nextafter(deadline, -math.inf), fire_time(deadline, tick)}
    pending = set(range(len(deadlines)))
    for now in sorted(p for p in probes if p >= start):
        for i in wheel.advance(now):
            assert deadlines[i] <= now
            pending.remove(i)
        for i in pending:
            assert fire_time(deadlines[i], tick) > now
        assert len(wheel) == len(pending)
        wheel._check()
    assert not pending


@settings(max_examples=100, deadline=None)
@given(
    tick=st.sampled_from(TICKS),
    ticks=st.integers(2**40, 2**52 - 16),
    sign=st.sampled_from([1, -1]),
    nudge=st.sampled_from([-1, 0, 1]),
)
def test_never_early_up_to_the_range_limit(
    twins: Implementation, tick: float, ticks: int, sign: int, nudge: int
) -> None:
    """Deadlines just inside the 2**52-tick limit still round up onto a float tick correctly."""
    deadline = sign * ticks * tick
    if nudge:
        deadline = math.nextafter(deadline, nudge * math.inf)
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(
        tick, 64, start=deadline - 8 * tick
    )
    wheel.add(deadline, "x")
    assert wheel.advance(math.nextafter(deadline, -math.inf)) == []
    calls = drain(wheel)
    assert calls[-1] == (fire_time(deadline, tick), ["x"])


# -- at most one tick late ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    tick=st.sampled_from(TICKS),
    wheel_size=st.sampled_from([2, 3, 8, 64]),
    start=st.floats(-1e3, 1e3),
    offsets=st.lists(st.floats(0, 1e4), min_size=1, max_size=40),
)
def test_at_most_one_tick_late_when_driven_by_next_deadline(
    twins: Implementation, tick: float, wheel_size: int, start: float, offsets: list[float]
) -> None:
    """Each payload comes out once, at the first tick at or after its deadline."""
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick, wheel_size, start)
    deadlines = [start + offset for offset in offsets]
    for i, deadline in enumerate(deadlines):
        wheel.add(deadline, i)
    seen: list[int] = []
    calls = drain(wheel)
    for now, out in calls:
        for i in out:
            deadline = deadlines[i]
            assert deadline <= now
            assert now == fire_time(deadline, tick)
            # Exactly: less than a tick, give or take the rounding of the float tick grid.
            assert Fraction(now) - Fraction(deadline) < Fraction(tick) + Fraction(math.ulp(now))
        seen.extend(out)
    assert sorted(seen) == list(range(len(deadlines)))
    # Every call fires or cascades a bucket: an entry passes through at most one per level.
    assert len(calls) <= len(deadlines) * wheel.levels
