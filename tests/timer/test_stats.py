"""What a Timer tells about itself -- ``stats()`` (also read from inside a pass), ``len()`` and the
reprs of the Timer, its handles and jobs.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
from support import TICK, Fired, noop

from aiowheel import LatenessHistogram, Timer, TimerStats
from aiowheel._lateness import LATENESS_BOUNDS

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- observability: stats, len, repr -----------------------------------------------------------


async def test_stats_count_what_happened(virtual_time: None) -> None:
    async with Timer(tick=TICK, wheel_size=64) as timer:
        assert timer.stats() == TimerStats(
            pending=0,
            fired=0,
            cancelled=0,
            max_lateness=0.0,
            driver_wakeups=0,
            levels=1,
            lateness=LatenessHistogram(tuple((b, 0) for b in (*LATENESS_BOUNDS, math.inf)), 0.0),
            pending_per_level=(0,),
        )
        fired = Fired(timer)
        base = (math.floor(timer.time() / TICK) + 10) * TICK
        whens = [base + 0.0005, base + 0.0006, base + 0.0009, base + 0.02]
        for when in whens:
            timer.call_at(when, fired, when)
        timer.call_at(base + 0.03, fired).cancel()
        timer.call_later(100, fired)  # 100 000 ticks away: level 2 of a 64-slot wheel
        assert len(timer) == 5
        await anyio.sleep(base + 0.05 - timer.time())
        stats = timer.stats()

    assert stats.pending == 1
    assert stats.fired == 4
    assert stats.cancelled == 1
    # The largest (run time - deadline), exactly, and less than a tick.
    assert stats.max_lateness == max(ran_at - when for when, ran_at in fired.calls)  # type: ignore[operator]
    assert 0 < stats.max_lateness < TICK
    assert stats.driver_wakeups == 2  # two non-empty buckets came due
    assert stats.levels == 3
    assert stats.pending_per_level == (0, 0, 1)
    assert stats.lateness.count == stats.fired
    assert timer.stats().cancelled == 2  # leaving cancelled the last one


async def test_stats_in_a_callback_add_up_and_an_unprintable_argument_is_reported() -> None:
    """A callback reading stats() mid-pass sees fired equal to the histogram's count; a callback
    that raises with an argument whose repr raises too is still reported, and the Timer carries
    on (before, the failing report stopped the driver's re-arming for good)."""

    class Unprintable:
        def __repr__(self) -> str:
            raise ValueError("no repr")

    def fails(_: object) -> None:
        raise RuntimeError("callback failed")

    reported: list[dict[str, Any]] = []
    seen: list[tuple[int, int]] = []
    async with Timer(exception_handler=reported.append) as timer:

        def look() -> None:
            stats = timer.stats()
            seen.append((stats.fired, stats.lateness.count))

        when = timer.time() + 0.002
        for _ in range(5):
            timer.call_at(when, lambda: None)
        timer.call_at(when, look)
        timer.call_at(when, fails, Unprintable())
        after = timer.call_later(0.01, look)
        await timer.sleep(0.02)
    assert seen[0] == (6, 6)  # itself included: counted as it starts
    assert seen[1] == (8, 8) and after.cancelled() is False
    [context] = reported
    assert isinstance(context["exception"], RuntimeError)
    assert "repr failed" in context["message"]


async def test_len_counts_pending_timers_and_jobs() -> None:
    async with Timer() as timer:
        assert len(timer) == 0
        handle = timer.call_later(0.001, noop)
        job = timer.schedule(0.001, noop)
        far = timer.call_later(10, noop)
        assert len(timer) == 3
        handle.cancel()
        assert len(timer) == 2
        await job
        assert len(timer) == 1
        far.cancel()
        assert len(timer) == 0


async def test_reprs() -> None:
    timer = Timer(tick=0.002, wheel_size=16)
    assert repr(timer) == "<Timer tick=0.002 wheel_size=16 idle pending=0>"
    async with timer:
        when = timer.time() + 5
        handle = timer.call_at(when, noop)
        assert repr(timer) == "<Timer tick=0.002 wheel_size=16 running pending=1>"
        assert repr(handle).startswith(f"<TimerHandle when={when!r} pending <function noop")
        handle.cancel()
        assert repr(handle) == f"<TimerHandle when={when!r} cancelled None>"
        done = timer.call_at(when - 10, noop)
        job = timer.schedule_at(when, noop)
        assert repr(job).startswith(f"<Job when={when!r} pending <function noop")
        await timer.sleep(0)
        assert repr(done).startswith(f"<TimerHandle when={when - 10!r} done ")
    assert repr(timer) == "<Timer tick=0.002 wheel_size=16 closed pending=0>"
    assert repr(job).startswith(f"<Job when={when!r} cancelled ")
