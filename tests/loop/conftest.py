"""The wheel-backed event loop's tests (:mod:`aiowheel.loop`), one concept per module, on both
implementations of the loop core (a loop made without ``implementation=`` holds the one the
``implementation`` fixture names).

The timer contract is tested on both variants: the selector loop in virtual time (see
``support.VirtualLoop``; exact, no tolerances) and uvloop with small real delays, where only
order, never-early and completion are asserted, never an upper time bound. The compatibility
tests run real asyncio, websockets and anyio code and the idle-expiry example unchanged on real
loops, on 127.0.0.1 only.

The modules: ``test_construction.py``, ``test_loop_core.py`` (what the loop hands its core and
gets back), ``test_timer_contract.py`` (asyncio's timer API, on time and in order),
``test_uvloop_base.py``, ``test_driving.py`` (the driver), ``test_debug_and_closing.py``,
``test_real_code.py`` (real libraries, unchanged), ``test_loop_order.py`` (the order of timers
against asyncio's own loop, side by side).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import make_loop, needs_uvloop

from aiowheel.loop import WheelLoop


@pytest.fixture(params=["virtual", pytest.param("uvloop", marks=needs_uvloop)])
def kind(request: pytest.FixtureRequest) -> str:
    """The variants the timer contract is tested on."""
    return str(request.param)


@pytest.fixture
def loop(kind: str) -> Iterator[WheelLoop]:
    loop = make_loop(kind)
    yield loop
    loop.close()


@pytest.fixture(params=["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
def use_uvloop(request: pytest.FixtureRequest) -> bool:
    """Real-time variants, for the compatibility tests."""
    return request.param == "uvloop"
