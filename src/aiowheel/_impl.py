"""Which implementation of the hot paths aiowheel runs on: compiled if built, else pure Python.

The one place that chooses, as in aio-libs' packages (propcache, frozenlist, multidict). Two
hot paths have a compiled twin, both built into the one extension module :mod:`aiowheel._cwheel`
by setup.py when a C compiler is available:

* the wheel -- :class:`Entry`, :class:`HierarchicalWheel`, :func:`ceil_ticks` and
  :func:`floor_ticks`, specified by :mod:`aiowheel.wheel`;
* the Timer's scheduling and dispatch -- :class:`TimerCore` (the base class of
  :class:`aiowheel.Timer`) and :class:`TimerHandle`, specified by :mod:`aiowheel._timercore`;
* the wheel-backed event loop's timers -- :class:`LoopCore` and :class:`LoopTimerHandle` (the
  loop's ``TimerHandle``) and the loop's ``call_later`` / ``call_at`` (:func:`loop_call_later`,
  :func:`loop_call_at`), specified by :mod:`aiowheel._loopcore`;
* idle expiry's touch and filing -- :class:`IdleCore` (the base class of
  :class:`aiowheel.IdleTimeouts`), specified by :mod:`aiowheel._idlecore`.

The layers above import these names from here, never from the pure modules or the extension
directly, and always get all of them from the same side: the compiled Timer core files its
handles in the compiled wheel. Both sides have the same API, behaviour and errors, and the
same tests.

Set ``AIOWHEEL_NO_EXTENSIONS`` to a non-empty value before the first ``import aiowheel`` to force
pure Python. :data:`COMPILED` tells which side was chosen; :data:`aiowheel.CORE` is its public
name (``"compiled"`` or ``"pure"``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

__all__ = [
    "COMPILED",
    "CORE",
    "Entry",
    "HierarchicalWheel",
    "IdleCore",
    "LoopCore",
    "LoopTimerHandle",
    "TimerCore",
    "TimerHandle",
    "ceil_ticks",
    "floor_ticks",
    "loop_call_at",
    "loop_call_later",
]

COMPILED: bool
"""True if the names here are the compiled ones."""

# Type checkers see the pure classes: aiowheel/_cwheel.pyi declares the same API.
if TYPE_CHECKING or os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
    from aiowheel._idlecore import IdleCore
    from aiowheel._loopcore import LoopCore
    from aiowheel._loopcore import TimerHandle as LoopTimerHandle
    from aiowheel._loopcore import call_at as loop_call_at
    from aiowheel._loopcore import call_later as loop_call_later
    from aiowheel._timercore import TimerCore, TimerHandle
    from aiowheel.wheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks

    COMPILED = False
else:
    try:
        from aiowheel._cwheel import (
            Entry,
            HierarchicalWheel,
            IdleCore,
            LoopCore,
            LoopTimerHandle,
            TimerCore,
            TimerHandle,
            ceil_ticks,
            floor_ticks,
            loop_call_at,
            loop_call_later,
        )
    except ImportError:  # not built: no C compiler or Cython at install time
        from aiowheel._idlecore import IdleCore
        from aiowheel._loopcore import LoopCore
        from aiowheel._loopcore import TimerHandle as LoopTimerHandle
        from aiowheel._loopcore import call_at as loop_call_at
        from aiowheel._loopcore import call_later as loop_call_later
        from aiowheel._timercore import TimerCore, TimerHandle
        from aiowheel.wheel import Entry, HierarchicalWheel, ceil_ticks, floor_ticks

        COMPILED = False
    else:
        COMPILED = True

CORE: Literal["compiled", "pure"] = "compiled" if COMPILED else "pure"
"""Which core runs, by name: ``"compiled"`` or ``"pure"`` (published as :data:`aiowheel.CORE`)."""
