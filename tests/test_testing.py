"""Tests for :mod:`aiowheel.testing`: ``VirtualTimeLoop``, ``run``, and ``VirtualClock`` (asyncio
and trio).

The loop's promise: when it would block waiting for its next timer, the clock jumps exactly to
that timer instead, so every timing assertion here is exact (``==``), with no real waiting.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time

import pytest

from aiowheel import Timer
from aiowheel.testing import VirtualClock, VirtualTimeLoop, run


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


def test_a_run_waits_for_executor_threads_in_real_time(recwarn: pytest.WarningsRecorder) -> None:
    # Python 3.12+'s asyncio.run gives the executor's threads a 300 s join timeout: on the
    # virtual clock it ran out at once, with a RuntimeWarning, while the thread still worked.
    finished = threading.Event()

    def work() -> None:
        time.sleep(0.05)
        finished.set()

    async def main() -> None:
        asyncio.get_running_loop().run_in_executor(None, work)  # still running when main ends

    run(main())
    assert finished.is_set()
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []


def test_advance_refuses_infinity_and_non_numbers() -> None:
    loop = VirtualTimeLoop(start=5)
    try:
        with pytest.raises(ValueError, match=r"seconds must be finite, got inf"):
            loop.advance(math.inf)
        with pytest.raises(TypeError, match=r"seconds must be an int or a float, got '1'"):
            loop.advance("1")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"got True"):
            loop.advance(True)
        assert loop.time() == 5.0
    finally:
        loop.close()


MAX = 1.7976931348623157e308  # sys.float_info.max
PAST_MAX = r"seconds 1\.7976931348623157e\+308 would move the clock from .* past the largest float"


def test_advance_never_makes_the_clock_infinite() -> None:
    """Regression (issue 27, item 8): two steps of the largest float made the clock inf, and a
    sleep(1) after it never returned."""
    loop = VirtualTimeLoop(start=5)
    try:
        loop.advance(MAX)
        with pytest.raises(ValueError, match=PAST_MAX):
            loop.advance(MAX)
        assert loop.time() == MAX
        loop.run_until_complete(asyncio.sleep(1))  # returns: the clock is finite
    finally:
        loop.close()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_clock_advance_never_makes_the_clock_infinite(backend: str) -> None:
    async def main() -> float:
        clock = VirtualClock()
        await clock.advance(MAX)
        with pytest.raises(ValueError, match=PAST_MAX):
            await clock.advance(MAX)
        return clock.time()

    if backend == "asyncio":
        assert run(main()) == MAX
    else:
        trio = pytest.importorskip("trio")
        from trio.testing import MockClock

        assert trio.run(main, clock=MockClock(autojump_threshold=0)) == MAX


# -- autojump ----------------------------------------------------------------------------------


def test_autojump_is_on_by_default_and_settable() -> None:
    loop = VirtualTimeLoop()
    try:
        assert loop.autojump is True
        loop.autojump = False
        assert loop.autojump is False
        with pytest.raises(TypeError, match=r"autojump must be True or False, got 1"):
            loop.autojump = 1  # type: ignore[assignment]
        assert loop.autojump is False
    finally:
        loop.close()
    manual = VirtualTimeLoop(autojump=False)
    try:
        assert manual.autojump is False
    finally:
        manual.close()


def test_without_autojump_an_idle_loop_waits_for_io_and_the_clock_stays() -> None:
    def work() -> str:
        time.sleep(0.005)  # real time passes in a thread; the loop must wait for it, not jump
        return "done"

    async def main() -> tuple[str, float, list[float]]:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        loop.call_later(1, lambda: fired.append(loop.time()))  # pending, never reached
        result = await loop.run_in_executor(None, work)
        return result, loop.time(), fired

    loop = VirtualTimeLoop(start=3.0, autojump=False)
    try:
        assert loop.run_until_complete(main()) == ("done", 3.0, [])
    finally:
        loop.close()


# -- VirtualClock on asyncio -------------------------------------------------------------------


def _schedule(log: list[tuple[str, float]], *delays: float) -> None:
    loop = asyncio.get_running_loop()
    for delay in delays:
        loop.call_later(delay, lambda d=delay: log.append((f"at +{d}", loop.time())))


@pytest.mark.parametrize("autojump", [True, False])
def test_clock_advance_runs_each_timer_at_its_own_deadline(autojump: bool) -> None:
    async def main() -> None:
        clock = VirtualClock()
        clock.autojump = autojump
        log: list[tuple[str, float]] = []
        _schedule(log, 30, 10, 20.5, 10, 45)
        await clock.advance(25)
        # Both at +10 in scheduling order, each seeing its own deadline, not the end of the span.
        assert log == [("at +10", 110.0), ("at +10", 110.0), ("at +20.5", 120.5)]
        assert clock.time() == 125.0  # the end of the span, exactly; the timer at 130 waits
        await clock.advance(5)
        assert log[3:] == [("at +30", 130.0)]
        assert clock.time() == 130.0

    run(main(), start=100.0)


def test_clock_advance_runs_what_the_timers_wake_and_schedule_within_the_span() -> None:
    async def sleeper(name: str, delay: float, log: list[tuple[str, float]]) -> None:
        await asyncio.sleep(delay)
        log.append((name, asyncio.get_running_loop().time()))
        if name == "first":  # a timer scheduled by a woken task, still inside the span
            await asyncio.sleep(1.5)
            log.append(("first again", asyncio.get_running_loop().time()))

    async def main() -> list[tuple[str, float]]:
        clock = VirtualClock()
        clock.autojump = False
        log: list[tuple[str, float]] = []
        tasks = [
            asyncio.create_task(sleeper("first", 1, log)),
            asyncio.create_task(sleeper("second", 2, log)),
            asyncio.create_task(sleeper("late", 9, log)),
        ]
        await clock.advance(3)
        assert [task.done() for task in tasks] == [True, True, False]
        tasks[2].cancel()
        return log

    assert run(main()) == [("first", 1.0), ("second", 2.0), ("first again", 2.5)]


def test_clock_advance_zero_only_lets_ready_work_run() -> None:
    async def main() -> None:
        clock = VirtualClock()
        started: list[float] = []

        async def worker() -> None:
            started.append(clock.time())
            await asyncio.sleep(1)
            started.append(clock.time())

        task = asyncio.create_task(worker())
        await clock.advance(0)
        assert started == [7.0]  # ran up to its sleep; the clock did not move
        assert clock.time() == 7.0
        await task  # autojump takes it from here
        assert started == [7.0, 8.0]

    run(main(), start=7.0)


@pytest.mark.parametrize(
    ("start", "when"),
    [
        (0.8681078156023432, 32196.11311510039),
        (1.36, 3.53),
        (279.404, math.nextafter(279.404, math.inf)),
    ],
    ids=["rounds-below", "rounds-above", "one-ulp-later"],
)
def test_clock_advance_stops_exactly_at_deadlines_float_rounding_or_not(
    start: float, when: float
) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen: list[float] = []
        loop.call_at(when, lambda: seen.append(loop.time()))
        await VirtualClock().advance(when - start + 1)
        return seen

    assert run(main(), start=start) == [when]


def test_clock_advance_does_not_let_autojump_overshoot() -> None:
    async def main() -> None:
        clock = VirtualClock()
        loop = asyncio.get_running_loop()
        loop.call_later(5, pytest.fail, "ran past the span")
        await clock.advance(4)
        assert clock.time() == 4.0

    run(main())


def test_clock_advance_by_two_tasks_at_once_is_refused() -> None:
    async def main() -> None:
        clock = VirtualClock()
        clock.autojump = False
        asyncio.get_running_loop().call_later(1, lambda: None)
        first = asyncio.create_task(clock.advance(10))
        await asyncio.sleep(0)  # first is now waiting inside advance
        with pytest.raises(RuntimeError, match="another task is already advancing"):
            await clock.advance(1)
        await first
        assert clock.time() == 10.0

    run(main())


def test_a_cancelled_advance_leaves_the_loop_working() -> None:
    async def main() -> None:
        clock = VirtualClock()
        clock.autojump = False
        advancing = asyncio.create_task(clock.advance(100))
        await asyncio.sleep(0)
        advancing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await advancing
        clock.autojump = True
        await asyncio.sleep(3)  # autojump is back in charge
        assert clock.time() == 3.0
        await clock.advance(2)  # and a new advance is accepted
        assert clock.time() == 5.0

    run(main())


@pytest.mark.parametrize(
    ("seconds", "error", "message"),
    [
        (-1, ValueError, r"seconds must be >= 0, got -1"),
        (math.nan, ValueError, r"seconds must be >= 0, got nan"),
        (math.inf, ValueError, r"seconds must be finite, got inf"),
        ("1", TypeError, r"seconds must be an int or a float, got '1'"),
        (None, TypeError, r"seconds must be an int or a float, got None"),
    ],
)
def test_clock_advance_refuses_bad_seconds(seconds: object, error: type, message: str) -> None:
    async def main() -> float:
        clock = VirtualClock()
        with pytest.raises(error, match=message):
            await clock.advance(seconds)  # type: ignore[arg-type]
        return clock.time()

    assert run(main(), start=1.0) == 1.0


def test_clock_without_autojump_lets_real_io_and_timers_meet() -> None:
    # The case autojump breaks: a server that drops a client idle for 3 s, tested over a real
    # socket. With autojump on, virtual time would race past 3 s while the bytes are in flight.
    async def main() -> tuple[bytes, bytes, float]:
        clock = VirtualClock()
        clock.autojump = False

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    async with asyncio.timeout(3):
                        line = await reader.readline()
                    writer.write(b"echo " + line)
            except TimeoutError:
                writer.write(b"idle, bye\n")
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        echo = await reader.readline()  # real I/O: the clock stays where it is
        assert clock.time() == 0.0
        await clock.advance(2.9)
        assert not reader.at_eof()
        await clock.advance(0.2)  # 3 s after the ping the server gives up
        bye = await reader.readline()
        writer.close()
        server.close()
        await server.wait_closed()
        return echo, bye, clock.time()

    assert run(main()) == (b"echo ping\n", b"idle, bye\n", 3.1)


def test_clock_restores_the_autojump_it_changed() -> None:
    loop = VirtualTimeLoop()
    try:

        async def main() -> VirtualClock:
            clock = VirtualClock()
            clock.autojump = False
            clock.autojump = False
            assert clock.autojump is False
            return clock

        clock = loop.run_until_complete(main())
        assert loop.autojump is False
        clock._restore_autojump()
        assert loop.autojump is True
    finally:
        loop.close()


def test_clock_refuses_a_non_bool_autojump() -> None:
    async def main() -> bool:
        clock = VirtualClock()
        with pytest.raises(TypeError, match=r"autojump must be True or False, got 'no'"):
            clock.autojump = "no"  # type: ignore[assignment]
        return clock.autojump

    assert run(main()) is True


def test_clock_outside_any_loop_says_so() -> None:
    clock = VirtualClock()
    assert repr(clock) == "<VirtualClock>"
    with pytest.raises(RuntimeError, match="no asyncio event loop and no trio run is running"):
        clock.time()
    with pytest.raises(RuntimeError, match="no asyncio event loop and no trio run is running"):
        clock.autojump = False


def test_clock_on_a_real_loop_says_how_to_get_virtual_time() -> None:
    async def main() -> None:
        clock = VirtualClock()
        with pytest.raises(RuntimeError, match=r"_UnixSelectorEventLoop, has a real clock") as info:
            clock.time()
        assert "aiowheel-virtual" in str(info.value)
        assert "MockClock(autojump_threshold=0)" in str(info.value)
        with pytest.raises(RuntimeError, match="has a real clock"):
            await clock.advance(1)

    asyncio.run(main())


# -- VirtualClock on trio ----------------------------------------------------------------------


def test_clock_on_trio_advances_the_mock_clock_deadline_by_deadline() -> None:
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    async def main() -> None:
        clock = VirtualClock()
        assert clock.time() == 0.0
        await trio.sleep(100)  # autojump
        assert clock.time() == 100.0
        assert clock.autojump is True
        clock.autojump = False
        log: list[tuple[str, float]] = []

        async def sleeper(name: str, delay: float) -> None:
            await trio.sleep(delay)
            log.append((name, trio.current_time()))

        async with trio.open_nursery() as nursery:
            for name, delay in [("c", 30.0), ("a", 10.0), ("b", 20.5)]:
                nursery.start_soon(sleeper, name, delay)
            await clock.advance(25)
            assert sorted(log) == [("a", 110.0), ("b", 120.5)]  # each at its own deadline
            assert clock.time() == 125.0
            await clock.advance(5)
        assert log[2:] == [("c", 130.0)]
        await clock.advance(0)
        assert clock.time() == 130.0

    mock = MockClock(autojump_threshold=0)
    trio.run(main, clock=mock)
    assert mock.autojump_threshold == math.inf  # switched off; the fixture would restore it


def test_clock_on_trio_restores_the_threshold_it_changed() -> None:
    trio = pytest.importorskip("trio")
    from trio.testing import MockClock

    async def main() -> VirtualClock:
        clock = VirtualClock()
        clock.autojump = True
        return clock

    mock = MockClock(autojump_threshold=0.25)
    clock = trio.run(main, clock=mock)
    assert mock.autojump_threshold == 0.0
    clock._restore_autojump()
    assert mock.autojump_threshold == 0.25


def test_clock_on_trio_with_a_real_clock_says_so() -> None:
    trio = pytest.importorskip("trio")

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"this trio run's clock is .*, a real one"):
            VirtualClock().time()

    trio.run(main)
