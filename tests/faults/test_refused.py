"""What is refused outright: copying or pickling a handle (:data:`COPIES`), a virtual clock started
at infinity, NaN or a non-number (:data:`BAD_STARTS`).
"""

from __future__ import annotations

import asyncio
import copy
import math
import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest
from support import make_loop, needs_uvloop
from twins import is_loop_handle

from aiowheel import Timer
from aiowheel.testing import VirtualTimeLoop, run

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- copying and pickling a handle ----------------------------------------------------------------
#
# A handle is the one handle of its timer: copy.copy, copy.deepcopy and pickle.dumps are refused
# with a TypeError, on both cores, for the Timer's TimerHandle and Job and for the wheel loop's
# LoopTimerHandle, pending, run or cancelled alike. (A copy sharing the timer's place on the
# wheel could cancel it behind the original's back; one not sharing it, or an unpickled one,
# would be a handle of no timer.) After the refusal the handle is unchanged: a pending one runs.

COPIES: dict[str, Callable[[Any], object]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "pickle.dumps": pickle.dumps,
}
STATES = ["pending", "run", "cancelled"]
NOT_COPYABLE = r"a {} cannot be copied or pickled: it is the one handle of its timer"


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("kind", ["TimerHandle", "Job"])
async def test_copying_a_timer_handle(backend_name: str, kind: str, how: str, state: str) -> None:
    ran: list[str] = []
    async with Timer() as timer:
        schedule = timer.call_later if kind == "TimerHandle" else timer.schedule
        handle = schedule(0.001, ran.append, "ran")
        if state == "run":
            await timer.sleep(0.002)
        elif state == "cancelled":
            handle.cancel()
        with pytest.raises(TypeError, match=NOT_COPYABLE.format(kind)):
            COPIES[how](handle)
        await timer.sleep(0.002)
    assert ran == ([] if state == "cancelled" else ["ran"])
    assert handle.cancelled() == (state == "cancelled")


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("kind", ["virtual", pytest.param("uvloop", marks=needs_uvloop)])
def test_copying_a_wheel_loop_handle(kind: str, how: str, state: str) -> None:
    ran: list[str] = []
    loop = make_loop(kind)
    try:
        handle = loop.call_later(0.01, ran.append, "ran")  # on the wheel: >= min_delay
        assert is_loop_handle(handle)
        if state == "run":
            loop.run_until_complete(asyncio.sleep(0.02))
        elif state == "cancelled":
            handle.cancel()
        with pytest.raises(TypeError, match=NOT_COPYABLE.format("LoopTimerHandle")):
            COPIES[how](handle)
        loop.run_until_complete(asyncio.sleep(0.02))
    finally:
        loop.close()
    assert ran == ([] if state == "cancelled" else ["ran"])
    assert handle.cancelled() == (state == "cancelled")


# -- a virtual clock started nowhere --------------------------------------------------------------
#
# VirtualTimeLoop(start=...) and aiowheel.testing.run(start=...) check start as advance() checks
# its seconds, with the same messages: at infinity the clock would never reach a timer (the loop
# spun at 100 % CPU), at NaN every timer would be due at once, out of order. A negative start is
# a clock like any other.

BAD_STARTS: list[tuple[object, type[Exception], str]] = [
    (math.inf, ValueError, "start must be finite, got inf"),
    (-math.inf, ValueError, "start must be finite, got -inf"),
    (math.nan, ValueError, "start must be finite, got nan"),
    (10**400, ValueError, "start must be finite, got 1000"),
    ("1", TypeError, "start must be an int or a float, got '1'"),
    (None, TypeError, "start must be an int or a float, got None"),
    (True, TypeError, "start must be an int or a float, got True"),
]


@pytest.mark.parametrize("entry", ["VirtualTimeLoop", "run"])
@pytest.mark.parametrize(
    ("start", "error", "message"), BAD_STARTS, ids=[repr(s)[:8] for s, _, _ in BAD_STARTS]
)
def test_bad_start(entry: str, start: Any, error: type[Exception], message: str) -> None:
    started: list[str] = []

    async def main() -> None:
        started.append("main")

    with pytest.raises(error, match=re.escape(message)):
        if entry == "VirtualTimeLoop":
            VirtualTimeLoop(start=start).close()
        else:
            run(main(), start=start)
    assert started == []


@pytest.mark.parametrize("start", [-5, -0.5, 0, 2.5])
def test_any_finite_start(start: float) -> None:
    assert run(_loop_time(), start=start) == start
    loop = VirtualTimeLoop(start=start)
    try:
        assert loop.time() == start
    finally:
        loop.close()


async def _loop_time() -> float:
    return asyncio.get_running_loop().time()
