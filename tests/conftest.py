"""Shared fixtures: the event loops every async test runs on.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``) and run three times:

* ``asyncio`` -- the default asyncio loop in virtual time
  (:class:`aiowheel.testing.VirtualTimeLoop`);
* ``uvloop`` -- uvloop in real time (its clock cannot be virtualised), so tests that need long
  waits ask for the ``virtual_time`` fixture, which skips them there;
* ``trio`` -- trio with ``MockClock(autojump_threshold=0)``: virtual time too.

Implementations (the words are docs/how-it-works.md's). Every core with two twins -- the rows of
:data:`aiowheel._impl.TWINS`: the wheel, the Timer core, the loop core, the idle core -- is tested
on both implementations, compiled and pure, in one pytest run. A test of the twins themselves
takes the ``twins`` fixture: one implementation's twins, an :class:`aiowheel._impl.Implementation`
(``twins.wheel.HierarchicalWheel``, ``twins.timer.TimerCore``, ``twins.idle.IdleCore``...), whose
``twins.name`` is ``"compiled"`` or ``"pure"``; the compiled one is skipped when it is not built
or ``AIOWHEEL_NO_EXTENSIONS`` is set. A test that needs one implementation says so with
``@pytest.mark.implementation("pure")`` or ``@pytest.mark.implementation("compiled")``: with the
fixture it then runs on that one only; without it, it is skipped unless :mod:`aiowheel._impl`
selected that one.

Everything built on the twins -- the Timer, timeouts, idle expiry, the event loop -- holds a core
made from one implementation: the selected one unless told otherwise
(``Timer(implementation="pure")``). A test of those layers takes the ``implementation`` fixture
-- the name of the implementation under test, ``"compiled"`` or ``"pure"`` -- or its module asks
for it with ``pytestmark = pytest.mark.usefixtures("implementation")``: it then runs once per
implementation in one pytest run, and whatever the test makes without naming one runs on it (for
the test's length the fixture makes it :data:`aiowheel._impl.SELECTED`, which is what
``implementation=None`` means). The compiled one is skipped when it is not built;
``@pytest.mark.implementation(...)`` narrows the ``implementation`` fixture as it narrows
``twins``, and a test taking both gets the same implementation in both. So ``scripts/test``
needs one pytest run per Python; a process started with ``AIOWHEEL_NO_EXTENSIONS=1`` still runs
pure Python throughout (``tests/test_impl.py`` starts such processes and checks it).

Which implementation and Python. The header of every run names them. ``scripts/test`` sets
``AIOWHEEL_EXPECT_IMPLEMENTATION`` (``compiled`` or ``pure``) for each run, and a run whose
process loaded the other implementation stops before collecting anything (a missing build would
otherwise test the pure one quietly twice). Its run of the CPython fallback build
(``AIOWHEEL_CPYTHON_FALLBACK=1``, see ``aiowheel/_ccpython.pxd``) selects the tests marked
``implementations`` -- every test that runs on each implementation, found by its fixtures, and
the twins' parity tests -- and also sets ``AIOWHEEL_EXPECT_CPYTHON_FALLBACK=1``, and stops the
same way unless :data:`aiowheel._impl.CPYTHON_FALLBACK` says that build was loaded.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import pytest
from twins import load_implementation

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
        "markers",
        "implementation(name): run on that implementation only, 'compiled' or 'pure' "
        "(see conftest.py)",
    )
    config.addinivalue_line(
        "markers",
        "implementations: runs the compiled code: given to every test that takes the twins or "
        "implementation fixture, and to the twins' parity tests (see conftest.py)",
    )
    expected = os.environ.get("AIOWHEEL_EXPECT_IMPLEMENTATION")
    if expected and expected != aiowheel.IMPLEMENTATION:
        raise pytest.UsageError(
            f"AIOWHEEL_EXPECT_IMPLEMENTATION={expected}: this run expected the {expected} "
            f"implementation, but {_running()} loaded the {aiowheel.IMPLEMENTATION} one from "
            f"{_package_dir()}"
            + (
                " (the compiled implementation is not built for this interpreter: reinstall "
                "aiowheel with it, e.g. `pip install -e .`, where a C compiler is found)"
                if expected == "compiled"
                else ""
            )
        )
    expected_fallback = bool(os.environ.get("AIOWHEEL_EXPECT_CPYTHON_FALLBACK"))
    if expected_fallback and not _impl.CPYTHON_FALLBACK:
        raise pytest.UsageError(
            f"AIOWHEEL_EXPECT_CPYTHON_FALLBACK is set, but {_running()} loaded the "
            f"{aiowheel.IMPLEMENTATION} implementation from {_package_dir()}, not a build made "
            "with AIOWHEEL_CPYTHON_FALLBACK=1"
        )


def _running() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


def _package_dir() -> str:
    return os.path.dirname(aiowheel.__file__)


def pytest_report_header(config: pytest.Config) -> str:
    fallback = " (the CPython fallback build)" if _impl.CPYTHON_FALLBACK else ""
    running = f"the {aiowheel.IMPLEMENTATION} implementation{fallback} on {_running()}"
    return f"aiowheel {aiowheel.__version__}: {running}, from {_package_dir()}"


def _marked_implementation(node: Any) -> str | None:
    marker = node.get_closest_marker("implementation")
    if marker is None:
        return None
    (name,) = marker.args
    if name not in _impl.IMPLEMENTATIONS:
        raise ValueError(
            f"@pytest.mark.implementation({name!r}): expected one of {_impl.IMPLEMENTATIONS}"
        )
    return str(name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = _marked_implementation(metafunc.definition)
    names = _impl.IMPLEMENTATIONS if marked is None else (marked,)
    if "implementation" in metafunc.fixturenames:
        if "twins" in metafunc.fixturenames:  # one implementation for both
            metafunc.parametrize(
                ("implementation", "twins"),
                [(name, name) for name in names],
                indirect=True,
                ids=list(names),
            )
        else:
            metafunc.parametrize("implementation", names, indirect=True, ids=list(names))
    elif "twins" in metafunc.fixturenames:
        metafunc.parametrize("twins", names, indirect=True, ids=list(names), scope="session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The tests a build of the compiled code must pass (scripts/test runs them on the CPython
    # fallback build with `-m implementations`): selected by what they run on, not listed.
    for item in items:
        if {"twins", "implementation"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.implementations)


def pytest_runtest_setup(item: pytest.Item) -> None:
    marked = _marked_implementation(item)
    fixturenames = getattr(item, "fixturenames", ())
    if marked is not None and "twins" not in fixturenames and marked != aiowheel.IMPLEMENTATION:
        pytest.skip(
            f"needs the {marked} implementation; aiowheel._impl selected the "
            f"{aiowheel.IMPLEMENTATION} one"
        )


@pytest.fixture(scope="session")
def twins(request: pytest.FixtureRequest) -> _impl.Implementation:
    """The twins under test: one implementation (parametrized by ``pytest_generate_tests``)."""
    return load_implementation(request.param)


@pytest.fixture
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The implementation under test, ``"compiled"`` or ``"pure"`` (parametrized by
    ``pytest_generate_tests``): what a Timer made in the test without ``implementation=`` runs
    on."""
    name: str = request.param
    monkeypatch.setattr(_impl, "SELECTED", load_implementation(name))
    return name
