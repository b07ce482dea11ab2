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
import inspect
import math
from collections.abc import Callable
from types import FunctionType, MethodType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from aiowheel.exceptions import PendingLimitError
from aiowheel.wheel import Entry, HierarchicalWheel, _check_time

if TYPE_CHECKING:
    from aiowheel._backends import Backend

__all__ = ["TimerCore", "TimerHandle"]

H = TypeVar("H", bound="TimerHandle")

_INF = math.inf
_COROUTINE_FLAGS = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE


def _check_number(value: object, what: str) -> float:
    if type(value) is float and -_INF < value < _INF:  # the common case, checked cheaply
        return value
    return _check_time(value, what)  # the wheel's check, with its messages


def _is_coroutine_function(func: object) -> bool:
    # Fast paths for plain functions and bound methods; inspect for partials and the rest.
    if type(func) is FunctionType:
        return bool(func.__code__.co_flags & _COROUTINE_FLAGS)
    if type(func) is MethodType:
        return _is_coroutine_function(func.__func__)
    return inspect.iscoroutinefunction(func)


def _check_callback(callback: object, method: str) -> None:
    # The same checks and messages as asyncio's BaseEventLoop._check_callback, made always, not
    # only in debug mode.
    if type(callback) is FunctionType:  # the common case: no coroutine, surely callable
        if callback.__code__.co_flags & _COROUTINE_FLAGS:
            raise TypeError(f"coroutines cannot be used with {method}()")
        return
    if inspect.iscoroutine(callback) or _is_coroutine_function(callback):
        raise TypeError(f"coroutines cannot be used with {method}()")
    if not callable(callback):
        raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")


_NOT_RUNNING = "Timer is not running: use it inside 'async with Timer() as timer:'"


def _not_running() -> float:
    raise RuntimeError(_NOT_RUNNING)


class TimerHandle(Entry[Callable[..., object]]):
    """A callback scheduled on a Timer, as returned by ``call_later``/``call_at``.

    Mirrors :class:`asyncio.TimerHandle`: ``when()``, ``cancel()``, ``cancelled()``. The handle is
    itself the wheel entry (its ``payload`` is the callback), so a pending timer costs one object.
    Once the callback has run or been cancelled the handle holds nothing but its deadline: the
    callback, its arguments and its context are released.
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
        self.deadline = when
        self.payload = callback
        self._bucket = None
        self._args = args
        self._context = contextvars.copy_context() if context is None else context
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

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "pending" if self.pending else "done"
        return f"<{type(self).__name__} when={self.deadline!r} {state} {self.payload!r}>"


class TimerCore:
    """The wheel, the handles and the dispatch of one Timer; see :class:`aiowheel.Timer`.

    The Timer sets ``_wheel``, ``_time``, ``_backend`` and ``_running`` when it starts, and
    implements ``_report`` (where a callback's error goes).
    """

    _backend: Backend

    def __init__(self, tick: float, wheel_size: int, max_pending: int | None) -> None:
        self._max_pending = max_pending
        # Validates tick and wheel_size now: a bad argument is a bug at the call site. Replaced
        # by a wheel starting at the loop's time when the Timer starts.
        self._wheel: HierarchicalWheel[Any] = HierarchicalWheel(tick, wheel_size)
        self._time: Callable[[], float] = _not_running
        self._running = False
        self._closed = False
        # When the driver is armed to wake; -inf while it is dispatching (it re-arms after).
        self._armed_at = math.inf
        self._fired = 0
        self._cancelled_count = 0
        self._early = 0
        self._max_lateness = 0.0

    def call_later(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` in ``delay`` seconds; like ``loop.call_later``.

        A negative delay is due at once (it still runs in a later pass of the driver, never
        inline). Raises TypeError for a non-number, a non-callable or a coroutine function,
        ValueError for NaN or infinity, RuntimeError if the Timer is not running,
        PendingLimitError beyond ``max_pending``.
        """
        if not self._running:
            self._check_running()
        if delay is None:
            raise TypeError("delay must not be None")
        _check_number(delay, "delay")
        _check_callback(callback, "call_later")
        return self._add(TimerHandle(self._time() + delay, callback, args, self, context))

    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` at loop time ``when``; like ``loop.call_at``.

        Checks and errors as for :meth:`call_later`.
        """
        if not self._running:
            self._check_running()
        if when is None:
            raise TypeError("when cannot be None")
        _check_number(when, "when")
        _check_callback(callback, "call_at")
        return self._add(TimerHandle(when, callback, args, self, context))

    def __len__(self) -> int:
        """Timers and jobs pending in the wheel."""
        return len(self._wheel)

    def _add(self, handle: H) -> H:
        wheel = self._wheel
        limit = self._max_pending
        if limit is not None and len(wheel) >= limit:
            raise PendingLimitError(
                f"{len(wheel)} timers are pending, the limit is max_pending={limit}"
            )
        wheel.add_entry(handle)
        if handle.deadline < self._armed_at:
            self._rearm()
        return handle

    def _check_running(self) -> NoReturn:
        if self._closed:
            raise RuntimeError("Timer is closed")
        raise RuntimeError(_NOT_RUNNING)

    def _forget(self, handle: TimerHandle) -> None:
        """A handle was cancelled before it ran: take it out of the wheel (unless an earlier
        callback of its due batch cancelled it, when it is out already) and release what it
        holds."""
        self._wheel.remove(handle)
        self._cancelled_count += 1
        self._release(handle)

    def _cancel_all(self) -> list[TimerHandle]:
        """Cancel every pending timer, as the Timer closes; return them in deadline order."""
        handles = cast("list[TimerHandle]", self._wheel.remove_all())
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

    def _run_due(self) -> None:
        """Run every callback due at the clock's current time, in (deadline, scheduling order)."""
        now = self._time()
        due = cast("list[TimerHandle]", self._wheel.advance_entries(now))
        if not due:
            return
        # The batch is in deadline order: its first entry is the earliest, its last the latest.
        lateness = now - due[0].deadline
        self._max_lateness = max(self._max_lateness, lateness)
        if due[-1].deadline > now:  # impossible by the wheel's construction; counted as proof
            self._early += sum(1 for handle in due if handle.deadline > now)
        index = skipped = 0
        try:
            for index, handle in enumerate(due):  # noqa: B007 -- index is used on interrupt
                if handle._cancelled:  # by an earlier callback of this batch
                    skipped += 1
                    continue
                callback, args, context = handle.payload, handle._args, handle._context
                self._release(handle)
                try:
                    context.run(callback, *args)  # type: ignore[union-attr, arg-type]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # as asyncio's Handle._run
                    self._report(callback, args, exc, handle)
        except BaseException:
            # SystemExit or KeyboardInterrupt from a callback: the rest of the batch stays
            # scheduled (due at once) instead of being lost.
            for handle in due[index + 1 :]:
                if not handle._cancelled:
                    self._wheel.add_entry(handle)
            raise
        finally:
            self._fired += index + 1 - skipped

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
