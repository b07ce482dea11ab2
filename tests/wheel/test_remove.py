"""Removing entries: once, never out again, the payload let go at once, ``len`` and
``next_deadline`` following, and removed entries left behind by a cascade.
"""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING

import pytest
from reference import drain

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# -- remove ---------------------------------------------------------------------------------------


def test_remove_returns_true_once_and_the_entry_never_comes_out(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8)
    kept, removed = wheel.add(5, "kept"), wheel.add(5, "removed")
    assert wheel.remove(removed) is True
    assert wheel.remove(removed) is False
    assert removed.payload is None
    assert not removed.pending
    assert wheel.locate(removed) is None
    assert removed.deadline == 5
    assert len(wheel) == 1
    assert wheel.advance(100) == ["kept"]
    assert not kept.pending
    assert wheel.remove(kept) is False  # already fired
    assert kept.payload is None
    assert len(wheel) == 0


def test_remove_entry_tells_whether_the_next_deadline_may_have_moved(twins: Implementation) -> None:
    """The contract the wheel-backed loop re-arms its driver by: O(1), no heap work."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8, start=0)
    first, second, later = wheel.add(3, "a"), wheel.add(3, "b"), wheel.add(5, "c")
    due = wheel.add(-1, "due")
    assert wheel.remove_entry(first) is False  # its bucket still holds "b"
    assert first.payload is None
    assert not first.pending
    assert wheel.remove_entry(due) is True  # the due bucket emptied: next_deadline moves
    assert wheel.next_deadline() == 3
    assert wheel.remove_entry(second) is True  # the earliest bucket emptied
    assert wheel.next_deadline() == 5
    assert wheel.remove_entry(second) is None  # not pending any more
    assert wheel.advance(5) == ["c"]
    assert wheel.remove_entry(later) is None  # fired
    assert len(wheel) == 0
    wheel._check()


class Payload:
    """A payload that can be weakly referenced."""


@pytest.mark.parametrize("deadline", [5, 5000, -1], ids=["level-0", "level-2", "already-due"])
def test_remove_releases_the_payload_at_once(twins: Implementation, deadline: float) -> None:
    """No tombstone and no reference cycle keeps a removed payload alive (gc disabled)."""
    wheel: HierarchicalWheel[Payload] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8, start=0)
    payload = Payload()
    alive = weakref.ref(payload)
    entry = wheel.add(deadline, payload)
    del payload
    gc.disable()
    try:
        assert alive() is not None
        assert wheel.remove(entry)
        assert alive() is None
    finally:
        gc.enable()


def test_fired_entry_releases_the_payload(twins: Implementation) -> None:
    wheel: HierarchicalWheel[Payload] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=8, start=0)
    entry = wheel.add(500, Payload())
    out = wheel.advance(500)
    assert len(out) == 1
    assert entry.payload is None
    alive = weakref.ref(out[0])
    del out
    gc.disable()
    try:
        assert alive() is None
    finally:
        gc.enable()


def test_len_tracks_add_remove_and_advance(twins: Implementation) -> None:
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=4)
    entries = [wheel.add(d, d) for d in range(1, 41)]
    assert len(wheel) == 40
    for entry in entries[::4]:
        wheel.remove(entry)
    assert len(wheel) == 30
    out = wheel.advance(20)
    assert len(out) == 15
    assert len(wheel) == 15
    wheel.remove(entries[0])  # already removed: no change
    wheel.remove(entries[1])  # already fired: no change
    wheel.remove(entries[-1])
    assert len(wheel) == 14
    assert len(wheel.advance(1000)) == 14
    assert len(wheel) == 0


def test_next_deadline_skips_buckets_emptied_by_remove(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=64)
    lone = wheel.add(500, "lone")
    wheel.remove(lone)
    assert wheel.next_deadline() is None

    soon, far = wheel.add(5, "soon"), wheel.add(500, "far")
    wheel.remove(soon)
    assert wheel.next_deadline() == wheel.bucket_expiration(*wheel.locate(far))  # type: ignore[misc]
    assert wheel.next_deadline() == 448  # level 1's bucket [448, 512)


def test_removed_entry_is_left_behind_when_its_bucket_cascades(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1, wheel_size=4)
    a, b, c = wheel.add(50, "a"), wheel.add(50.5, "b"), wheel.add(51, "c")
    assert wheel.locate(a) == wheel.locate(b) == wheel.locate(c) == (2, 3)
    wheel.remove(b)
    assert wheel.advance(48) == []  # [48, 64) cascades without b
    assert wheel.remove(b) is False
    wheel.remove(c)  # removed after its cascade
    assert [out for _, out in drain(wheel)] == [["a"]]
