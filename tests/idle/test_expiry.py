"""The idle-expiry rule of ``IdleTimeouts``, exactly, in virtual time: a key touched at ``t``
expires at ``E(t)`` unless touched or discarded before, whether or not the driver has processed
the time yet.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from idle_rule import TICK, Expired, expiry
from support import jump

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts
from aiowheel.testing import VirtualTimeLoop, run

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- the rule, in virtual time --------------------------------------------------------------------


async def test_expires_exactly_at_deadline(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 2, expired)
        t0 = timer.time()
        idle.touch("a")
        deadline = expiry(t0, 2, TICK)
        assert idle.deadline("a") == deadline == t0 + 2
        await timer.sleep_until(deadline - TICK)
        assert expired.calls == [] and "a" in idle  # never early
        await timer.sleep_until(deadline + 10)
        assert expired.calls == [("a", deadline)]  # exactly at E, once
        assert "a" not in idle and len(idle) == 0 and idle.deadline("a") is None


async def test_touch_before_deadline_postpones(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        await timer.sleep_until(t0 + 0.75)
        idle.touch("a")  # strictly before E = t0 + 1
        await timer.sleep_until(t0 + 1.5)
        idle.touch("a")  # strictly before E = t0 + 1.75
        assert idle.deadline("a") == t0 + 2.5
        await timer.sleep_until(t0 + 10)
        assert expired.calls == [("a", t0 + 2.5)]
        # The key was re-filed lazily: no wheel entry was cancelled on the way.
        assert timer.stats().cancelled == 0


@pytest.mark.parametrize("driver_first", [True, False], ids=["driver-first", "touch-first"])
async def test_touch_at_exactly_deadline_expires_then_starts_anew(
    virtual_time: None, driver_first: bool
) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        deadline = t0 + 1
        if driver_first:
            await timer.sleep_until(deadline)
            assert expired.calls == [("a", deadline)]
        else:
            jump(deadline - t0)
            assert timer.time() == deadline and expired.calls == []
        idle.touch("a")  # at E: too late, the key expired; this starts a new period
        assert expired.calls == [("a", deadline)]
        assert idle.deadline("a") == deadline + 1 and len(idle) == 1
        await timer.sleep_until(deadline + 10)
        assert expired.calls == [("a", deadline), ("a", deadline + 1)]


async def test_late_touch_expires_the_ended_period_first(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        idle.touch("b")
        jump(3.5)  # past E = t0 + 1; the driver has not run
        idle.touch("a")
        assert expired.calls == [("a", t0 + 3.5)]  # on_expire ran inside touch
        assert idle.deadline("a") == t0 + 4.5
        await timer.sleep_until(t0 + 10)
        # b expires when the driver catches up; a's first period never expires twice.
        assert expired.calls == [("a", t0 + 3.5), ("b", t0 + 3.5), ("a", t0 + 4.5)]


async def test_discard_before_deadline(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        await timer.sleep_until(t0 + 0.75)
        assert idle.discard("a") is True
        await timer.sleep_until(t0 + 10)
        assert expired.calls == [] and len(idle) == 0
        assert len(timer) == 0  # the discarded key's filing came due and was dropped


@pytest.mark.parametrize("driver_first", [True, False], ids=["driver-first", "discard-first"])
async def test_discard_at_deadline_expires_instead(virtual_time: None, driver_first: bool) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        if driver_first:
            await timer.sleep_until(t0 + 1)
        else:
            jump(1)
        assert idle.discard("a") is False
        assert expired.calls == [("a", t0 + 1)]
        assert "a" not in idle
        await timer.sleep_until(t0 + 10)
        assert expired.calls == [("a", t0 + 1)]


async def test_discard_then_touch_reuses_the_filing(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        for i in range(100):  # a client that reconnects with the same key, often
            idle.touch("a")
            assert idle.discard("a") is True
            await timer.sleep_until(t0 + (i + 1) * TICK)
        idle.touch("a")
        assert len(timer) <= 5  # filings do not pile up, one per reconnect
        await timer.sleep_until(t0 + 100)
        assert expired.calls == [("a", t0 + 100 * TICK + 1)]


async def test_rounding_up_to_the_tick(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1.1, expired)  # t + 1.1 is no multiple of the tick
        t0 = timer.time()
        idle.touch("a")
        await timer.sleep_until(t0 + 0.5)
        idle.touch("b")
        assert idle.deadline("a") == expiry(t0, 1.1, TICK) == t0 + 1.25
        assert idle.deadline("b") == expiry(t0 + 0.5, 1.1, TICK) == t0 + 1.75
        await timer.sleep_until(t0 + 10)
        assert expired.calls == [("a", t0 + 1.25), ("b", t0 + 1.75)]


@settings(max_examples=300, deadline=None)
@given(
    t=st.floats(min_value=0, max_value=1e7, allow_nan=False),
    timeout=st.floats(min_value=1e-3, max_value=1e5),
    tick=st.sampled_from([0.001, 0.003, 0.01, 0.1, 0.25, 1.0, 1 / 3]),
)
def test_the_rule_is_the_wheels_rounding(
    twins: Implementation, t: float, timeout: float, tick: float
) -> None:
    # The documented E is exactly when either wheel fires the deadline t + timeout.
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=tick)
    wheel.add(t + timeout, "key")
    fired_at = None
    while fired_at is None:
        now = wheel.next_deadline()
        assert now is not None
        if wheel.advance(now):
            fired_at = now
    assert fired_at == expiry(t, timeout, tick)


def test_rounding_with_a_decimal_tick_and_far_clock() -> None:
    # Non-binary tick and times far from zero, where t + timeout and w / tick are rounded:
    # on_expire sees exactly the E of the documented rule.
    tick, timeout = 0.001, 30.0
    offsets = [0.0, 0.0004, 0.1234567, 0.3, 0.7000001, 1.0009999]

    async def main() -> list[tuple[Hashable, float]]:
        async with Timer(tick=tick) as timer:
            expired = Expired(timer)
            idle = IdleTimeouts(timer, timeout, expired)
            loop = asyncio.get_running_loop()
            assert isinstance(loop, VirtualTimeLoop)
            t0 = loop.time()
            for key, offset in enumerate(offsets):
                loop.advance(t0 + offset - loop.time())
                idle.touch(key)
                assert idle.deadline(key) == expiry(loop.time(), timeout, tick)
            touched = {key: idle.deadline(key) for key in range(len(offsets))}
            await asyncio.sleep(60)
            assert expired.calls == list(touched.items())
            return expired.calls

    run(main(), start=123456.789)


async def test_coroutine_on_expire_runs_as_a_task(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        calls: list[tuple[str, str, float]] = []

        async def on_expire(key: str) -> None:
            calls.append(("start", key, timer.time()))
            await anyio.sleep(0.5)
            calls.append(("end", key, timer.time()))

        idle = IdleTimeouts(timer, 1, on_expire)
        t0 = timer.time()
        idle.touch("a")
        idle.touch("b")
        await timer.sleep_until(t0 + 5)
        assert sorted(calls) == [
            ("end", "a", t0 + 1.5),
            ("end", "b", t0 + 1.5),
            ("start", "a", t0 + 1),
            ("start", "b", t0 + 1),
        ]


async def test_running_coroutine_on_expire_is_cancelled_with_the_timer(
    virtual_time: None,
) -> None:
    cancelled: list[str] = []

    async def on_expire(key: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(key)

    async with Timer(tick=TICK) as timer:
        idle = IdleTimeouts(timer, 1, on_expire)
        idle.touch("a")
        await timer.sleep(2)
        assert cancelled == []
    assert cancelled == ["a"]


async def test_on_expire_errors_are_reported_and_stop_nothing(virtual_time: None) -> None:
    contexts: list[dict[str, Any]] = []
    async with Timer(tick=TICK, exception_handler=contexts.append) as timer:
        expired = Expired(timer)

        def failing(key: str) -> None:
            expired(key)
            if key == "bad":
                raise ValueError(key)

        async def failing_async(key: str) -> None:
            raise KeyError(key)

        idle = IdleTimeouts(timer, 1, failing)
        idle_async = IdleTimeouts(timer, 1, failing_async)
        t0 = timer.time()
        for key in ("good", "bad", "also good"):
            idle.touch(key)
        idle_async.touch("x")
        await timer.sleep_until(t0 + 2)
        assert expired.calls == [("good", t0 + 1), ("bad", t0 + 1), ("also good", t0 + 1)]
        errors = {(type(c["exception"]), c["message"].split(".")[-1]) for c in contexts}
        assert errors == {(KeyError, "failing_async('x',)"), (ValueError, "failing('bad',)")}
        assert all(c["message"].startswith("Exception in callback ") for c in contexts)
        # Inline expiry (a late touch) reports the same way instead of raising from touch.
        contexts.clear()
        idle.touch("bad")
        jump(1)
        idle.touch("bad")
        assert [type(c["exception"]) for c in contexts] == [ValueError]


class Fatal(BaseException):
    """Neither an Exception nor an interrupt: reported and stops nothing, as in asyncio."""


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
async def test_an_on_expire_raising_a_base_exception_is_reported_and_stops_nothing(
    kind: str,
) -> None:
    """The coroutine on_expire as the plain one: reported (it was never reported on asyncio,
    and took the Timer down on trio), and the Timer and the other keys carry on."""
    contexts: list[dict[str, Any]] = []
    expired: list[str] = []

    def plain(key: str) -> None:
        expired.append(key)
        if key == "bad":
            raise Fatal(key)

    async def coroutine(key: str) -> None:
        await anyio.sleep(0)
        plain(key)

    async with Timer(exception_handler=contexts.append) as timer:
        idle = IdleTimeouts(timer, 0.002, plain if kind == "plain" else coroutine)
        idle.touch("bad")
        idle.touch("good")
        await timer.sleep(0.005)
        idle.touch("later")
        await timer.sleep(0.005)
        assert not timer.closed
    assert sorted(expired) == ["bad", "good", "later"]
    assert [type(context["exception"]) for context in contexts] == [Fatal]
    assert contexts[0]["message"].startswith("Exception in callback ")


async def test_touch_inside_on_expire_starts_a_new_period(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)

        def on_expire(key: str) -> None:
            expired(key)
            if len(expired.calls) < 3:
                idle.touch(key)  # the key stays alive, expiring once per period
            if key == "a":
                idle.touch("b")  # other keys may be touched too

        idle = IdleTimeouts(timer, 1.5, on_expire)
        t0 = timer.time()
        idle.touch("a")
        await timer.sleep_until(t0 + 3.25)
        assert expired.calls == [("a", t0 + 1.5), ("b", t0 + 3), ("a", t0 + 3)]
        assert idle.deadline("a") is None and idle.deadline("b") == t0 + 4.5


async def test_late_touch_when_on_expire_touches_too(virtual_time: None) -> None:
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)

        def on_expire(key: str) -> None:
            expired(key)
            idle.touch(key)

        idle = IdleTimeouts(timer, 1, on_expire)
        t0 = timer.time()
        idle.touch("a")
        jump(2)
        assert idle.discard("a") is True  # expired first; on_expire's touch is then discarded
        assert expired.calls == [("a", t0 + 2)] and "a" not in idle
        await timer.sleep_until(t0 + 10)
        assert expired.calls == [("a", t0 + 2)]


async def test_many_keys_cost_few_wheel_entries(virtual_time: None) -> None:
    rng = random.Random(3)
    async with Timer(tick=TICK) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 30, expired)
        t0 = timer.time()
        last: dict[int, float] = {}
        for step in range(40):  # 10 s of traffic: 2,000 keys, a keepalive each 2 s or so
            for key in range(2000):
                if key < 1900 and rng.random() < 0.125:
                    idle.touch(key)
                    last[key] = timer.time()
                elif step == 0:
                    idle.touch(key)  # the last 100 keys go silent at once
                    last[key] = timer.time()
            await timer.sleep_until(t0 + (step + 1) * TICK)
        # One wheel entry per deadline tick that has keys filed, not one per key.
        assert len(idle) == 2000 and len(timer) <= 41
        assert timer.stats().cancelled == 0
        await timer.sleep_until(t0 + 100)
        expected = sorted((key, expiry(t, 30, TICK)) for key, t in last.items())
        assert sorted(expired.calls) == expected
