"""``sleep`` and ``sleep_until`` on the wheel: on time, yielding even when already due, and leaving
no timer behind when cancelled.
"""

from __future__ import annotations

import anyio
import pytest
from support import TICK, assert_on_time, is_virtual

from aiowheel import Timer

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- sleep / sleep_until --------------------------------------------------------------------------


async def test_sleep_and_sleep_until(backend_name: str) -> None:
    exact = is_virtual(backend_name)
    async with Timer(tick=TICK) as timer:
        for delay in [0.0003, 0.001, 0.0125] + ([2.5, 300.0] if exact else []):
            start = timer.time()
            await timer.sleep(delay)
            assert_on_time(start + delay, timer.time(), exact=exact)
        when = timer.time() + 0.0207
        await timer.sleep_until(when)
        assert_on_time(when, timer.time(), exact=exact)
        assert len(timer) == 0


async def test_sleep_zero_and_sleep_until_the_past_still_yield(backend_name: str) -> None:
    others: list[str] = []

    async def other() -> None:
        others.append("ran")

    async with Timer() as timer:
        for sleep in [
            lambda: timer.sleep(0),
            lambda: timer.sleep(-1),
            lambda: timer.sleep_until(timer.time() - 10),
        ]:
            others.clear()
            wakeups = timer.stats().driver_wakeups
            start = timer.time()
            async with anyio.create_task_group() as group:
                group.start_soon(other)
                await sleep()
                assert others == ["ran"]  # another task ran meanwhile
            assert timer.stats().driver_wakeups > wakeups  # through the driver
            if is_virtual(backend_name):
                assert timer.time() == start


async def test_a_cancelled_sleep_leaves_no_timer_behind() -> None:
    async with Timer() as timer:
        with anyio.move_on_after(0.002) as scope:
            await timer.sleep(10)
        assert scope.cancelled_caught
        assert len(timer) == 0
        stats = timer.stats()
    assert stats.cancelled == 1
