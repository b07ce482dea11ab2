"""The Timer's hot path: scheduling a callback and running the due ones, in pure Python.

:class:`TimerCore` is the core :class:`aiowheel.Timer` holds: it owns the wheel, the handles
(:class:`TimerHandle`), ``call_later``/``call_at``/``refile_at``, cancellation, arming the
driver and the dispatch of a due batch. :class:`aiowheel.Timer` (``aiowheel/timer.py``) adds
everything else -- lifecycle, the driver coroutine, jobs, timeouts, statistics -- and documents
the guarantees. It talks to its core only through the public methods of :class:`TimerCore`,
which are the contract both twins keep, and binds ``call_later``, ``call_at`` and
``refile_at`` on itself, so that scheduling runs no frame of the Timer's.

This module is the specification of that hot path; ``aiowheel/_ctimercore.pyx`` is its
compiled twin (the extension ``aiowheel._ctimercore``), with the same behaviour and error
messages, and :mod:`aiowheel._impl` declares both (a Timer is made with either:
``Timer(implementation=...)``). Both run the whole test suite. Where the twin stores things
differently (untracked handles), its docstring says why; nothing a user can observe differs.

Two ways both twins save a pending handle's memory, without anything observable changing: a
callback with one argument keeps that argument, not a tuple of it (``_args`` still reads as the
tuple), and handles scheduled from the same context share one snapshot of it, each callback
running in a fresh copy -- the same values and the same isolation as asyncio's one copy per
handle (:mod:`aiowheel._snapshot`, shared with the pure loop core). Here the current context is
copied at each call and compared with the last snapshot by its variables and the identity of
their values (no ``__eq__`` runs); the copy is dropped at once when they are the same.
"""

from __future__ import annotations

import contextvars
import math
from bisect import bisect_left
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any, NoReturn, cast

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
from aiowheel._snapshot import Snapshot, same_variables
from aiowheel._wheel import Entry, HierarchicalWheel

if TYPE_CHECKING:
    from typing import SupportsFloat, SupportsIndex

__all__ = ["TimerCore", "TimerHandle"]

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

    __slots__ = ("_argument", "_cancelled", "_context", "_timer")

    # The callback's arguments: the one argument itself unless it is an exact tuple, else the
    # tuple of them (a tuple here is always the tuple of arguments); () once released. Read as
    # a tuple through _args.
    _argument: Any
    # The context the callback runs in: the one given, or a snapshot its Timer shares among
    # handles made in the same context (the callback gets a fresh copy); None once released.
    _context: contextvars.Context | Snapshot | None
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
        _init_entry(self, when, callback)
        self._argument = args[0] if len(args) == 1 and type(args[0]) is not tuple else args
        self._context = timer._snapshot() if context is None else context
        self._timer = timer
        self._cancelled = False

    @property
    def _args(self) -> tuple[Any, ...]:
        argument = self._argument
        return argument if type(argument) is tuple else (argument,)

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


# A handle made in two steps, for the scheduling hot path: type.__call__'s dispatch to __init__
# costs as much as the Python call itself in CPython 3.11; and TimerHandle.__init__'s body
# written out there, one frame fewer.
_new_handle = object.__new__
_init_entry = Entry.__init__


class TimerCore:
    """The wheel, the handles and the dispatch of one Timer: the hot path :class:`aiowheel.Timer`
    holds (one per Timer) and talks to through the methods below, which are the core's contract
    (the compiled twin has the same).

    Made with the Timer's arguments, it files nothing until :meth:`start` gives it the loop's
    clock and the Timer's two hooks: ``arm(when)``, which wakes the driver at ``when`` (None:
    never), and ``report(callback, args, exc, handle)``, where a callback's error goes.

    Arming, one rule (the Timer's driver is armed for at most one time, ``_armed_at``):

    * filing a handle arms the driver for the wheel's next deadline if that is earlier than the
      time armed -- and never between :meth:`run_due` and :meth:`rearm`, while the driver
      dispatches (its rearm comes after);
    * :meth:`rearm`, after a pass, arms the wheel's next deadline (None if nothing is pending),
      whatever was armed before.
    """

    __slots__ = (
        "_arm",
        "_armed_at",
        "_batch",
        "_cancelled_count",
        "_last_snapshot",
        "_lateness",
        "_lateness_sum",
        "_max_lateness",
        "_max_pending",
        "_report",
        "_wheel",
        "closed",
        "running",
        "time",
    )

    def __init__(
        self, tick: SupportsFloat, wheel_size: SupportsIndex, max_pending: int | None
    ) -> None:
        self._max_pending = max_pending
        # Validates tick and wheel_size now: a bad argument is a bug at the call site. Replaced
        # by a wheel starting at the loop's time by start().
        self._wheel: HierarchicalWheel[Any] = HierarchicalWheel(tick, wheel_size)
        # Public attributes, read-only by contract (the compiled twin enforces it): the clock
        # start() gave (until then a function raising RuntimeError); True from start() to
        # close(); True once close() was called.
        self.time: Callable[[], float] = not_running
        self.running = False
        self.closed = False
        self._arm: Callable[[float | None], object] = _not_started
        self._report: Callable[..., object] = _not_started
        # When the driver is armed to wake; -inf while it is dispatching (run_due until rearm).
        self._armed_at = math.inf
        self._cancelled_count = 0
        self._max_lateness = 0.0
        # Callbacks started, by lateness: index i counts the bucket of aiowheel._lateness's
        # lateness_bucket. And the sum of their lateness, in seconds.
        self._lateness = [0] * LATENESS_BUCKETS
        self._lateness_sum = 0.0
        # The due batch run_due is dispatching, out of the wheel already; None between passes.
        # Its handles not run yet are pending still (their _timer is set): close() cancels
        # them too, should a callback of the batch close the Timer.
        self._batch: list[TimerHandle] | None = None
        # The snapshot the last handle made without a context of its own got (see the module
        # docstring), for the next ones made while the current context holds the same
        # variables; None while nothing needs it (reset by every pass, so that it keeps no
        # context's values alive for long).
        self._last_snapshot: Snapshot | None = None

    @property
    def tick(self) -> float:
        """The wheel's tick, as it checked and converted it."""
        return self._wheel.tick

    @property
    def wheel_size(self) -> int:
        """Slots per wheel level."""
        return self._wheel.wheel_size

    def start(
        self,
        clock: Callable[[], float],
        arm: Callable[[float | None], object],
        report: Callable[[object, tuple[Any, ...], BaseException, TimerHandle], object],
    ) -> None:
        """Start filing: ``clock`` is the loop's clock (the wheel starts at its current time),
        ``arm(when)`` wakes the driver at ``when`` (None: never), ``report(callback, args,
        exc, handle)`` takes a callback's error. Once, before anything is scheduled."""
        self._wheel = HierarchicalWheel(self._wheel.tick, self._wheel.wheel_size, start=clock())
        self.time = clock
        self._arm = arm
        self._report = report
        self.running = True

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
        once (it still runs in a later pass of the driver, never inline). The callback runs in
        ``context`` (default: a copy of the current context). Raises TypeError for a
        non-number, a non-callable or a coroutine function, ValueError for NaN or infinity or a
        deadline beyond the wheel's range, RuntimeError if the Timer is not running,
        PendingLimitError beyond ``max_pending``.
        """
        if not self.running:
            self._check_running()
        if delay is None:
            raise TypeError(DELAY_NONE)
        if type(delay) is float and -_INF < delay < _INF:  # deadline_after's common case, inline
            when = self.time() + delay
        else:
            when = deadline_after(self.time(), delay)
        # check_callback's common case, a plain function that is no coroutine function, inline:
        if type(callback) is not FunctionType or callback.__code__.co_flags & COROUTINE_FLAGS:
            check_callback(callback, "call_later")
        limit = self._max_pending
        if limit is not None and len(self._wheel) >= limit:
            raise pending_limit(len(self._wheel), limit)
        # TimerHandle.__init__, inline (see _new_handle), and _file's filing.
        handle = _new_handle(TimerHandle)
        _init_entry(handle, when, callback)
        handle._argument = args[0] if len(args) == 1 and type(args[0]) is not tuple else args
        if context is None:  # _snapshot(), inline
            current = _copy_context()
            snapshot = self._last_snapshot
            if snapshot is None or (
                (current or snapshot.context) and not same_variables(current, snapshot.context)
            ):
                snapshot = self._last_snapshot = Snapshot(current)
            handle._context = snapshot
        else:
            handle._context = context
        handle._timer = self
        handle._cancelled = False
        self._wheel.add_entry(handle)
        if when < self._armed_at:
            self._arm_for_new()
        return handle

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
        if not self.running:
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
        limit = self._max_pending
        if limit is not None and len(self._wheel) >= limit:
            raise pending_limit(len(self._wheel), limit)
        return self._file(TimerHandle(deadline, callback, args, self, context))

    def refile_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """``call_at`` for the feature layers' own bookkeeping, which ``max_pending`` never
        refuses (see :meth:`aiowheel.Timer.refile_at`). RuntimeError if not running."""
        if not self.running:
            self._check_running()
        handle = TimerHandle(check_deadline(when, "when"), callback, args, self, context)
        return self._file(handle)

    def __len__(self) -> int:
        """Timers and jobs pending in the wheel."""
        return len(self._wheel)

    def _file(self, handle: TimerHandle) -> TimerHandle:
        """Put ``handle`` in the wheel, and arm the driver if it is now due earlier (the first
        rule of arming, in the class docstring). call_later does the same inline."""
        self._wheel.add_entry(handle)
        if handle.deadline < self._armed_at:
            self._arm_for_new()
        return handle

    def _arm_for_new(self) -> None:
        """A handle earlier than the time armed was filed: arm the wheel's next deadline if
        that is earlier now."""
        next_deadline = self._wheel.next_deadline()
        if next_deadline is not None and next_deadline < self._armed_at:
            self._armed_at = next_deadline
            self._arm(next_deadline)

    def _snapshot(self) -> contextvars.Context | Snapshot:
        """The context a handle made without one runs in: a snapshot of the current context,
        shared with the handles made before it in the same variables (see the module
        docstring)."""
        current = _copy_context()
        snapshot = self._last_snapshot
        # Two empty contexts (the common case) are told apart from others without a call.
        if snapshot is None or (
            (current or snapshot.context) and not same_variables(current, snapshot.context)
        ):
            snapshot = self._last_snapshot = Snapshot(current)
        return snapshot

    def _check_running(self) -> NoReturn:
        if self.closed:
            raise RuntimeError(CLOSED)
        raise RuntimeError(NOT_RUNNING)

    def _forget(self, handle: TimerHandle) -> None:
        """A handle was cancelled before it ran: take it out of the wheel (unless an earlier
        callback of its due batch cancelled it, when it is out already) and release what it
        holds."""
        self._wheel.remove(handle)
        self._cancelled_count += 1
        self._release(handle)
        if not self._wheel:
            self._last_snapshot = None  # nothing pending: no context kept alive by the core

    def close(self) -> list[tuple[object, tuple[Any, ...]]]:
        """Stop: cancel every pending timer and return ``(callback, args)`` of each, in deadline
        order. Idempotent (later calls return ``[]``); afterwards scheduling raises
        RuntimeError.

        Pending are the wheel's entries and, when a callback of the driver's pass closes the
        Timer (a coroutine started eagerly can, by ``await timer.aclose()``), the rest of the
        batch that pass took out of the wheel: none of it runs on the closed Timer.
        """
        self.closed = True
        if not self.running:
            return []
        self.running = False
        batch = self._batch
        handles = [handle for handle in batch if handle._timer is not None] if batch else []
        handles += cast("list[TimerHandle]", self._wheel.remove_all())
        cancelled: list[tuple[object, tuple[Any, ...]]] = []
        for handle in handles:
            self._cancelled_count += 1
            handle._cancelled = True
            cancelled.append((handle.payload, handle._args))
            self._release(handle)
        return cancelled

    @staticmethod
    def _release(handle: TimerHandle) -> None:
        handle.payload = None
        handle._argument = ()
        handle._context = None
        handle._timer = None

    def rearm(self) -> None:
        """Arm the driver for the wheel's next deadline (None if nothing is pending), whatever
        was armed: the second rule of arming, after a pass (or once an interrupt that left it
        has gone). Nothing once closed."""
        if self.running:
            next_deadline = self._wheel.next_deadline()
            self._armed_at = _INF if next_deadline is None else next_deadline
            self._arm(next_deadline)

    def counters(self) -> tuple[tuple[int, ...], float, float, int]:
        """``(started, lateness_sum, max_lateness, cancelled)`` so far: the callbacks started
        per bucket of :mod:`aiowheel._lateness`, the sum of their lateness and the largest, in
        seconds, and the timers cancelled before they ran."""
        return tuple(self._lateness), self._lateness_sum, self._max_lateness, self._cancelled_count

    def pending_per_level(self) -> tuple[int, ...]:
        """Timers pending on each level of the wheel, level 0 first (see
        :meth:`aiowheel.HierarchicalWheel.pending_per_level`)."""
        return self._wheel.pending_per_level()

    def run_due(self) -> None:
        """The driver's pass: run every callback due at the clock's current time, in (deadline,
        scheduling order), and count each one's lateness (see :mod:`aiowheel._lateness`).

        From here until :meth:`rearm` the driver counts as dispatching: filing arms nothing.
        An interrupt (or an error of the clock) leaves with the rest of the batch back in the
        wheel, due at once."""
        self._armed_at = -_INF
        self._last_snapshot = None  # keep no context's values alive longer than a pass
        now = self.time()
        due = cast("list[TimerHandle]", self._wheel.advance_entries(now))
        if not due:
            return
        counts = self._lateness
        index = 0
        self._batch = due
        try:
            for i, handle in enumerate(due):
                if i and not i % CLOCK_STRIDE:
                    # Before the cancelled check (every 16th entry, cancelled or not) and before
                    # index moves on (if the clock raises, this entry is re-filed below).
                    now = self.time()
                index = i
                if handle._cancelled:  # by an earlier callback of this batch
                    continue
                # Counted per callback, so that stats() in a callback adds up: fired is the
                # histogram's count.
                lateness = now - handle.deadline
                counts[bisect_left(LATENESS_BOUNDS, lateness)] += 1  # lateness_bucket, inline
                self._lateness_sum += lateness
                if lateness > self._max_lateness:  # noqa: PLR1730 -- cheaper than max()
                    self._max_lateness = lateness
                callback, argument, context = handle.payload, handle._argument, handle._context
                # _release, inline.
                handle.payload = None
                handle._argument = ()
                handle._context = None
                handle._timer = None
                try:
                    if type(context) is Snapshot:
                        context = context.context.copy()
                    if type(argument) is tuple:
                        context.run(callback, *argument)  # type: ignore[union-attr, arg-type]
                    else:
                        context.run(callback, argument)  # type: ignore[union-attr, arg-type]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # as asyncio's Handle._run
                    args = argument if type(argument) is tuple else (argument,)
                    self._report(callback, args, exc, handle)
        except BaseException:
            # SystemExit or KeyboardInterrupt from a callback (or an error of the clock): the
            # rest of the batch stays scheduled (due at once) instead of being lost.
            for handle in due[index + 1 :]:
                if not handle._cancelled:
                    self._wheel.add_entry(handle)
            raise
        finally:
            self._batch = None


def _not_started(*args: object) -> NoReturn:
    """``arm`` and ``report`` before :meth:`TimerCore.start` (never called: nothing is filed)."""
    raise RuntimeError(NOT_RUNNING)
