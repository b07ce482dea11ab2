"""Which implementation of the wheel aiowheel runs on: compiled if built, else pure Python.

The one place that chooses, as in aio-libs' packages (propcache, frozenlist, multidict): the
layers above import :class:`Entry`, :class:`HierarchicalWheel` and the rounding functions
:func:`ceil_ticks` and :func:`floor_ticks` from here, never from
:mod:`aiowheel.wheel` (the pure implementation and the specification) or
:mod:`aiowheel._cwheel` (its compiled twin, built by setup.py when a C compiler is available)
directly. Both have the same API, behaviour and errors, and the same tests.

Set ``AIOWHEEL_NO_EXTENSIONS`` to a non-empty value before the first ``import aiowheel`` to force
the pure-Python wheel. :data:`COMPILED` tells which one was chosen.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = ["COMPILED", "Entry", "HierarchicalWheel", "ceil_ticks", "floor_ticks"]

COMPILED: bool
"""True if the names here are the compiled ones."""

# Type checkers see the pure classes: aiowheel/_cwheel.pyi declares the same API.
if TYPE_CHECKING or os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
    from aiowheel.wheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks

    COMPILED = False
else:
    try:
        from aiowheel._cwheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks
    except ImportError:  # not built: no C compiler or Cython at install time
        from aiowheel.wheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks

        COMPILED = False
    else:
        COMPILED = True
