"""Context snapshots, which the pure cores -- the Timer's (:mod:`aiowheel._timercore`) and the
wheel-backed loop's (:mod:`aiowheel._loopcore`) -- share among the timers made in the same
context, instead of one context copy per timer.

A core copies the current context when a timer is made and keeps the copy as its last
:class:`Snapshot` while the next timers are made in the same variables, set to the very same
objects (:func:`same_variables`: compared by identity only, so no ``__eq__`` runs); each
callback runs in a fresh copy of its snapshot, so what one sets reaches no other -- the same
values and the same isolation as asyncio's one copy per handle. The compiled cores do the same
in C (``_ctimercore.pyx``, ``_cloopcore.pyx``).
"""

from __future__ import annotations

import contextvars
from itertools import repeat
from operator import is_

__all__ = ["Snapshot", "same_variables"]


class Snapshot:
    """A snapshot of a context, shared by the timers made in it: each callback runs in a fresh
    copy, so what one sets reaches no other."""

    __slots__ = ("context",)

    def __init__(self, context: contextvars.Context) -> None:
        self.context = context


def same_variables(current: contextvars.Context, snapshot: contextvars.Context) -> bool:
    """Whether ``current`` holds the same variables as ``snapshot``, each set to the very same
    object (not an equal one: values are compared by identity only, so no ``__eq__`` runs)."""
    if len(current) != len(snapshot):
        return False
    get = snapshot.get
    return all(map(is_, current.values(), map(get, current.keys(), repeat(_ABSENT))))


# What same_variables finds for a variable the snapshot lacks: no value is this object.
_ABSENT = object()
