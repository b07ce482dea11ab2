"""Shared fixtures: the event loops every async test runs on.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``) and run three times:

* ``asyncio`` -- the default asyncio loop in virtual time
  (:class:`aiowheel.testing.VirtualTimeLoop`);
* ``uvloop`` -- uvloop in real time (its clock cannot be virtualised), so tests that need long
  waits ask for the ``virtual_time`` fixture, which skips them there;
* ``trio`` -- trio with ``MockClock(autojump_threshold=0)``: virtual time too.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiowheel.testing import VirtualTimeLoop

BACKENDS = ["asyncio", "uvloop", "trio"]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    name = request.param
    if name == "asyncio":
        return ("asyncio", {"loop_factory": VirtualTimeLoop})
    if name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    trio_testing = pytest.importorskip("trio.testing")
    return ("trio", {"clock": trio_testing.MockClock(autojump_threshold=0)})


@pytest.fixture
def backend_name(request: pytest.FixtureRequest, anyio_backend: object) -> str:
    """Which of BACKENDS the current test runs on."""
    return str(request.node.callspec.params["anyio_backend"])


@pytest.fixture
def virtual_time(backend_name: str) -> None:
    """Skip on uvloop, the one loop without virtual time."""
    if backend_name == "uvloop":
        pytest.skip("uvloop's clock cannot be virtualised; covered on asyncio and trio")
