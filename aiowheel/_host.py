"""The host interface: what a feature built on a Timer may ask of it, and nothing more.

A feature -- idle expiry (:mod:`aiowheel.idle` and its core, :mod:`aiowheel._idlecore`),
timeouts (:mod:`aiowheel.timeouts`), or one of your own -- talks to its Timer only through
:class:`TimerHost`, which :class:`aiowheel.Timer` implements with these public names. It lives
below the Timer, beside the event-loop adapters, so that the idle core (a twin, under the Timer
layer) can name it too: features depend on this contract, not on the Timer's module.

Published as :class:`aiowheel.TimerHost`; the handle and the cancel scope it returns are
described there, not published under names of their own.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aiowheel._backends import CancelScope

__all__ = ["FiledHandle", "TimerHost"]


class FiledHandle(Protocol):
    """What :meth:`TimerHost.call_at` and :meth:`TimerHost.refile_at` return (a
    :class:`aiowheel.TimerHandle` of either core is one)."""

    def when(self) -> float:
        """The deadline the entry is filed for."""
        ...

    def cancel(self) -> None:
        """Take the entry off the wheel; a no-op if it already fired or was cancelled."""
        ...


class TimerHost(Protocol):
    """What a feature built on a :class:`~aiowheel.Timer` may ask of it: its wheel's tick, its
    clock, filing a callback (as new work, or as the feature's own re-filing), running one now
    as the driver would, and a cancel scope. :class:`aiowheel.Timer` implements it; idle expiry
    (:class:`~aiowheel.IdleTimeouts`) and timeouts (:class:`~aiowheel.Timeout`) use nothing
    else of it.

    ``call_at`` and ``refile_at`` return the entry's handle: ``handle.when()`` is its deadline,
    ``handle.cancel()`` takes it off the wheel (a no-op once it ran or was cancelled).
    ``open_cancel_scope()`` returns a scope of the calling task: ``scope.cancel()`` cancels the
    code inside it (from any task), and ``scope.close(exc)``, from the task, leaves it with the
    exception leaving the block (None if none) and returns True iff that exception is the
    scope's own cancellation, caught there.
    """

    @property
    def tick(self) -> float:
        """The wheel's tick, in seconds: a deadline must lie within ``2**52`` ticks of zero."""
        ...

    @property
    def closed(self) -> bool:
        """True once the Timer was closed: nothing it files runs any more."""
        ...

    def time(self) -> float:
        """The Timer's clock: the running loop's time. RuntimeError before the Timer starts.

        Read afresh at every call, never cached for a pass of the driver; and from the
        Timer's start on, ``timer.time`` is the loop's clock itself, so that a feature's hot
        path reads it without a frame of the Timer's."""
        ...

    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> FiledHandle:
        """File ``callback(*args)`` for loop time ``when``: new work, which ``max_pending``
        may refuse (:class:`~aiowheel.PendingLimitError`). As ``loop.call_at``."""
        ...

    def refile_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> FiledHandle:
        """Like :meth:`call_at`, for filing again work the Timer already accepted (an entry that
        fired early and stands for work still due later): never refused by ``max_pending``."""
        ...

    def run_now(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        """Call ``callback(*args)`` now, as the driver calls a due callback: its error is
        reported, never raised; a coroutine it returns runs as a task of the Timer's."""
        ...

    def open_cancel_scope(self) -> CancelScope:
        """Enter a cancel scope in the calling task (what a timeout cancels)."""
        ...
