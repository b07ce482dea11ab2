"""Making a wheel loop: its options checked and converted, the loop factories, the class it is."""

from __future__ import annotations

import asyncio
import inspect
import math
import re
import sys
from typing import Any

import pytest
from support import needs_uvloop

import aiowheel
import aiowheel._impl
import aiowheel.loop
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop
from aiowheel.loop._selector import WheelEventLoop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- construction ---------------------------------------------------------------------------------


def test_default_loop_is_asyncios_selector_loop_with_a_wheel() -> None:
    loop = new_event_loop()
    try:
        assert isinstance(loop, WheelEventLoop)
        assert isinstance(loop, asyncio.SelectorEventLoop)
        assert isinstance(loop, WheelLoop)
        assert loop.wheel.tick == 0.001
        assert loop.wheel.wheel_size == 64
        assert loop.min_delay == 4 * 0.001
        # loop.time() is the base loop's own clock.
        assert type(loop).time is asyncio.SelectorEventLoop.time
    finally:
        loop.close()


@needs_uvloop
def test_uvloop_variant_is_a_uvloop_loop() -> None:
    loop = new_uvloop_event_loop(tick=0.002, wheel_size=32, min_delay=0.01)
    try:
        assert isinstance(loop, uvloop.Loop)
        assert isinstance(loop, WheelLoop)
        assert type(loop).time is uvloop.Loop.time
        assert (loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay) == (0.002, 32, 0.01)
        assert "WheelUVLoop" in repr(loop)
    finally:
        loop.close()


def test_missing_uvloop_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    aiowheel.loop._uvloop_class.cache_clear()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` fail
    try:
        # It says which extra, and where to go without it.
        with pytest.raises(ImportError, match=r"pip install 'aiowheel\[uvloop\]'.*new_event_loop"):
            new_uvloop_event_loop()
        with pytest.raises(ImportError, match=re.escape("pip install 'aiowheel[uvloop]'")):
            new_uvloop_event_loop(tick=0.002)
    finally:
        aiowheel.loop._uvloop_class.cache_clear()


def test_new_uvloop_event_loop_is_the_uvloop_twin_with_the_defaults() -> None:
    pytest.importorskip("uvloop")
    import uvloop

    loop = new_uvloop_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert isinstance(loop, WheelLoop)
        reference = new_event_loop()
        try:
            assert (loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay) == (
                reference.wheel.tick,
                reference.wheel.wheel_size,
                reference.min_delay,
            )
        finally:
            reference.close()
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"tick": 0}, ValueError, "tick must be finite and > 0, got 0"),
        ({"tick": "1ms"}, TypeError, "tick must be a real number, got '1ms'"),
        ({"wheel_size": 1}, ValueError, "wheel_size must be >= 2, got 1"),
        ({"min_delay": -0.5}, ValueError, "min_delay must be finite and >= 0, got -0.5"),
        ({"min_delay": math.nan}, ValueError, "min_delay must be finite and >= 0, got nan"),
        ({"min_delay": True}, TypeError, "min_delay must be a real number or None, got True"),
    ],
)
def test_bad_options_are_refused_by_name(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    makers = [new_event_loop] + ([new_uvloop_event_loop] if uvloop is not None else [])
    for make in makers:
        with pytest.raises(error, match=re.escape(message)):
            make(**options)


def keyword_options(func: Any) -> dict[str, Any]:
    """A signature's keyword-only parameters and their defaults."""
    parameters = inspect.signature(func).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}


def test_every_way_to_make_a_wheel_loop_takes_the_same_options() -> None:
    # The wheel's options are written in the signatures of both makers, both loop classes and
    # the loop's set-up, and in aiowheel.loop.run's TypedDict: the same names and defaults.
    expected = keyword_options(new_event_loop)
    assert list(expected) == ["tick", "wheel_size", "min_delay", "implementation"]
    assert set(aiowheel.loop._LoopOptions.__annotations__) == set(expected)
    makers = [new_uvloop_event_loop, WheelEventLoop.__init__, WheelLoop._init_wheel]
    if uvloop is not None:
        makers.append(aiowheel.loop._uvloop_class().__init__)  # type: ignore[misc]
    for make in makers:
        assert keyword_options(make) == expected, make
