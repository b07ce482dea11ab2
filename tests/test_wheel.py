"""Tests for :mod:`aiowheel._wheel`: the guarantees of ``HierarchicalWheel``, one section each.

Everything runs in virtual time: times are plain numbers handed to ``add`` and ``advance``.

The reference helpers ``ceil_ticks`` and ``floor_ticks`` restate the wheel's rounding rule without
sharing its code: an exact rational first guess, then an unbounded search on the float product
``q * tick`` (the value ``next_deadline`` reports and the caller's clock is compared with).
"""

from __future__ import annotations

import gc
import math
import random
import re
import weakref
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

if TYPE_CHECKING:
    from aiowheel._impl import Entry, HierarchicalWheel, Implementation

# Ticks that stress float rounding in different ways: decimal fractions with no exact binary
# form, a repeating binary fraction, a whole number, and a very fine tick.
TICKS = [0.001, 0.1, 1 / 3, 7, 1e-6]


# -- reference rounding ------------------------------------------------------------------------


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


# -- 1. argument checks ------------------------------------------------------------------------


def names(value: object) -> str:
    """A ``match=`` pattern: the error message shows ``value`` as its repr."""
    return re.escape(repr(value))


@pytest.mark.parametrize("tick", [0, 0.0, -1, -0.001, math.nan, math.inf, -math.inf])
def test_tick_must_be_finite_and_positive(twins: Implementation, tick: float) -> None:
    with pytest.raises(ValueError, match=rf"tick .*{names(tick)}$"):
        twins.wheel.HierarchicalWheel(tick=tick)


@pytest.mark.parametrize("tick", ["1", True, None, b"1"])
def test_tick_must_be_a_number(twins: Implementation, tick: Any) -> None:
    with pytest.raises(TypeError, match=rf"tick .*{names(tick)}$"):
        twins.wheel.HierarchicalWheel(tick=tick)


@pytest.mark.parametrize("wheel_size", [1, 0, -64])
def test_wheel_size_must_be_at_least_2(twins: Implementation, wheel_size: int) -> None:
    with pytest.raises(ValueError, match=rf"wheel_size .*{names(wheel_size)}$"):
        twins.wheel.HierarchicalWheel(wheel_size=wheel_size)


@pytest.mark.parametrize("wheel_size", [2.5, 64.0, "64", True])
def test_wheel_size_must_be_an_int(twins: Implementation, wheel_size: Any) -> None:
    with pytest.raises(TypeError, match=rf"wheel_size .*{names(wheel_size)}$"):
        twins.wheel.HierarchicalWheel(wheel_size=wheel_size)


def test_start_must_be_a_finite_number(twins: Implementation) -> None:
    with pytest.raises(ValueError, match=names(math.nan)):
        twins.wheel.HierarchicalWheel(start=math.nan)
    with pytest.raises(ValueError, match=names(-math.inf)):
        twins.wheel.HierarchicalWheel(start=-math.inf)
    with pytest.raises(TypeError, match=names("0")):
        twins.wheel.HierarchicalWheel(start="0")  # type: ignore[arg-type]


@pytest.mark.parametrize("deadline", [math.nan, math.inf, -math.inf])
def test_add_rejects_non_finite_deadlines(twins: Implementation, deadline: float) -> None:
    """A bad deadline raises, names itself, and leaves the wheel untouched."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1)
    with pytest.raises(ValueError, match=rf"deadline .*{names(deadline)}$"):
        wheel.add(deadline, "x")
    assert len(wheel) == 0
    assert wheel.next_deadline() is None


@pytest.mark.parametrize("deadline", ["5", None, True, b"5"])
def test_add_rejects_non_numbers(twins: Implementation, deadline: Any) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1)
    with pytest.raises(TypeError, match=rf"deadline .*{names(deadline)}$"):
        wheel.add(deadline, "x")
    assert len(wheel) == 0


def test_advance_rejects_bad_times(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1)
    with pytest.raises(ValueError, match=names(math.nan)):
        wheel.advance(math.nan)
    with pytest.raises(TypeError, match=names("1")):
        wheel.advance("1")  # type: ignore[arg-type]


@pytest.mark.parametrize("tick", TICKS)
def test_times_2_52_ticks_or_more_from_zero_are_rejected(
    twins: Implementation, tick: float
) -> None:
    """Beyond 2**52 ticks floats cannot tell adjacent ticks apart: refuse rather than misfire."""
    far = 2**53 * tick
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=tick)
    for deadline in (far, -far, 1e308):
        with pytest.raises(ValueError, match=rf"{names(deadline)} is too far away"):
            wheel.add(deadline, "x")
    with pytest.raises(ValueError, match=rf"{names(far)} is too far away"):
        wheel.advance(far)
    with pytest.raises(ValueError, match="too far away"):
        twins.wheel.HierarchicalWheel(tick=tick, start=far)
    assert len(wheel) == 0
    wheel.add(2**51 * tick, "near the limit is fine")
    assert len(wheel) == 1


def test_nanosecond_tick_on_an_epoch_clock_is_rejected_not_fired_early(
    twins: Implementation,
) -> None:
    """Regression: 1.79e18 ticks used to file this deadline one float step early, and
    ``advance(1793241449.6480036)`` returned it although its deadline is ...038."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1e-9, start=0)
    with pytest.raises(ValueError, match="too far away"):
        wheel.add(1793241449.6480038, "x")


# -- 2. seed 002: the literal trace (tickMs=1000, wheelSize=3, seven tasks) ---------------------

# Times are S + seconds past 14:40:00 on 2023-02-07; the article's start, 14:40:20.558, is
# floored to the second. Levels are 0-based: the article's "1层" is level 0. Kafka re-inserts a
# due task where we return it; with whole-tick start and deadlines that changes nothing.
S = 1675752000

# After inserting task n (due at S + 20 + n): its (level, slot), the number of levels, and the
# expiration of every queued bucket (buckets not listed are not queued).
SEED_002_INSERTS: list[tuple[tuple[int, int], int, dict[tuple[int, int], int]]] = [
    ((0, 0), 1, {(0, 0): 21}),
    ((0, 1), 1, {(0, 0): 21, (0, 1): 22}),
    # Task 3 overflows level 0's [20, 23): level 1 is created at the aligned start 18.
    ((1, 0), 2, {(0, 0): 21, (0, 1): 22, (1, 0): 21}),
    ((1, 1), 2, {(0, 0): 21, (0, 1): 22, (1, 0): 21, (1, 1): 24}),
    # Tasks 5 and 6 join task 4's bucket, whose expiration is already set: nothing new queued.
    ((1, 1), 2, {(0, 0): 21, (0, 1): 22, (1, 0): 21, (1, 1): 24}),
    ((1, 1), 2, {(0, 0): 21, (0, 1): 22, (1, 0): 21, (1, 1): 24}),
    # Task 7 overflows level 1's [18, 27): level 2 is created at the aligned start 12.
    ((2, 2), 3, {(0, 0): 21, (0, 1): 22, (1, 0): 21, (1, 1): 24, (2, 2): 21}),
]
SEED_002_LEVEL_STARTS = (20, 18, 12)

# Each "前进时间轮" step: the dequeue time, the tasks that come out, then (level, slot) of every
# pending task, the level starts and the queued buckets, as in the article's tables.
SEED_002_ADVANCES: list[
    tuple[int, list[int], dict[int, tuple[int, int]], tuple[int, ...], dict[tuple[int, int], int]]
] = [
    # Three buckets expire at 21: task 1 fires, task 3 drops to level 0, task 7 to level 1.
    (
        21,
        [1],
        {2: (0, 1), 3: (0, 2), 4: (1, 1), 5: (1, 1), 6: (1, 1), 7: (1, 2)},
        (21, 21, 21),
        {(0, 1): 22, (0, 2): 23, (1, 1): 24, (1, 2): 27},
    ),
    (
        22,
        [2],
        {3: (0, 2), 4: (1, 1), 5: (1, 1), 6: (1, 1), 7: (1, 2)},
        (22, 21, 21),
        {(0, 2): 23, (1, 1): 24, (1, 2): 27},
    ),
    (23, [3], {4: (1, 1), 5: (1, 1), 6: (1, 1), 7: (1, 2)}, (23, 21, 21), {(1, 1): 24, (1, 2): 27}),
    # Level 1's bucket [24, 27) expires: task 4 fires, 5 and 6 drop to level 0.
    (
        24,
        [4],
        {5: (0, 1), 6: (0, 2), 7: (1, 2)},
        (24, 24, 21),
        {(0, 1): 25, (0, 2): 26, (1, 2): 27},
    ),
    (25, [5], {6: (0, 2), 7: (1, 2)}, (25, 24, 21), {(0, 2): 26, (1, 2): 27}),
    (26, [6], {7: (1, 2)}, (26, 24, 21), {(1, 2): 27}),
    # Task 7 comes straight out of level 1: its bucket starts at its deadline.
    (27, [7], {}, (27, 27, 21), {}),
]


def test_seed_002_trace(twins: Implementation) -> None:
    """Placement, on-demand levels, bucket expirations and every cascade of the article's trace."""
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(
        tick=1, wheel_size=3, start=S + 20
    )
    entries: dict[int, Entry[int]] = {}
    for task, (where, levels, buckets) in enumerate(SEED_002_INSERTS, start=1):
        entries[task] = wheel.add(S + 20 + task, task)
        assert wheel.locate(entries[task]) == where, f"task {task}"
        for earlier in range(1, task):
            assert wheel.locate(entries[earlier]) == SEED_002_INSERTS[earlier - 1][0]
        assert wheel.levels == levels
        assert [wheel.level_start(n) for n in range(levels)] == [
            S + start for start in SEED_002_LEVEL_STARTS[:levels]
        ]
        assert queued_buckets(wheel) == {key: S + t for key, t in buckets.items()}
        assert len(wheel) == task

    for now, fired, pending, level_starts, buckets in SEED_002_ADVANCES:
        assert wheel.next_deadline() == S + now
        assert wheel.advance(S + now) == fired, f"at {now}"
        assert {task: wheel.locate(entries[task]) for task in pending} == pending, f"at {now}"
        assert [wheel.level_start(n) for n in range(3)] == [S + t for t in level_starts]
        assert queued_buckets(wheel) == {key: S + t for key, t in buckets.items()}
        assert len(wheel) == len(pending)
        for task in fired:
            assert not entries[task].pending
            assert wheel.locate(entries[task]) is None

    assert wheel.next_deadline() is None
    assert wheel.levels == 3  # levels are never destroyed


# -- 3. seeds 000 / 001: tickMs=1, wheelSize=20 ------------------------------------------------

# The same examples in milliseconds (tick 1) and in seconds (tick 0.001), where deadlines such
# as 0.35 are not whole multiples of the float tick.
SCALES = pytest.mark.parametrize("scale", [1, 1000], ids=["ms", "s"])


@SCALES
def test_seed_000_level_0_slots(twins: Implementation, scale: int) -> None:
    """2 ms goes to slot 2; 8 ms later to slot 10; 19 ms later reuses the expired slot 1."""
    tick = 1 / scale
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick=tick, wheel_size=20, start=0)
    first = wheel.add(2 / scale, 2)
    assert wheel.locate(first) == (0, 2)
    assert wheel.advance(2 * tick) == [2]

    eight = wheel.add(10 / scale, 8)
    assert wheel.locate(eight) == (0, 10)
    assert wheel.bucket_expiration(0, 1) is None
    nineteen = wheel.add(21 / scale, 19)
    assert wheel.locate(nineteen) == (0, 1)
    assert wheel.bucket_expiration(0, 1) == 21 * tick
    assert wheel.levels == 1

    assert drain(wheel) == [(10 * tick, [8]), (21 * tick, [19])]


@SCALES
def test_seed_000_overflow_levels_and_cascade(twins: Implementation, scale: int) -> None:
    """350 ms sits on level 1; 450 ms on level 2, then cascades 2 -> 1 -> 0 and fires at 450."""
    tick = 1 / scale
    wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick=tick, wheel_size=20, start=0)

    e350 = wheel.add(350 / scale, 350)
    assert wheel.levels == 2
    assert wheel.locate(e350) == (1, 17)  # virtualId 350 // 20 = 17
    assert wheel.bucket_expiration(1, 17) == 340 * tick

    e450 = wheel.add(450 / scale, 450)
    assert wheel.levels == 3
    # Seed 000 says "bucket 0" here, loosely. Kafka's own formula gives virtualId 450 // 400 = 1,
    # slot 1 % 20 = 1, the bucket [400, 800) expiring at 400, as seed 001 says.
    assert wheel.locate(e450) == (2, 1)
    assert wheel.bucket_expiration(2, 1) == 400 * tick
    assert wheel.level_start(2) == 0

    # 340: level 1's [340, 360) cascades; 350 drops to level 0 slot 10 and fires at 350.
    assert wheel.next_deadline() == 340 * tick
    assert wheel.advance(340 * tick) == []
    assert wheel.locate(e350) == (0, 10)
    assert wheel.advance(349 / scale) == []
    assert wheel.next_deadline() == 350 * tick
    assert wheel.advance(350 * tick) == [350]

    # 400: level 2's [400, 800) cascades; 450 goes to level 1 slot 2, the bucket [440, 460).
    assert wheel.next_deadline() == 400 * tick
    assert wheel.advance(400 * tick) == []
    assert wheel.locate(e450) == (1, 2)
    assert wheel.bucket_expiration(1, 2) == 440 * tick

    # 440: cascades again, to level 0 slot 10; it is due at 450, not at 449.
    assert wheel.next_deadline() == 440 * tick
    assert wheel.advance(440 * tick) == []
    assert wheel.locate(e450) == (0, 10)
    assert wheel.bucket_expiration(0, 10) == 450 * tick
    assert wheel.advance(449 / scale) == []
    assert e450.pending
    assert wheel.next_deadline() == 450 * tick
    assert wheel.advance(450 * tick) == [450]
    assert wheel.next_deadline() is None


# -- 4. never early ----------------------------------------------------------------------------

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


# -- 5. at most one tick late --------------------------------------------------------------------


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


# -- 6. order ----------------------------------------------------------------------------------


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


# -- 7. remove ---------------------------------------------------------------------------------


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


# -- 8. already due ----------------------------------------------------------------------------


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


# -- 9. far future and scale -------------------------------------------------------------------

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


# -- 10. next_deadline jumps bucket to bucket --------------------------------------------------


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


# -- 11. against a reference model ---------------------------------------------------------------


def align(ticks: int, width: int) -> int:
    """``ticks`` rounded down to a multiple of ``width``: a level's current slot start."""
    return ticks - ticks % width


# Deadlines and times relative to the clock, in ticks.
ADD_UNITS = st.one_of(
    # Quarter ticks near the clock: already due, and several deadlines sharing one tick.
    st.integers(-12, 60).map(lambda k: k / 4),
    st.integers(-3, 5000),  # a few levels up for small wheels
    st.floats(-3, 5000),  # between ticks
    st.integers(5000, 10**7),  # many levels up
)
ADVANCE_UNITS = st.one_of(
    st.integers(-8, 40).map(lambda k: k / 4),  # small steps, including before the clock
    st.floats(-2, 3000),
    st.integers(0, 10**7),
)


class WheelVsModel(RuleBasedStateMachine):
    """Random add / remove / advance on a wheel and on a model: a dict of pending entries.

    Model rule: an entry is due once its deadline's tick (``ceil_ticks``) is at or before the
    clock, which is the furthest ``floor_ticks(now)`` seen (or the start). Due entries come out
    sorted by (deadline, add order); payloads are add-order numbers.
    """

    def __init__(self, twins: Implementation, tick: float) -> None:
        super().__init__()
        self.twins = twins
        self.tick = tick
        self.wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick)
        self.clock = 0  # ticks
        self.levels = 1
        # payload -> (deadline, its tick, entry)
        self.pending: dict[int, tuple[float, int, Entry[int]]] = {}
        self.entries: list[Entry[int]] = []

    def at(self, units: float) -> float:
        return (self.clock + units) * self.tick

    @initialize(wheel_size=st.sampled_from([2, 3, 4, 64]), units=st.integers(-1000, 1000))
    def create(self, wheel_size: int, units: int) -> None:
        start = units * self.tick
        self.wheel = self.twins.wheel.HierarchicalWheel(self.tick, wheel_size, start)
        self.clock = floor_ticks(start, self.tick)

    @rule(units=ADD_UNITS)
    def add(self, units: float) -> None:
        self.check_add(self.at(units))

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def add_tie(self, data: st.DataObject) -> None:
        """The deadline of an earlier entry: filed on another level if the clock moved since,
        the case where Kafka's cascade puts the earlier entry behind the later one."""
        self.check_add(data.draw(st.sampled_from(self.entries)).deadline)

    def check_add(self, deadline: float) -> None:
        payload = len(self.entries)
        entry = self.wheel.add(deadline, payload)
        q = ceil_ticks(deadline, self.tick)
        self.entries.append(entry)
        self.pending[payload] = (deadline, q, entry)
        ws = self.wheel.wheel_size
        if q <= self.clock:
            assert self.wheel.locate(entry) == (0, self.clock % ws)
            return
        # Kafka's placement: the lowest level whose [current, current + span) holds q.
        level = 0
        while q >= align(self.clock, ws**level) + ws ** (level + 1):
            level += 1
        self.levels = max(self.levels, level + 1)
        assert self.wheel.locate(entry) == (level, q // ws**level % ws)

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        payload = data.draw(st.integers(0, len(self.entries) - 1))
        entry = self.entries[payload]
        assert self.wheel.remove(entry) is (payload in self.pending)
        self.pending.pop(payload, None)
        assert not entry.pending
        assert entry.payload is None

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def remove_entry(self, data: st.DataObject) -> None:
        """remove_entry's contract: None if not pending; False: next_deadline() unchanged;
        True: the entry was the last of its bucket, next_deadline() is not earlier."""
        payload = data.draw(st.integers(0, len(self.entries) - 1))
        entry = self.entries[payload]
        where = self.wheel.locate(entry)
        bucket_mates = [
            p
            for p, (_, _, e) in self.pending.items()
            if p != payload and self.wheel.locate(e) == where
        ]
        before = self.wheel.next_deadline()
        emptied = self.wheel.remove_entry(entry)
        after = self.wheel.next_deadline()
        if payload not in self.pending:
            assert emptied is None
        else:
            assert emptied is (not bucket_mates)
        if emptied:
            assert before is not None
            assert after is None or after >= before
        else:
            assert after == before
        self.pending.pop(payload, None)
        assert not entry.pending
        assert entry.payload is None

    @rule(units=ADVANCE_UNITS)
    def advance(self, units: float) -> None:
        self.check_advance(self.at(units))

    @rule()
    def advance_to_next_deadline(self) -> None:
        now = self.wheel.next_deadline()
        if now is not None:
            self.check_advance(now)

    def check_advance(self, now: float) -> None:
        self.clock = max(self.clock, floor_ticks(now, self.tick))
        due = sorted((d, p) for p, (d, q, _) in self.pending.items() if q <= self.clock)
        assert self.wheel.advance(now) == [p for _, p in due]
        for _, payload in due:
            entry = self.pending.pop(payload)[2]
            assert not entry.pending
            assert entry.payload is None

    @invariant()
    def structure_is_consistent(self) -> None:
        self.wheel._check()

    @invariant()
    def counts_match(self) -> None:
        assert len(self.wheel) == len(self.pending)
        assert self.wheel.now == self.clock * self.tick
        assert self.wheel.levels == self.levels

    @invariant()
    def pending_per_level_counts_where_entries_sit(self) -> None:
        counts = [0] * self.wheel.levels
        for _, _, entry in self.pending.values():
            where = self.wheel.locate(entry)
            assert where is not None
            counts[where[0]] += 1
        assert self.wheel.pending_per_level() == tuple(counts)

    @invariant()
    def next_deadline_is_never_after_the_earliest_tick(self) -> None:
        now = self.wheel.next_deadline()
        if not self.pending:
            assert now is None
            return
        earliest = min(q for _, q, _ in self.pending.values())
        assert now is not None
        if earliest <= self.clock:
            assert now == self.clock * self.tick
        else:
            assert self.clock * self.tick < now <= earliest * self.tick

    @invariant()
    def entries_sit_in_live_buckets(self) -> None:
        """Each entry is in the bucket of its tick on some level, in that level's current
        rotation and still in the future; the bucket's expiration is its start."""
        ws = self.wheel.wheel_size
        for _, q, entry in self.pending.values():
            assert entry.pending
            where = self.wheel.locate(entry)
            assert where is not None
            level, slot = where
            if q <= self.clock:
                assert where == (0, self.clock % ws)
                continue
            width = ws**level
            expiration = align(q, width)
            assert slot == q // width % ws
            assert self.wheel.bucket_expiration(level, slot) == expiration * self.tick
            assert self.clock < expiration < align(self.clock, width) + width * ws


@pytest.mark.parametrize("tick", [1, 0.001, 1 / 3])
def test_wheel_matches_reference_model(twins: Implementation, tick: float) -> None:
    run_state_machine_as_test(
        lambda: WheelVsModel(twins, tick),
        settings=settings(
            max_examples=50,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# -- 12. repr and pending ----------------------------------------------------------------------


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


# -- 13. the invariant checker ------------------------------------------------------------------


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
    with pytest.raises(AssertionError, match=r"is filed at tick 30, its tick is 100"):
        wheel._check()
