"""Shared fixtures: the event loops every async test runs on.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``) and run three times:

* ``asyncio`` -- the default asyncio loop in virtual time
  (:class:`aiowheel.testing.VirtualTimeLoop`);
* ``uvloop`` -- uvloop in real time (its clock cannot be virtualised), so tests that need long
  waits ask for the ``virtual_time`` fixture, which skips them there;
* ``trio`` -- trio with ``MockClock(autojump_threshold=0)``: virtual time too.

Twins. Every core with two twins -- the rows of :data:`aiowheel._impl.TWINS`: the wheel, the
Timer core, the loop core, the idle core -- is tested on both sides in one pytest run. A test of
the twins themselves takes the ``impl`` fixture: one side, an :class:`aiowheel._impl.Impl`
(``impl.wheel.HierarchicalWheel``, ``impl.timer.TimerCore``, ``impl.idle.IdleCore``...), whose
``impl.name`` is ``"pure"`` or ``"compiled"``; the compiled one is skipped when it is not built
or ``AIOWHEEL_NO_EXTENSIONS`` is set. A test that needs one side says so with
``@pytest.mark.impl("pure")`` or ``@pytest.mark.impl("compiled")``: with the fixture it then runs
on that side only; without it, it is skipped unless :mod:`aiowheel._impl` selected that side.

Everything built on the twins -- the Timer, timeouts, idle expiry, the event loop -- holds a core
made from one side of :mod:`aiowheel._impl`: the selected one unless told otherwise
(``Timer(core="pure")``). A test of those layers takes the ``core`` fixture -- the name of the
side under test, ``"compiled"`` or ``"pure"`` -- or its module asks for it with
``pytestmark = pytest.mark.usefixtures("core")``: it then runs once per side in one pytest run,
and whatever the test makes without naming a core runs on that side (for the test's length the
fixture makes it :data:`aiowheel._impl.SELECTED`, which is what ``core=None`` means). The
compiled side is skipped when it is not built; ``@pytest.mark.impl(...)`` narrows ``core`` as it
narrows ``impl``, and a test taking both gets the same side in both. So ``scripts/test`` needs one
pytest run per Python; a process started with ``AIOWHEEL_NO_EXTENSIONS=1`` still runs pure
Python throughout (``tests/test_impl.py`` starts such processes and checks it).

Which core and Python. The header of every run names them. ``scripts/test`` sets
``AIOWHEEL_EXPECT_CORE`` (``compiled`` or ``pure``) for each run, and a run whose process loaded
the other core stops before collecting anything (a missing build would otherwise test the pure
core quietly twice). Its run of the CPython fallback build (``AIOWHEEL_CPYTHON_FALLBACK=1``, see
``aiowheel/_ccpython.pxd``) also sets ``AIOWHEEL_EXPECT_CPYTHON_FALLBACK=1``, and stops the
same way unless :data:`aiowheel._impl.CPYTHON_FALLBACK` says that build was loaded.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import pytest
from twins import CORES, IMPLS, Impl, load_impl, load_side, selected_impl

import aiowheel
from aiowheel import _impl
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "impl(name): run on that twin only, 'pure' or 'compiled' (see conftest.py)"
    )
    expected = os.environ.get("AIOWHEEL_EXPECT_CORE")
    if expected and expected != aiowheel.CORE:
        raise pytest.UsageError(
            f"AIOWHEEL_EXPECT_CORE={expected}: this run expected the {expected} core, but "
            f"{_running()} loaded the {aiowheel.CORE} one from {_package_dir()}"
            + (
                " (the compiled core is not built for this interpreter: reinstall aiowheel "
                "with it, e.g. `pip install -e .`, where a C compiler is found)"
                if expected == "compiled"
                else ""
            )
        )
    expected_fallback = bool(os.environ.get("AIOWHEEL_EXPECT_CPYTHON_FALLBACK"))
    if expected_fallback and not _impl.CPYTHON_FALLBACK:
        raise pytest.UsageError(
            f"AIOWHEEL_EXPECT_CPYTHON_FALLBACK is set, but {_running()} loaded the "
            f"{aiowheel.CORE} core from {_package_dir()}, not a build made with "
            "AIOWHEEL_CPYTHON_FALLBACK=1"
        )


def _running() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


def _package_dir() -> str:
    return os.path.dirname(aiowheel.__file__)


def pytest_report_header(config: pytest.Config) -> str:
    fallback = " (the CPython fallback build)" if _impl.CPYTHON_FALLBACK else ""
    core = f"the {aiowheel.CORE} core{fallback} on {_running()}"
    return f"aiowheel {aiowheel.__version__}: {core}, from {_package_dir()}"


def _marked_impl(node: Any) -> str | None:
    marker = node.get_closest_marker("impl")
    if marker is None:
        return None
    (name,) = marker.args
    if name not in IMPLS:
        raise ValueError(f"@pytest.mark.impl({name!r}): expected one of {IMPLS}")
    return str(name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = _marked_impl(metafunc.definition)
    if "core" in metafunc.fixturenames:
        cores = CORES if marked is None else (marked,)
        if "impl" in metafunc.fixturenames:  # one side for both
            metafunc.parametrize(
                ("core", "impl"), [(name, name) for name in cores], indirect=True, ids=cores
            )
        else:
            metafunc.parametrize("core", cores, indirect=True, ids=list(cores))
    elif "impl" in metafunc.fixturenames:
        names = IMPLS if marked is None else (marked,)
        metafunc.parametrize("impl", names, indirect=True, ids=list(names), scope="session")


def pytest_runtest_setup(item: pytest.Item) -> None:
    marked = _marked_impl(item)
    fixturenames = getattr(item, "fixturenames", ())
    if marked is not None and "impl" not in fixturenames and marked != selected_impl():
        pytest.skip(f"needs the {marked} core; aiowheel._impl selected the {selected_impl()} one")


@pytest.fixture(scope="session")
def impl(request: pytest.FixtureRequest) -> Impl:
    """The twin under test (parametrized by ``pytest_generate_tests``)."""
    return load_impl(request.param)


@pytest.fixture
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The side under test, ``"compiled"`` or ``"pure"`` (parametrized by
    ``pytest_generate_tests``): what a Timer made in the test without ``core=`` runs on."""
    name: str = request.param
    monkeypatch.setattr(_impl, "SELECTED", load_side(name))
    return name
