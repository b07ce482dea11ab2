"""Tests for :mod:`aiowheel._impl` and for the compiled wheel being a true twin of the pure one.

``tests/wheel/`` runs every wheel test on both implementations. This module checks what
those tests cannot: which implementation the selector picks, that the compiled classes have the
pure ones' public names, signatures and docstrings, and -- the main check -- that random sequences
of operations, including bad input and float edges, give identical results, errors and
observable state (queued buckets, level starts, locations, repr) on both.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import importlib
import math
import os
import pickle
import subprocess
import sys
import types
import weakref
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiowheel
from aiowheel import _impl
from aiowheel import _timercore as pure_core
from aiowheel import _wheel as pure

if TYPE_CHECKING:
    from aiowheel._impl import Implementation

try:  # the compiled twins, one part per pure module (aiowheel._impl.TWINS)
    from aiowheel import _ctimercore as compiled_core
    from aiowheel import _cwheel as compiled
except ImportError:  # not built
    compiled = compiled_core = None  # type: ignore[assignment]

needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled wheel is not built")

# The selector and the twins compared: part of what a build of the compiled code must pass.
pytestmark = pytest.mark.implementations


# -- the selector --------------------------------------------------------------------------------


def selected(env: dict[str, str]) -> str:
    """``COMPILED`` and the wheel's module, as a fresh interpreter with ``env`` imports them."""
    code = (
        "import aiowheel, aiowheel._impl as i, aiowheel.timer as t; "
        "assert aiowheel.HierarchicalWheel is i.HierarchicalWheel; "
        "assert aiowheel.Entry is i.Entry and issubclass(t.TimerHandle, i.Entry); "
        "assert t.TimerHandle is i.TimerHandle; "
        "assert t.Timer().implementation == aiowheel.IMPLEMENTATION; "
        "print(i.COMPILED, i.HierarchicalWheel.__module__, i.TimerCore.__module__)"
    )
    environ = {k: v for k, v in os.environ.items() if k != "AIOWHEEL_NO_EXTENSIONS"} | env
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_env_var_forces_pure_python() -> None:
    assert selected({"AIOWHEEL_NO_EXTENSIONS": "1"}) == "False aiowheel._wheel aiowheel._timercore"


def test_an_empty_env_var_does_not_force_pure_python() -> None:
    expected = (
        "False aiowheel._wheel aiowheel._timercore"
        if compiled is None
        else "True aiowheel._cwheel aiowheel._ctimercore"
    )
    assert selected({"AIOWHEEL_NO_EXTENSIONS": ""}) == expected


# A made-up edge row: its pure twin is the standard library's json, its compiled part is not
# built anywhere. edge_twin's choices without pyspark (the real row is tested in tests/spark/).
MADE_UP_EDGE = (("made-up", "json", "aiowheel._no_such_part", ("dumps",)),)


def test_an_edge_twin_is_the_pure_one_for_pure_and_when_its_part_is_not_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    monkeypatch.setattr(_impl, "EDGE_TWINS", MADE_UP_EDGE)
    assert _impl.edge_twin("made-up", "pure") is json
    # None: the selected implementation's twin; compiled, but its part is not built: the pure.
    assert _impl.edge_twin("made-up") is json
    monkeypatch.setattr(_impl, "SELECTED", _impl.PURE)
    assert _impl.edge_twin("made-up") is json


def test_an_edge_twin_asked_for_by_name_must_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_impl, "EDGE_TWINS", MADE_UP_EDGE)
    if compiled is not None:
        with pytest.raises(RuntimeError, match=r"compiled twin aiowheel\._no_such_part is not"):
            _impl.edge_twin("made-up", "compiled")
    with pytest.raises(ValueError, match="EDGE_TWINS has no row 'other'"):
        _impl.edge_twin("other")
    with pytest.raises(ValueError, match="implementation must be"):
        _impl.edge_twin("made-up", "fast")


def test_import_aiowheel_imports_no_edge_twin() -> None:
    """The edges' twins need their optional dependencies: a plain import leaves them alone."""
    code = (
        "import sys, aiowheel, aiowheel.loop; from aiowheel import _impl; "
        "print(sorted(m for _, p, c, _ in _impl.EDGE_TWINS for m in (p, c) if m in sys.modules),"
        " 'pyspark' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[] False"


def test_the_public_core_name_is_the_selected_one() -> None:
    expected = "compiled" if _impl.COMPILED else "pure"
    assert expected == aiowheel.IMPLEMENTATION


@pytest.mark.parametrize("expected", ["compiled", "pure"])
def test_a_run_that_loads_the_other_core_stops_and_says_which_was_expected(expected: str) -> None:
    """scripts/test sets AIOWHEEL_EXPECT_IMPLEMENTATION; conftest.py refuses a run on the other
    implementation."""
    other = {"compiled": "1", "pure": ""}[expected]  # AIOWHEEL_NO_EXTENSIONS for the other core
    if expected == "pure" and compiled is None:
        pytest.skip("the compiled wheel is not built: no run can load it")
    environ = os.environ | {
        "AIOWHEEL_NO_EXTENSIONS": other,
        "AIOWHEEL_EXPECT_IMPLEMENTATION": expected,
    }
    tests = Path(__file__).resolve().parent
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(tests / "test_checks.py"),
        ],
        env=environ,
        cwd=tests.parent,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    loaded = "pure" if expected == "compiled" else "compiled"
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"expected the {expected} implementation, but" in done.stderr
    assert f"loaded the {loaded} one from" in done.stderr
    assert "collected" not in done.stdout


def test_this_process_uses_the_selected_implementation() -> None:
    expected = compiled is not None and not os.environ.get("AIOWHEEL_NO_EXTENSIONS")
    assert expected is _impl.COMPILED
    module = compiled if expected else pure
    assert aiowheel.HierarchicalWheel is module.HierarchicalWheel
    for name in ("Entry", "HierarchicalWheel", "ceil_ticks", "floor_ticks"):
        assert getattr(_impl, name) is getattr(module, name)
    core_module = compiled_core if expected else pure_core
    for name in ("TimerCore", "TimerHandle"):
        assert getattr(_impl, name) is getattr(core_module, name)


def test_the_cpython_fallback_build_is_one_build_and_reported() -> None:
    """Every compiled part says whether it was built with AIOWHEEL_CPYTHON_FALLBACK=1, all the
    same way; aiowheel._impl.CPYTHON_FALLBACK reports it for the core that runs."""
    if compiled is None:
        assert _impl.CPYTHON_FALLBACK is False
        return
    built = {importlib.import_module(home).CPYTHON_FALLBACK for _, _, home, _ in _impl.TWINS}
    assert len(built) == 1
    assert _impl.CPYTHON_FALLBACK is (_impl.COMPILED and built.pop())


# -- the same public surface ------------------------------------------------------------------
# Names, docstrings and parameters of every name the twin table lists: tests/test_twins.py,
# generated from aiowheel._impl.TWINS.


@needs_compiled
def test_construction_by_keyword_works_alike() -> None:
    """A compiled __init__ shows no signature for test_twins to compare."""
    for module in (pure, compiled):
        entry = module.Entry(deadline=1.5, payload="x")
        assert (entry.deadline, entry.payload, entry.pending) == (1.5, "x", False)
        wheel = module.HierarchicalWheel(tick=1, wheel_size=8, start=-2)
        assert (wheel.tick, wheel.wheel_size, wheel.now) == (1, 8, -2)


@needs_compiled
def test_entry_fields_are_member_descriptors_like_slots() -> None:
    """So a Python subclass with __slots__ reads and writes them at slot speed; the CPython
    fallback build keeps properties, which behave the same (see _ccpython.pxd). The deadline is
    a property on both builds: a C double, not an object (see Entry in _cwheel.pxd)."""
    for name in ("payload", "_bucket"):
        slot = type(vars(pure.Entry)[name])
        expected = types.GetSetDescriptorType if compiled.CPYTHON_FALLBACK else slot
        assert type(vars(compiled.Entry)[name]) is expected
    assert type(vars(compiled.Entry)["deadline"]) is types.GetSetDescriptorType


@needs_compiled
def test_generic_subscription_and_slotted_subclasses() -> None:
    """What aiowheel.timer does with Entry: subclass ``Entry[...]`` with extra __slots__."""
    for module in (pure, compiled):

        class Handle(module.Entry[str]):  # type: ignore[name-defined, misc]
            __slots__ = ("extra",)

            def __init__(self, deadline: float, payload: str) -> None:
                super().__init__(deadline, payload)
                self.extra = 1

        wheel = module.HierarchicalWheel[str](tick=1)
        handle = wheel.add_entry(Handle(3, "x"))
        assert handle.pending
        assert not hasattr(handle, "__dict__")
        assert wheel.advance_entries(3) == [handle]
        assert handle.payload == "x"
        assert not handle.pending


# -- identical behaviour, operation by operation --------------------------------------------------


class FloatSub(float):
    """A float subclass: allowed everywhere a float is, and off the compiled fast path."""


class IntSub(int):
    pass


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """The result of ``call()`` as comparable data: its value with types, or its error."""
    try:
        value = call()
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return ("returned", typed(value))


def typed(value: Any) -> Any:
    """``value`` with the type of every number in it, so 340 and 340.0 (and -0.0) differ."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(item) for item in value])
    if isinstance(value, int | float):
        return (type(value).__name__, repr(value))
    if hasattr(value, "pending"):  # an entry: the same repr, not the same object
        return ("entry", repr(value))
    return value


def _handle_class(module: ModuleType, name: str) -> type:
    """An Entry subclass as aiowheel.timer's TimerHandle, with a repr that does not name the
    module; a module-level class, so that pickle finds it."""

    def __init__(self: Any, deadline: Any, payload: Any) -> None:
        module.Entry.__init__(self, deadline, payload)
        self.name = payload

    namespace = {
        "__slots__": ("name",),
        "__init__": __init__,
        "__repr__": lambda self: f"<Handle {self.name}>",
        "__module__": __name__,
        "__qualname__": name,
    }
    return type(name, (module.Entry,), namespace)


PureHandle = _handle_class(pure, "PureHandle")
CompiledHandle = None if compiled is None else _handle_class(compiled, "CompiledHandle")


def make_handle(module: ModuleType) -> type:
    return PureHandle if module is pure else CompiledHandle  # type: ignore[return-value]


class Twin:
    """One implementation driven through the ops; entries are referred to by index."""

    def __init__(self, module: ModuleType, tick: Any, wheel_size: int, start: Any) -> None:
        self.module = module
        self.handle_cls = make_handle(module)
        self.entries: list[Any] = []
        self.created = outcome(lambda: module.HierarchicalWheel(tick, wheel_size, start))
        self.wheel = module.HierarchicalWheel(tick, wheel_size, start) if self.ok else None

    @property
    def ok(self) -> bool:
        return self.created[0] == "returned"

    def names(self, entries: list[Any]) -> list[Any]:
        return [self.entries.index(entry) for entry in entries]

    def run(self, op: tuple[Any, ...]) -> tuple[Any, ...]:
        """Apply ``op`` (a name and its arguments) and return its outcome."""
        return getattr(self, f"op_{op[0]}")(*op[1:])  # type: ignore[no-any-return]

    def op_add(self, deadline: Any) -> tuple[Any, ...]:
        added: list[Any] = []
        result = outcome(lambda: added.append(self.wheel.add(deadline, len(self.entries))))
        self.entries.extend(added)
        return result

    def op_add_entry(self, deadline: Any) -> tuple[Any, ...]:
        handle = self.handle_cls(deadline, len(self.entries))
        self.entries.append(handle)
        return outcome(lambda: self.wheel.add_entry(handle) is handle)

    def op_entry(self, method: str, index: int) -> tuple[Any, ...]:
        """``method`` (remove, locate or add_entry again) on an entry made earlier."""
        if not self.entries:
            return ("no entries",)
        entry = self.entries[index % len(self.entries)]
        return outcome(lambda: getattr(self.wheel, method)(entry))

    def op_advance(self, now: Any) -> tuple[Any, ...]:
        return outcome(lambda: self.wheel.advance(now))

    def op_advance_entries(self, now: Any) -> tuple[Any, ...]:
        return outcome(lambda: self.names(self.wheel.advance_entries(now)))

    def op_drive(self) -> tuple[Any, ...]:
        """What the Timer does: advance to next_deadline."""
        wheel = self.wheel
        return outcome(lambda: wheel.advance(wheel.next_deadline() or wheel.now))

    def op_remove_all(self) -> tuple[Any, ...]:
        return outcome(lambda: self.names(self.wheel.remove_all()))

    def op_bad(self, method: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return outcome(lambda: getattr(self.wheel, method)(*args))

    def op_pickle(self, deep_copy: bool) -> tuple[Any, ...]:
        """Go on with a copy of the wheel and its entries, pickled or deep-copied."""
        both = (self.wheel, self.entries)
        self.wheel, self.entries = (
            copy.deepcopy(both) if deep_copy else pickle.loads(pickle.dumps(both))
        )
        return ("copied",)

    def state(self) -> tuple[Any, ...]:
        wheel = self.wheel
        levels = wheel.levels
        return (
            len(wheel),
            typed(wheel.now),
            levels,
            [typed(wheel.level_start(n)) for n in range(levels)],
            [
                typed(wheel.bucket_expiration(n, s))
                for n in range(levels)
                for s in range(wheel.wheel_size)
            ],
            outcome(wheel.next_deadline),
            wheel.pending_per_level(),
            [(entry.pending, typed(wheel.locate(entry))) for entry in self.entries],
            [typed(entry.payload) for entry in self.entries],
            repr(wheel),
        )


TICKS = st.sampled_from(
    [1, 7, 0.001, 0.1, 1 / 3, 1e-6, 1024.0, 2**53, 2**53 + 1, 10**20, FloatSub(0.001), IntSub(3)]
)


def times(tick: Any) -> st.SearchStrategy[Any]:
    """Times around the tick grid and its 2**52-tick limit, big ints, and unusual types."""
    step = float(tick)
    return st.one_of(
        st.floats(-1e4, 1e4),
        st.integers(-(10**4), 10**4),
        # On a tick, or one float step off it.
        st.builds(
            math.nextafter,
            st.integers(-5000, 5000).map(lambda k: k * step),
            st.sampled_from([-math.inf, 0.0, math.inf]),
        ),
        # Near the limit, as an exact product (an int for an int tick) or a float.
        st.builds(
            lambda k, sign, exact: sign * k * tick if exact else float(sign * k * tick),
            st.integers(2**52 - 4, 2**52 + 4),
            st.sampled_from([1, -1]),
            st.booleans(),
        ),
        st.integers(-(2**64), 2**64),
        st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 2**53 + 1]),
        st.sampled_from([FloatSub(2.5), IntSub(7), True, Fraction(7, 2), "5", None]),
        # Other real numbers: converted where they enter (rounded up or down), or refused.
        st.builds(Fraction, st.integers(-(10**6), 10**6), st.integers(1, 10**6)),
        st.sampled_from(
            [Decimal("2.5"), Decimal("0.1"), Decimal("NaN"), Decimal("1e400"), 10**400]
        ),
        st.floats(allow_nan=True, allow_infinity=True),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Any, int, Any, list[tuple[Any, ...]]]:
    tick = draw(TICKS)
    wheel_size = draw(st.sampled_from([2, 3, 4, 64]))
    start = draw(st.one_of(times(tick), st.just(0)))
    moments = times(tick)
    op = st.one_of(
        st.tuples(st.just("add"), moments),
        st.tuples(st.just("add_entry"), moments),
        st.tuples(
            st.just("entry"),
            st.sampled_from(["add_entry", "remove", "remove_entry", "locate"]),
            st.integers(0, 50),
        ),
        st.tuples(st.sampled_from(["advance", "advance_entries"]), moments),
        st.tuples(st.just("drive")),
        st.tuples(st.just("pickle"), st.booleans()),
        st.tuples(st.just("remove_all")),
        st.tuples(
            st.just("bad"),
            st.sampled_from(["remove", "remove_entry", "locate", "add_entry"]),
            st.sampled_from([(None,), ("x",), (5,)]),
        ),
        st.tuples(
            st.just("bad"),
            st.sampled_from(["bucket_expiration"]),
            st.sampled_from([(0, -1), (0, 64), (-1, 0), (5, 0), (0, "1"), (0, 1.0), (0, True)]),
        ),
        st.tuples(st.just("bad"), st.just("level_start"), st.sampled_from([(-1,), (9,), ("0",)])),
    )
    return tick, wheel_size, start, draw(st.lists(op, max_size=40))


@needs_compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_results_errors_and_state_on_random_operations(
    scenario: tuple[Any, int, Any, list[tuple[Any, ...]]],
) -> None:
    tick, wheel_size, start, ops = scenario
    twins = [Twin(module, tick, wheel_size, start) for module in (pure, compiled)]
    assert twins[0].created[0] == twins[1].created[0]
    if twins[0].created[0] == "raised":
        assert twins[0].created == twins[1].created
        return
    assert twins[0].state() == twins[1].state()
    for op in ops:
        results = [twin.run(op) for twin in twins]
        assert results[0] == results[1], op
        assert twins[0].state() == twins[1].state(), op
        for twin in twins:
            twin.wheel._check()


def rounding(module: ModuleType, tick: Any, start: Any, t: Any) -> tuple[Any, ...]:
    """Where a wheel of ``module`` files a deadline ``t``, and where advancing to ``t`` gets."""
    made = outcome(lambda: module.HierarchicalWheel(tick, 4, start))
    if made[0] == "raised":
        return made
    wheel = module.HierarchicalWheel(tick, 4, start)
    added = outcome(lambda: wheel.add_entry(make_handle(module)(t, "x")) and None)
    filed = (added, typed(wheel.next_deadline()), wheel.levels)
    advanced = outcome(lambda: wheel.advance(t))
    return (filed, advanced, typed(wheel.now), typed(wheel.next_deadline()), len(wheel))


@needs_compiled
@settings(max_examples=1000, deadline=None)
@given(data=st.data(), tick=TICKS)
def test_same_rounding_of_times_to_ticks(data: st.DataObject, tick: Any) -> None:
    """One time at a time, many times: the conversions between times and ticks agree."""
    t = data.draw(times(tick))
    start = data.draw(st.sampled_from([0, -1.5, t]))
    assert rounding(pure, tick, start, t) == rounding(compiled, tick, start, t)


@needs_compiled
@settings(max_examples=1000, deadline=None)
@given(data=st.data(), tick=st.one_of(TICKS, st.sampled_from([0.0, 0, -0.5, -3, math.nan, 1e300])))
def test_same_ceil_ticks_and_floor_ticks(data: st.DataObject, tick: Any) -> None:
    """The module functions, also with ticks a wheel refuses (zero, negative, NaN)."""
    t = data.draw(times(tick if tick else 1))
    for pure_function, compiled_function in (
        (pure.ceil_ticks, compiled.ceil_ticks),
        (pure.floor_ticks, compiled.floor_ticks),
    ):
        expected = outcome(lambda f=pure_function: f(t, tick))
        assert outcome(lambda f=compiled_function: f(t, tick)) == expected


# -- memory ---------------------------------------------------------------------------------------


def test_a_cycle_through_a_pending_payload_is_collected(twins: Implementation) -> None:
    """wheel -> entry -> payload -> wheel, as Timer -> wheel -> TimerHandle -> Timer: the garbage
    collector sees the wheel's references to its entries and frees the cycle."""

    class Owner:
        pass

    owner = Owner()
    owner.wheel = twins.wheel.HierarchicalWheel(tick=1)  # type: ignore[attr-defined]
    for deadline in (-1, 5, 5000):
        owner.wheel.add(deadline, owner)  # type: ignore[attr-defined]
    alive = weakref.ref(owner)
    del owner
    gc.collect()
    assert alive() is None


@needs_compiled
def test_deleted_entry_fields_raise_like_slots() -> None:
    """``del entry.payload`` leaves the field empty; the compiled wheel raises, never crashes."""
    for module in (pure, compiled):
        wheel = module.HierarchicalWheel(tick=1)
        entry = wheel.add(1, "x")
        del entry.payload
        with pytest.raises(AttributeError, match="payload"):
            wheel.advance(1)
        handle = make_handle(module)(2, "y")
        del handle.deadline
        with pytest.raises(AttributeError, match="deadline"):
            wheel.add_entry(handle)
        del handle._bucket
        with pytest.raises(AttributeError, match="_bucket"):
            _ = handle.pending


# -- the compiled Timer core ---------------------------------------------------------------------


@pytest.mark.implementation("compiled")
def test_a_pending_compiled_handle_costs_at_most_its_budget_of_heap() -> None:
    """A bound in bytes, not a speed: tracemalloc counts exactly what the Python heap holds.
    A pending ``call_at(when, callback, key)`` costs the handle (88 bytes: no GC header, the
    key kept without a tuple, the deadline a C double, the flags in the entry's index word) and
    its slot in a bucket list (8 plus the list's over-allocation). A GC header back would add
    16, a tuple per timer 48, a float deadline 24. The
    CPython fallback build (see _ccpython.pxd) keeps the header and shares no context snapshot:
    it is held to those 16 and a Context per timer more."""
    import contextvars
    import tracemalloc

    assert compiled_core is not None
    fallback = compiled_core.CPYTHON_FALLBACK
    extra = 16 + sys.getsizeof(contextvars.copy_context()) if fallback else 0
    has_gc = bool(compiled_core.TimerHandle.__flags__ & (1 << 14))  # Py_TPFLAGS_HAVE_GC
    assert has_gc is fallback
    n = 20_000
    keys = list(range(n))
    handles: list[Any] = [None] * n

    async def main() -> float:
        async with aiowheel.Timer() as timer:
            far = timer.time() + 3600.0
            timer.call_at(far, int).cancel()  # the wheel's levels, created once
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                for key in keys:
                    handles[key] = timer.call_at(far + key * 0.01, int, key)
                per_timer = (tracemalloc.get_traced_memory()[0] - base) / n
            finally:
                tracemalloc.stop()
            assert gc.is_tracked(handles[0]) is fallback
            return per_timer

    per_timer = asyncio.run(main())
    assert 88 + 8 + extra <= per_timer <= 100 + extra, per_timer


@pytest.mark.implementation("compiled")
def test_compiled_handles_are_untracked_share_snapshots_and_reference_nothing_once_done() -> None:
    """What makes handles without GC support safe (see aiowheel/_ctimercore.pyx): a handle out
    of the wheel references nothing. A job (a Python object, holding its entry) stays tracked;
    its entry, untracked like any handle, references the job only while it is pending. (The
    CPython fallback build has neither trick: its handles are tracked, each has its own context
    copy.)"""
    fallback = _impl.CPYTHON_FALLBACK

    async def main() -> None:
        async with aiowheel.Timer() as timer:
            ran, cancelled = timer.call_later(0, int), timer.call_later(10, int, "1")
            closed = timer.call_later(10, int, "2")
            job = timer.schedule(10, int)
            # One context snapshot shared while the context's variables stay the same.
            assert (cancelled._context is closed._context) is not fallback
            tracked = [gc.is_tracked(handle) for handle in (ran, cancelled, closed)]
            assert tracked == [fallback] * 3
            assert gc.is_tracked(job)
            assert any(referent is timer for referent in gc.get_referents(job))
            cancelled.cancel()
            await timer.sleep(0)
        for handle in (ran, cancelled, closed):
            assert (handle.payload, handle._args, handle._context, handle._timer) == (
                None,
                (),
                None,
                None,
            )

    asyncio.run(main())
