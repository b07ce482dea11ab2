"""Tests for :mod:`aiowheel.idle`: the idle-expiry rule of ``IdleTimeouts``, exactly.

Every async test runs on virtual-time asyncio, uvloop and trio (MockClock) -- see conftest.py;
those that assert times ask for ``virtual_time`` (skipped on uvloop) and assert them exactly: in
virtual time the driver wakes at a deadline ``E`` itself, so ``on_expire`` sees
``timer.time() == E``. Times and ticks are binary fractions unless a test is about rounding, so
that trio's MockClock (which jumps by ``deadline - now``) lands on them exactly too.

Two ways to reach a time, because the rule must hold whether or not the Timer's driver has
processed it yet: ``await timer.sleep_until(t)`` lets the driver run first (the sleep is a wheel
timer filed after the key's, and due timers run in scheduling order), :func:`jump` moves the
clock without letting anything run.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Hashable
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support import jump
from twins import load_implementation

import aiowheel
from aiowheel import PendingLimitError, Timer, _impl
from aiowheel.idle import IdleTimeouts
from aiowheel.testing import VirtualTimeLoop, run

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# Every test on both twins of the cores (the `core` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]

TICK = 0.25


# -- helpers -----------------------------------------------------------------------------------


def expiry(t: float, timeout: float, tick: float) -> float:
    """The rule as the module documents it: ``t + timeout`` rounded up to a multiple of tick."""
    return float(ceil_rule(t + timeout, tick))


def available_twins() -> list[Implementation]:
    """The idle core's twins this process can run: the pure one, and the compiled one when
    :mod:`aiowheel._impl` selected it (it is built and not switched off)."""
    names = _impl.IMPLEMENTATIONS if aiowheel.IMPLEMENTATION == "compiled" else ("pure",)
    return [load_implementation(name) for name in names]


class HandClockHost:
    """A :class:`aiowheel.TimerHost` whose clock is a number the test sets, the rest its
    Timer's: the host interface is all an idle core may use, so this is all it can tell."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.now: Any = 0
        self.call_at = timer.call_at
        self.refile_at = timer.refile_at
        self.run_now = timer.run_now
        self.open_cancel_scope = timer.open_cancel_scope

    @property
    def tick(self) -> float:
        return self.timer.tick

    @property
    def closed(self) -> bool:
        return self.timer.closed

    def time(self) -> Any:
        return self.now


class Expired:
    """An ``on_expire`` that records ``(key, timer.time())`` for each call."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.calls: list[tuple[Hashable, float]] = []

    def __call__(self, key: Hashable) -> None:
        self.calls.append((key, self.timer.time()))


# -- construction and queries --------------------------------------------------------------------


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


# -- the rule, in virtual time -------------------------------------------------------------------


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


# -- limits and interrupts: no key is ever lost --------------------------------------------------


async def test_re_filing_is_never_refused_by_max_pending(virtual_time: None) -> None:
    """Keys touched since their entry was filed are re-filed when it fires: bookkeeping, not
    new work, so max_pending never refuses it (it did, and the keys never expired)."""
    errors: list[dict[str, Any]] = []
    async with Timer(tick=TICK, max_pending=2, exception_handler=errors.append) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        idle.touch("b")  # one entry, at t0 + 1
        timer.call_at(t0 + 50, expired, "blocker")  # the Timer is at its limit
        await anyio.sleep(0.25)
        idle.touch("a")  # now due at t0 + 1.25: no wheel operation yet
        await anyio.sleep(0.25)
        idle.touch("b")  # now due at t0 + 1.5
        await anyio.sleep(2)  # at t0 + 1 both are re-filed: two entries, one over the limit
        assert expired.calls == [("a", t0 + 1.25), ("b", t0 + 1.5)]
        assert len(idle) == 0
    assert errors == []


async def test_a_new_key_at_max_pending_is_refused_at_touch(virtual_time: None) -> None:
    """A key that needs a new wheel entry is new work: refused loudly, at touch, and not
    tracked. A key whose deadline tick already has an entry costs the wheel nothing."""
    async with Timer(tick=TICK, max_pending=1) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")  # the one entry
        idle.touch("same tick")  # shares it
        await anyio.sleep(0.25)
        with pytest.raises(PendingLimitError):
            idle.touch("new")
        assert "new" not in idle and len(idle) == 2
        idle.touch("a")  # a known key is never refused
        await anyio.sleep(2)
        assert expired.calls == [("same tick", t0 + 1), ("a", t0 + 1.25)]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_from_on_expire_loses_no_key(interrupt: type[BaseException]) -> None:
    """The interrupt leaves the loop (as from any Timer callback); the keys filed with the
    interrupted one still expire once the application carries on, the interrupted key is not
    expired twice."""
    loop = VirtualTimeLoop()
    expired: list[tuple[str, float]] = []

    def on_expire(key: str) -> None:
        expired.append((key, loop.time()))
        if key == "interrupting":
            raise interrupt

    async def start() -> tuple[Timer, IdleTimeouts[str]]:
        timer = Timer(tick=TICK)
        await timer.__aenter__()
        return timer, IdleTimeouts(timer, 1, on_expire)

    try:
        timer, idle = loop.run_until_complete(start())
        t0 = timer.time()
        for key in ("first", "interrupting", "second", "third"):
            idle.touch(key)
        with pytest.raises(interrupt):
            loop.run_until_complete(asyncio.sleep(5))
        loop.run_until_complete(asyncio.sleep(5))
        assert sorted(expired) == [
            ("first", t0 + 1),
            ("interrupting", t0 + 1),
            ("second", t0 + 1),
            ("third", t0 + 1),
        ]
        assert len(idle) == 0 and len(timer) == 0
        loop.run_until_complete(timer.aclose())
    finally:
        loop.close()


# -- the rule against a model, on random event sequences -----------------------------------------


class Model:
    """The rule written as naively as possible: a dict of deadlines, walked on every step."""

    def __init__(self, timeout: float, tick: float, sticky: set[str]) -> None:
        self.timeout = timeout
        self.tick = tick
        self.sticky = sticky  # keys whose on_expire touches them again
        self.deadlines: dict[str, float] = {}
        self.log: list[tuple[str, float]] = []

    def expire(self, key: str, now: float) -> None:
        del self.deadlines[key]
        self.log.append((key, now))
        if key in self.sticky:
            self.deadlines[key] = expiry(now, self.timeout, self.tick)

    def expire_due(self, now: float) -> None:
        """Expire, at ``now``, every key whose deadline has passed (the driver catching up)."""
        for key in [key for key, when in self.deadlines.items() if when <= now]:
            self.expire(key, now)

    def touch(self, key: str, now: float) -> None:
        if self.deadlines.get(key, math.inf) <= now:
            self.expire(key, now)
        self.deadlines[key] = expiry(now, self.timeout, self.tick)

    def discard(self, key: str, now: float) -> bool:
        if self.deadlines.get(key, math.inf) <= now:
            self.expire(key, now)
        return self.deadlines.pop(key, None) is not None

    def sleep(self, start: float, end: float) -> None:
        self.expire_due(start)
        while self.deadlines:  # each expiry at its own deadline, earliest first
            key, when = min(self.deadlines.items(), key=lambda item: item[1])
            if when > end:
                break
            self.expire(key, when)


KEYS = ["a", "b", "r"]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("touch"), st.sampled_from(KEYS)),
        st.tuples(st.just("discard"), st.sampled_from(KEYS)),
        st.tuples(st.just("sleep"), st.sampled_from([0.001, 0.1, 0.25, 0.3, 1.0, 1.1, 2.5])),
        st.tuples(st.just("jump"), st.sampled_from([0.1, 0.25, 0.7, 1.0, 3.0])),
        # To a key's deadline exactly: the boundary the rule is about.
        st.tuples(st.just("sleep to"), st.sampled_from(KEYS)),
        st.tuples(st.just("jump to"), st.sampled_from(KEYS)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The boundaries, always tried: an event at exactly E, before and after the driver got there.
@example(
    ops=[("touch", "a"), ("jump to", "a"), ("discard", "a")], timeout=1.0, tick=0.25, start=0.0
)
@example(ops=[("touch", "a"), ("jump to", "a"), ("touch", "a")], timeout=1.1, tick=0.1, start=0.0)
@example(
    ops=[("touch", "a"), ("sleep to", "a"), ("touch", "a")], timeout=0.3, tick=0.001, start=1000.0
)
@example(
    ops=[("touch", "r"), ("jump to", "r"), ("discard", "r")], timeout=2.5, tick=0.25, start=0.0
)
@given(
    ops=operations,
    timeout=st.sampled_from([0.3, 1.0, 1.1, 2.5]),
    tick=st.sampled_from([0.001, 0.1, 0.25]),
    start=st.sampled_from([0.0, 1000.0, 98765.4321]),
)
def test_matches_the_model(
    ops: list[tuple[str, Any]], timeout: float, tick: float, start: float
) -> None:
    """Both twins of the idle core side by side on one Timer (the compiled one where it is
    built), each against the model: the same expiries at the same times, the same state."""
    twins = available_twins()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        async with Timer(tick=tick) as timer:
            model = Model(timeout, tick, sticky={"r"})
            logs: list[list[tuple[str, float]]] = [[] for _ in twins]
            cores: list[Any] = []

            def expirer(index: int) -> Callable[[str], None]:
                def on_expire(key: str) -> None:
                    logs[index].append((key, timer.time()))
                    if key in model.sticky:
                        cores[index].touch(key)

                return on_expire

            cores += [
                twin.idle.IdleCore(timer, timeout, expirer(i)) for i, twin in enumerate(twins)
            ]
            for op, arg in ops:
                now = loop.time()
                if op in ("sleep to", "jump to"):
                    if model.deadlines.get(arg, -math.inf) <= now:
                        continue
                    when = model.deadlines[arg]
                    if op == "jump to":
                        loop.advance(when - now)
                        loop._virtual_now = when  # exactly there, whatever now + (when - now) is
                    else:
                        await timer.sleep_until(when)
                        assert loop.time() == when
                        model.sleep(now, when)
                elif op == "touch":
                    for core in cores:
                        core.touch(arg)
                    model.touch(arg, now)
                elif op == "discard":
                    results = [core.discard(arg) for core in cores]
                    assert results == [model.discard(arg, now)] * len(cores)
                elif op == "jump":
                    loop.advance(arg)
                else:
                    await asyncio.sleep(arg)
                    # Let the driver finish the pass for the time the sleep ended at.
                    await asyncio.sleep(0)
                    await asyncio.sleep(0)
                    model.sleep(now, loop.time())
                for core, log in zip(cores, logs, strict=True):
                    assert sorted(log) == sorted(model.log)
                    assert len(core) == len(model.deadlines)
                    for key in KEYS:
                        assert core.deadline(key) == model.deadlines.get(key)
                        assert (key in core) == (key in model.deadlines)
            for core in cores:
                core.close()

    run(main(), start=start)


# -- the twins: the same errors and results on odd inputs ----------------------------------------
# The idle core has a pure twin (aiowheel._idlecore, the specification) and a compiled one
# (aiowheel/_cidlecore.pyx): every test above runs on both (the core fixture, see conftest.py),
# test_matches_the_model on both side by side, and these on both side by side on what the
# compiled touch's fast path must hand to the slow one.


def outcome(call: Callable[[], object]) -> tuple[object, ...]:
    """What a call did: its result, or its exception's type and message."""
    try:
        return ("returned", call())
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def test_rejects_a_timer_that_is_not_one() -> None:
    with pytest.raises(TypeError, match=r"timer must be an aiowheel\.Timer, got None"):
        IdleTimeouts(None, 1, print)  # type: ignore[arg-type]


class Collides:
    """A key equal to nothing else, whose hash collides with every other Collides."""

    def __init__(self, name: str, fail: type[Exception] | None = None) -> None:
        self.name = name
        self.fail = fail

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        fail = self.fail or getattr(other, "fail", None)  # whichever side the dict asks
        if fail is not None:
            raise fail("a key refuses to compare")
        return self is other


class Unhashable:
    def __hash__(self) -> int:
        raise ValueError("no hash for you")


@pytest.mark.parametrize("bad", ["unhashable", "hash raises", "eq raises", "eq raises KeyError"])
def test_hostile_keys_fail_alike_and_change_nothing(bad: str) -> None:
    """A key a dict cannot take raises what the dict raises, on both twins, and leaves every
    other key as it was."""

    async def main() -> list[tuple[object, ...]]:
        seen = []
        async with Timer(tick=TICK) as timer:
            for twin in available_twins():
                core = twin.idle.IdleCore(timer, 1.0, print)
                tracked = Collides("tracked")
                core.touch(tracked)
                key: object = {
                    "unhashable": [],
                    "hash raises": Unhashable(),
                    "eq raises": Collides("bad", ValueError),
                    "eq raises KeyError": Collides("bad", KeyError),
                }[bad]
                result = [outcome(partial(core.touch, key)), outcome(partial(core.discard, key))]
                result += [
                    outcome(partial(core.__contains__, key)),
                    outcome(partial(core.deadline, key)),
                ]
                assert len(core) == 1 and tracked in core and core.deadline(tracked) == 1.0
                assert all(kind == "raised" for kind, *_ in result)
                seen.append(tuple(result))
                core.close()
        return seen

    results = run(main())
    assert all(result == results[0] for result in results)


@pytest.mark.parametrize(
    ("tick", "timeout", "clock"),
    [
        (1, 3, [0, 1, 2, 3, 5, 9, 12]),  # an int clock and tick: ints throughout
        (0.25, 1, [Fraction(1, 3), Fraction(5, 3), Fraction(9, 4), 7]),  # exact fractions
        (2**60, 2**61, [0.0, 2.0**60, 2.0**62, 2.0**63]),  # deadlines beyond 2**53: ints
        (10**307, 10**309, [0.5]),  # an int timeout beyond doubles: float + int overflows
    ],
    ids=["int-clock", "fraction-clock", "huge-int-tick", "huge-int-timeout"],
)
def test_odd_clocks_and_ticks_give_the_same_deadlines(
    tick: Any, timeout: Any, clock: list[Any]
) -> None:
    """Times the compiled touch cannot hold in doubles take the slow path, with the spec's
    results: at each clock reading touch and discard two keys, then touch them again once
    their periods ended (the expiry happens inside the touch)."""

    async def main() -> list[list[object]]:
        seen = []
        async with Timer(tick=tick) as timer:
            host = HandClockHost(timer)
            for twin in available_twins():
                events: list[object] = []
                core = twin.idle.IdleCore(host, timeout, events.append)
                for now in clock:
                    host.now = now
                    events.append(outcome(partial(core.touch, "a")))
                    events.append(outcome(partial(core.touch, "b")))
                    events.append(outcome(partial(core.discard, "b")))
                    events.append((core.deadline("a"), core.deadline("b"), len(core)))
                core.close()
                seen.append(events)
        return seen

    results = run(main())
    assert all(result == results[0] for result in results)
    first = results[0]
    if timeout < 2**1024:
        assert first[:3] == [("returned", None), ("returned", None), ("returned", True)]
        assert first[3] == (ceil_rule(clock[0] + timeout, tick), None, 1)
    else:
        assert first[0] == ("raised", OverflowError, "int too large to convert to float")


def ceil_rule(w: Any, tick: Any) -> Any:
    """The rule's rounding on any numbers: the smallest ``q * tick >= w``."""
    q = math.ceil(w / tick)
    if q * tick < w:
        q += 1
    elif (q - 1) * tick >= w:
        q -= 1
    return q * tick


def test_closing_inside_a_late_touch_fails_it_alike() -> None:
    """on_expire closing the object while a late touch expires the ended period: the touch
    then raises, as any touch of a closed IdleTimeouts does, on both twins."""

    async def main() -> list[list[object]]:
        seen = []
        async with Timer(tick=TICK) as timer:
            for twin in available_twins():
                events: list[object] = []
                closing: list[Any] = []

                def on_expire(
                    key: str, events: list[object] = events, closing: list[Any] = closing
                ) -> None:
                    events.append(key)
                    closing[0].close()

                core = twin.idle.IdleCore(timer, 1.0, on_expire)
                closing.append(core)
                core.touch("a")
                jump(2.0)
                events.append(outcome(partial(core.touch, "a")))
                events.append((len(core), "a" in core, core.closed))
                events.append(outcome(partial(core.touch, "b")))
                seen.append(events)
        return seen

    results = run(main())
    assert results[0] == [
        "a",
        ("raised", RuntimeError, "IdleTimeouts is closed"),
        (0, False, True),
        ("raised", RuntimeError, "IdleTimeouts is closed"),
    ]
    assert all(result == results[0] for result in results)


def test_on_the_monotonic_clock_touch_reads_the_timers_own_time() -> None:
    """On asyncio's own loop the Timer's clock is time.monotonic, which the compiled touch
    reads through the C function behind it: each deadline is the rule's for a time between
    the readings around the touch, and no key expires before its deadline (real time)."""

    async def main() -> None:
        async with Timer(tick=0.001) as timer:
            assert timer.time is time.monotonic  # the loop's clock itself, once started
            expired: dict[tuple[int, str], float] = {}
            cores = []
            for index, twin in enumerate(available_twins()):

                def on_expire(key: str, index: int = index) -> None:
                    expired[index, key] = time.monotonic()

                cores.append(twin.idle.IdleCore(timer, 0.003, on_expire))
            deadlines: dict[tuple[int, str], float] = {}
            for round_ in range(50):
                for index, core in enumerate(cores):
                    key = f"k{round_ % 5}"
                    before = time.monotonic()
                    core.touch(key)
                    after = time.monotonic()
                    deadline = core.deadline(key)
                    assert expiry(before, 0.003, 0.001) <= deadline <= expiry(after, 0.003, 0.001)
                    deadlines[index, key] = deadline
                await asyncio.sleep(0)
            await asyncio.sleep(0.01)
            for index_key, deadline in deadlines.items():
                assert expired[index_key] >= deadline  # never early
            for core in cores:
                core.close()

    asyncio.run(main())


def test_subscripting_gives_an_alias_on_both_twins() -> None:
    """``IdleTimeouts[str]`` in annotations and at runtime, whichever core it is built on."""
    alias = IdleTimeouts[str]
    assert alias is not IdleTimeouts and alias.__origin__ is IdleTimeouts  # type: ignore[attr-defined]
    assert alias.__args__ == (str,)  # type: ignore[attr-defined]
