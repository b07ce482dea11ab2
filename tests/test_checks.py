"""Tests for :mod:`aiowheel._checks` and for every public entry point that takes a number.

The module's rules: any real number is accepted (int, float, Fraction, Decimal, numpy scalars),
never a bool; each is converted once -- a deadline rounded up, a clock reading down, a length to
nearest, ints kept exact -- and a bad one gets TypeError or ValueError naming it, never a bare
OverflowError. The first sections test the functions themselves, the last ones each entry point
of the wheel (on both twins, with the ``impl`` fixture), the Timer, its timeouts, IdleTimeouts and
the wheel-backed loop (on the core ``aiowheel._impl`` selected; scripts/test runs both).
"""

from __future__ import annotations

import asyncio
import math
import re
import sys
from collections.abc import Callable, Coroutine
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiowheel import IdleTimeouts, Timer
from aiowheel._checks import (
    check_callback,
    check_clock,
    check_count,
    check_deadline,
    check_length,
    check_ticks,
    deadline_after,
)
from aiowheel.loop import new_event_loop, new_uvloop_event_loop
from aiowheel.loop._selector import WheelEventLoop
from aiowheel.testing import VirtualTimeLoop, run

if TYPE_CHECKING:
    from twins import Impl

np = pytest.importorskip("numpy")

HUGE = 10**400  # an int beyond float range
# Just above and just below a whole number: a float rounds both to the whole number itself.
ABOVE_5 = Fraction(5) + Fraction(1, 10**30)
BELOW_5 = Fraction(5) - Fraction(1, 10**30)


def exact(value: Any) -> Fraction:
    """The exact value of a real number, numpy scalars included."""
    if isinstance(value, np.integer):
        return Fraction(int(value))
    if isinstance(value, np.floating):
        return Fraction(*value.as_integer_ratio())
    return Fraction(value)


def names(value: object) -> str:
    """A ``match=`` pattern: the message shows ``value`` as its repr."""
    return re.escape(repr(value))


# -- conversions -----------------------------------------------------------------------------------

REALS = st.one_of(
    st.fractions(max_denominator=10**40).filter(lambda x: abs(x) < 10**300),
    st.decimals(allow_nan=False, allow_infinity=False, places=40).filter(
        lambda x: abs(x) < 10**300
    ),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(np.float32),
)


@given(REALS)
def test_a_deadline_is_the_smallest_float_not_below_the_value(value: Any) -> None:
    exact_value = exact(value)
    deadline = check_deadline(value, "deadline")
    assert type(deadline) is float
    assert Fraction(deadline) >= exact_value
    assert Fraction(math.nextafter(deadline, -math.inf)) < exact_value


# No Hypothesis deadline: it is a real-time bound on one example, which a stall of the process
# breaks (exact Fractions of huge Decimals are the slow examples); nothing here is about speed.
@settings(deadline=None)
@given(REALS)
def test_a_clock_reading_is_the_largest_float_not_above_the_value(value: Any) -> None:
    exact_value = exact(value)
    clock = check_clock(value, "now")
    assert type(clock) is float
    assert Fraction(clock) <= exact_value
    assert Fraction(math.nextafter(clock, math.inf)) > exact_value


@given(REALS, st.floats(-1e9, 1e9))
def test_a_delay_is_added_exactly_and_the_sum_rounded_up(delay: Any, now: float) -> None:
    exact_sum = Fraction(now) + exact(delay)
    deadline = deadline_after(now, delay)
    assert Fraction(deadline) >= exact_sum
    assert Fraction(math.nextafter(deadline, -math.inf)) < exact_sum


@given(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9) | st.integers(-(10**9), 10**9))
def test_an_int_or_float_delay_is_added_as_asyncio_adds_it(now: float, delay: float) -> None:
    assert deadline_after(now, delay) == now + delay


@pytest.mark.parametrize("value", [0, 7, -3, 2**60, 2**53 + 1, np.int64(7), np.uint8(3)])
def test_whole_numbers_stay_exact_ints(value: Any) -> None:
    for check in (check_deadline, check_clock, check_length):
        checked = check(abs(value) or 1, "x")
        assert type(checked) is int
        assert checked == (abs(int(value)) or 1)


def test_floats_and_float_subclasses_pass_as_exact_floats() -> None:
    for value in (0.1, np.float64(0.1), -2.5):
        assert check_deadline(value, "x") == check_clock(value, "x") == float(value)
        assert type(check_deadline(value, "x")) is float
    assert check_length(np.float32(0.1), "tick") == float(np.float32(0.1))


def test_a_length_rounds_to_nearest() -> None:
    assert check_length(Fraction(1, 3), "tick") == 1 / 3
    assert check_length(Decimal("0.1"), "tick") == 0.1


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, TypeError, "x must be a real number, got True"),
        (np.bool_(True), TypeError, "x must be a real number, got np.True_"),
        ("1", TypeError, "x must be a real number, got '1'"),
        (None, TypeError, "x must be a real number, got None"),
        (1j, TypeError, "x must be a real number, got 1j"),
        (math.nan, ValueError, "x must be finite, got nan"),
        (-math.inf, ValueError, "x must be finite, got -inf"),
        (Decimal("NaN"), ValueError, "x must be finite, got Decimal('NaN')"),
        (Decimal("sNaN"), ValueError, "x must be finite, got Decimal('sNaN')"),
        (Decimal("Infinity"), ValueError, "x must be finite, got Decimal('Infinity')"),
        (np.float32("inf"), ValueError, "x must be finite, got np.float32(inf)"),
        (HUGE, ValueError, f"x {HUGE!r} is too far away"),
        (-HUGE, ValueError, f"x {-HUGE!r} is too far away"),
        (Fraction(HUGE), ValueError, f"x {Fraction(HUGE)!r} is too far away"),
        (Decimal("1e400"), ValueError, "x Decimal('1E+400') is too far away"),
    ],
)
def test_bad_times_are_refused_by_name(value: Any, error: type[Exception], message: str) -> None:
    for check in (check_deadline, check_clock, lambda v, what: deadline_after(0.0, v, what)):
        with pytest.raises(error, match=re.escape(message)):
            check(value, "x")


def test_a_deadline_that_rounds_up_beyond_float_range_is_refused() -> None:
    beyond = Fraction(int(sys.float_info.max)) + 1  # finite; no float is above it
    with pytest.raises(ValueError, match="is too far away"):
        check_deadline(beyond, "x")
    assert check_clock(beyond, "x") == sys.float_info.max  # rounded down: the largest float


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "tick must be finite and > 0, got 0"),
        (Fraction(-1, 2), ValueError, "tick must be finite and > 0, got Fraction(-1, 2)"),
        (math.inf, ValueError, "tick must be finite and > 0, got inf"),
        (Decimal("NaN"), ValueError, "tick must be finite and > 0, got Decimal('NaN')"),
        (HUGE, ValueError, f"tick {HUGE!r} is too large"),
        (True, TypeError, "tick must be a real number, got True"),
    ],
)
def test_bad_lengths_are_refused_by_name(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        check_length(value, "tick")


def test_a_length_may_be_zero_when_asked() -> None:
    assert check_length(0, "min_delay", zero_ok=True) == 0
    with pytest.raises(ValueError, match=r"min_delay must be finite and >= 0, got -1"):
        check_length(-1, "min_delay", zero_ok=True)
    with pytest.raises(TypeError, match="min_delay must be a real number or None, got '1'"):
        check_length("1", "min_delay", zero_ok=True, optional=True)


def test_counts() -> None:
    assert check_count(np.int64(64), "wheel_size", 2) == 64
    assert type(check_count(np.int64(64), "wheel_size", 2)) is int
    for value in (64.0, True, "64", Fraction(64)):
        with pytest.raises(TypeError, match=rf"wheel_size must be an int, got {names(value)}"):
            check_count(value, "wheel_size", 2)
    with pytest.raises(TypeError, match=r"max_pending must be an int or None, got 1\.5"):
        check_count(1.5, "max_pending", 1, optional=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wheel_size must be >= 2, got 1"):
        check_count(1, "wheel_size", 2)
    with pytest.raises(ValueError, match=rf"wheel_size {names(HUGE)} is too large"):
        check_count(HUGE, "wheel_size", 2, 2**40)


def test_ticks_within_the_wheels_reach() -> None:
    assert check_ticks(2**51 * 0.001, "timeout", 0.001) == 2**51 * 0.001
    with pytest.raises(ValueError, match=r"timeout 1e\+300 is too far away for tick 0.001"):
        check_ticks(1e300, "timeout", 0.001)


def test_callbacks() -> None:
    async def coroutine_function() -> None:
        pass

    check_callback(print, "call_at")
    with pytest.raises(TypeError, match=r"coroutines cannot be used with call_at\(\)"):
        check_callback(coroutine_function, "call_at")
    with pytest.raises(TypeError, match=r"a callable object was expected by call_at\(\), got 3"):
        check_callback(3, "call_at")


# -- the wheel's entry points, on both twins -------------------------------------------------------

WHEEL_ENTRY_POINTS: dict[str, Callable[[Any, Any], object]] = {
    "tick": lambda W, x: W(tick=x),
    "start": lambda W, x: W(start=x),
    "add": lambda W, x: W(tick=1).add(x, "payload"),
    "advance": lambda W, x: W(tick=1).advance(x),
    "advance_entries": lambda W, x: W(tick=1).advance_entries(x),
}
ACCEPTED = [np.int64(3), np.float32(2.5), np.float64(2.5), Fraction(5, 2), Decimal("2.5")]


@pytest.mark.parametrize("entry_point", list(WHEEL_ENTRY_POINTS))
def test_wheel_entry_points_refuse_a_huge_int_by_name(impl: Impl, entry_point: str) -> None:
    """Regression: tick gave ``OverflowError: int too large to convert to float``."""
    with pytest.raises(ValueError, match=names(HUGE)):
        WHEEL_ENTRY_POINTS[entry_point](impl.wheel.HierarchicalWheel, HUGE)


@pytest.mark.parametrize("entry_point", list(WHEEL_ENTRY_POINTS))
@pytest.mark.parametrize("value", ACCEPTED, ids=repr)
def test_wheel_entry_points_take_any_real_number(impl: Impl, entry_point: str, value: Any) -> None:
    """Regression: numpy scalars, Fractions and Decimals were refused with TypeError."""
    WHEEL_ENTRY_POINTS[entry_point](impl.wheel.HierarchicalWheel, value)


@pytest.mark.parametrize("entry_point", list(WHEEL_ENTRY_POINTS))
def test_wheel_entry_points_refuse_a_bool(impl: Impl, entry_point: str) -> None:
    with pytest.raises(TypeError, match="must be a real number, got True"):
        WHEEL_ENTRY_POINTS[entry_point](impl.wheel.HierarchicalWheel, True)


def test_wheel_size_takes_numpy_ints_and_refuses_huge_ones(impl: Impl) -> None:
    """Regression: a huge wheel_size gave OverflowError (pure) or MemoryError (compiled)."""
    assert impl.wheel.HierarchicalWheel(wheel_size=np.int64(8)).wheel_size == 8
    for size in (HUGE, 2**40 + 1):
        with pytest.raises(ValueError, match=rf"wheel_size {names(size)} is too large"):
            impl.wheel.HierarchicalWheel(wheel_size=size)


def test_a_fraction_deadline_is_never_filed_below_itself(impl: Impl) -> None:
    """A float nearest to 5 + 1e-30 is 5: filed there, it would come out at 5, early."""
    wheel = impl.wheel.HierarchicalWheel(tick=1, wheel_size=8)
    entry = wheel.add(ABOVE_5, "x")
    assert entry.deadline == math.nextafter(5.0, math.inf)
    assert wheel.advance(5) == []
    assert wheel.advance(6) == ["x"]


def test_a_fraction_clock_reading_never_releases_early(impl: Impl) -> None:
    """Advancing to just below 5: the nearest float, 5, would release a deadline of 5."""
    wheel = impl.wheel.HierarchicalWheel(tick=1, wheel_size=8)
    wheel.add(5, "x")
    assert wheel.advance(BELOW_5) == []
    assert wheel.advance(Decimal(5)) == ["x"]
    start = impl.wheel.HierarchicalWheel(tick=1, start=BELOW_5)
    assert start.now == 4


def test_a_fraction_tick_is_kept_as_the_nearest_float(impl: Impl) -> None:
    assert impl.wheel.HierarchicalWheel(tick=Fraction(1, 1000)).tick == 0.001
    assert impl.wheel.HierarchicalWheel(tick=np.int64(2)).tick == 2


# -- the Timer, its timeouts and IdleTimeouts (the selected core) ----------------------------------


def in_timer(body: Callable[[Timer], Coroutine[Any, Any, None]], **options: Any) -> None:
    """Run ``body(timer)`` on a running Timer in virtual time, starting at 0.1 (a float)."""

    async def main() -> None:
        async with Timer(**options) as timer:
            await body(timer)

    run(main(), start=0.1)


def test_timer_construction_numbers() -> None:
    """Regression: a huge tick gave OverflowError; numpy numbers were refused."""
    with pytest.raises(ValueError, match=rf"tick {names(HUGE)} is too large"):
        Timer(tick=HUGE)
    with pytest.raises(ValueError, match=rf"wheel_size {names(HUGE)} is too large"):
        Timer(wheel_size=HUGE)
    timer = Timer(tick=Fraction(1, 100), wheel_size=np.int64(16), max_pending=np.int64(5))
    assert (timer.tick, timer.wheel_size, timer.max_pending) == (0.01, 16, 5)
    assert (type(timer.tick), type(timer.wheel_size), type(timer.max_pending)) == (
        float,
        int,
        int,
    )
    with pytest.raises(TypeError, match="max_pending must be an int or None, got True"):
        Timer(max_pending=True)


# Each: a name, and how to give the running Timer a delay (relative) or a time (absolute).
TIMER_CALLS: dict[str, tuple[bool, Callable[[Timer, Any], Any]]] = {
    "call_later": (True, lambda timer, x: timer.call_later(x, print).when()),
    "call_at": (False, lambda timer, x: timer.call_at(x, print).when()),
    "schedule": (True, lambda timer, x: timer.schedule(x, print).when()),
    "schedule_at": (False, lambda timer, x: timer.schedule_at(x, print).when()),
    "timeout": (True, lambda timer, x: timer.timeout(x).when()),
    "timeout_at": (False, lambda timer, x: timer.timeout_at(x).when()),
    "move_on_after": (True, lambda timer, x: timer.move_on_after(x).when()),
    "move_on_at": (False, lambda timer, x: timer.move_on_at(x).when()),
}


@pytest.mark.parametrize("call", list(TIMER_CALLS))
@pytest.mark.parametrize(
    "value",
    [ABOVE_5, Fraction(1, 5), Decimal("0.2"), np.float32(0.2), np.int64(2), np.float64(0.2)],
    ids=repr,
)
def test_timer_deadlines_take_any_real_number_and_are_never_early(call: str, value: Any) -> None:
    """Regression: numpy scalars, Fractions and Decimals were refused with TypeError. The
    deadline is never before the exact value (for a delay: the clock, 0.1, plus it)."""
    relative, make = TIMER_CALLS[call]

    async def body(timer: Timer) -> None:
        goal = exact(value) + (Fraction(timer.time()) if relative else 0)
        deadline = make(timer, value)
        assert type(deadline) in (int, float)
        assert Fraction(deadline) >= goal
        if not isinstance(value, int | float):
            assert Fraction(math.nextafter(deadline, -math.inf)) < goal  # the smallest such

    in_timer(body)


@pytest.mark.parametrize("call", list(TIMER_CALLS))
@pytest.mark.parametrize("value", [HUGE, 1e300], ids=["huge int", "1e300"])
def test_timer_deadlines_out_of_reach_are_refused_at_once(call: str, value: Any) -> None:
    """Regression: ``timer.timeout(1e300)`` was accepted and failed later, at entry; a huge int
    gave OverflowError."""
    _, make = TIMER_CALLS[call]

    async def body(timer: Timer) -> None:
        with pytest.raises(ValueError, match="is too far away"):
            make(timer, value)

    in_timer(body)


def test_sleeps_take_any_real_number_and_are_never_early() -> None:
    async def body(timer: Timer) -> None:
        start = timer.time()
        await timer.sleep(Fraction(1, 5))
        assert Fraction(timer.time()) >= Fraction(start) + Fraction(1, 5)
        await timer.sleep_until(np.float32(1.5))
        assert timer.time() >= 1.5
        with pytest.raises(ValueError, match=names(HUGE)):
            await timer.sleep(HUGE)
        with pytest.raises(TypeError, match="when must be a real number, got True"):
            await timer.sleep_until(True)

    in_timer(body)


def test_reschedule_takes_any_real_number_and_refuses_one_out_of_reach() -> None:
    """Regression: a deadline moved beyond the wheel's reach was accepted and failed in the
    driver, when the entry filed earlier came due."""

    async def body(timer: Timer) -> None:
        async with timer.move_on_after(10) as scope:
            scope.reschedule(Fraction(41, 2))
            assert scope.when() == 20.5
            with pytest.raises(ValueError, match=r"deadline 1e\+300 is too far away"):
                scope.reschedule(1e300)
            assert scope.when() == 20.5
            scope.reschedule(np.float32(0.5))
            await timer.sleep(1)
        assert scope.cancelled_caught

    in_timer(body)


def test_idle_timeout_numbers() -> None:
    """Regression: a huge int gave OverflowError, numpy numbers TypeError, and 1e300 was
    accepted, to fail at the first touch."""

    async def body(timer: Timer) -> None:
        with pytest.raises(ValueError, match=rf"timeout {names(HUGE)} is too large"):
            IdleTimeouts(timer, HUGE, print)
        with pytest.raises(ValueError, match=r"timeout 1e\+300 is too far away for tick 0.001"):
            IdleTimeouts(timer, 1e300, print)
        with pytest.raises(TypeError, match="timeout must be a real number, got True"):
            IdleTimeouts(timer, True, print)
        assert IdleTimeouts(timer, np.float32(0.5), print).timeout == 0.5
        assert IdleTimeouts(timer, Fraction(1, 2), print).timeout == 0.5
        assert type(IdleTimeouts(timer, np.int64(3), print).timeout) is int

    in_timer(body)


# -- the wheel-backed loop -------------------------------------------------------------------------


LOOP_FACTORIES: dict[str, Callable[..., object]] = {
    "new_event_loop": new_event_loop,
    "new_uvloop_event_loop": new_uvloop_event_loop,
}


@pytest.mark.parametrize("factory", list(LOOP_FACTORIES))
@pytest.mark.parametrize("option", ["tick", "wheel_size", "min_delay"])
def test_loop_options_refuse_a_huge_int_by_name(factory: str, option: str) -> None:
    """Regression: tick and min_delay gave OverflowError, wheel_size OverflowError or
    MemoryError."""
    if factory == "new_uvloop_event_loop":
        pytest.importorskip("uvloop")
    with pytest.raises(ValueError, match=rf"{option} {names(HUGE)} is too large"):
        LOOP_FACTORIES[factory](**{option: HUGE})


def test_loop_options_take_any_real_number() -> None:
    loop = new_event_loop(tick=Fraction(1, 1000), wheel_size=np.int64(32), min_delay=np.float32(0))
    try:
        assert (loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay) == (0.001, 32, 0.0)
    finally:
        loop.close()


# A time on the loop's tick grid, and one a hair after it: as a float, the nearest is the grid time.
START = 1000.0
GRID = 1000200 * 0.001
AFTER_GRID = Fraction(GRID) + Fraction(1, 10**30)


class VirtualWheelLoop(WheelEventLoop, VirtualTimeLoop):
    """The wheel-backed selector loop on a virtual clock (as in tests/test_loop.py)."""

    def __init__(self) -> None:
        VirtualTimeLoop.__init__(self, START)
        self._init_wheel(tick=0.001)


@pytest.mark.parametrize(
    ("call", "value"),
    [
        ("call_at", AFTER_GRID),
        ("call_later", AFTER_GRID - Fraction(START)),
        ("call_at", np.float32(1000.5)),
        ("call_later", np.float32(0.2)),
        ("call_later", Fraction(1, 3)),
    ],
    ids=repr,
)
def test_loop_wheel_timers_are_never_early_for_any_real_number(call: str, value: Any) -> None:
    """Regression: a Fraction deadline was converted to the nearest float, which may lie before
    it (here: the grid time, where the wheel fired it), and so was ``loop.time() + delay``."""
    loop = VirtualWheelLoop()
    ran: list[float] = []
    try:
        assert loop.time() == START
        goal = exact(value) + (Fraction(START) if call == "call_later" else 0)
        getattr(loop, call)(value, lambda: ran.append(loop.time()))
        assert loop.wheel_stats().wheel_timers == 1
        loop.run_until_complete(asyncio.sleep(1))
        assert len(ran) == 1
        assert Fraction(ran[0]) >= goal
    finally:
        loop.close()
