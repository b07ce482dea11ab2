"""The rule's two twins, side by side: the compiled IdleRule returns what the pure one returns.

:mod:`aiowheel.spark._keystate` is the specification, :mod:`aiowheel.spark._ckeystate` its
compiled twin (``aiowheel._impl.EDGE_TWINS``). Each visit here goes to both with equal inputs,
and the outcomes must be equal to the repr -- the same floats, ints and None in the same places,
the caller's event tuples kept as they were -- or both raise the same error. What the rule does
against the reference is tested in test_shard.py, on each twin.
"""

from __future__ import annotations

import math
import pickle
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiowheel import _impl
from aiowheel.spark import _keystate as pure
from aiowheel.spark.events import KIND_RANK
from aiowheel.spark.stream import _IdleExpiryPandasProcessor, _IdleExpiryProcessor

pytestmark = pytest.mark.spark

try:
    compiled: Any = _impl.edge_twin("rule", "compiled")
    compiled_visit: Any = _impl.edge_twin("visit", "compiled")
except RuntimeError:  # not built, or AIOWHEEL_NO_EXTENSIONS
    compiled = compiled_visit = None
needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled twin is not built")

Event = tuple[float, int, "str | None"]


def outcome(call: Any) -> str:
    """What a call returned, or the error it raised, as text: equal texts, equal outcomes."""
    try:
        return "returned " + repr(call())
    except Exception as exc:
        return f"raised {type(exc).__name__}: {exc}"


def both(timeouts: list[float], tick: float, delay: float) -> tuple[pure.IdleRule, Any]:
    return pure.IdleRule(timeouts, tick, delay), compiled.IdleRule(timeouts, tick, delay)


def visit_both(
    rules: tuple[pure.IdleRule, Any], stored: Any, arrived: list[Event], watermark: int
) -> str:
    """One visit on each twin, each with its own copies of the inputs; their common outcome."""
    pure_rule, compiled_rule = rules
    expected = outcome(lambda: pure_rule.visit_stored(_copy(stored), list(arrived), watermark))
    got = outcome(lambda: compiled_rule.visit_stored(_copy(stored), list(arrived), watermark))
    assert got == expected
    return expected


def _copy(stored: Any) -> Any:
    """A state with its own list of events (a visit may reuse the list it was given)."""
    if stored is None:
        return None
    last_seen, fired, applied, recent, wake = stored
    return (last_seen, fired, applied, list(recent), wake)


events = st.tuples(
    st.one_of(
        st.integers(-40, 400).map(lambda n: n / 4),
        st.floats(-1e3, 1e4, allow_nan=False, allow_infinity=False),
    ),
    st.sampled_from(sorted(KIND_RANK.values())),
    st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d"])),
)


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(
    timeouts=st.lists(st.sampled_from([0.5, 3.0, 5.0, 8.0, 30.0]), min_size=1, unique=True).map(
        sorted
    ),
    tick=st.sampled_from([1.0, 0.5, 0.25, 0.001, 0.1, 3.0]),
    delay=st.sampled_from([0.0, 1.0, 2.5, 10.0]),
    visits=st.lists(
        st.tuples(st.lists(events, max_size=6), st.integers(-10_000, 500_000)),
        min_size=1,
        max_size=8,
    ),
)
def test_the_twins_visit_alike(
    timeouts: list[float],
    tick: float,
    delay: float,
    visits: list[tuple[list[Event], int]],
) -> None:
    """A key's visits in a row, the state of each taken from the pure twin's outcome (the
    watermark goes anywhere, events arrive in any order: the twins agree even off contract).
    The compiled visit's records (below) take every one whose events fit (RECORD_EVENTS, 16,
    kept and new together), with the same outcome."""
    rules = both(timeouts, tick, delay)
    stored: Any = None
    for arrived, watermark in visits:
        expected = visit_both(rules, stored, arrived, watermark)
        got = visit_as_record(rules[1], stored, arrived, watermark)
        held = 0 if stored is None else len(stored[3])
        assert got == expected or (held + len(arrived) > 16 and got == "declined")
        stored, _ = rules[0].visit_stored(_copy(stored), list(arrived), watermark)


@needs_compiled
def test_the_twins_agree_where_the_double_arithmetic_runs_out() -> None:
    """A deadline beyond 2**52 ticks, an infinite or NaN time, a watermark far from zero: the
    compiled twin hands these to the pure functions, which compute or raise the same."""
    cases: list[tuple[list[float], float, list[Event], int]] = [
        ([30.0], 0.001, [(4.6e12, 1, None)], 0),  # 2**52 ticks of 1 ms: ValueError
        ([30.0], 1.0, [(4.6e12, 1, None)], 0),  # within range at 1 s ticks
        ([30.0], 0.001, [(1e300, 1, None)], 0),
        ([30.0], 0.001, [(math.inf, 1, None)], 0),
        ([30.0], 0.001, [(math.nan, 1, None), (1.0, 1, None)], 5_000),
        ([30.0], 0.001, [(-0.25, 1, None)], 0),  # a ceiling of -0.0
        ([0.001], 0.001, [(-0.001, 1, None)], 0),  # a deadline at 0: 0.0, not -0.0
        ([30.0], 0.001, [(1.0, 1, "x")], 2**62),
        ([30.0], 0.001, [(1.0, 1, "x")], -(2**62)),
        ([5.0], 1e-9, [(9e6, 1, None)], 0),  # 2**52 ticks of 1 ns
    ]
    for timeouts, tick, arrived, watermark in cases:
        visit_both(both(timeouts, tick, 0.0), None, arrived, watermark)
    for t in (0.0, -0.0, 0.0015, -2.5, 1e15, 9.1e12, 1e300, -1e300, math.inf, -math.inf, math.nan):
        assert outcome(lambda t=t: compiled.wake_ms(t)) == outcome(lambda t=t: pure.wake_ms(t))


# The compiled visit's records: the compiled rule's visit on C values, a key's state read from
# its bytes in a page and written back as bytes (IdleRule.visit_record, through
# aiowheel.spark._cvisit). They must give the pure twin's outcome, or decline the visit (None),
# which the visit then hands to visit_stored.


def visit_as_record(rule: Any, stored: Any, arrived: list[Event], watermark: int) -> str:
    """The outcome of one visit of the compiled ``rule`` as records, or "declined"."""
    got = outcome(lambda: compiled_visit._visit_as_record(rule, stored, list(arrived), watermark))
    return "declined" if got == "returned None" else got


odd_events = st.tuples(
    st.one_of(
        st.floats(),  # NaN and the infinities too
        st.integers(-5, 5),  # an int ts: the object rule's
        st.just(-0.0),
    ),
    st.one_of(st.sampled_from(sorted(KIND_RANK.values())), st.integers(-(2**70), 2**70)),
    st.one_of(st.none(), st.sampled_from(["a", "é", "\ud800", "a" * 300]), st.integers(0, 2)),
)


@st.composite
def odd_states(draw: st.DrawFn, timeouts: int) -> Any:
    """A state as a page may hold it, mostly one the rule could have left (``fired`` within
    the timeouts, ``applied`` within the events), sometimes not."""
    if draw(st.integers(0, 5)) == 0:
        return None
    recent = draw(st.lists(events | odd_events, max_size=18))
    near = st.integers(-1, len(recent) + 1)
    return (
        draw(st.one_of(st.none(), st.floats(), st.integers(-5, 5))),
        draw(st.integers(-1, timeouts + 1) | st.integers(-(2**70), 2**70)),
        draw(near | st.integers(-3, 20)),
        recent,
        draw(st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**70), 2**70)),
    )


@needs_compiled
@settings(max_examples=600, deadline=None)
@given(
    rule=st.tuples(
        st.lists(st.sampled_from([0.5, 3.0, 30.0]), max_size=3, unique=True).map(sorted),
        st.sampled_from([1.0, 0.001, 1e-9]),
        st.sampled_from([0.0, 10.0]),
    ),
    data=st.data(),
    arrived=st.lists(events | odd_events, max_size=18),
    watermark=st.integers(-10_000, 500_000) | st.sampled_from([2**62, -(2**62)]),
)
def test_records_decline_what_they_cannot_follow(
    rule: tuple[list[float], float, float],
    data: st.DataObject,
    arrived: list[Any],
    watermark: int,
) -> None:
    """Any state, any events, even off contract (NaN, int ts, ranks and ints beyond int64,
    surrogates, ids that are not strs, ``fired`` or ``applied`` out of range, no timeouts):
    records give the pure twin's outcome, its error included, or decline the visit."""
    pure_rule, compiled_rule = both(*rule)
    stored = data.draw(odd_states(len(rule[0])))
    expected = outcome(lambda: pure_rule.visit_stored(_copy(stored), list(arrived), watermark))
    assert visit_as_record(compiled_rule, stored, arrived, watermark) in ("declined", expected)


@needs_compiled
def test_pending_events_sort_by_ts_and_kind_keeping_arrival_order_within_ties() -> None:
    """The compiled twin sorts short pending lists itself: the order is list.sort's, stable,
    and every event kept is one of the caller's tuples."""
    tied = [(5.0, 1, "b"), (5.0, 0, "a"), (5.0, 1, None), (4.0, 2, None), (5.0, 1, "c")]
    rules = both([30.0], 0.5, 10.0)
    for arrived in (tied, tied[::-1], tied * 2, tied * 3):  # 5, 10 and 15 events
        result = visit_both(rules, None, arrived, 0)
        assert "(4.0, 2, None), (5.0, 0, 'a')" in result
        stored, _ = rules[1].visit_stored(None, list(arrived), 0)
        assert stored[3] == sorted(arrived, key=lambda event: event[:2])
        assert all(any(kept is event for event in tied) for kept in stored[3])
    # An int rank is sorted in C; a float one by list.sort: the same order either way.
    visit_both(rules, None, [(5.0, 1.5, None), (5.0, 1, None)], 0)  # type: ignore[list-item]


@needs_compiled
def test_a_visit_gains_or_loses_no_reference_to_the_callers_events() -> None:
    """The C sort moves the list's items in place: each event is held as often after as
    before, over many visits (a reference too many or too few would show a hundredfold)."""
    tied = [(5.0, 1, "b"), (5.0, 0, "a"), (5.0, 1, None), (4.0, 2, None), (3.0, 1, "c")]
    rule = compiled.IdleRule([30.0], 0.5, 10.0)
    before = [sys.getrefcount(event) for event in tied]
    for _ in range(100):
        arrived = list(tied)
        rule.visit_stored(None, arrived, 0)
        rule.visit_stored(None, arrived, 4_500)
    del arrived
    assert [sys.getrefcount(event) for event in tied] == before


@needs_compiled
def test_the_compiled_rule_keeps_its_arguments_and_reads_them_once() -> None:
    rule = compiled.IdleRule([5.0, 30.0], 0.001, 10.0)
    assert (rule.timeouts, rule.tick, rule.delay) == ((5.0, 30.0), 0.001, 10.0)
    with pytest.raises(AttributeError):
        rule.tick = 1.0
    with pytest.raises(TypeError):
        compiled.IdleRule(["5"], 0.001, 10.0)
    with pytest.raises(TypeError):
        pickle.dumps(rule)  # the processors ship their arguments, not a rule


HOMES = {"pure": "aiowheel.spark._keystate", "compiled": "aiowheel.spark._ckeystate"}


@pytest.mark.parametrize("processor", [_IdleExpiryPandasProcessor, _IdleExpiryProcessor])
def test_a_processor_runs_the_twin_of_the_implementation_selected_where_it_is_made(
    implementation: str, processor: type
) -> None:
    """Made on the driver, pickled to a worker (here the same process, the same selection):
    the worker's rule is the twin of the driver's implementation."""
    made = pickle.loads(pickle.dumps(processor([30.0], 0.001, 10.0, 4)))
    made.init(_Handle())
    assert type(made.rule).__module__ == HOMES[implementation]
    assert made.rule.timeouts == (30.0,)


@needs_compiled
@pytest.mark.parametrize("processor", [_IdleExpiryPandasProcessor, _IdleExpiryProcessor])
def test_a_worker_without_the_compiled_core_runs_the_pure_rule(
    processor: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver with the compiled core, a worker whose aiowheel is pure (a wheel shipped as a
    zip): the worker runs the pure rule, it does not fail. A pure driver makes every worker
    run the pure rule, compiled core or not."""
    shipped = pickle.dumps(processor([30.0], 0.001, 10.0, 4))
    monkeypatch.setattr(_impl, "SELECTED", _impl.PURE)
    made = pickle.loads(shipped)
    made.init(_Handle())
    assert type(made.rule).__module__ == HOMES["pure"]
    shipped = pickle.dumps(processor([30.0], 0.001, 10.0, 4))
    monkeypatch.setattr(_impl, "SELECTED", _impl.implementation_named("compiled"))
    made = pickle.loads(shipped)
    made.init(_Handle())
    assert type(made.rule).__module__ == HOMES["pure"]


class _Handle:
    """The two state calls a processor's init makes, answering nothing."""

    def getValueState(self, *args: object) -> None:  # Spark's name
        return None

    def getMapState(self, *args: object) -> None:  # Spark's name
        return None
