"""What a Timer refuses, naming the value: bad construction arguments, bad times, non-callables
and coroutine functions as callbacks, times out of range.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
from support import noop

from aiowheel import Timer

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- construction ---------------------------------------------------------------------------------


def test_defaults() -> None:
    timer = Timer()
    assert (timer.tick, timer.wheel_size, timer.max_pending) == (0.001, 64, None)
    assert timer.exception_handler is None
    assert not timer.closed
    assert len(timer) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tick": 0}, "tick must be finite and > 0, got 0"),
        ({"tick": -0.001}, "tick must be finite and > 0, got -0.001"),
        ({"tick": math.nan}, "tick must be finite and > 0, got nan"),
        ({"tick": math.inf}, "tick must be finite and > 0, got inf"),
        ({"wheel_size": 1}, "wheel_size must be >= 2, got 1"),
        ({"wheel_size": 0}, "wheel_size must be >= 2, got 0"),
        ({"max_pending": 0}, "max_pending must be >= 1, got 0"),
        ({"max_pending": -3}, "max_pending must be >= 1, got -3"),
    ],
)
def test_bad_construction_arguments_raise_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Timer(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tick": "1ms"}, "tick must be a real number, got '1ms'"),
        ({"wheel_size": 64.0}, "wheel_size must be an int, got 64.0"),
    ],
)
def test_construction_arguments_of_the_wrong_type_raise_type_error(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        Timer(**kwargs)


@pytest.mark.parametrize("value", [1.5, True, "3"])
def test_max_pending_must_be_an_int(value: object) -> None:
    with pytest.raises(
        TypeError, match=re.escape(f"max_pending must be an int or None, got {value!r}")
    ):
        Timer(max_pending=value)  # type: ignore[arg-type]


# -- bad input ------------------------------------------------------------------------------------

TIME_ARGUMENT_USERS: dict[str, Callable[[Timer, Any], object]] = {
    "call_later": lambda timer, value: timer.call_later(value, noop),
    "call_at": lambda timer, value: timer.call_at(value, noop),
    "schedule": lambda timer, value: timer.schedule(value, noop),
    "schedule_at": lambda timer, value: timer.schedule_at(value, noop),
    "sleep": lambda timer, value: timer.sleep(value),
    "sleep_until": lambda timer, value: timer.sleep_until(value),
}


@pytest.mark.parametrize("method", list(TIME_ARGUMENT_USERS))
@pytest.mark.parametrize(
    ("value", "error", "named"),
    [
        (math.nan, ValueError, "nan"),
        (math.inf, ValueError, "inf"),
        (-math.inf, ValueError, "-inf"),
        ("1", TypeError, "'1'"),
        (None, TypeError, "None"),
        # bool is an int subclass, but True seconds is a bug at the call site.
        (True, TypeError, "True"),
    ],
    ids=["nan", "inf", "-inf", "str", "None", "bool"],
)
async def test_a_bad_time_argument_is_refused_naming_the_value(
    method: str, value: object, error: type[Exception], named: str
) -> None:
    async with Timer() as timer:
        with pytest.raises(error, match=re.escape(named)):
            result = TIME_ARGUMENT_USERS[method](timer, value)
            if isinstance(result, Awaitable):
                await result
        assert len(timer) == 0


async def test_a_non_callable_is_refused_naming_it() -> None:
    async with Timer() as timer:
        with pytest.raises(TypeError, match=re.escape("by call_later(), got 42")):
            timer.call_later(1, 42)
        with pytest.raises(TypeError, match=re.escape("by call_at(), got 'x'")):
            timer.call_at(1, "x")
        with pytest.raises(TypeError, match=re.escape("by schedule(), got None")):
            timer.schedule(1, None)
        with pytest.raises(TypeError, match=re.escape("got 3.5")):
            timer.schedule_at(1, 3.5)
        assert len(timer) == 0


class Client:
    async def fetch(self) -> None:
        return None


async def _coroutine_function() -> None:
    return None


@pytest.mark.parametrize("method", ["call_later", "call_at"])
@pytest.mark.parametrize(
    "make_callback",
    [
        lambda: _coroutine_function,
        lambda: Client().fetch,
        lambda: partial(_coroutine_function),
        _coroutine_function,  # a coroutine object
    ],
    ids=["coroutine function", "async method", "partial", "coroutine object"],
)
async def test_coroutines_are_refused_as_callbacks(
    method: str, make_callback: Callable[[], Any]
) -> None:
    callback = make_callback()
    try:
        async with Timer() as timer:
            message = re.escape(f"coroutines cannot be used with {method}()")
            with pytest.raises(TypeError, match=message):
                getattr(timer, method)(1, callback)
            assert len(timer) == 0
            # A coroutine object is not a function to schedule either.
            if asyncio.iscoroutine(callback):
                with pytest.raises(TypeError, match="by schedule"):
                    timer.schedule(1, callback)
    finally:
        if asyncio.iscoroutine(callback):
            callback.close()


async def test_a_deadline_years_away_is_fine() -> None:
    async with Timer() as timer:
        handle = timer.call_later(10 * 365 * 86400, noop)
        assert len(timer) == 1
        handle.cancel()
        assert len(timer) == 0


async def test_a_time_too_large_for_a_float_is_a_value_error() -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match="when 1000"):
            timer.call_at(10**400, print)
        with pytest.raises(ValueError, match="delay 1000"):
            timer.call_later(10**400, print)
