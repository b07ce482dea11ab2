"""Tests for :mod:`aiowheel.testing`: ``VirtualTimeLoop``, asyncio in virtual time, and ``run``.

The loop's promise: when it would block waiting for its next timer, the clock jumps exactly to
that timer instead, so every timing assertion here is exact (``==``), with no real waiting.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time

import pytest

from aiowheel import Timer
from aiowheel.testing import VirtualTimeLoop, run


async def _now() -> float:
    return asyncio.get_running_loop().time()


# -- run() and construction --------------------------------------------------------------------


def test_run_returns_the_result_on_a_virtual_time_loop() -> None:
    async def main() -> tuple[type, float, bool]:
        loop = asyncio.get_running_loop()
        return type(loop), loop.time(), loop.get_debug()

    assert run(main()) == (VirtualTimeLoop, 0.0, False)
    assert run(main(), start=1234.5, debug=True) == (VirtualTimeLoop, 1234.5, True)


def test_run_propagates_the_error_and_closes_the_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        raise LookupError("from main")

    with pytest.raises(LookupError, match="from main"):
        run(main())
    assert loops[0].is_closed()


def test_it_is_a_selector_event_loop_with_a_clock_of_its_own() -> None:
    loop = VirtualTimeLoop(start=50)
    try:
        assert isinstance(loop, asyncio.SelectorEventLoop)
        assert loop.time() == 50.0
        assert isinstance(loop.time(), float)
        time.sleep(0.002)
        assert loop.time() == 50.0  # real time does not move it
    finally:
        loop.close()


# -- clock jumps -------------------------------------------------------------------------------


@pytest.mark.parametrize("start", [0.0, 1e6 + 0.1])
def test_sleep_is_exact_and_jumps_the_clock(start: float) -> None:
    # From a second to a week: the week is beyond asyncio's longest select timeout (one day).
    delays = [0.0, 1e-9, 0.001, 0.1, 1.0, 3600.0, 7 * 86400.0]

    async def main() -> list[tuple[float, float]]:
        seen = []
        for delay in delays:
            before = await _now()
            await asyncio.sleep(delay)
            seen.append((before + delay, await _now()))
        return seen

    for expected, now in run(main(), start=start):
        assert now == expected


def test_concurrent_sleepers_wake_in_order_each_at_its_time() -> None:
    delays = [3.0, 0.5, 2.25, 0.5, 10.0, 1e-3]

    async def sleeper(delay: float, woke: list[tuple[float, float]]) -> None:
        await asyncio.sleep(delay)
        woke.append((delay, await _now()))

    async def main() -> list[tuple[float, float]]:
        woke: list[tuple[float, float]] = []
        await asyncio.gather(*(sleeper(delay, woke) for delay in delays))
        assert await _now() == 100.0 + max(delays)
        return woke

    woke = run(main(), start=100.0)
    assert [delay for delay, _ in woke] == sorted(delays)
    assert all(now == 100.0 + delay for delay, now in woke)


@pytest.mark.parametrize(
    ("start", "when"),
    [
        # now + (when - now) rounds below when: a jump by the timeout would land short of it.
        (0.8681078156023432, 32196.11311510039),
        # now + (when - now) rounds above when: a jump by the timeout would overshoot it.
        (1.36, 3.53),
        # when is a hair after now: asyncio's clock_resolution would run it before its time.
        (279.404, math.nextafter(279.404, math.inf)),
    ],
    ids=["rounds-below", "rounds-above", "one-ulp-later"],
)
def test_a_timer_runs_exactly_when_the_clock_reaches_its_time(start: float, when: float) -> None:
    seen: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.call_at(when, lambda: (seen.append(loop.time()), done.set_result(None)))
        await done

    run(main(), start=start)
    assert seen == [when]  # neither a hair before (early) nor after: virtual time is exact


def test_callbacks_see_their_own_when() -> None:
    async def main() -> list[tuple[float, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[float, float]] = []
        whens = [loop.time() + offset for offset in (0.3, 0.1, 1 / 3, 7.77, 86400.5, 1e-7)]
        for when in whens:
            loop.call_at(when, lambda w=when: seen.append((w, loop.time())))
        await asyncio.sleep(max(whens) - loop.time())
        await asyncio.sleep(0)
        assert sorted(when for when, _ in seen) == sorted(whens)
        return seen

    seen = run(main(), start=12345.678)
    assert [when for when, _ in seen] == sorted(when for when, _ in seen)
    assert all(now == when for when, now in seen)


def test_a_cancelled_timer_does_not_move_the_clock() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        loop.call_later(5, pytest.fail).cancel()
        await asyncio.sleep(1)
        return loop.time()

    assert run(main()) == 1.0


def test_asyncio_timeout_runs_in_virtual_time() -> None:
    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5):
                await asyncio.sleep(3600)
        return await _now()

    assert run(main(), start=10.0) == 15.0


def test_a_timer_on_the_loop_sees_virtual_time() -> None:
    async def main() -> tuple[float, float]:
        async with Timer(tick=0.001) as timer:
            start = timer.time()
            await timer.sleep(3600)
            return start, timer.time()

    start, end = run(main(), start=7.0)
    assert start == 7.0
    assert 3607.0 <= end < 3607.0 + 0.001


# -- advance() ---------------------------------------------------------------------------------


def test_advance_moves_the_clock_and_due_timers_run_next_iteration() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        ran: list[tuple[str, float]] = []
        loop.call_later(10, lambda: ran.append(("at 10", loop.time())))
        loop.call_later(30, lambda: ran.append(("at 30", loop.time())))
        loop.advance(4)
        assert loop.time() == 4.0
        await asyncio.sleep(0)
        assert ran == []
        loop.advance(0)
        loop.advance(16)  # overshoots the first timer: it runs late, at 20
        assert ran == []  # not inline
        await asyncio.sleep(0)
        assert loop.time() == 20.0
        await asyncio.sleep(15)  # the idle loop then jumps to the next timer
        return ran

    assert run(main()) == [("at 10", 20.0), ("at 30", 30.0)]


def test_advance_on_a_loop_that_is_not_running() -> None:
    loop = VirtualTimeLoop()
    try:
        loop.advance(2.5)
        loop.advance(0.5)
        assert loop.time() == 3.0
        assert loop.run_until_complete(_now()) == 3.0
    finally:
        loop.close()


@pytest.mark.parametrize("seconds", [-1, -1e-9, math.nan, -math.inf])
def test_advance_refuses_to_go_back_or_nowhere(seconds: float) -> None:
    loop = VirtualTimeLoop(start=5)
    try:
        with pytest.raises(ValueError, match=r"seconds must be >= 0, got "):
            loop.advance(seconds)
        assert loop.time() == 5.0
    finally:
        loop.close()


# -- real I/O ----------------------------------------------------------------------------------


def test_ready_io_is_served_before_the_clock_jumps() -> None:
    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        try:
            left.setblocking(False)
            right.setblocking(False)
            loop.call_later(100, pytest.fail)  # a timer pending far away
            await loop.sock_sendall(left, b"ping")
            data = await loop.sock_recv(right, 4)
            return data, loop.time()
        finally:
            left.close()
            right.close()

    assert run(main(), start=1.0) == (b"ping", 1.0)


def test_with_no_timer_pending_the_loop_waits_for_io() -> None:
    def work() -> str:
        time.sleep(0.005)  # in a thread: the loop must block on its selector, not spin or jump
        return "done"

    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, work)
        return result, loop.time()

    assert run(main(), start=2.0) == ("done", 2.0)
