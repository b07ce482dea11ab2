"""The wheel's one order, (deadline, add order), across cascades and within a bucket, and entries
added already due.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest
from reference import TICKS, drain

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# -- order ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("early", "late", "expected"),
    [(6, 6, ["early", "late"]), (5.5, 5.9, ["early", "late"]), (5.9, 5.5, ["late", "early"])],
)
def test_order_survives_a_cascade_behind_a_direct_insert(
    twins: Implementation, early: float, late: float, expected: list[str]
) -> None:
    """Kafka's FIFO breaks here: an entry cascaded from level 1 lands behind one added straight
    into the same level-0 bucket. The batch is still ordered by (deadline, add order)."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=4, start=0)
    first = wheel.add(early, "early")
    assert wheel.locate(first) == (1, 1)  # beyond level 0's [0, 4): level 1's [4, 8)
    assert wheel.advance(3) == []
    second = wheel.add(late, "late")
    assert wheel.locate(second) == (0, 2)  # level 0 now covers [3, 7)
    assert wheel.advance(4) == []
    assert wheel.locate(first) == (0, 2)  # cascaded into the same bucket, after `second`
    assert wheel.advance(6) == expected


def test_sub_tick_deadlines_in_one_bucket_come_out_sorted(twins: Implementation) -> None:
    wheel: HierarchicalWheel[float] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8, start=0)
    entries = [wheel.add(d, d) for d in (5.7, 5.2, 6.0, 5.5)]
    assert {wheel.locate(e) for e in entries} == {(0, 6)}
    assert wheel.advance(6) == [5.2, 5.5, 5.7, 6.0]


@pytest.mark.parametrize("tick", TICKS)
def test_equal_deadlines_keep_add_order(twins: Implementation, tick: float) -> None:
    """Across levels and cascades, ties come out in add order; the whole run is sorted."""
    rng = random.Random(7)
    choices = [0, 3 * tick, 2.5 * tick, 700 * tick, 5000.5 * tick, 123456 * tick]
    deadlines = [rng.choice(choices) for _ in range(2000)]
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick, 8, start=-tick)
    for i, deadline in enumerate(deadlines):
        wheel.add(deadline, i)
    out = [i for _, batch in drain(wheel) for i in batch]
    assert out == sorted(range(len(deadlines)), key=lambda i: (deadlines[i], i))


# -- already due ----------------------------------------------------------------------------------


@pytest.mark.parametrize("deadline", [100, 99.5, 50, 0, -3, -1e6])
def test_entry_added_already_due_comes_out_at_the_next_advance(
    twins: Implementation, deadline: float
) -> None:
    """Even when that advance is given a time before the wheel's clock."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8, start=100)
    entry = wheel.add(deadline, "late")
    assert wheel.locate(entry) == (0, 100 % 8)
    assert wheel.next_deadline() == 100  # due now: the wheel's clock
    assert wheel.advance(10) == ["late"]
    assert wheel.now == 100  # the clock never moves back
    assert wheel.next_deadline() is None


def test_already_due_entries_join_the_due_batch_in_order(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8, start=0)
    wheel.add(10, "on time")
    wheel.add(10, "tie, later")
    assert wheel.advance(9) == []
    wheel.add(-5, "overdue")
    wheel.add(12, "not yet")
    wheel.add(9.5, "just due")  # rounds up to 10, still after the clock at 9
    assert wheel.advance(10) == ["overdue", "just due", "on time", "tie, later"]
    assert wheel.advance(11.9) == []
    assert wheel.advance(12) == ["not yet"]


def test_advance_before_the_clock_moves_nothing(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(
        tick=0.25, wheel_size=4, start=1.3
    )
    assert wheel.now == 1.25
    wheel.add(2, "x")
    assert wheel.advance(1.75) == []
    assert wheel.advance(0.5) == []
    assert wheel.now == 1.75
    assert wheel.advance(2) == ["x"]
