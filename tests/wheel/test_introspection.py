"""What a wheel tells about itself: ``pending_per_level``, ``next_deadline`` jumping bucket to
bucket without walking empty slots, its repr and ``pending`` flag.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from reference import drain

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# -- next_deadline jumps bucket to bucket ---------------------------------------------------------


def test_pending_per_level_follows_adds_removes_and_cascades(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=4)
    assert wheel.pending_per_level() == (0,)
    near = wheel.add(2, "level 0")
    wheel.add(3, "level 0 too")
    far = wheel.add(9, "level 1")  # 4 <= 9 < 16 ticks: level 1
    wheel.add(40, "level 2")  # 16 <= 40 < 64: level 2
    wheel.add(-1, "already due")  # at or before the clock: on level 0, where locate puts it
    assert wheel.levels == 3
    assert wheel.pending_per_level() == (3, 1, 1)
    assert wheel.remove(near)
    wheel.remove(far)
    assert wheel.pending_per_level() == (2, 0, 1)
    wheel.advance(3)  # the due entry and tick 3 come out
    assert wheel.pending_per_level() == (0, 0, 1)
    wheel.advance(32)  # level 2's bucket [32, 48) expires: 40 cascades to level 1
    assert wheel.pending_per_level() == (0, 1, 0)
    assert sum(wheel.pending_per_level()) == len(wheel) == 1
    wheel.remove_all()
    assert wheel.pending_per_level() == (0, 0, 0)  # the levels stay, empty


def test_next_deadline_does_not_walk_empty_slots(twins: Implementation) -> None:
    """10,000 entries an hour away: the clock jumps to their level-3 bucket, then down."""
    tick, wheel_size = 0.001, 64
    rng = random.Random(3600)
    deadlines = [3600 + rng.randrange(50) / 1000 for _ in range(10_000)]
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick, wheel_size, start=0)
    entries = [wheel.add(deadline, i) for i, deadline in enumerate(deadlines)]
    # 3,600,000 ticks: 64**3 <= q < 64**4, level 3, in the bucket starting at 13 * 64**3 ticks.
    assert wheel.levels == 4
    assert {wheel.locate(e) for e in entries} == {(3, 13)}
    assert wheel.next_deadline() == 13 * 64**3 * tick == wheel.bucket_expiration(3, 13)
    calls = drain(wheel)
    # One call per cascade (at most one bucket per higher level here) and one per distinct tick.
    assert len(calls) <= wheel.levels + len(set(deadlines))
    assert len(calls) <= wheel.levels * wheel_size
    out = [i for _, batch in calls for i in batch]
    assert out == sorted(range(len(deadlines)), key=lambda i: (deadlines[i], i))


# -- repr and pending -----------------------------------------------------------------------------


def test_repr_and_pending_flag(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=0.5, wheel_size=4)
    fired, removed = wheel.add(1, "a"), wheel.add(200, "b")
    assert fired.pending
    assert removed.pending
    assert "HierarchicalWheel" in repr(wheel)
    assert "1" in repr(fired)
    wheel.remove(removed)
    assert wheel.advance(1) == ["a"]
    assert not fired.pending
    assert not removed.pending
    for entry in (fired, removed):
        assert repr(entry).startswith("<Entry")
    assert "HierarchicalWheel" in repr(wheel)
