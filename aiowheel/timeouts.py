"""Timeouts on the wheel: ``async with timer.timeout(delay):``, like ``asyncio.timeout``.

This module owns :class:`Timeout`, the async context manager returned by the Timer's
``timeout(delay)`` / ``timeout_at(when)`` (which raise :class:`TimeoutError`, like
``asyncio.timeout`` and ``anyio.fail_after``) and ``move_on_after(delay)`` / ``move_on_at(when)``
(which do not, like trio's and anyio's ``move_on_after``). A deadline is one entry on the Timer's
wheel, so thousands of concurrent timeouts cost one loop timer -- the driver's -- not thousands.

Semantics, the same on asyncio, uvloop and trio:

* ``when`` is in the Timer's clock (``timer.time()``); ``delay`` is counted from the call that
  creates the Timeout, as ``asyncio.timeout`` does. ``None`` means no deadline.
* Once ``timer.time() >= when`` while the block runs, the block is cancelled: it gets the
  backend's cancellation (``asyncio.CancelledError``, ``trio.Cancelled``) at its next await.
  Never early; at most one tick late, plus the loop's latency.
* If that cancellation leaves the block, ``timeout``/``timeout_at`` raise ``TimeoutError`` from
  it and ``move_on_*`` swallow it; either way ``cancelled_caught`` becomes True. If the block
  catches it and ends normally, nothing is raised (``expired()`` is still True).
* A deadline already past -- on entry, or set by ``reschedule`` -- cancels the block at its next
  await, as the loop next runs (``asyncio.timeout``'s ``call_soon`` of its expiry). Until then
  ``expired()`` is False and a ``reschedule`` takes it back, as with ``asyncio.timeout``: the
  same outcome for every sequence of ``reschedule`` calls, on asyncio, uvloop and trio.
* A cancellation that is not this Timeout's own is never caught, let alone turned into
  ``TimeoutError``: an enclosing timeout that expired too, a cancel scope around the block, a
  ``task.cancel()`` from outside. When nested timeouts both expire, the outermost one catches.
  On asyncio this is ``asyncio.timeout``'s logic exactly (``task.cancel()``, then
  ``task.uncancel()`` and a look at ``task.cancelling()`` on exit); on trio it is a
  ``trio.CancelScope`` that the wheel cancels. The backend-specific part lives in the adapters
  (:mod:`aiowheel._backends`).

``reschedule(when)`` is lazy: the Timeout keeps one wheel entry, filed at or before its deadline.
Moving the deadline later (or to None) touches nothing -- the entry fires early and re-files
itself under the new deadline then -- so a deadline pushed on every received message costs a
comparison, not a wheel operation. Moving it earlier re-files the entry (O(1) remove and add).
That re-filing is the Timeout's own bookkeeping, which the Timer's ``max_pending`` never refuses;
only a Timeout that needs a wheel entry it did not have (on entry, or a deadline set after None)
can get :class:`~aiowheel.PendingLimitError`, at that call.

A deadline is any real number (see :mod:`aiowheel._checks`): one that is not an int or a float is
rounded up to a float. One beyond the wheel's reach (``2**52`` ticks from zero) is refused when
the Timeout is made or rescheduled, with ValueError.

A Timeout can be entered once, and only while its Timer runs; if the Timer closes while the
block runs (``aclose()`` from anywhere), its deadline no longer applies and the block runs on.
Not thread-safe.

This module is part of the Timer layer: :class:`aiowheel.Timer` imports it for its ``timeout*`` and
``move_on*`` methods, and it does not import the Timer back -- it needs only the host interface,
:class:`aiowheel.TimerHost`, which the Timer implements.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, SupportsFloat, final

from aiowheel._checks import check_deadline, check_ticks

if TYPE_CHECKING:
    from aiowheel._backends import CancelScope
    from aiowheel._host import FiledHandle, TimerHost

__all__ = ["Timeout"]

# The states of asyncio.timeouts.Timeout, with its names.
_CREATED = "created"
_ENTERED = "active"
_EXPIRING = "expiring"
_EXPIRED = "expired"
_EXITED = "finished"


def _checked(when: SupportsFloat, tick: float) -> float:
    """``when`` as a deadline (rounded up to a float unless an int or a float) that a wheel with
    ``tick`` can hold."""
    return check_ticks(check_deadline(when, "when"), "deadline", tick)


@final
class Timeout:
    """An async context manager that cancels its block at a deadline on the Timer's wheel.

    Get one from ``timer.timeout(delay)``, ``timer.timeout_at(when)`` (raise TimeoutError),
    ``timer.move_on_after(delay)`` or ``timer.move_on_at(when)`` (don't)::

        async with timer.timeout(10) as t:
            async for message in stream:
                t.reschedule(timer.time() + 10)  # cheap: no wheel operation

    Args:
        timer: the Timer whose clock and wheel hold the deadline.
        when: the deadline in the Timer's clock (any real number), or None for none.
        fail: True to raise TimeoutError when the deadline cancelled the block, False to
            swallow the cancellation instead.
    """

    __slots__ = (
        "_cancelled_caught",
        "_fail",
        "_handle",
        "_past",
        "_scope",
        "_state",
        "_timer",
        "_when",
    )

    _scope: CancelScope
    # The deadline, checked: an int or a float within the wheel's reach; None for none.
    _when: float | None
    # The wheel entry, filed at or before _when (never after); None if none is filed.
    _handle: FiledHandle | None
    # A deadline already past was set: the scope's cancel_soon is pending, or was delivered
    # (then the state moves to expiring when next looked at: _settle).
    _past: bool

    def __init__(self, timer: TimerHost, when: SupportsFloat | None, *, fail: bool) -> None:
        self._timer = timer
        self._when = None if when is None else _checked(when, timer.tick)
        self._fail = fail
        self._state = _CREATED
        self._handle = None
        self._past = False
        self._cancelled_caught = False

    def when(self) -> float | None:
        """The current deadline, or None."""
        return self._when

    def reschedule(self, when: SupportsFloat | None) -> None:
        """Move the deadline to ``when`` (None: no deadline). Only inside the block.

        O(1); moving it later or to None does no wheel operation. A time already past cancels
        the block at its next await, unless a ``reschedule`` to a later time comes first (as
        ``asyncio.Timeout.reschedule``). RuntimeError before entry or once expired or exited,
        TypeError or ValueError for a bad ``when`` (as ``asyncio.Timeout.reschedule``) or one
        beyond the wheel's reach, :class:`~aiowheel.PendingLimitError` if the Timer is at
        ``max_pending`` and the Timeout has no wheel entry yet (its deadline was None). A call
        that raises changes nothing.
        """
        self._settle()
        if self._state is not _ENTERED:
            if self._state is _CREATED:
                raise RuntimeError("Timeout has not been entered")
            raise RuntimeError(f"Cannot change state of {self._state} Timeout")
        deadline = None if when is None else _checked(when, self._timer.tick)
        if self._past:
            # The past deadline's cancellation is not delivered yet (_settle): taken back, as
            # asyncio.timeout cancels its call_soon.
            self._scope.withdraw()
            self._past = False
        if deadline is None:
            self._when = None
            return  # a filed entry fires, finds no deadline and is dropped
        timer = self._timer
        handle = self._handle
        if deadline <= timer.time():
            if handle is not None:
                handle.cancel()
                self._handle = None
            self._when = deadline
            self._past = True
            self._scope.cancel_soon()
            return
        if handle is None:
            # No entry filed: a new one is new work, which max_pending may refuse -- here, at
            # the call, before anything has changed.
            self._handle = timer.call_at(deadline, self._on_deadline)
        elif handle.when() > deadline:
            # Filed too late: replaced, which is the Timeout's own bookkeeping (never refused).
            handle.cancel()
            self._handle = timer.refile_at(deadline, self._on_deadline)
        # Otherwise the entry is filed at or before `when`: it re-files itself when it fires.
        self._when = deadline

    def expired(self) -> bool:
        """True once the deadline has cancelled the block (whatever the block did with it)."""
        self._settle()
        return self._state is _EXPIRING or self._state is _EXPIRED

    def _settle(self) -> None:
        """A past deadline's cancellation delivered since it was set: the Timeout is expiring."""
        if self._past and self._scope.delivered():
            self._past = False
            self._state = _EXPIRING

    @property
    def cancelled_caught(self) -> bool:
        """True if the deadline's cancellation left the block and was caught on exit: turned
        into TimeoutError by ``timeout``, swallowed by ``move_on_*`` (anyio's name)."""
        return self._cancelled_caught

    def __repr__(self) -> str:
        when = f" when={self._when!r}" if self._state is _ENTERED else ""
        return f"<Timeout [{self._state}]{when}>"

    async def __aenter__(self) -> Timeout:
        if self._state is not _CREATED:
            raise RuntimeError("Timeout has already been entered")
        self._scope = self._timer.open_cancel_scope()
        self._state = _ENTERED
        try:
            self.reschedule(self._when)
        except BaseException:  # e.g. PendingLimitError: leave the scope as we found it
            self._state = _EXITED
            self._scope.close(None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._settle()
        if self._past:  # not delivered: the block ended before its next await
            self._scope.withdraw()
            self._past = False
        expiring = self._state is _EXPIRING
        self._state = _EXPIRED if expiring else _EXITED
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if self._scope.close(exc) and expiring:
            self._cancelled_caught = True
            if self._fail:
                raise TimeoutError from exc
            return True
        return None

    def _on_deadline(self) -> None:
        """The wheel entry fired: cancel the block, or re-file if the deadline moved later."""
        self._handle = None
        when = self._when
        if when is None or self._state is not _ENTERED:
            return
        timer = self._timer
        if when <= timer.time():
            self._expire()
        else:  # the deadline moved later: re-file, which max_pending never refuses
            self._handle = timer.refile_at(when, self._on_deadline)

    def _expire(self) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        self._state = _EXPIRING
        self._scope.cancel()
