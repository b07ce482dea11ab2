"""An entry's ``deadline`` reads back as the number stored -- a float, an int, or any other
number given to ``add_entry`` -- through filing, ordering and removal, on both implementations
(the compiled entry keeps a float or a small int as a C double and anything else aside, see
``Entry`` in ``_cwheel.pxd``; none of that is observable).
"""

from __future__ import annotations

import gc
import weakref
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from aiowheel._impl import Implementation


class WeakFraction(Fraction):
    """A Fraction that can be referenced weakly (Fraction has __slots__ without __weakref__)."""


DEADLINES = [
    2.5,
    -0.0,
    3,
    -7,
    2**53,
    2**53 + 1,
    -(2**60),
    Fraction(7, 2),
    Decimal("3.25"),
    True,
]


@pytest.mark.parametrize("deadline", DEADLINES, ids=repr)
def test_the_deadline_reads_back_as_stored(twins: Implementation, deadline: Any) -> None:
    entry = twins.wheel.Entry(deadline, "x")
    assert entry.deadline == deadline and type(entry.deadline) is type(deadline)
    assert repr(entry) == f"<Entry deadline={deadline!r} done>"
    entry.deadline = 1.5
    assert entry.deadline == 1.5 and type(entry.deadline) is float
    entry.deadline = deadline
    assert entry.deadline == deadline and type(entry.deadline) is type(deadline)


@pytest.mark.parametrize("deadline", [3, Fraction(7, 2), 2.5], ids=repr)
def test_filed_deadlines_of_every_kind_come_out_in_order(
    twins: Implementation, deadline: Any
) -> None:
    wheel = twins.wheel.HierarchicalWheel(tick=1, start=0)
    entries = [
        wheel.add_entry(twins.wheel.Entry(value, name))
        for name, value in (("late", deadline + 2), ("first", deadline), ("tie", deadline))
    ]
    assert [entry.deadline for entry in entries] == [deadline + 2, deadline, deadline]
    assert wheel.advance(deadline + 1) == ["first", "tie"]
    assert wheel.advance(deadline + 3) == ["late"]
    assert [type(entry.deadline) for entry in entries] == [type(deadline)] * 3


def test_a_deleted_deadline_reads_as_a_missing_slot(twins: Implementation) -> None:
    entry = twins.wheel.Entry(Fraction(1, 3), "x")
    del entry.deadline
    with pytest.raises(AttributeError, match="Entry' object has no attribute 'deadline'"):
        _ = entry.deadline
    with pytest.raises(AttributeError, match="deadline"):
        del entry.deadline
    entry.deadline = 4
    assert entry.deadline == 4


def test_a_deadline_object_lives_as_long_as_its_entry(twins: Implementation) -> None:
    wheel = twins.wheel.HierarchicalWheel(tick=1)
    deadline = WeakFraction(10)
    alive = weakref.ref(deadline)
    entry = wheel.add_entry(twins.wheel.Entry(deadline, "x"))
    del deadline
    gc.collect()
    assert alive() is not None
    entry.deadline = 1.0  # replaced: released at once
    assert alive() is None
    entry.deadline = replaced = WeakFraction(11)
    alive = weakref.ref(replaced)
    del replaced
    assert wheel.remove(entry)
    gc.collect()
    assert alive() is not None  # a removed entry keeps its deadline
    del entry
    gc.collect()
    assert alive() is None
