"""Tests for the lateness histogram (:mod:`aiowheel._lateness`, ``TimerStats.lateness``) and the
per-level counts of ``TimerStats.pending_per_level``.

Two kinds of test. The twins' dispatch is driven directly on both cores (the ``twins`` fixture)
with a hand-moved clock -- a callback that moves it is a callback that blocked -- so every
lateness, and hence every bucket, is exact. The Timer is tested on the three backends
(``anyio_backend``), in virtual time where values are asserted exactly: a jump of the clock, a
callback holding up the next one of its pass, every callback counted once, the snapshot after
close.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from support import jump
from twins import load_implementation

from aiowheel import LatenessHistogram, Timer, TimerStats
from aiowheel._impl import Implementation
from aiowheel._lateness import CLOCK_STRIDE, LATENESS_BOUNDS, LATENESS_BUCKETS, lateness_bucket

TICK = 0.001


# -- the buckets -------------------------------------------------------------------------------


def test_bounds_are_1_2_5_per_decade_from_10_us_to_10_s() -> None:
    decades = [10.0**e for e in range(-5, 1)]
    expected = [float(f"{m * d:.0e}") for d in decades for m in (1, 2, 5)] + [10.0]
    assert list(LATENESS_BOUNDS) == expected
    assert LATENESS_BUCKETS == 20


@pytest.mark.parametrize("index", range(len(LATENESS_BOUNDS)))
def test_a_bound_is_in_its_own_bucket_and_just_above_it_in_the_next(index: int) -> None:
    bound = LATENESS_BOUNDS[index]
    assert lateness_bucket(bound) == index  # Prometheus' le: at most the bound
    assert lateness_bucket(math.nextafter(bound, math.inf)) == index + 1
    assert lateness_bucket(math.nextafter(bound, -math.inf)) == index


@pytest.mark.parametrize(
    ("lateness", "bucket"),
    [(-1.0, 0), (0.0, 0), (5e-324, 0), (3e-4, 5), (0.0015, 7), (10.5, 19), (1e300, 19)],
)
def test_lateness_bucket(lateness: float, bucket: int) -> None:
    assert lateness_bucket(lateness) == bucket


# -- the twins' dispatch, on a clock moved by hand ---------------------------------------------


class HandClock:
    """The core's clock: a number the test (and the callbacks) move."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def running_core(twins: Implementation, clock: Callable[[], float]) -> Any:
    """A Timer core of ``twins``, started as the Timer starts it, without a loop: arming the
    driver does nothing, and a callback's error fails the test."""

    def report(callback: object, args: object, exc: BaseException, handle: object) -> None:
        raise AssertionError(f"{callback!r}{args!r} raised") from exc

    core = twins.timer.TimerCore(TICK, 64, None)
    core.start(clock, lambda when: None, report)
    return core


def counted(core: Any) -> dict[int, int]:
    """The core's non-empty buckets: {index: count}."""
    started, _, _, _ = core.counters()
    return {i: n for i, n in enumerate(started) if n}


def started_count(core: Any) -> int:
    """Callbacks the core started: the histogram's count."""
    return sum(core.counters()[0])


def lateness_sum(core: Any) -> float:
    return float(core.counters()[1])


def max_lateness(core: Any) -> float:
    return float(core.counters()[2])


def test_the_twins_start_with_empty_buckets(twins: Implementation) -> None:
    core = twins.timer.TimerCore(TICK, 64, None)
    assert core.counters() == ((0,) * LATENESS_BUCKETS, 0.0, 0.0, 0)


VALUES = [
    0.0,
    *LATENESS_BOUNDS,
    *(math.nextafter(b, math.inf) for b in LATENESS_BOUNDS),
    *(math.nextafter(b, -math.inf) for b in LATENESS_BOUNDS),
    1e-9,
    3e-4,
    1e6,
]


@pytest.mark.parametrize("lateness", VALUES)
def test_each_twin_counts_a_lateness_in_the_spec_bucket(
    twins: Implementation, lateness: float
) -> None:
    # Due at 0.0 and run at `lateness`: the lateness is exactly `lateness`.
    clock = HandClock(0.0)
    core = running_core(twins, clock)
    core.call_at(0.0, lambda: None)
    clock.now = lateness
    core.run_due()
    assert counted(core) == {lateness_bucket(lateness): 1}
    assert lateness_sum(core) == lateness
    assert max_lateness(core) == lateness


def test_callbacks_held_up_by_earlier_ones_count_late_from_the_next_reading(
    twins: Implementation,
) -> None:
    clock = HandClock(0.0)
    core = running_core(twins, clock)
    started: list[float] = []

    def blocks(seconds: float) -> None:
        started.append(clock.now)
        clock.now += seconds  # what a callback that blocks for `seconds` does to the clock

    blocking = {3: 0.03, 15: 0.4}
    for position in range(18):
        core.call_at(1.0, blocks, blocking.get(position, 0.0))  # one pass: all due at 1.0
    clock.now = 1.0
    core.run_due()
    assert started[3:5] == pytest.approx([1.0, 1.03]) and started[16] == pytest.approx(1.43)
    # The pass read the clock at its start (1.0) and before position 16 (1.43): positions 4-15,
    # held up by 30 ms, are counted from the first reading; 16 and 17 as 0.43 s late.
    assert counted(core) == {0: 16, 14: 2}
    assert max_lateness(core) == pytest.approx(0.43)
    assert lateness_sum(core) == pytest.approx(0.86)
    assert started_count(core) == 18


def test_a_long_pass_reads_the_clock_before_every_16th_callback(twins: Implementation) -> None:
    clock = HandClock(0.0)
    core = running_core(twins, clock)
    step = 2.0**-10  # each callback takes a binary-exact ~0.98 ms
    n = 40

    def busy() -> None:
        clock.now += step

    for _ in range(n):
        core.call_at(0.5, busy)
    clock.now = 0.5
    core.run_due()
    assert CLOCK_STRIDE == 16
    # Readings before positions 0, 16 and 32: 0, 16 and 32 steps late. 16 steps (15.6 ms) is in
    # the bucket (10 ms, 20 ms], 32 steps (31.3 ms) in (20 ms, 50 ms].
    assert counted(core) == {0: 16, 10: 16, 11: 8}
    assert lateness_sum(core) == step * (16 * 16 + 8 * 32)
    assert max_lateness(core) == 32 * step
    assert started_count(core) == n


def test_cancelled_in_its_pass_is_not_counted(twins: Implementation) -> None:
    clock = HandClock(0.0)
    core = running_core(twins, clock)
    later = core.call_at(1.0, lambda: None)
    core.call_at(0.5, later.cancel)
    clock.now = 1.0  # one pass holds both; the first cancels the second
    core.run_due()
    assert started_count(core) == 1
    assert lateness_sum(core) == 0.5  # the canceller's lateness only


def test_the_16th_entry_reads_the_clock_even_when_it_was_cancelled(twins: Implementation) -> None:
    """The re-read is every 16th *entry*: a callback that cancels the 16th does not leave the
    ones after it measured from a reading 31 callbacks old."""
    clock = HandClock(0.0)
    core = running_core(twins, clock)
    step = 2.0**-10

    def busy() -> None:
        clock.now += step

    handles = [core.call_at(0.5, busy) for _ in range(20)]
    core.call_at(0.25, handles[15].cancel)  # runs first: position 16 of the pass is cancelled
    clock.now = 0.5
    core.run_due()
    # The canceller ran first (0.25 s late), positions 1-15 for 15 steps, 16 was cancelled; the
    # reading there makes the last four 15 steps late (they were counted on time without it).
    assert lateness_sum(core) == 0.25 + 4 * 15 * step
    assert started_count(core) == 20


def test_a_clock_that_raises_mid_pass_loses_no_timer(twins: Implementation) -> None:
    """An error of the clock at a re-read leaves the pass there: the entry it was about to run
    and the rest of the batch stay scheduled, counted nowhere; the next pass runs them."""
    clock = HandClock(0.0)
    reads: int | None = None  # counted from the first pass on

    def failing_once() -> float:
        nonlocal reads
        if reads is not None:
            reads += 1
            if reads == 2:  # the re-read before position 16
                raise OSError("the clock failed")
        return clock.now

    core = running_core(twins, failing_once)
    ran: list[int] = []
    for position in range(20):
        core.call_at(0.5, ran.append, position)
    clock.now = 0.5
    reads = 0
    with pytest.raises(OSError, match="the clock failed"):
        core.run_due()
    assert ran == list(range(16))
    assert started_count(core) == 16
    assert len(core) == 4
    core.run_due()
    assert ran == list(range(20))
    assert started_count(core) == 20


def test_an_interrupted_pass_counts_what_it_started(twins: Implementation) -> None:
    clock = HandClock(0.0)
    core = running_core(twins, clock)

    def interrupt() -> None:
        raise KeyboardInterrupt

    core.call_at(0.25, lambda: None)
    core.call_at(0.5, interrupt)
    core.call_at(0.75, lambda: None)  # stays scheduled, due at once
    clock.now = 1.0
    with pytest.raises(KeyboardInterrupt):
        core.run_due()
    assert started_count(core) == 2
    assert lateness_sum(core) == 0.75 + 0.5
    core.run_due()
    assert started_count(core) == 3
    assert lateness_sum(core) == 0.75 + 0.5 + 0.25


@pytest.mark.implementation("compiled")
def test_the_twins_count_the_same_random_passes() -> None:
    """Random batches with random blocking, on both twins: the same counts, sum and maximum."""
    rng = random.Random(7)
    plan = [
        [(rng.uniform(0, 0.2), rng.choice([0.0, 0.0, 1e-5, 3e-3, 0.07])) for _ in range(size)]
        for size in (1, 3, 16, 17, 40, 200)
    ]
    outcomes = []
    for name in ("pure", "compiled"):
        twins = load_implementation(name)
        clock = HandClock(100.0)
        core = running_core(twins, clock)

        def blocks(seconds: float, clock: HandClock = clock) -> None:
            clock.now += seconds

        for batch in plan:
            base = clock.now
            for offset, seconds in batch:
                core.call_at(base + offset, blocks, seconds)
            clock.now = base + 0.25
            core.run_due()
        outcomes.append(core.counters())
    assert outcomes[0] == outcomes[1]
    assert sum(outcomes[0][0]) == sum(len(batch) for batch in plan)


# -- the Timer, on every backend ----------------------------------------------------------------


def buckets_of(stats: TimerStats) -> dict[float, int]:
    """The non-empty buckets of a snapshot: {upper bound: count}."""
    return {bound: count for bound, count in stats.lateness.buckets if count}


@pytest.mark.anyio
async def test_a_clock_jump_makes_the_callbacks_late(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        start = timer.time()
        timer.call_at(start + 0.01, lambda: None)
        timer.call_at(start + 0.011, lambda: None)
        jump(0.3)  # the loop was blocked for 0.3 s: both are found ~0.29 s late
        await timer.sleep_until(start + 0.3)  # a timer due now: in the same pass, on time
        stats = timer.stats()
    assert stats.fired == 3
    assert buckets_of(stats) == {0.5: 2, LATENESS_BOUNDS[0]: 1}
    assert stats.max_lateness == pytest.approx(0.29)


@pytest.mark.anyio
async def test_a_blocking_callback_makes_the_next_16th_of_its_pass_late(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        when = timer.time() + 0.0105
        ran: list[float] = []

        def blocks() -> None:
            ran.append(timer.time())
            jump(0.004)  # what a callback blocking for 4 ms does to the clock

        timer.call_at(when, blocks)
        for _ in range(15):
            timer.call_at(when, lambda: None)
        timer.call_at(when, lambda: ran.append(timer.time()))  # position 16: the clock is read
        await timer.sleep_until(when)  # a timer of the same pass, at position 17
        stats = timer.stats()
    first, second = (at - when for at in ran)
    assert 0 <= first < TICK
    assert second == pytest.approx(first + 0.004)
    assert lateness_bucket(second) == 8  # (2 ms, 5 ms]
    expected = [0] * LATENESS_BUCKETS
    expected[lateness_bucket(first)] += 16  # positions 0-15, from the pass's first reading
    expected[lateness_bucket(second)] += 2
    assert [count for _, count in stats.lateness.buckets] == expected


@pytest.mark.anyio
async def test_every_callback_is_counted_once_never_early(backend_name: str) -> None:
    """Many timers on every backend: the histogram counts each fired one, none below zero; in
    virtual time each in the bucket of (its start - its deadline), exactly."""
    rng = random.Random(3)
    async with Timer(tick=TICK) as timer:
        lateness: list[float] = []

        def record(when: float) -> None:
            lateness.append(timer.time() - when)

        start = timer.time()
        for _ in range(300):
            when = start + rng.uniform(0, 0.05)
            timer.call_at(when, record, when)
        job = timer.schedule(0.02, lambda: None)
        await job
        await timer.sleep_until(start + 0.06)
        stats = timer.stats()
    histogram = stats.lateness
    assert histogram.count == stats.fired == 302  # the records, the job, the sleep
    assert min(lateness) >= 0
    assert histogram.sum >= 0 and stats.max_lateness >= 0
    # In real time (uvloop) a callback reads the clock after the pass's reading, so it measures
    # itself later than the histogram does: only virtual time gives equality, below.
    if backend_name != "uvloop":  # virtual time: nothing moves while callbacks run
        expected = [0] * LATENESS_BUCKETS
        for late in lateness:
            expected[lateness_bucket(late)] += 1
        counts = [count for _, count in histogram.buckets]
        assert sum(counts) - sum(expected) == 2  # the job and the sleep, on time
        assert all(c >= e for c, e in zip(counts, expected, strict=True))
        assert stats.max_lateness == max(lateness) and stats.max_lateness < TICK


@pytest.mark.anyio
async def test_pending_per_level_and_the_snapshot_after_close(virtual_time: None) -> None:
    async with Timer(tick=TICK, wheel_size=64) as timer:
        assert timer.stats().pending_per_level == (0,)
        timer.call_later(0.01, lambda: None)  # 10 ticks: level 0
        timer.call_later(0.5, lambda: None)  # 500 ticks: level 1
        timer.call_later(100, lambda: None)  # 100,000 ticks: level 2
        handle = timer.call_later(100, lambda: None)
        stats = timer.stats()
        assert stats.pending_per_level == (1, 1, 2)
        assert sum(stats.pending_per_level) == stats.pending
        handle.cancel()
        assert timer.stats().pending_per_level == (1, 1, 1)
        await anyio.sleep(0.2)  # the level-0 timer fires
        assert timer.stats().pending_per_level == (0, 1, 1)
        await anyio.sleep(0.4)  # level 1's bucket cascades and fires
        fired_stats = timer.stats()
        assert fired_stats.pending_per_level == (0, 0, 1)
    closed = timer.stats()
    assert closed.pending == 0 and closed.pending_per_level == (0, 0, 0)
    assert closed.lateness == fired_stats.lateness  # closing counts nothing
    assert closed.lateness.count == closed.fired == 2  # the level-0 and level-1 timers
    with pytest.raises(dataclasses.FrozenInstanceError):
        closed.lateness = fired_stats.lateness  # type: ignore[misc]
    assert isinstance(closed.lateness.buckets, tuple)


def test_stats_of_a_timer_never_started() -> None:
    stats = Timer().stats()
    assert stats.lateness.count == 0 and stats.lateness.sum == 0.0
    assert [bound for bound, _ in stats.lateness.buckets] == [*LATENESS_BOUNDS, math.inf]
    assert stats.pending_per_level == (0,)


# -- LatenessHistogram -------------------------------------------------------------------------


def histogram(counts: dict[int, int], total: float = 0.0) -> LatenessHistogram:
    bounds = (*LATENESS_BOUNDS, math.inf)
    return LatenessHistogram(tuple((b, counts.get(i, 0)) for i, b in enumerate(bounds)), total)


def test_count_cumulative_and_quantile() -> None:
    h = histogram({6: 90, 8: 9, 19: 1}, 0.5)
    assert h.count == 100
    cumulative = dict(h.cumulative())
    assert cumulative[0.0005] == 0 and cumulative[0.001] == 90 and cumulative[0.005] == 99
    assert cumulative[math.inf] == 100
    assert h.quantile(0) == 0.001  # the smallest lateness seen is at most 1 ms
    assert h.quantile(0.5) == h.quantile(0.9) == 0.001
    assert h.quantile(0.95) == h.quantile(0.99) == 0.005
    assert h.quantile(1) == math.inf


def test_quantile_of_nothing_is_nan_and_q_is_checked() -> None:
    assert math.isnan(histogram({}).quantile(0.5))
    bad: list[Any] = [-0.1, 1.5, math.nan, "0.5", True, None]
    for q in bad:
        with pytest.raises(ValueError, match=r"q must be a number from 0 to 1, got"):
            histogram({1: 1}).quantile(q)


def test_str_shows_the_non_empty_buckets_in_a_line() -> None:
    assert str(histogram({})) == "nothing counted"
    line = str(histogram({0: 3, 6: 1200, 10: 2, 15: 1, 19: 1}))
    assert line == "<=10 µs: 3, <=1 ms: 1,200, <=20 ms: 2, <=1 s: 1, >10 s: 1"
