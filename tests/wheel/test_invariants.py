"""The wheel's invariant checker ``_check()``: it catches a corrupted wheel, an entry that lost its
bucket and one filed under another deadline.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from aiowheel._impl import Entry, HierarchicalWheel, Implementation


# -- the invariant checker ------------------------------------------------------------------------


def busy_wheel(twins: Implementation) -> tuple[HierarchicalWheel[int], list[Entry[int]]]:
    """A wheel with entries due, on level 0 and on higher levels, and emptied buckets."""
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=4, start=10)
    entries = [wheel.add(deadline, i) for i, deadline in enumerate([5, 11, 12, 13, 30, 31, 200])]
    wheel.remove(wheel.add(14, -1))
    wheel._check()
    return wheel, entries


def edit_state(wheel: HierarchicalWheel[int], edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to the pickled state of a compiled wheel (its fields are C fields)."""
    _, fields = wheel.__getstate__()  # type: ignore[attr-defined]
    edit(fields)
    wheel.__setstate__((None, fields))  # type: ignore[attr-defined]


def corrupt(twins: Implementation, wheel: HierarchicalWheel[int], what: str) -> None:
    """Break one invariant of ``wheel``, as a bug in the wheel could."""
    if what == "len":
        if twins.name == "pure":
            wheel._len += 1  # type: ignore[attr-defined]
        else:
            edit_state(wheel, lambda fields: fields.update(len=fields["len"] + 1))
    elif what == "heap":
        if twins.name == "pure":
            wheel._heap.pop()  # type: ignore[attr-defined]
        else:
            edit_state(wheel, lambda fields: fields["heap"].pop())
    elif what == "level clock":
        if twins.name == "pure":
            wheel._levels[1].current += 4  # type: ignore[attr-defined]
        else:

            def move_level_1(fields: dict[str, Any]) -> None:
                width, current, buckets, expirations = fields["levels"][1]
                fields["levels"][1] = (width, current + 4, buckets, expirations)

            edit_state(wheel, move_level_1)


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("len", "len is 8 but 7 entries are filed"),
        ("heap", "the heap does not hold exactly the queued buckets"),
        ("level clock", "level 1's current is not level 0's clock 10"),
    ],
)
def test_check_catches_a_corrupted_wheel(twins: Implementation, what: str, message: str) -> None:
    wheel, _ = busy_wheel(twins)
    corrupt(twins, wheel, what)
    with pytest.raises(AssertionError, match=re.escape(message)):
        wheel._check()


@pytest.mark.parametrize("index", [0, 1, 4, 6], ids=["due", "level 0", "level 1", "level 3"])
def test_check_catches_an_entry_that_lost_its_bucket(twins: Implementation, index: int) -> None:
    wheel, entries = busy_wheel(twins)
    entries[index]._bucket = None  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match=re.escape(repr(entries[index]))):
        wheel._check()


def test_check_catches_an_entry_filed_under_another_deadline(twins: Implementation) -> None:
    wheel, entries = busy_wheel(twins)
    entries[4].deadline = 100
    # The compiled entry keeps its tick (30); the pure one does not, and names its bucket's.
    filed = "tick 30" if twins.name == "compiled" else "ticks 16 to 31"
    with pytest.raises(AssertionError, match=rf"is filed at {filed}, its tick is 100"):
        wheel._check()
