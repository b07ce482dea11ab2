"""The twin table: which cores have a compiled twin, where each side lives, and which one runs.

Four cores have two twins with one contract, as in aio-libs' packages (propcache, frozenlist,
multidict): a pure-Python module that specifies it, and a compiled counterpart (Cython) that
implements the same names with the same behaviour, errors and tests.

* ``wheel`` -- :class:`Entry`, :class:`HierarchicalWheel`, :func:`ceil_ticks`, :func:`floor_ticks`
  (pure: :mod:`aiowheel._wheel`);
* ``timer`` -- the Timer's scheduling and dispatch, ``TimerCore`` and ``TimerHandle``
  (pure: :mod:`aiowheel._timercore`);
* ``loop`` -- the wheel-backed event loop's timers, ``LoopCore`` and the loop's ``TimerHandle``
  (pure: :mod:`aiowheel._loopcore`);
* ``idle`` -- idle expiry's touch and filing, ``IdleCore`` (pure: :mod:`aiowheel._idlecore`).

:data:`TWINS` is the one list of them: the test fixtures, the parity tests and ``setup.py`` (the
build's list of compiled parts) read it; nothing else names the twins' modules. It is a plain
literal so that ``setup.py`` can read it without importing the package.

An :class:`Impl` is one side, every core of it: ``impl.timer.TimerCore`` and so on. The two sides
are never mixed (the compiled Timer core files its handles in the compiled wheel).
:data:`SELECTED` is the side this process runs: the compiled one if it was built, else the pure
one; set ``AIOWHEEL_NO_EXTENSIONS`` to a non-empty value before the first ``import aiowheel`` to
force pure Python. :data:`CORE` is its name, published as :data:`aiowheel.CORE`. A layer that
holds a core is made from :data:`SELECTED` by default, or from the side :func:`impl_named` names.
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
    "CORE",
    "CPYTHON_FALLBACK",
    "PURE",
    "SELECTED",
    "TWINS",
    "Entry",
    "HierarchicalWheel",
    "Impl",
    "LoopTimerHandle",
    "TimerCore",
    "TimerHandle",
    "ceil_ticks",
    "compiled_impl",
    "documented_by",
    "floor_ticks",
    "impl_named",
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
        ("LoopCore", "TimerHandle"),
    ),
    ("idle", "aiowheel._idlecore", "aiowheel._cidlecore", ("IdleCore",)),
)


@dataclass(frozen=True, repr=False)
class Impl:
    """One side of every twin: ``name`` is ``"compiled"`` or ``"pure"``; ``wheel``, ``timer``,
    ``loop`` and ``idle`` are that side's module of each core, which exports the names
    :data:`TWINS` lists for it."""

    name: Literal["compiled", "pure"]
    wheel: _contract.WheelTwin
    timer: _contract.TimerTwin
    loop: _contract.LoopTwin
    idle: _contract.IdleTwin

    def __repr__(self) -> str:
        return f"<Impl {self.name}>"


def _side(name: Literal["compiled", "pure"]) -> Impl:
    """Import every core of one side; ImportError if a compiled part is not built."""
    cores: dict[str, ModuleType] = {
        twin: importlib.import_module(pure if name == "pure" else compiled)
        for twin, pure, compiled, _ in TWINS
    }
    return Impl(name, **cores)


def compiled_impl() -> Impl | None:
    """The compiled side, or None if it is not built or ``AIOWHEEL_NO_EXTENSIONS`` is set."""
    if os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
        return None
    try:
        return _side("compiled")
    except ImportError:  # not built: no C compiler or Cython at install time
        return None


PURE: Final = _side("pure")
"""The pure-Python side: always there."""

SELECTED: Final = compiled_impl() or PURE
"""The side this process runs: compiled if built (and not switched off), else pure."""

COMPILED: Final = SELECTED is not PURE
"""True if :data:`SELECTED` is the compiled side."""

_COMPILED_SIDE: Final = SELECTED if COMPILED else None


def impl_named(name: str | None) -> Impl:
    """The side called ``name``: ``"compiled"`` or ``"pure"``; None: :data:`SELECTED`.

    For a layer that holds a core (``Timer(core=...)``). RuntimeError for ``"compiled"`` when it
    is not built or ``AIOWHEEL_NO_EXTENSIONS`` is set; ValueError for another name.
    """
    if name is None:
        return SELECTED
    if name == "pure":
        return PURE
    if name == "compiled":
        if _COMPILED_SIDE is None:
            raise RuntimeError(
                "core='compiled': the compiled core is not built for this interpreter (no C "
                "compiler at install time) or AIOWHEEL_NO_EXTENSIONS is set; use core='pure' "
                "or None"
            )
        return _COMPILED_SIDE
    raise ValueError(f"core must be 'compiled', 'pure' or None, got {name!r}")


CORE: Literal["compiled", "pure"] = SELECTED.name
"""Which core runs, by name: ``"compiled"`` or ``"pure"`` (published as :data:`aiowheel.CORE`)."""

CPYTHON_FALLBACK: Final = COMPILED and any(
    getattr(SELECTED, twin).CPYTHON_FALLBACK for twin, _, _, _ in TWINS
)
"""True if the compiled core runs and was built with ``AIOWHEEL_CPYTHON_FALLBACK=1``: every use
of CPython's internals (``aiowheel/_ccpython.pxd``) replaced by a plain fallback on the
public C API. :data:`CORE` is ``"compiled"`` either way."""

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
    # mypy holds both sides of every twin to its contract (aiowheel._contract): the pure modules
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

    _PURE_CONTRACT = Impl("pure", _wheel, _timercore, _loopcore, _idlecore)
    _COMPILED_CONTRACT = Impl("compiled", _cwheel, _ctimercore, _cloopcore, _cidlecore)

# The selected side's names, for the layers above (type checkers see the pure classes; the
# compiled parts' stubs, aiowheel/_cwheel.pyi and the others, declare the same API).
if TYPE_CHECKING:
    from aiowheel._loopcore import TimerHandle as LoopTimerHandle
    from aiowheel._timercore import TimerCore, TimerHandle
    from aiowheel._wheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks
else:
    Entry = SELECTED.wheel.Entry
    HierarchicalWheel = SELECTED.wheel.HierarchicalWheel
    ceil_ticks = SELECTED.wheel.ceil_ticks
    floor_ticks = SELECTED.wheel.floor_ticks
    TimerCore = SELECTED.timer.TimerCore
    TimerHandle = SELECTED.timer.TimerHandle
    LoopTimerHandle = SELECTED.loop.TimerHandle
