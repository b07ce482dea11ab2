"""The Timer's hot path: scheduling a callback and running the due ones, in pure Python.

:class:`TimerCore` is the base class of :class:`aiowheel.Timer`: it owns the wheel, the handles
(:class:`TimerHandle`), ``call_later``/``call_at``, cancellation, re-arming the driver and the
dispatch of a due batch. :class:`aiowheel.Timer` (``aiowheel/timer.py``) adds everything else --
lifecycle, the driver coroutine, jobs, timeouts, statistics -- and documents the guarantees.

This module is the specification of that hot path; ``aiowheel/_ctimercore.pxi`` is its
compiled twin (built into ``aiowheel._cwheel``), with the same behaviour and error messages, and
:mod:`aiowheel._impl` chooses between the two along with the wheel. Both run the whole test
suite. Where the twin stores things differently (untracked handles, shared context snapshots),
its docstring says why; nothing a user can observe differs.
"""

from __future__ import annotations

import contextvars
import math
from bisect import bisect_left
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from aiowheel._checks import (
    CLOSED,
    COROUTINE_FLAGS,
    DELAY_NONE,
    NOT_RUNNING,
    WHEN_NONE,
    check_callback,
    check_deadline,
    deadline_after,
    not_copyable,
    not_running,
    pending_limit,
)
from aiowheel._lateness import CLOCK_STRIDE, LATENESS_BOUNDS, LATENESS_BUCKETS
from aiowheel.wheel import Entry, HierarchicalWheel

if TYPE_CHECKING:
    from typing import SupportsFloat, SupportsIndex

    from aiowheel._backends import Backend

__all__ = ["TimerCore", "TimerHandle"]

H = TypeVar("H", bound="TimerHandle")

_INF = math.inf
_copy_context = contextvars.copy_context


class TimerHandle(Entry[Callable[..., object]]):
    """A callback scheduled on a Timer, as returned by ``call_later``/``call_at``.

    Mirrors :class:`asyncio.TimerHandle`: ``when()``, ``cancel()``, ``cancelled()``. The handle is
    itself the wheel entry (its ``payload`` is the callback), so a pending timer costs one object.
    Once the callback has run or been cancelled the handle holds nothing but its deadline: the
    callback, its arguments and its context are released. It is its timer's one handle: copying
    or pickling it raises TypeError.
    """

    __slots__ = ("_args", "_cancelled", "_context", "_timer")

    _args: tuple[Any, ...]
    _context: contextvars.Context | None
    # The Timer while the handle is pending; None once it ran, was cancelled or the Timer closed.
    _timer: TimerCore | None
    _cancelled: bool

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        timer: TimerCore,
        context: contextvars.Context | None,
    ) -> None:
        Entry.__init__(self, when, callback)
        self._args = args
        self._context = _copy_context() if context is None else context
        self._timer = timer
        self._cancelled = False

    def when(self) -> float:
        """The time (in the loop's clock) the callback is scheduled for."""
        return self.deadline

    def cancel(self) -> None:
        """Cancel the callback: it will not run. At once, the timer leaves the wheel and the
        callback and its arguments are released. Cancelling twice or after it ran does nothing
        more than mark the handle cancelled, as asyncio does."""
        if self._cancelled:
            return
        self._cancelled = True
        timer = self._timer
        if timer is not None:
            timer._forget(self)

    def cancelled(self) -> bool:
        """True if ``cancel()`` was called."""
        return self._cancelled

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refused: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise TypeError (see
        :func:`aiowheel._checks.not_copyable`), pending, run or cancelled alike."""
        raise not_copyable(type(self).__name__)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "pending" if self.pending else "done"
        return f"<{type(self).__name__} when={self.deadline!r} {state} {self.payload!r}>"


# TimerHandle(...) in two steps, for the scheduling hot path: type.__call__'s dispatch to
# __init__ costs as much as the Python call itself in CPython 3.11.
_new_handle = object.__new__
_init_handle = TimerHandle.__init__


class TimerCore:
    """The wheel, the handles and the dispatch of one Timer; see :class:`aiowheel.Timer`.

    The Timer sets ``_wheel``, ``_time``, ``_backend`` and ``_running`` when it starts, and
    implements ``_report`` (where a callback's error goes).
    """

    _backend: Backend

    def __init__(
        self, tick: SupportsFloat, wheel_size: SupportsIndex, max_pending: int | None
    ) -> None:
        self._max_pending = max_pending
        # Validates tick and wheel_size now: a bad argument is a bug at the call site. Replaced
        # by a wheel starting at the loop's time when the Timer starts.
        self._wheel: HierarchicalWheel[Any] = HierarchicalWheel(tick, wheel_size)
        self._time: Callable[[], float] = not_running
        self._running = False
        self._closed = False
        # When the driver is armed to wake; -inf while it is dispatching (it re-arms after).
        self._armed_at = math.inf
        self._fired = 0
        self._cancelled_count = 0
        self._early = 0
        self._max_lateness = 0.0
        # Callbacks started, by lateness: index i counts the bucket of aiowheel._lateness's
        # lateness_bucket; they add up to _fired. And the sum of their lateness, in seconds.
        self._lateness = [0] * LATENESS_BUCKETS
        self._lateness_sum = 0.0
        # The due batch _run_due is dispatching, out of the wheel already; None between passes.
        # Its handles not run yet are pending still (their _timer is set): _cancel_all cancels
        # them too, should a callback of the batch close the Timer.
        self._batch: list[TimerHandle] | None = None

    def call_later(
        self,
        delay: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` in ``delay`` seconds; like ``loop.call_later``.

        ``delay`` is any real number: an int or a float is added to the clock as asyncio does,
        another number (a Fraction, a Decimal, a numpy scalar) exactly, the sum rounded up to a
        float, so the callback never runs before ``now + delay``. A negative delay is due at
        once (it still runs in a later pass of the driver, never inline). Raises TypeError for a
        non-number, a non-callable or a coroutine function, ValueError for NaN or infinity or a
        deadline beyond the wheel's range, RuntimeError if the Timer is not running,
        PendingLimitError beyond ``max_pending``.
        """
        if not self._running:
            self._check_running()
        if delay is None:
            raise TypeError(DELAY_NONE)
        if type(delay) is float and -_INF < delay < _INF:  # deadline_after's common case, inline
            when = self._time() + delay
        else:
            when = deadline_after(self._time(), delay)
        # check_callback's common case, a plain function that is no coroutine function, inline:
        if type(callback) is not FunctionType or callback.__code__.co_flags & COROUTINE_FLAGS:
            check_callback(callback, "call_later")
        handle = _new_handle(TimerHandle)
        _init_handle(handle, when, callback, args, self, context)
        return self._add(handle)

    def call_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` at loop time ``when``; like ``loop.call_at``.

        ``when`` is any real number; one that is not an int or a float is rounded up to a float
        (``handle.when()``). Checks and errors as for :meth:`call_later`.
        """
        if not self._running:
            self._check_running()
        if when is None:
            raise TypeError(WHEN_NONE)
        if type(when) is float and -_INF < when < _INF:  # check_deadline's common case, inline
            deadline = when
        else:
            deadline = check_deadline(when, "when")
        # check_callback's common case, a plain function that is no coroutine function, inline:
        if type(callback) is not FunctionType or callback.__code__.co_flags & COROUTINE_FLAGS:
            check_callback(callback, "call_at")
        handle = _new_handle(TimerHandle)
        _init_handle(handle, deadline, callback, args, self, context)
        return self._add(handle)

    def _refile_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """``call_at`` for the library's own bookkeeping, which ``max_pending`` never refuses.

        For filing again work the Timer already accepted, when the entry standing for it fires
        early: an idle key touched since its entry was filed, a Timeout whose deadline moved
        later (:mod:`aiowheel.idle`, :mod:`aiowheel.timeouts`). The limit refuses new work at
        the call that asks for it; refused here, inside the driver's pass, the work would be
        lost. RuntimeError if the Timer is not running.
        """
        if not self._running:
            self._check_running()
        handle = _new_handle(TimerHandle)
        _init_handle(handle, check_deadline(when, "when"), callback, args, self, context)
        return self._file(handle)

    def __len__(self) -> int:
        """Timers and jobs pending in the wheel."""
        return len(self._wheel)

    def _add(self, handle: H) -> H:
        """File ``handle`` unless ``max_pending`` timers are pending already."""
        limit = self._max_pending
        if limit is not None and len(self._wheel) >= limit:
            raise pending_limit(len(self._wheel), limit)
        return self._file(handle)

    def _file(self, handle: H) -> H:
        self._wheel.add_entry(handle)
        if handle.deadline < self._armed_at:
            self._rearm()
        return handle

    def _check_running(self) -> NoReturn:
        if self._closed:
            raise RuntimeError(CLOSED)
        raise RuntimeError(NOT_RUNNING)

    def _forget(self, handle: TimerHandle) -> None:
        """A handle was cancelled before it ran: take it out of the wheel (unless an earlier
        callback of its due batch cancelled it, when it is out already) and release what it
        holds."""
        self._wheel.remove(handle)
        self._cancelled_count += 1
        self._release(handle)

    def _cancel_all(self) -> list[TimerHandle]:
        """Cancel every pending timer, as the Timer closes; return them in deadline order.

        Pending are the wheel's entries and, when a callback of the driver's pass closes the
        Timer (a coroutine started eagerly can, by ``await timer.aclose()``), the rest of the
        batch that pass took out of the wheel: none of it runs on the closed Timer.
        """
        batch = self._batch
        handles = [handle for handle in batch if handle._timer is not None] if batch else []
        handles += cast("list[TimerHandle]", self._wheel.remove_all())
        for handle in handles:
            self._cancelled_count += 1
            handle._cancelled = True
            self._release(handle)
        return handles

    @staticmethod
    def _release(handle: TimerHandle) -> None:
        handle.payload = None
        handle._args = ()
        handle._context = None
        handle._timer = None

    def _rearm(self) -> None:
        next_deadline = self._wheel.next_deadline()
        if next_deadline is not None and next_deadline < self._armed_at:
            self._armed_at = next_deadline
            self._backend.arm(next_deadline)

    def _lateness_counts(self) -> tuple[int, ...]:
        """Callbacks started so far, per bucket of :mod:`aiowheel._lateness`."""
        return tuple(self._lateness)

    def _run_due(self) -> None:
        """Run every callback due at the clock's current time, in (deadline, scheduling order),
        and count each one's lateness (see :mod:`aiowheel._lateness`)."""
        now = self._time()
        due = cast("list[TimerHandle]", self._wheel.advance_entries(now))
        if not due:
            return
        # The batch is in deadline order: its last entry is the latest.
        if due[-1].deadline > now:  # impossible by the wheel's construction; counted as proof
            self._early += sum(1 for handle in due if handle.deadline > now)
        counts = self._lateness
        index = skipped = 0
        self._batch = due
        try:
            for i, handle in enumerate(due):
                if i and not i % CLOCK_STRIDE:
                    # Before the cancelled check (every 16th entry, cancelled or not) and before
                    # index moves on (if the clock raises, this entry is re-filed below).
                    now = self._time()
                index = i
                if handle._cancelled:  # by an earlier callback of this batch
                    skipped += 1
                    continue
                # Counted per callback, so that stats() in a callback adds up: fired is the
                # histogram's count.
                lateness = now - handle.deadline
                counts[bisect_left(LATENESS_BOUNDS, lateness)] += 1  # lateness_bucket, inline
                self._lateness_sum += lateness
                if lateness > self._max_lateness:  # noqa: PLR1730 -- cheaper than max()
                    self._max_lateness = lateness
                callback, args, context = handle.payload, handle._args, handle._context
                self._release(handle)
                try:
                    context.run(callback, *args)  # type: ignore[union-attr, arg-type]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # as asyncio's Handle._run
                    self._report(callback, args, exc, handle)
        except BaseException:
            # SystemExit or KeyboardInterrupt from a callback (or an error of the clock): the
            # rest of the batch stays scheduled (due at once) instead of being lost.
            for handle in due[index + 1 :]:
                if not handle._cancelled:
                    self._wheel.add_entry(handle)
            raise
        finally:
            self._fired += index + 1 - skipped
            self._batch = None

    def _report(
        self,
        callback: object,
        args: tuple[Any, ...],
        exc: BaseException,
        handle: TimerHandle | None = None,
        message: str | None = None,
    ) -> None:
        """Where the error of ``callback(*args)`` goes: implemented by the Timer."""
        raise NotImplementedError
