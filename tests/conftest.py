"""Shared fixtures: the event loops every async test runs on.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``) and run three times:

* ``asyncio`` -- the default asyncio loop in virtual time
  (:class:`aiowheel.testing.VirtualTimeLoop`);
* ``uvloop`` -- uvloop in real time (its clock cannot be virtualised), so tests that need long
  waits ask for the ``virtual_time`` fixture, which skips them there;
* ``trio`` -- trio with ``MockClock(autojump_threshold=0)``: virtual time too.

Wheel tests run on both implementations of the wheel (``wheel_impl``): the pure-Python
:mod:`aiowheel.wheel` and the compiled :mod:`aiowheel._cwheel`. Everything else runs on the one
:mod:`aiowheel._impl` selects: run the suite once more with ``AIOWHEEL_NO_EXTENSIONS=1`` for the
pure one.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from types import ModuleType
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


WHEEL_IMPLEMENTATIONS = ["python", "compiled"]


@pytest.fixture(scope="module", params=WHEEL_IMPLEMENTATIONS)
def wheel_impl(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """The wheel module under test: ``aiowheel.wheel`` (python) or ``aiowheel._cwheel`` (compiled;
    skipped when not built or when ``AIOWHEEL_NO_EXTENSIONS`` forces pure Python).

    A test module opts in with ``pytestmark = pytest.mark.usefixtures("wheel_impl")``: its
    module-level ``Entry`` and ``HierarchicalWheel`` are rebound to the implementation's while its
    tests run, so each of them runs on both.
    """
    if request.param == "compiled":
        if os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
            pytest.skip("AIOWHEEL_NO_EXTENSIONS is set: pure Python only")
        module = pytest.importorskip("aiowheel._cwheel", reason="the compiled wheel is not built")
    else:
        module = importlib.import_module("aiowheel.wheel")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("Entry", "HierarchicalWheel"):
            if hasattr(request.module, name):
                patch.setattr(request.module, name, getattr(module, name))
        yield module
