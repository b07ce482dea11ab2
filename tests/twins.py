"""The twins of the wheel, the Timer core and the idle core, for tests: which exist, and what
:mod:`aiowheel._impl` selected (see ``conftest.py`` for the ``impl`` fixture and marker).

A module of its own, not ``conftest.py``, so that tests can import it at run time: with
``tests/spark/conftest.py`` there are two modules named ``conftest``, and which one a plain
``from conftest import ...`` finds depends on collection order.
"""

from __future__ import annotations

import pytest

from aiowheel import _impl

__all__ = [
    "CORES",
    "IMPLS",
    "Impl",
    "is_loop_handle",
    "load_impl",
    "load_side",
    "selected_impl",
]

IMPLS = ("pure", "compiled")
#: The ``core`` fixture's values, as ``Timer(core=...)`` takes them.
CORES = ("compiled", "pure")


#: One side of every twin, as :mod:`aiowheel._impl` makes it: ``impl.wheel.HierarchicalWheel``,
#: ``impl.timer.TimerCore``... (the rows of :data:`aiowheel._impl.TWINS`).
Impl = _impl.Impl


def load_impl(name: str) -> Impl:
    """The ``name`` side, as :mod:`aiowheel._impl` loads it (``PURE``, ``compiled_impl()``);
    skips the calling test if it is the compiled one and is not built (or switched off)."""
    if name not in IMPLS:
        raise ValueError(f"no twin named {name!r}: expected one of {IMPLS}")
    return load_side(name)


def load_side(name: str) -> _impl.Impl:
    """The side of :mod:`aiowheel._impl` called ``name``; skips the calling test if it is the
    compiled one and is not built (or ``AIOWHEEL_NO_EXTENSIONS`` is set)."""
    try:
        return _impl.impl_named(name)
    except RuntimeError as exc:
        pytest.skip(str(exc))


def selected_impl() -> str:
    """The twin :mod:`aiowheel._impl` selected in this process."""
    return _impl.CORE


def is_loop_handle(handle: object) -> bool:
    """True if ``handle`` is a wheel loop's handle of the side under test: the loop core of
    :data:`aiowheel._impl.SELECTED`, which the ``core`` fixture sets. (``aiowheel.loop``'s
    ``LoopTimerHandle`` is the class of the side selected at import.)"""
    return isinstance(handle, _impl.SELECTED.loop.TimerHandle)
