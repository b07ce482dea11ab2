"""The public surface: which names each public module exports, the names it no longer has, and
the one shape of the counters the Timer and the wheel-backed loop share.

Each ``__all__`` is pinned here, so that a new public name -- a second door to something that
has one -- is a choice made in this file, with the docs and the changelog, not an accident. The
names removed before the first release (docs/changelog.md says what replaces each) are checked
to be gone, so that none comes back by a stray import.

The stats run on the core this process selected; ``scripts/test`` runs this module on both.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

import anyio
import pytest
from support import HANG

import aiowheel
import aiowheel.loop
import aiowheel.testing
from aiowheel import Timer, TimerStats
from aiowheel.loop import WheelLoop, WheelStats, new_event_loop, new_uvloop_event_loop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

# -- the names -----------------------------------------------------------------------------------

PUBLIC = {
    aiowheel: [
        "CORE",
        "Entry",
        "HierarchicalWheel",
        "IdleTimeouts",
        "Job",
        "JobCancelled",
        "LatenessHistogram",
        "PendingLimitError",
        "Timeout",
        "Timer",
        "TimerHandle",
        "TimerHost",
        "TimerStats",
    ],
    aiowheel.loop: [
        "FAR_DELAY",
        "LoopTimerHandle",
        "WheelLoop",
        "WheelStats",
        "new_event_loop",
        "new_uvloop_event_loop",
        "run",
    ],
    aiowheel.testing: ["VirtualClock", "VirtualTimeLoop", "run"],
}

# Names that were public before 0.1.0 was released and are not any more.
GONE = {
    aiowheel: [
        "run",
        "new_event_loop",
        "new_uvloop_event_loop",
        "loop_factory",
        "WheelLoop",
        "WheelStats",
    ],
    aiowheel.loop: ["loop_factory", "LoopFactory", "TimerHandle", "WheelEventLoop"],
}


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda module: module.__name__)
def test_each_public_module_exports_exactly_its_pinned_names(module: Any) -> None:
    assert sorted(module.__all__) == sorted(PUBLIC[module])
    for name in module.__all__:
        assert hasattr(module, name), name


@pytest.mark.parametrize(
    ("module", "name"),
    [(module, name) for module, names in GONE.items() for name in names],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_name_removed_before_the_first_release_is_gone(module: Any, name: str) -> None:
    with pytest.raises(AttributeError):
        getattr(module, name)
    assert name not in module.__all__


def test_the_wheel_loop_classes_are_reached_through_the_loop_makers_only() -> None:
    # One way to make a loop: the makers. The concrete classes are private (their module is),
    # the loop's base is chosen by the maker's name, not by a flag.
    for make in (new_event_loop, new_uvloop_event_loop):
        with pytest.raises(TypeError, match="uvloop"):
            make(uvloop=True)  # type: ignore[call-arg]
    loop = new_event_loop()
    try:
        assert isinstance(loop, WheelLoop)
        assert type(loop).__module__.startswith("aiowheel.loop._")
    finally:
        loop.close()


# -- one shape for the counters ------------------------------------------------------------------

# The facts both count, in this order, first in both.
SHARED = ["pending", "fired", "cancelled", "driver_wakeups", "levels"]


@pytest.mark.parametrize("stats", [TimerStats, WheelStats])
def test_both_stats_are_frozen_slotted_dataclasses_with_the_shared_facts_first(
    stats: type,
) -> None:
    assert dataclasses.is_dataclass(stats)
    params = stats.__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen and "__slots__" in vars(stats)
    names = [field.name for field in dataclasses.fields(stats)]
    assert names[: len(SHARED)] == SHARED
    hints = get_type_hints(stats)
    assert all(hints[name] is int for name in SHARED)
    assert "early" not in names  # always 0: removed


@pytest.mark.parametrize(
    ("stats", "home"), [(TimerStats, "aiowheel.timer"), (WheelStats, "aiowheel.loop._wheelloop")]
)
def test_every_stats_field_has_its_docstring(stats: type, home: str) -> None:
    # Each field is documented where it is declared: a string right after its annotation.
    # (Read from the module that defines it: WheelStats is documented as aiowheel.loop's.)
    tree = ast.parse(inspect.getsource(importlib.import_module(home)))
    body = next(
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == stats.__name__
    )
    documented = {
        node.target.id
        for node, after in zip(body.body, body.body[1:], strict=False)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }
    assert documented == {field.name for field in dataclasses.fields(stats)}


def scenario(call_later: Callable[..., Any], done: Callable[[], None]) -> None:
    """Two timers that fire, the second scheduled by the first and calling ``done``; one
    cancelled; one left pending two minutes away (level 2 of a 64-slot wheel with a 1 ms tick).

    The second is scheduled from the first's callback, so it runs in a later driver pass however
    late the first one runs (a timer scheduled while a batch runs is never part of it): two
    driver wakeups at least, also when the process stalls. (Two timers scheduled up front, 10 ms
    apart, come due in one pass after a stall of 10 ms.)"""
    call_later(0.01, lambda: call_later(0.01, done))
    call_later(60, lambda: None).cancel()
    call_later(120, lambda: None)


def check_shared(stats: TimerStats | WheelStats) -> None:
    assert (stats.pending, stats.fired, stats.cancelled, stats.levels) == (1, 2, 1, 3)
    assert stats.driver_wakeups >= 2  # the second timer was made by the first one's pass
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.pending = 0  # type: ignore[misc]


@pytest.mark.anyio
async def test_the_timers_stats_count_the_shared_facts(backend_name: str) -> None:
    async with Timer(tick=0.001, wheel_size=64) as timer:
        done = anyio.Event()
        scenario(timer.call_later, done.set)
        with anyio.fail_after(HANG):
            await done.wait()
        stats = timer.stats()
    check_shared(stats)


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize(
    "make",
    [
        new_event_loop,
        pytest.param(
            new_uvloop_event_loop,
            marks=pytest.mark.skipif(uvloop is None, reason="uvloop is not installed"),
        ),
    ],
)
def test_the_loops_stats_count_the_same_facts_under_the_same_names(
    make: Callable[..., WheelLoop],
) -> None:
    # The same timers as the Timer's test, the same figures. No timer of the test's own (a
    # bound, a poll) is on the loop: the test's timeout bounds a hang.
    loop = make(tick=0.001, wheel_size=64)
    try:
        done = loop.create_future()
        scenario(loop.call_later, lambda: done.set_result(None))
        loop.run_until_complete(done)
        stats = loop.wheel_stats()
    finally:
        loop.close()
    check_shared(stats)
    assert (stats.wheel_timers, stats.base_timers) == (4, 0)


def test_the_two_stats_name_their_own_facts_apart() -> None:
    # Beyond the shared facts, no field of one means something else in the other.
    timer_only = {field.name for field in dataclasses.fields(TimerStats)} - set(SHARED)
    loop_only = {field.name for field in dataclasses.fields(WheelStats)} - set(SHARED)
    assert timer_only == {"max_lateness", "lateness", "pending_per_level"}
    assert loop_only == {"wheel_timers", "base_timers"}
    assert not timer_only & loop_only
