"""The twin table: which cores have a compiled twin, where each twin lives, and which
implementation runs.

Four cores have two twins with one contract, as in aio-libs' packages (propcache, frozenlist,
multidict): a pure-Python module that specifies it, and a compiled counterpart (Cython) that
implements the same names with the same behaviour, errors and tests.

* ``wheel`` -- :class:`Entry`, :class:`HierarchicalWheel`, :func:`ceil_ticks`, :func:`floor_ticks`
  (pure: :mod:`aiowheel._wheel`);
* ``timer`` -- the Timer's scheduling and dispatch, ``TimerCore`` and ``TimerHandle``
  (pure: :mod:`aiowheel._timercore`);
* ``loop`` -- the wheel-backed event loop's timers, ``LoopCore`` and ``LoopTimerHandle``
  (pure: :mod:`aiowheel._loopcore`);
* ``idle`` -- idle expiry's touch and filing, ``IdleCore`` (pure: :mod:`aiowheel._idlecore`).

:data:`TWINS` is the one list of them: the test fixtures, the parity tests and ``setup.py`` (the
build's list of compiled parts) read it; nothing else names the twins' modules. It is a plain
literal so that ``setup.py`` can read it without importing the package.

An edge has twins too, listed apart in :data:`EDGE_TWINS` because ``import aiowheel`` must not
import them: ``rule`` -- the Spark stream's per-key idle-expiry rule, ``IdleRule`` and
``wake_ms`` (pure: :mod:`aiowheel.spark._keystate`, which needs the ``spark`` extra) -- and
``visit`` -- the stream's visit of a shard around that rule, ``add_events`` and ``visit`` (pure:
:mod:`aiowheel.spark._visit`). The build
and the parity tests read both tables alike; the edge imports its twin on first use, through
:func:`edge_twin`, which follows the same choice of implementation.

The words (docs/how-it-works.md says them too): the **implementation** is the choice between the
compiled and the pure twins, named ``"compiled"`` or ``"pure"`` (:data:`IMPLEMENTATIONS`); an
:class:`Implementation` holds one implementation's twin of every row (``twins.timer.TimerCore``
and so on), and the two are never mixed (the compiled Timer core files its handles in the
compiled wheel). A **core** is what a layer holds: a ``TimerCore``, ``LoopCore`` or ``IdleCore``
instance made from one implementation's twins.

:data:`SELECTED` is the implementation this process runs: the compiled one if it was built,
else the pure one; set ``AIOWHEEL_NO_EXTENSIONS`` to a non-empty value before the first
``import aiowheel`` to force pure Python. :data:`IMPLEMENTATION` is its name, published as
:data:`aiowheel.IMPLEMENTATION`. A layer that holds a core makes it from :data:`SELECTED` by
default, or from the implementation :func:`implementation_named` names.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from aiowheel import _contract

__all__ = [
    "COMPILED",
    "CPYTHON_FALLBACK",
    "EDGE_TWINS",
    "IMPLEMENTATION",
    "IMPLEMENTATIONS",
    "PURE",
    "SELECTED",
    "TWINS",
    "ClockWatch",
    "Entry",
    "HierarchicalWheel",
    "Implementation",
    "LoopTimerHandle",
    "TimerCore",
    "TimerHandle",
    "ceil_ticks",
    "compiled_implementation",
    "documented_by",
    "edge_twin",
    "floor_ticks",
    "implementation_named",
]

#: Every twin: (its name, its pure module, its compiled module, the names both export).
TWINS: Final = (
    (
        "wheel",
        "aiowheel._wheel",
        "aiowheel._cwheel",
        ("Entry", "HierarchicalWheel", "ceil_ticks", "floor_ticks"),
    ),
    ("timer", "aiowheel._timercore", "aiowheel._ctimercore", ("TimerCore", "TimerHandle")),
    (
        "loop",
        "aiowheel._loopcore",
        "aiowheel._cloopcore",
        ("ClockWatch", "LoopCore", "LoopTimerHandle"),
    ),
    ("idle", "aiowheel._idlecore", "aiowheel._cidlecore", ("IdleCore",)),
)

#: The twins of the edges, imported by their edge on first use (:func:`edge_twin`), never by
#: ``import aiowheel``: rows as in :data:`TWINS`.
EDGE_TWINS: Final = (
    ("rule", "aiowheel.spark._keystate", "aiowheel.spark._ckeystate", ("IdleRule", "wake_ms")),
    ("visit", "aiowheel.spark._visit", "aiowheel.spark._cvisit", ("add_events", "visit")),
)


#: The implementations' names, as ``Timer(implementation=...)`` takes them.
IMPLEMENTATIONS: Final = ("compiled", "pure")


@dataclass(frozen=True, repr=False)
class Implementation:
    """One implementation's twins: ``name`` is ``"compiled"`` or ``"pure"``; ``wheel``,
    ``timer``, ``loop`` and ``idle`` are its twin of each row of :data:`TWINS`, the module that
    exports the names the row lists."""

    name: Literal["compiled", "pure"]
    wheel: _contract.WheelTwin
    timer: _contract.TimerTwin
    loop: _contract.LoopTwin
    idle: _contract.IdleTwin

    def __repr__(self) -> str:
        return f"<Implementation {self.name}>"


def _load(name: Literal["compiled", "pure"]) -> Implementation:
    """Import every twin of one implementation; ImportError if a compiled part is not built."""
    twins: dict[str, ModuleType] = {
        row: importlib.import_module(pure if name == "pure" else compiled)
        for row, pure, compiled, _ in TWINS
    }
    return Implementation(name, **twins)


def compiled_implementation() -> Implementation | None:
    """The compiled implementation, or None if it is not built or ``AIOWHEEL_NO_EXTENSIONS``
    is set."""
    if os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
        return None
    try:
        return _load("compiled")
    except ImportError:  # not built: no C compiler or Cython at install time
        return None


PURE: Final = _load("pure")
"""The pure-Python implementation: always there."""

SELECTED: Final = compiled_implementation() or PURE
"""The implementation this process runs: compiled if built (and not switched off), else pure."""

COMPILED: Final = SELECTED is not PURE
"""True if :data:`SELECTED` is the compiled implementation."""

_COMPILED_IMPLEMENTATION: Final = SELECTED if COMPILED else None


def implementation_named(name: str | None) -> Implementation:
    """The implementation called ``name``: ``"compiled"`` or ``"pure"``; None: :data:`SELECTED`.

    For a layer that holds a core (``Timer(implementation=...)``). RuntimeError for
    ``"compiled"`` when it is not built or ``AIOWHEEL_NO_EXTENSIONS`` is set; ValueError for
    another name.
    """
    if name is None:
        return SELECTED
    if name == "pure":
        return PURE
    if name == "compiled":
        if _COMPILED_IMPLEMENTATION is None:
            raise RuntimeError(
                "implementation='compiled': the compiled implementation is not built for this "
                "interpreter (no C compiler at install time) or AIOWHEEL_NO_EXTENSIONS is set; "
                "use implementation='pure' or None"
            )
        return _COMPILED_IMPLEMENTATION
    raise ValueError(f"implementation must be 'compiled', 'pure' or None, got {name!r}")


def edge_twin(row: str, implementation: str | None = None) -> ModuleType:
    """The module of ``implementation``'s twin of the :data:`EDGE_TWINS` row ``row``, imported
    now (an edge's twins may need an optional dependency).

    ``implementation`` is named as for :func:`implementation_named` (None: :data:`SELECTED`'s).
    The compiled twin when that is ``"compiled"`` and its part is built, else the pure one; for
    an explicit ``"compiled"`` whose part is not built, RuntimeError. ValueError for a row the
    table does not have.
    """
    chosen = implementation_named(implementation).name
    for name, pure, compiled, _ in EDGE_TWINS:
        if name != row:
            continue
        if chosen == "pure":
            return importlib.import_module(pure)
        try:
            return importlib.import_module(compiled)
        except ImportError:  # the core's parts are built, this one not (or not importable)
            if implementation == "compiled":
                raise RuntimeError(
                    f"implementation='compiled': the compiled twin {compiled} is not built "
                    "for this interpreter; use implementation='pure' or None"
                ) from None
            return importlib.import_module(pure)
    raise ValueError(f"aiowheel._impl.EDGE_TWINS has no row {row!r}")


IMPLEMENTATION: Literal["compiled", "pure"] = SELECTED.name
"""Which implementation runs, by name: ``"compiled"`` or ``"pure"`` (published as
:data:`aiowheel.IMPLEMENTATION`)."""

CPYTHON_FALLBACK: Final = COMPILED and any(
    getattr(SELECTED, row).CPYTHON_FALLBACK for row, _, _, _ in TWINS
)
"""True if the compiled implementation runs and was built with ``AIOWHEEL_CPYTHON_FALLBACK=1``:
every use of CPython's internals (``aiowheel/_ccpython.pxd``) replaced by a plain fallback on the
public C API. :data:`IMPLEMENTATION` is ``"compiled"`` either way."""

_Layer = TypeVar("_Layer", bound=type)


def documented_by(core: object, *names: str) -> Callable[[_Layer], _Layer]:
    """Class decorator for a layer that holds a core: each of ``names`` -- a method or property
    of the layer that forwards to the core, or that the core's own bound method stands in for
    on the instance -- takes its docstring from ``core``, the pure twin's class. What the core
    does is written once, there (the compiled twin carries the same text: ``tests/test_twins.py``
    compares them); the layer's member has no docstring of its own, and TypeError says so if
    it has one."""

    def document(layer: _Layer) -> _Layer:
        for name in names:
            member = vars(layer)[name]
            if member.__doc__:
                raise TypeError(
                    f"{layer.__name__}.{name} has a docstring of its own: its text is "
                    f"{getattr(core, '__name__', core)}.{name}'s"
                )
            member.__doc__ = getattr(core, name).__doc__
        return layer

    return document


if TYPE_CHECKING:
    # mypy holds both twins of every row to its contract (aiowheel._contract): the pure modules
    # and the compiled parts' stubs, each checked against the Protocol of its row.
    from aiowheel import (
        _cidlecore,
        _cloopcore,
        _ctimercore,
        _cwheel,
        _idlecore,
        _loopcore,
        _timercore,
        _wheel,
    )

    _PURE_CONTRACT = Implementation("pure", _wheel, _timercore, _loopcore, _idlecore)
    _COMPILED_CONTRACT = Implementation("compiled", _cwheel, _ctimercore, _cloopcore, _cidlecore)

# The selected implementation's names, for the layers above (type checkers see the pure classes; the
# compiled parts' stubs, aiowheel/_cwheel.pyi and the others, declare the same API).
if TYPE_CHECKING:
    from aiowheel._loopcore import ClockWatch, LoopTimerHandle
    from aiowheel._timercore import TimerCore, TimerHandle
    from aiowheel._wheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks
else:
    Entry = SELECTED.wheel.Entry
    HierarchicalWheel = SELECTED.wheel.HierarchicalWheel
    ceil_ticks = SELECTED.wheel.ceil_ticks
    floor_ticks = SELECTED.wheel.floor_ticks
    TimerCore = SELECTED.timer.TimerCore
    TimerHandle = SELECTED.timer.TimerHandle
    LoopTimerHandle = SELECTED.loop.LoopTimerHandle
    ClockWatch = SELECTED.loop.ClockWatch
