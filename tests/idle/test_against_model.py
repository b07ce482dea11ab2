"""The rule against a model, on random sequences of touches, discards and clock moves, on both
twins of the idle core side by side.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from idle_rule import available_twins, expiry

from aiowheel import Timer
from aiowheel.testing import VirtualTimeLoop, run

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- the rule against a model, on random event sequences ------------------------------------------


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
