"""The driver -- it never ticks (no wake-up for timers an hour away), wakes once per non-empty
bucket, re-arms for earlier timers, and runs nothing early when it is woken early.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio
import pytest
from support import TICK, Fired, assert_on_time, is_virtual, noop

import aiowheel.timer
from aiowheel import Timer, TimerHandle

if TYPE_CHECKING:
    from aiowheel._backends import Backend

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- never early, also when the driver is woken early ------------------------------------------


async def test_never_early_when_the_driver_is_woken_early(
    backend_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    early_arms = 0
    make_backend = aiowheel.timer.current_backend

    def backend_arming_early() -> Backend:
        # The Timer's backend, but it wakes the driver halfway to the time asked for, until it
        # is very close: every deadline is approached by several early wake-ups.
        backend = make_backend()
        real_arm = backend.arm

        def arm_early(when: float | None) -> None:
            nonlocal early_arms
            now = backend.time()
            if when is not None and when - now > TICK / 8:
                early_arms += 1
                when = now + (when - now) / 2
            real_arm(when)

        backend.arm = arm_early  # type: ignore[method-assign]
        return backend

    monkeypatch.setattr(aiowheel.timer, "current_backend", backend_arming_early)
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        whens = [timer.time() + offset for offset in (0.0105, 0.0203, 0.02035, 0.04)]
        for when in whens:
            timer.call_at(when, fired, when)
        await timer.sleep_until(max(whens))
        stats = timer.stats()

    assert early_arms > 0
    if is_virtual(backend_name):
        # More wake-ups than due buckets (the sleep shares the last one): it was woken early.
        assert stats.driver_wakeups > 3
    assert fired.labels == whens
    for when, ran_at in fired.calls:
        assert_on_time(when, ran_at, exact=is_virtual(backend_name))


# -- the driver: no ticking, one wake-up per bucket, re-arming ---------------------------------


async def test_the_driver_does_not_wake_for_timers_an_hour_away(virtual_time: None) -> None:
    async with Timer(tick=TICK, wheel_size=64) as timer:
        start = timer.time()
        for i in range(10_000):
            timer.call_later(3600 + i * 0.001, noop)
        await anyio.sleep(600)  # ten virtual minutes, not on the wheel
        assert timer.time() == start + 600
        stats = timer.stats()
    assert stats.driver_wakeups == 0
    assert stats.fired == 0
    assert stats.pending == 10_000


async def test_one_wakeup_per_non_empty_bucket(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        base = (math.floor(timer.time() / TICK) + 10) * TICK
        # 100 timers within one tick: one bucket, one wake-up.
        for i in range(100):
            timer.call_at(base + 0.0001 + i * 0.000008, fired, i)  # ticks: base + 1
        await anyio.sleep(base + 0.01 - timer.time())
        assert timer.stats().driver_wakeups == 1
        assert fired.labels == list(range(100))
        # Five more buckets, some cancelled timers in a sixth: five wake-ups.
        later = (math.floor(timer.time() / TICK) + 10) * TICK
        for bucket in range(5):
            for i in range(10):
                timer.call_at(later + 0.0001 + bucket * 0.003 + i * 0.00005, fired, (bucket, i))
        cancelled = [timer.call_at(later + 0.0205, fired, "cancelled") for _ in range(10)]
        for handle in cancelled:
            handle.cancel()
        await anyio.sleep(later + 0.03 - timer.time())
        stats = timer.stats()
    assert stats.driver_wakeups == 1 + 5
    assert stats.fired == 150


async def test_the_driver_rearms_for_earlier_and_earlier_timers(backend_name: str) -> None:
    exact = is_virtual(backend_name)
    delays = [2.0, 1.0, 0.5, 0.25, 0.04, 0.02, 0.01, 0.005] if exact else [0.04, 0.02, 0.01]
    async with Timer(tick=TICK) as timer:
        fired = Fired(timer)
        handles: dict[float, TimerHandle] = {}
        for delay in delays:
            handles[delay] = timer.call_later(delay, fired, delay)
            await anyio.sleep(0)  # let the driver sleep on the current earliest timer
        await timer.sleep_until(max(handle.when() for handle in handles.values()))
    assert fired.labels == sorted(delays)
    for delay, ran_at in fired.calls:
        assert_on_time(handles[delay].when(), ran_at, exact=exact)
