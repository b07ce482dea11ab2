"""Tests for :mod:`aiowheel.timeouts`: ``timer.timeout`` / ``timeout_at`` / ``move_on_*``.

Every async test runs on virtual-time asyncio, uvloop and trio (MockClock) -- see conftest.py;
those asserting times ask for ``virtual_time`` and assert them exactly (with tick 0.25, binary
fractions all the way). The expected behaviour is asyncio's ``asyncio.timeout`` and anyio's
``fail_after`` / ``move_on_after``; "cancelled" below means the backend's cancellation,
``anyio.get_cancelled_exc_class()``.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from support import HANG

from aiowheel import PendingLimitError, Timer
from aiowheel.testing import run
from aiowheel.timeouts import Timeout

# Every test on both twins of the cores (the `core` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("core")]

TICK = 0.25


async def test_expiry_cancels_the_block_and_raises_timeout_error(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        cancelled_at = None
        with pytest.raises(TimeoutError) as raised:
            async with timer.timeout(1.5) as t:
                assert t.when() == t0 + 1.5 and not t.expired()
                try:
                    await anyio.sleep(10)
                except anyio.get_cancelled_exc_class():
                    cancelled_at = timer.time()
                    raise
        assert cancelled_at == timer.time() == t0 + 1.5
        assert isinstance(raised.value.__cause__, anyio.get_cancelled_exc_class())
        assert t.expired() and t.cancelled_caught
        assert len(timer) == 0
        await anyio.sleep(1)  # the task is not left cancelled


async def test_timeout_at_absolute_deadline(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with pytest.raises(TimeoutError):
            async with timer.timeout_at(t0 + 2.25) as t:
                await anyio.sleep_forever()
        assert timer.time() == t0 + 2.25 and t.when() == t0 + 2.25


async def test_no_expiry_leaves_the_block_alone() -> None:
    async with Timer(tick=0.001) as timer:
        async with timer.timeout(HANG) as t:  # uvloop: real time, on a loaded machine
            await anyio.sleep(0.01)
            result = "done"
        assert result == "done"
        assert not t.expired() and not t.cancelled_caught
        assert len(timer) == 0  # the wheel entry left with the block
        await anyio.sleep(0.01)


async def test_errors_from_the_block_pass_through() -> None:
    async with Timer() as timer:
        with pytest.raises(KeyError):
            async with timer.timeout(10) as t:
                raise KeyError("x")
        assert not t.expired() and len(timer) == 0


async def test_none_means_no_deadline(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        async with timer.timeout(None) as t:
            assert t.when() is None
            await anyio.sleep(1000)
        async with timer.timeout_at(None) as t:
            assert len(timer) == 0
        assert not t.expired()


async def test_reschedule_later_is_lazy(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with pytest.raises(TimeoutError):
            async with timer.timeout(1) as t:
                for i in range(1000):  # a deadline pushed on every message
                    t.reschedule(t0 + 2 + i * TICK / 100)
                assert len(timer) == 1 and timer.stats().cancelled == 0  # no wheel operation
                await anyio.sleep(0.75)
                t.reschedule(t0 + 3.5)
                assert t.when() == t0 + 3.5
                await anyio.sleep_forever()
        # The entry filed for t0 + 1 fired early and re-filed itself at the final deadline.
        assert timer.time() == t0 + 3.5
        assert timer.stats().cancelled == 0


async def test_reschedule_earlier(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with pytest.raises(TimeoutError):
            async with timer.timeout(10) as t:
                t.reschedule(t0 + 1.25)
                assert t.when() == t0 + 1.25 and len(timer) == 1
                await anyio.sleep_forever()
        assert timer.time() == t0 + 1.25


async def test_reschedule_to_none_and_back(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with pytest.raises(TimeoutError):
            async with timer.timeout(1) as t:
                t.reschedule(None)
                await anyio.sleep(5)  # the old entry fires at t0 + 1 and does nothing
                assert t.when() is None and not t.expired()
                t.reschedule(t0 + 6)
                await anyio.sleep_forever()
        assert timer.time() == t0 + 6


async def test_reschedule_to_the_past_cancels_at_the_next_await(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with pytest.raises(TimeoutError):
            async with timer.timeout(10) as t:
                t.reschedule(t0 - 1)
                assert not t.expired()  # as asyncio.timeout: not before the loop delivers it
                await anyio.lowlevel.checkpoint()
                pytest.fail("not cancelled at the first await")
        assert timer.time() == t0


@pytest.mark.parametrize("delay", [0, -1])
async def test_deadline_already_past_cancels_at_the_first_await(delay: float) -> None:
    async with Timer() as timer:
        reached = []
        with pytest.raises(TimeoutError):
            async with timer.timeout(delay) as t:
                reached.append("before the first await")
                await anyio.lowlevel.checkpoint()
                reached.append("after it")
        assert reached == ["before the first await"] and t.cancelled_caught


async def test_deadline_past_without_an_await_cancels_nothing_later() -> None:
    async with Timer() as timer:
        async with timer.timeout(-1) as t:
            pass  # no await: nothing to cancel, nothing raised (as asyncio.timeout)
        assert not t.expired() and not t.cancelled_caught  # never delivered, as asyncio's
        await anyio.lowlevel.checkpoint()  # not cancelled out here either
        await anyio.sleep(0.001)


async def test_block_that_swallows_the_cancellation(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        async with timer.timeout(1) as t:
            try:
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                pass
        assert t.expired() and not t.cancelled_caught  # nothing left to catch: no TimeoutError
        await anyio.sleep(1)


async def test_move_on_does_not_raise(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        async with timer.move_on_after(1) as scope:
            await anyio.sleep_forever()
        assert scope.cancelled_caught and scope.expired() and timer.time() == t0 + 1
        async with timer.move_on_at(t0 + 3) as scope:
            await anyio.sleep_forever()
        assert scope.cancelled_caught and timer.time() == t0 + 3
        async with timer.move_on_after(5) as scope:
            await anyio.sleep(1)
        assert not scope.cancelled_caught and not scope.expired() and timer.time() == t0 + 4


async def test_nested_inner_expires_first(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        async with timer.timeout(5) as outer:
            with pytest.raises(TimeoutError):
                async with timer.timeout(1) as inner:
                    await anyio.sleep_forever()
            assert timer.time() == t0 + 1
            await anyio.sleep(1)  # the outer block goes on
        assert inner.expired() and inner.cancelled_caught
        assert not outer.expired() and not outer.cancelled_caught


@pytest.mark.parametrize("inner_delay", [5, 1])
async def test_nested_outer_expires_first_or_together(
    virtual_time: None, inner_delay: float
) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with pytest.raises(TimeoutError):
            async with timer.timeout(1) as outer:
                async with timer.timeout(inner_delay) as inner:
                    await anyio.sleep_forever()
                pytest.fail("the outer deadline's cancellation was caught by the inner timeout")
        assert timer.time() == t0 + 1
        assert outer.cancelled_caught and not inner.cancelled_caught
        assert inner.expired() == (inner_delay == 1)


async def test_cancellation_from_outside_is_not_a_timeout(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with anyio.CancelScope() as scope:
            async with timer.timeout(10) as t:
                timer.call_at(t0 + 1, scope.cancel)
                await anyio.sleep_forever()
        assert scope.cancelled_caught and not t.expired() and not t.cancelled_caught
        assert timer.time() == t0 + 1


async def test_outside_cancellation_at_the_same_time_wins(virtual_time: None) -> None:
    # The enclosing scope and the timeout are cancelled in the same driver pass: the
    # cancellation belongs to the enclosing scope and is not turned into TimeoutError.
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        with anyio.CancelScope() as scope:
            timer.call_at(t0 + 1, scope.cancel)
            async with timer.timeout(1) as t:
                await anyio.sleep_forever()
        assert scope.cancelled_caught and t.expired() and not t.cancelled_caught


async def test_task_group_cancellation_is_not_a_timeout(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        outcome = []

        async def worker() -> None:
            try:
                async with timer.timeout(10):
                    await anyio.sleep_forever()
            except TimeoutError:
                outcome.append("timeout")
            except anyio.get_cancelled_exc_class():
                outcome.append("cancelled")
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            await anyio.sleep(1)
            tg.cancel_scope.cancel()
        assert outcome == ["cancelled"]


async def test_asyncio_task_cancel_from_outside(anyio_backend_name: str) -> None:
    if anyio_backend_name != "asyncio":
        pytest.skip("task.cancel() is asyncio's")
    async with Timer() as timer:

        async def body() -> None:
            async with timer.timeout(HANG):
                await asyncio.sleep(HANG)

        task = asyncio.ensure_future(body())
        await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()


async def test_five_thousand_timeouts_cost_one_loop_timer(
    virtual_time: None, anyio_backend_name: str
) -> None:
    async with Timer(tick=TICK) as timer:
        t0 = timer.time()
        n = 5000
        outcomes: list[tuple[str, float]] = []
        everyone_waits = anyio.Event()
        never = anyio.Event()  # not anyio.sleep_forever(): on asyncio that is a loop timer
        entered = 0

        async def worker(i: int) -> None:
            nonlocal entered
            try:
                async with timer.timeout(1 + (i % 4) * TICK):
                    entered += 1
                    if entered == n:
                        everyone_waits.set()
                    await never.wait()
            except TimeoutError:
                outcomes.append(("timeout", timer.time() - t0))

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(worker, i)
            await everyone_waits.wait()
            assert len(timer) == n  # 5,000 wheel entries...
            if anyio_backend_name == "asyncio":
                loop = asyncio.get_running_loop()
                assert len(loop._scheduled) == 1  # type: ignore[attr-defined]  # ...one loop timer
            wakeups = timer.stats().driver_wakeups
        assert sorted(outcomes) == sorted(("timeout", 1 + (i % 4) * TICK) for i in range(n))
        assert timer.stats().driver_wakeups - wakeups <= 4  # one pass per distinct deadline
        assert len(timer) == 0


# -- max_pending: the Timeout's own re-filing is never refused ----------------------------------


def _noop() -> None:
    return None


async def test_a_deadline_moved_later_fires_on_a_timer_at_max_pending(virtual_time: None) -> None:
    """The entry filed for the old deadline fires and re-files itself; by then the Timer is at
    max_pending again. That re-filing is the Timeout's own bookkeeping, not new work: never
    refused (it was, and the block ran to its end)."""
    errors: list[dict[str, object]] = []
    async with Timer(tick=TICK, max_pending=2, exception_handler=errors.append) as timer:
        t0 = timer.time()

        def fill_up() -> None:  # runs just before the Timeout's entry, in the same batch
            timer.call_later(50, _noop)
            timer.call_later(50, _noop)

        timer.call_at(t0 + 1, fill_up)
        async with timer.move_on_after(1) as t:
            t.reschedule(t0 + 2)
            await anyio.sleep(60)
        assert t.cancelled_caught
        assert timer.time() == t0 + 2
    assert errors == []


async def test_new_deadlines_at_max_pending_are_refused_at_the_call(virtual_time: None) -> None:
    """New work is refused where it is asked for, loudly, and changes nothing."""
    async with Timer(tick=TICK, max_pending=1) as timer:
        t0 = timer.time()
        async with timer.move_on_at(None) as t:
            timer.call_at(t0 + 50, _noop)
            with pytest.raises(PendingLimitError):
                t.reschedule(t0 + 1)  # no entry filed yet: a new one is needed
            assert t.when() is None  # unchanged by the refused call
            await anyio.sleep(2)
        assert not t.cancelled_caught
        with pytest.raises(PendingLimitError):
            async with timer.timeout(1):
                pass


# -- errors and states ---------------------------------------------------------------------------


async def test_bad_arguments() -> None:
    async with Timer() as timer:
        with pytest.raises(TypeError, match="delay must be a real number, got '1'"):
            timer.timeout("1")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="delay must be finite, got nan"):
            timer.move_on_after(math.nan)
        with pytest.raises(ValueError, match="when must be finite, got inf"):
            timer.timeout_at(math.inf)
        async with timer.timeout(10) as t:
            with pytest.raises(TypeError, match="when must be a real number"):
                t.reschedule("soon")  # type: ignore[arg-type]
            assert t.when() is not None  # unchanged by the failed call


async def test_states_as_asyncio_timeout() -> None:
    async with Timer() as timer:
        t = timer.timeout(10)
        assert repr(t) == "<Timeout [created]>"
        with pytest.raises(RuntimeError, match="Timeout has not been entered"):
            t.reschedule(1)
        async with t:
            assert repr(t).startswith("<Timeout [active] when=")
            with pytest.raises(RuntimeError, match="Timeout has already been entered"):
                async with t:
                    pass
        assert repr(t) == "<Timeout [finished]>"
        with pytest.raises(RuntimeError, match="Cannot change state of finished Timeout"):
            t.reschedule(1)
        with pytest.raises(TimeoutError):
            async with timer.timeout(0) as t:
                await anyio.lowlevel.checkpoint()
        assert repr(t) == "<Timeout [expired]>"
        with pytest.raises(RuntimeError, match="Cannot change state of expired Timeout"):
            t.reschedule(None)


async def test_needs_a_running_timer() -> None:
    timer = Timer()
    with pytest.raises(RuntimeError, match="Timer is not running"):
        timer.timeout(1)
    t = timer.timeout_at(None)
    with pytest.raises(RuntimeError, match="Timer is not running"):
        async with t:
            pass
    assert isinstance(t, Timeout)


# -- every reschedule sequence, against asyncio.timeout itself (issue 27, item 9) ----------------
#
# A block enters a timeout without a deadline, reschedules it by each offset from the clock in
# turn (None: no deadline), notes expired(), then sleeps 1 s. asyncio.timeout on asyncio's loop in
# virtual time is the reference; the Timer's timeout must end each sequence the same way on
# asyncio, uvloop and trio. A deadline already past is delivered as the loop next runs, so a
# later reschedule takes it back.

RESCHEDULES: list[list[float | None]] = [
    [-1],
    [0],
    [0.5],
    [5],
    [None],
    [-1, 5],
    [-1, None],
    [0, 5],
    [5, -1],
    [-1, -2],
    [-1, 5, -1],
    [0.5, -1, 5],
    [None, -1, 5],
    [5, 0.5],
    [0.5, 5],
    [-1, 0.5],
]


async def _reschedule_block(
    timeout: Any, now: Any, sleep: Any, offsets: list[float | None]
) -> list[str]:
    events: list[str] = []
    try:
        async with timeout(None) as t:
            start = now()
            for offset in offsets:
                try:
                    t.reschedule(None if offset is None else start + offset)
                except RuntimeError as exc:
                    events.append(f"RuntimeError: {exc}")
            events.append(f"expired={t.expired()}")
            await sleep(1)
            events.append("slept")
    except TimeoutError:
        events.append("TimeoutError")
    events.append(f"finally expired={t.expired()}")
    return events


@pytest.fixture
def asyncio_timeout_outcome(offsets: list[float | None]) -> list[str]:
    """The reference: the sequence with asyncio.timeout (run before the test's own loop)."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        return await _reschedule_block(asyncio.timeout, loop.time, asyncio.sleep, offsets)

    return run(main())


@pytest.mark.parametrize("offsets", RESCHEDULES, ids=str)
async def test_every_reschedule_sequence_ends_as_with_asyncio_timeout(
    offsets: list[float | None], asyncio_timeout_outcome: list[str]
) -> None:
    async with Timer() as timer:
        observed = await _reschedule_block(timer.timeout, timer.time, anyio.sleep, offsets)
    assert observed == asyncio_timeout_outcome
