"""Far deadlines and scale: ten years ahead, many far deadlines drained in few steps, 200k entries
out once and in order.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest
from reference import ceil_ticks, drain, fire_time

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# -- far future and scale -------------------------------------------------------------------------

TEN_YEARS = 10 * 365 * 24 * 3600.0


@pytest.mark.parametrize("wheel_size", [2, 20, 64])
def test_deadline_ten_years_ahead(twins: Implementation, wheel_size: int) -> None:
    """Creates just the levels it needs and fires on time, one cascade per level."""
    tick = 0.001
    deadline = TEN_YEARS + 0.0005
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick, wheel_size, start=0)
    entry = wheel.add(deadline, "x")
    q = ceil_ticks(deadline, tick)
    levels = next(n for n in range(1, 100) if wheel_size**n > q)
    assert wheel.levels == levels
    assert wheel.locate(entry) == (levels - 1, q // wheel_size ** (levels - 1) % wheel_size)
    calls = drain(wheel)
    assert calls[-1] == (fire_time(deadline, tick), ["x"])
    assert all(out == [] for _, out in calls[:-1])
    assert len(calls) <= wheel.levels


def test_many_far_deadlines_drain_in_few_steps(twins: Implementation) -> None:
    """Thirty deadlines spread over ten years: no empty tick is ever visited."""
    tick, wheel_size = 0.001, 20
    rng = random.Random(10)
    deadlines = sorted(rng.uniform(0, TEN_YEARS) for _ in range(30))
    wheel: HierarchicalWheel[float] = twins.wheel.HierarchicalWheel(tick, wheel_size, start=0)
    for deadline in deadlines:
        wheel.add(deadline, deadline)
    calls = drain(wheel)
    assert [d for _, out in calls for d in out] == deadlines
    # Each call fires or cascades a bucket; an entry passes through at most one per level.
    assert len(calls) <= len(deadlines) * wheel.levels


def test_200k_entries_come_out_once_in_order(twins: Implementation) -> None:
    """200,000 random deadlines (about 33 per value) drain in (deadline, add order), each once,
    on time."""
    tick = 0.001
    rng = random.Random(2024)
    deadlines = [rng.randrange(6000) / 10 for _ in range(200_000)]  # ten minutes, in tenths
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick, 64, start=0)
    for i, deadline in enumerate(deadlines):
        wheel.add(deadline, i)
    assert len(wheel) == len(deadlines)
    out: list[int] = []
    for now, batch in drain(wheel):
        # Deadlines are tenths, so a batch is at most a tick (plus float grid error) late.
        assert all(deadlines[i] <= now < deadlines[i] + 1.5 * tick for i in batch)
        out.extend(batch)
    # sorted() is stable: equal deadlines keep add order.
    assert out == sorted(range(len(deadlines)), key=deadlines.__getitem__)
    assert len(wheel) == 0
