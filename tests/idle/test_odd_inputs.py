"""The idle core's twins give the same errors and results on odd inputs: unhashable keys, keys
whose ``__hash__`` or ``__eq__`` raise, and a Timer that closes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Any

import pytest
from idle_rule import TICK, HandClockHost, available_twins, ceil_rule, expiry
from support import jump

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts
from aiowheel.testing import run

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- the twins: the same errors and results on odd inputs -----------------------------------------
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
