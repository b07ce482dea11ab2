"""aiowheel's pytest plugin: virtual time and the wheel-backed loops, one line away in a test.

Registered through the ``pytest11`` entry point, so installing aiowheel is enough (disable it
with ``-p no:aiowheel``). It provides:

* loop factories for pytest-asyncio (1.4 or later), by name, through its
  ``pytest_asyncio_loop_factories`` hook::

      @pytest.mark.asyncio(loop_factories=["aiowheel-virtual"])

  - ``"aiowheel-virtual"``: :class:`aiowheel.testing.VirtualTimeLoop`, asyncio in virtual time;
  - ``"aiowheel"``: the wheel-backed asyncio loop (:func:`aiowheel.loop.new_event_loop`);
  - ``"aiowheel-uvloop"``: the same on uvloop (:func:`aiowheel.loop.new_uvloop_event_loop`;
    the test is skipped if uvloop is not installed);
  - ``"asyncio"``: the loop pytest-asyncio makes by default (``asyncio.new_event_loop()``, so
    an event loop policy still applies), for comparing against it.

  The ``aiowheel_default_loop_factories`` ini option names the factories for every asyncio
  test whose marker names none (several names run each such test once per loop);
* the ``virtual_clock`` fixture: the clock of the running test, asyncio or trio
  (:class:`aiowheel.testing.VirtualClock`): read virtual time, advance it by hand running what
  becomes due, switch autojump off for tests that wait on real I/O.

What it leaves alone. pytest-asyncio asks a registered hook for every asyncio test, so the hook
answers for tests that name no factory too: with the ini option unset, it gives them the single
``"asyncio"`` factory -- the very loop pytest-asyncio would make without any hook, under an id
pytest hides, so test names and loops are unchanged. Projects with a
``pytest_asyncio_loop_factories`` hook of their own keep theirs: this one runs last, and only if
theirs returns None; theirs can offer aiowheel's loops by merging :func:`loop_factories`.
Tests that use neither pytest-asyncio nor ``virtual_clock`` (anyio's and trio's plugins, sync
tests) never meet this plugin.

Loading it costs little: the module imports only pytest (and, being in it, the ``aiowheel``
package); :mod:`aiowheel.testing`, the loops' modules, uvloop and trio are imported by the
factories and the fixture, when a test asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

    from aiowheel.testing import VirtualClock

__all__ = ["loop_factories", "virtual_clock"]

LoopFactory = Callable[[], "AbstractEventLoop"]

_DEFAULT_FACTORIES_INI = "aiowheel_default_loop_factories"


def _asyncio_loop() -> AbstractEventLoop:
    import asyncio

    # What asyncio.Runner makes when pytest-asyncio gives it no factory: the policy's loop.
    return asyncio.new_event_loop()


def _wheel_loop() -> AbstractEventLoop:
    import aiowheel.loop

    return aiowheel.loop.new_event_loop()


def _wheel_uvloop() -> AbstractEventLoop:
    pytest.importorskip("uvloop", reason="aiowheel-uvloop needs uvloop, which is not installed")
    import aiowheel.loop

    return aiowheel.loop.new_uvloop_event_loop()


def _virtual_time_loop() -> AbstractEventLoop:
    from aiowheel.testing import VirtualTimeLoop

    return VirtualTimeLoop()


_FACTORIES: dict[str, LoopFactory] = {
    "aiowheel": _wheel_loop,
    "aiowheel-uvloop": _wheel_uvloop,
    "aiowheel-virtual": _virtual_time_loop,
    "asyncio": _asyncio_loop,
}


def loop_factories() -> dict[str, LoopFactory]:
    """aiowheel's loop factories by name, for a project's own ``pytest_asyncio_loop_factories``.

    A fresh dict each call: ``"aiowheel"``, ``"aiowheel-uvloop"``, ``"aiowheel-virtual"`` and
    ``"asyncio"`` (see the module docstring). Each factory imports what it needs when called.
    """
    return dict(_FACTORIES)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        _DEFAULT_FACTORIES_INI,
        type="args",
        default=[],
        help="aiowheel: loop factories for pytest-asyncio tests whose asyncio marker names none "
        f"(any of: {', '.join(_FACTORIES)}); empty: pytest-asyncio's default loop",
    )


def pytest_configure(config: pytest.Config) -> None:
    unknown = [name for name in _default_factory_names(config) if name not in _FACTORIES]
    if unknown:
        raise pytest.UsageError(
            f"{_DEFAULT_FACTORIES_INI}: unknown loop factory {unknown[0]!r}; "
            f"expected names among: {', '.join(_FACTORIES)}"
        )


def _default_factory_names(config: pytest.Config) -> list[str]:
    names: list[str] = config.getini(_DEFAULT_FACTORIES_INI)
    return names


# optionalhook: without pytest-asyncio (or before 1.4) the hook does not exist and this is unused.
@pytest.hookimpl(trylast=True, optionalhook=True)
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """pytest-asyncio's hook: every factory for a test that names some in its marker, else the
    configured defaults (``"asyncio"`` alone if none are)."""
    marker = item.get_closest_marker("asyncio")
    if marker is not None and "loop_factories" in marker.kwargs:
        # pytest-asyncio runs the ones named, and skips a name missing here, listing these.
        return loop_factories()
    names = _default_factory_names(config) or ["asyncio"]
    return {name: _FACTORIES[name] for name in names}


@pytest.fixture
def virtual_clock() -> Iterator[VirtualClock]:
    """The virtual clock of the running test: :class:`aiowheel.testing.VirtualClock`.

    ``virtual_clock.time()``, ``await virtual_clock.advance(seconds)``,
    ``virtual_clock.autojump = False``; from inside the test, on
    ``loop_factories=["aiowheel-virtual"]`` (pytest-asyncio), on anyio's
    ``("asyncio", {"loop_factory": VirtualTimeLoop})`` or on trio with a ``MockClock``. An
    autojump setting changed through it is put back after the test.
    """
    from aiowheel.testing import VirtualClock

    clock = VirtualClock()
    yield clock
    clock._restore_autojump()
