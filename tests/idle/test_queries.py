"""Making an :class:`~aiowheel.IdleTimeouts` and asking it: what it refuses, ``in``, ``len``,
``deadline``, ``close`` and its repr.
"""

from __future__ import annotations

import math

import pytest
from idle_rule import TICK, Expired

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- construction and queries ---------------------------------------------------------------------


async def test_rejects_bad_arguments() -> None:
    async with Timer() as timer:
        with pytest.raises(TypeError, match="timeout must be a real number, got '1'"):
            IdleTimeouts(timer, "1", print)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="timeout must be a real number, got True"):
            IdleTimeouts(timer, True, print)
        for bad in (0, -1.0, math.inf, math.nan):
            with pytest.raises(ValueError, match="timeout must be finite and > 0"):
                IdleTimeouts(timer, bad, print)
        with pytest.raises(TypeError, match="on_expire must be callable, got 3"):
            IdleTimeouts(timer, 1, 3)  # type: ignore[arg-type]


async def test_touch_discard_and_queries() -> None:
    async with Timer() as timer:
        idle = IdleTimeouts(timer, 30, print)
        assert len(idle) == 0 and "a" not in idle and idle.deadline("a") is None
        before = timer.time()
        idle.touch("a")
        idle.touch("b")
        idle.touch("a")
        after = timer.time()
        assert len(idle) == 2 and "a" in idle and "b" in idle
        deadline = idle.deadline("a")
        assert deadline is not None
        assert before + 30 <= deadline < after + 30 + timer.tick
        assert idle.discard("a") is True
        assert idle.discard("a") is False
        assert idle.discard("never") is False
        assert "a" not in idle and idle.deadline("a") is None and len(idle) == 1
        idle.touch("a")  # tracked again after a discard
        assert "a" in idle and len(idle) == 2
        assert idle.timeout == 30 and idle.timer is timer
        assert repr(idle) == "<IdleTimeouts timeout=30 tracked=2>"
        idle.close()


async def test_touch_needs_a_running_timer() -> None:
    timer = Timer()
    idle = IdleTimeouts(timer, 1, print)  # may be created before the Timer starts
    with pytest.raises(RuntimeError, match="Timer is not running"):
        idle.touch("a")
    async with timer:
        idle.touch("a")
        assert "a" in idle


async def test_close_stops_everything(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        with IdleTimeouts(timer, 1, expired) as idle:
            for key in range(10):
                idle.touch(key)
            assert len(timer) == 1  # ten keys, one deadline, one wheel entry
        assert idle.closed and len(idle) == 0 and 0 not in idle and len(timer) == 0
        assert repr(idle) == "<IdleTimeouts timeout=1 closed>"
        idle.close()  # idempotent
        assert idle.discard(0) is False
        with pytest.raises(RuntimeError, match="IdleTimeouts is closed"):
            idle.touch(0)
        await timer.sleep(5)
        assert expired.calls == []
