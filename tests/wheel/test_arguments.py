"""The wheel refuses what it cannot file, naming the value: ticks, wheel sizes, start times,
deadlines and clock readings out of range or of the wrong type (on both implementations, the
``twins`` fixture; times are plain numbers).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import pytest
from reference import TICKS

if TYPE_CHECKING:
    from aiowheel._impl import HierarchicalWheel, Implementation

# -- argument checks ------------------------------------------------------------------------------


def names(value: object) -> str:
    """A ``match=`` pattern: the error message shows ``value`` as its repr."""
    return re.escape(repr(value))


@pytest.mark.parametrize("tick", [0, 0.0, -1, -0.001, math.nan, math.inf, -math.inf])
def test_tick_must_be_finite_and_positive(twins: Implementation, tick: float) -> None:
    with pytest.raises(ValueError, match=rf"tick .*{names(tick)}$"):
        twins.wheel.HierarchicalWheel(tick=tick)


@pytest.mark.parametrize("tick", ["1", True, None, b"1"])
def test_tick_must_be_a_number(twins: Implementation, tick: Any) -> None:
    with pytest.raises(TypeError, match=rf"tick .*{names(tick)}$"):
        twins.wheel.HierarchicalWheel(tick=tick)


@pytest.mark.parametrize("wheel_size", [1, 0, -64])
def test_wheel_size_must_be_at_least_2(twins: Implementation, wheel_size: int) -> None:
    with pytest.raises(ValueError, match=rf"wheel_size .*{names(wheel_size)}$"):
        twins.wheel.HierarchicalWheel(wheel_size=wheel_size)


@pytest.mark.parametrize("wheel_size", [2.5, 64.0, "64", True])
def test_wheel_size_must_be_an_int(twins: Implementation, wheel_size: Any) -> None:
    with pytest.raises(TypeError, match=rf"wheel_size .*{names(wheel_size)}$"):
        twins.wheel.HierarchicalWheel(wheel_size=wheel_size)


def test_start_must_be_a_finite_number(twins: Implementation) -> None:
    with pytest.raises(ValueError, match=names(math.nan)):
        twins.wheel.HierarchicalWheel(start=math.nan)
    with pytest.raises(ValueError, match=names(-math.inf)):
        twins.wheel.HierarchicalWheel(start=-math.inf)
    with pytest.raises(TypeError, match=names("0")):
        twins.wheel.HierarchicalWheel(start="0")  # type: ignore[arg-type]


@pytest.mark.parametrize("deadline", [math.nan, math.inf, -math.inf])
def test_add_rejects_non_finite_deadlines(twins: Implementation, deadline: float) -> None:
    """A bad deadline raises, names itself, and leaves the wheel untouched."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1)
    with pytest.raises(ValueError, match=rf"deadline .*{names(deadline)}$"):
        wheel.add(deadline, "x")
    assert len(wheel) == 0
    assert wheel.next_deadline() is None


@pytest.mark.parametrize("deadline", ["5", None, True, b"5"])
def test_add_rejects_non_numbers(twins: Implementation, deadline: Any) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1)
    with pytest.raises(TypeError, match=rf"deadline .*{names(deadline)}$"):
        wheel.add(deadline, "x")
    assert len(wheel) == 0


def test_advance_rejects_bad_times(twins: Implementation) -> None:
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1)
    with pytest.raises(ValueError, match=names(math.nan)):
        wheel.advance(math.nan)
    with pytest.raises(TypeError, match=names("1")):
        wheel.advance("1")  # type: ignore[arg-type]


@pytest.mark.parametrize("tick", TICKS)
def test_times_2_52_ticks_or_more_from_zero_are_rejected(
    twins: Implementation, tick: float
) -> None:
    """Beyond 2**52 ticks floats cannot tell adjacent ticks apart: refuse rather than misfire."""
    far = 2**53 * tick
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=tick)
    for deadline in (far, -far, 1e308):
        with pytest.raises(ValueError, match=rf"{names(deadline)} is too far away"):
            wheel.add(deadline, "x")
    with pytest.raises(ValueError, match=rf"{names(far)} is too far away"):
        wheel.advance(far)
    with pytest.raises(ValueError, match="too far away"):
        twins.wheel.HierarchicalWheel(tick=tick, start=far)
    assert len(wheel) == 0
    wheel.add(2**51 * tick, "near the limit is fine")
    assert len(wheel) == 1


def test_nanosecond_tick_on_an_epoch_clock_is_rejected_not_fired_early(
    twins: Implementation,
) -> None:
    """Regression: 1.79e18 ticks used to file this deadline one float step early, and
    ``advance(1793241449.6480036)`` returned it although its deadline is ...038."""
    wheel: HierarchicalWheel[str] = twins.wheel.HierarchicalWheel(tick=1e-9, start=0)
    with pytest.raises(ValueError, match="too far away"):
        wheel.add(1793241449.6480038, "x")
