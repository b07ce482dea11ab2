"""Loading the implementation a test runs on (see ``conftest.py`` for the ``implementation`` and
``twins`` fixtures and the ``implementation`` marker).

A module of its own, not ``conftest.py``, so that tests can import it at run time: with
``tests/spark/conftest.py`` there are two modules named ``conftest``, and which one a plain
``from conftest import ...`` finds depends on collection order.
"""

from __future__ import annotations

import pytest

from aiowheel import _impl

__all__ = ["is_loop_handle", "load_implementation"]


def load_implementation(name: str) -> _impl.Implementation:
    """The implementation called ``name`` (one of :data:`aiowheel._impl.IMPLEMENTATIONS`), as
    :mod:`aiowheel._impl` loads it; skips the calling test if it is the compiled one and it is
    not built (or ``AIOWHEEL_NO_EXTENSIONS`` is set)."""
    if name not in _impl.IMPLEMENTATIONS:
        raise ValueError(
            f"no implementation named {name!r}: expected one of {_impl.IMPLEMENTATIONS}"
        )
    try:
        return _impl.implementation_named(name)
    except RuntimeError as exc:
        pytest.skip(str(exc))


def is_loop_handle(handle: object) -> bool:
    """True if ``handle`` is a wheel loop's handle of the implementation under test: the loop
    core of :data:`aiowheel._impl.SELECTED`, which the ``implementation`` fixture sets.
    (``aiowheel.loop``'s ``LoopTimerHandle`` is the class of the implementation selected at
    import.)"""
    return isinstance(handle, _impl.SELECTED.loop.LoopTimerHandle)
