"""The wheel-backed event loop's timers: handle, routing, filing, cancelling, advancing (pure).

:class:`LoopCore` is what an :class:`aiowheel.loop.WheelLoop` holds for its wheel timers: it owns
the wheel, makes the handles (:class:`LoopTimerHandle`), files them, takes them off the wheel when
they are cancelled and hands the due ones to the loop's driver. Its :meth:`LoopCore.call_later`
and :meth:`LoopCore.call_at` *are* the loop's (the loop binds them on itself, so that the
compiled twin runs them without a Python frame): they route a timer to the wheel, to the core's
queue of imminent timers, or back to the base loop. The loop keeps the driver itself and the
base-loop specific parts, hands them to the core when it makes it (see :class:`LoopCore`), and
documents the guarantees.

One deadline order for every timer the core holds. The wheel only stores timers; it never
decides when one runs. Timers shorter than ``min_delay`` go straight into ``near``, a binary
heap ordered by (deadline, scheduling order); each driver pass moves into it every wheel timer
whose bucket could hold a deadline up to two ticks ahead (so the wheel's tick never delays a
timer), then takes out exactly those whose deadline the clock has reached. A timer therefore
runs in the pass in which ``loop.time()`` reaches its ``when()``, never before, and due timers
run in (deadline, scheduling order) whichever structure held them. :meth:`LoopCore.next_due`
is when the driver must run: the heap's earliest deadline, or just after the start of the
wheel's next bucket, a tick before it expires (every deadline in that bucket is later).

This module is the specification of that hot path; ``aiowheel/_cloopcore.pyx`` is its compiled
twin (the extension ``aiowheel._cloopcore``), and :mod:`aiowheel._impl` declares the two. A loop
is made with either (``implementation=`` of the loop classes), and the loop's tests run on both
in one process.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import sys
import time
from asyncio import format_helpers
from collections.abc import Callable
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, NoReturn, TypeVarTuple, Unpack, cast

from aiowheel._checks import (
    DELAY_NONE,
    WHEN_NONE,
    cancelled_repr,
    closed_error,
    loop_deadline,
    loop_deadline_after,
    not_copyable,
)
from aiowheel._snapshot import Snapshot, same_variables
from aiowheel._wheel import Entry, HierarchicalWheel

if TYPE_CHECKING:
    from typing import SupportsFloat, SupportsIndex

__all__ = ["ClockWatch", "LoopCore", "LoopTimerHandle"]

_Ts = TypeVarTuple("_Ts")

# HierarchicalWheel refuses deadlines 2**52 ticks or more from zero; stay well inside that.
WHEEL_TICKS = 2**50


class LoopTimerHandle(Entry[Callable[..., object]]):
    """The handle of a timer of a wheel-backed event loop.

    It has ``asyncio.TimerHandle``'s API -- ``when()``, ``cancel()``, ``cancelled()``,
    ``get_context()``, ordering, hashing and ``repr`` -- but is not an instance of it, as
    uvloop's handles are not. ``cancel()`` takes the timer off the wheel at once.
    """

    # The handle is its own wheel entry (the wheel finds an entry by its add order, not by its
    # __eq__, which is asyncio's here), and a pending timer costs this one object with slots:
    # the callback is the entry's payload, one argument is kept without a tuple, timers made in
    # the same context share one snapshot of it, what only debug mode or an unusual `when`
    # needs sits in an _Extra, and the loop is read through the core. asyncio's private fields
    # (_when, _callback, _args, _context, _loop, _cancelled, _source_traceback, _repr) are
    # properties over these.
    __slots__ = ("__weakref__", "_argument", "_core", "_ctx", "_extra", "_order")

    # The callback's arguments: the one argument itself unless it is an exact tuple, else the
    # tuple of them (so `_args` can tell: a tuple here is the tuple of arguments); _RELEASED
    # once the timer ran, was cancelled or its loop closed.
    _argument: Any
    # The context the callback runs in: its own Context (given to call_later / call_at, or
    # copied by get_context), or a Snapshot its core shares among timers made in the same
    # context, of which the callback gets a fresh copy; None once released.
    _ctx: contextvars.Context | Snapshot | None
    # The loop's core while the timer is pending; None once it ran or its loop closed;
    # _CANCELLED once cancelled, for good (cancelled() reads it).
    _core: LoopCore | object | None
    # Scheduling order among all the core's timers: ties between equal deadlines by it.
    _order: int
    # What few timers need: the time asked for when it is not the deadline itself (a number
    # other than an int or a float), and the debug-mode fields. None for the others.
    _extra: _Extra | None

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("LoopTimerHandle is made by the loop's call_later / call_at")

    def when(self) -> float:
        """The time the callback is scheduled for, as asked (a float, or the number given)."""
        extra = self._extra
        return self.deadline if extra is None else extra.when

    def cancelled(self) -> bool:
        return self._core is _CANCELLED

    def get_context(self) -> contextvars.Context | None:
        """The context the callback runs in: the handle's own (a copy of a shared snapshot is
        made here, once, so that what a caller sets in it reaches no other timer)."""
        context = self._ctx
        if type(context) is Snapshot:
            context = self._ctx = context.context.copy()
        return context  # type: ignore[return-value]  # a Context or None from here

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refused, unlike asyncio's handle: a copy would share the timer's place on the wheel
        (see aiowheel._checks.not_copyable)."""
        raise not_copyable("LoopTimerHandle")

    def cancel(self) -> None:
        """Cancel the callback: at once the timer leaves the wheel and the callback and its
        arguments are released. Cancelling twice does nothing more; cancelling after it ran
        only marks it cancelled (its repr says so, as asyncio's)."""
        core = self._core
        if core is _CANCELLED:
            return
        self._core = _CANCELLED
        if core is not None:
            if core.debug:  # type: ignore[attr-defined]
                self._repr = repr(self)  # as asyncio: the repr it had, now that the callback goes
            core._forget(self)  # type: ignore[attr-defined]
        elif self._repr is not None:
            self._repr = cancelled_repr(self._repr)  # it ran in debug mode: the repr it kept
        self.payload = None
        self._argument = _RELEASED
        self._ctx = None

    def _run(self) -> None:
        """Run the callback in its context, as ``asyncio.Handle._run``: an exception goes to the
        loop's exception handler. The handle releases its callback, arguments and context first
        (see :class:`LoopCore`)."""
        callback, argument, context, core = self.payload, self._argument, self._ctx, self._core
        assert callback is not None and isinstance(core, LoopCore)  # pending
        loop = core.loop
        if type(context) is Snapshot:
            context = context.context.copy()
        extra = self._extra
        if extra is not None and extra.repr is None and extra.source_traceback is not None:
            extra.repr = repr(self)  # debug mode: the repr it had, now that the callback goes
        _release(self)
        try:
            if type(argument) is tuple:
                context.run(callback, *argument)  # type: ignore[union-attr]
            else:
                context.run(callback, argument)  # type: ignore[union-attr]
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            args = argument if type(argument) is tuple else (argument,)
            report = {
                "message": f"Exception in callback {_callback_source(callback, args)}",
                "exception": exc,
                "handle": self,
            }
            if self._source_traceback:
                report["source_traceback"] = self._source_traceback
            loop.call_exception_handler(report)

    # asyncio's private fields, as asyncio's loops and handles read them.

    @property
    def _when(self) -> float:
        return self.when()

    @property
    def _callback(self) -> Callable[..., object] | None:
        return self.payload

    @_callback.setter
    def _callback(self, callback: Callable[..., object] | None) -> None:
        self.payload = callback

    @property
    def _args(self) -> tuple[Any, ...] | None:
        argument = self._argument
        if argument is _RELEASED:
            return None
        return argument if type(argument) is tuple else (argument,)

    @_args.setter
    def _args(self, args: tuple[Any, ...] | None) -> None:
        self._argument = _RELEASED if args is None else args

    @property
    def _context(self) -> contextvars.Context | None:
        return self.get_context()

    @property
    def _loop(self) -> Any:
        core = self._core
        return core.loop if isinstance(core, LoopCore) else None

    @property
    def _cancelled(self) -> bool:
        return self._core is _CANCELLED

    @property
    def _source_traceback(self) -> Any:
        extra = self._extra
        return None if extra is None else extra.source_traceback

    @property
    def _repr(self) -> str | None:
        extra = self._extra
        return None if extra is None else extra.repr

    @_repr.setter
    def _repr(self, value: str | None) -> None:
        extra = self._extra
        if extra is None:
            extra = self._extra = _Extra(self.deadline, None)
        extra.repr = value

    def _repr_info(self) -> list[str]:
        info = [type(self).__name__]
        cancelled = self._core is _CANCELLED
        if cancelled:
            info.append("cancelled")
        if self.payload is not None:
            info.append(_callback_source(self.payload, self._args))
        traceback = self._source_traceback
        if traceback:
            frame = traceback[-1]
            info.append(f"created at {frame[0]}:{frame[1]}")
        info.insert(2 if cancelled else 1, f"when={self._when}")
        return info

    def __repr__(self) -> str:
        extra = self._extra
        if extra is not None and extra.repr is not None:
            return extra.repr
        return "<{}>".format(" ".join(self._repr_info()))

    def __hash__(self) -> int:
        return hash(self._when)

    # Ordered and compared as asyncio's handles are, with theirs too.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, _HANDLES):
            return NotImplemented
        return bool(self._when < other._when)  # type: ignore[union-attr]

    def __le__(self, other: object) -> bool:
        if not isinstance(other, _HANDLES):
            return NotImplemented
        return bool(self._when <= other._when)  # type: ignore[union-attr]

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, _HANDLES):
            return NotImplemented
        return bool(self._when > other._when)  # type: ignore[union-attr]

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, _HANDLES):
            return NotImplemented
        return bool(self._when >= other._when)  # type: ignore[union-attr]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _HANDLES):
            return NotImplemented
        fields: Any = other
        return bool(
            self._when == fields._when
            and self._callback == fields._callback
            and self._args == fields._args
            and self._cancelled == fields._cancelled
        )


# A handle's _core once it was cancelled.
_CANCELLED = object()
# A handle's _argument once it let go of its arguments (None could be the one argument).
_RELEASED = object()

# The handles ours compare with: ours and asyncio's, as asyncio's compare with each other.
_HANDLES = (LoopTimerHandle, asyncio.TimerHandle)

# LoopTimerHandle(...) in two steps, as the core makes it (its __init__ refuses a caller).
_new_handle = object.__new__
_init_entry = Entry.__init__
_copy_context = contextvars.copy_context


class _Extra:
    """What a few timers keep beside the others' fields (see ``LoopTimerHandle._extra``)."""

    __slots__ = ("repr", "source_traceback", "when")

    def __init__(self, when: float, source_traceback: Any) -> None:
        # The time asked for (handle.when()): the deadline, or the number given.
        self.when = when
        # Debug mode: where call_later / call_at was called (asyncio's _source_traceback).
        self.source_traceback = source_traceback
        # Debug mode: the repr kept once the callback is released (asyncio's _repr).
        self.repr: str | None = None


def _callback_source(callback: Callable[..., object], args: Any) -> str:
    """The callback and its arguments as asyncio's handles show them."""
    return format_helpers._format_callback_source(callback, args)


def _release(timer: LoopTimerHandle) -> None:
    """Let go of what a pending timer holds: it ran or its loop closed (cancel() lets go
    itself). Its loop too: a spent handle kept by anyone (an exception handler's
    ``context["handle"]``) keeps no loop alive."""
    timer.payload = None
    timer._argument = _RELEASED
    timer._ctx = None
    timer._core = None


class ClockWatch:
    """A base of the wheel-backed loop classes: it lets the loop core know when ``time`` is set
    or deleted on the loop (a test patching the loop's clock, as ``mock.patch.object(loop,
    "time")`` and pytest's ``monkeypatch.setattr`` do), so that the core can read the clock
    without looking ``loop.time`` up for every timer while nobody did. A patch on the loop's
    class or one of its bases is seen without it. ``time`` written into the loop's ``__dict__``
    directly is not seen by the compiled core once it trusts the clock.

    This pure twin's core looks ``loop.time`` up for every timer, as asyncio's loops do, so it
    needs to be told nothing: this class adds no behaviour.
    """

    __slots__ = ()


class LoopCore:
    """The wheel of one wheel-backed loop, its queue of imminent timers, and their bookkeeping.

    The core is made by its loop and given what it needs of it, and nothing else of the loop is
    read (both twins, see :mod:`aiowheel._impl`):

    * ``loop`` -- the event loop the handles belong to: a callback's exception goes to its
      ``call_exception_handler``; the core reads its ``time()`` and ``get_debug()`` when made.
    * ``arm(when)`` -- point the loop's driver at ``when`` (a float; ``inf``: disarm it). The
      core calls it only when the time it needs the driver at changes (:attr:`driver_when`).
    * ``check_in_debug(callback)`` -- the base loop's debug-mode checks of ``call_at``, called
      for each timer while :attr:`debug` is true.
    * ``call_on_base(when, delay, callback, args, context)`` -- a timer the base loop's own
      way, for those that never fire on the wheel (further than ``far_delay``, beyond the
      wheel's range, infinite or NaN); returns its handle.

    The loop binds :meth:`call_later` and :meth:`call_at` on itself as its own, keeps
    :attr:`debug` equal to its ``get_debug()``, calls :meth:`advance` from its driver and
    :meth:`close` when it closes. ``tick`` and ``wheel_size`` are the wheel's; timers with a
    delay below ``min_delay`` skip the wheel, into the near queue.

    The handles, on both twins: a :class:`LoopTimerHandle` (public as
    ``aiowheel.loop.LoopTimerHandle``, its name in reprs and tracebacks) has
    ``asyncio.TimerHandle``'s API and the private fields and ``_run()`` asyncio's loops read
    (``_when``, ``_callback``, ``_args``, ``_context``, ``_loop``, ``_cancelled``,
    ``_source_traceback``, ``_repr``), but is not an ``asyncio.TimerHandle``, as uvloop's are
    not. ``cancel()`` takes its timer off the wheel at once, without calling the loop. A handle
    that ran, was cancelled or was dropped by :meth:`close` lets go of its callback, arguments
    and context (``get_context()`` is None then), and copying or pickling one is refused. On both
    twins a handle is its own wheel entry (a subclass of the twin's
    :class:`~aiowheel._wheel.Entry`): one object per pending timer.
    """

    # Slots, as the compiled twin's fields (declared in _cloopcore.pxd): the same names on the
    # class, and no instance dict.
    __slots__ = (
        "_snapshot",
        "advanced_to",
        "arm",
        "call_on_base",
        "cancelled",
        "catch_up_after",
        "check_in_debug",
        "clock",
        "closed",
        "debug",
        "driver_wakeups",
        "driver_when",
        "far_delay",
        "fired",
        "latest_deadline",
        "loop",
        "loop_time",
        "min_delay",
        "near",
        "near_timers",
        "order",
        "wheel",
        "wheel_reach",
        "wheel_timers",
    )

    def __init__(
        self,
        loop: Any,
        tick: SupportsFloat,
        wheel_size: SupportsIndex,
        min_delay: float,
        far_delay: float,
        *,
        arm: Callable[[float], object],
        check_in_debug: Callable[[Callable[..., object]], object],
        call_on_base: Callable[..., asyncio.TimerHandle],
    ) -> None:
        now = loop.time()
        wheel: HierarchicalWheel[Callable[..., object]]
        wheel = HierarchicalWheel(tick, wheel_size, start=now)
        self.loop = loop
        self.arm = arm
        self.check_in_debug = check_in_debug
        self.call_on_base = call_on_base
        # loop.time as the loop's class defines it. Every timer reads the clock the loop's user
        # sees: while loop.time is still this method, through `clock`; once it is not (a test
        # patched it on the loop or its class), by calling loop.time() itself, as asyncio does.
        self.loop_time: Callable[[], float] | None = loop.time
        # loop.time, or the function it calls: asyncio's own loops read time.monotonic()
        # through a Python method, and calling it directly spares a frame per timer.
        uses_monotonic = getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
        self.clock: Callable[[], float] | None = time.monotonic if uses_monotonic else loop.time
        self.wheel = wheel
        # A heap of (deadline, order, handle): the timers shorter than min_delay, and the wheel
        # timers taken off the wheel because they are due within two ticks. Cancelled ones stay
        # until they reach the top (their callback and arguments are released at once).
        self.near: list[tuple[float, int, LoopTimerHandle]] = []
        # The scheduling order the next timer gets.
        self.order = 0
        # The snapshot of a context the last timer made without a context of its own got, for
        # the next ones made while the current context holds the same variables (a context
        # copied per timer is a quarter of asyncio's whole timer). None while no timer needs
        # it: reset by every pass, so that it keeps no context's values alive for long.
        self._snapshot: Snapshot | None = None
        # Set by close(): asyncio's call_at refuses a closed loop, and so does schedule.
        self.closed = False
        # loop.get_debug(), kept by the loop's set_debug: read on every schedule.
        self.debug: bool = loop.get_debug()
        # Timers with a delay below min_delay go to `near` directly; above far_delay they stay
        # on the base loop.
        self.min_delay = min_delay
        self.far_delay = far_delay
        # Deadlines from here on are beyond what the wheel takes (with a tiny tick, the loop's
        # clock plus FAR_DELAY can be); the loop sends them to the base loop like far timers.
        self.latest_deadline = WHEEL_TICKS * wheel.tick
        # The time the driver is armed for (the last `arm` was given), inf when it is not. No
        # timer the core holds can be due before it.
        self.driver_when = math.inf
        # loop.time() of the last advance; the wheel's clock is at most two ticks ahead of it.
        self.advanced_to = now
        # The time the wheel's clock was last moved to. A deadline not after it would be filed
        # as due at once, in a bucket that expires with the wheel's clock, not with the timer
        # (late by up to two ticks, with a min_delay below a tick): such a timer goes to the
        # near queue instead.
        self.wheel_reach = now
        # How far the wheel's clock may lag before an add moves it up: level 0's span.
        self.catch_up_after = wheel.wheel_size * wheel.tick
        self.wheel_timers = 0
        self.near_timers = 0
        self.cancelled = 0
        self.fired = 0
        self.driver_wakeups = 0

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """asyncio's ``call_later``: on the wheel if ``delay >= min_delay``, in the near queue if
        shorter, on the base loop if further than ``far_delay``, infinite or NaN.

        The clock is ``loop.time()`` as the loop's user sees it, also when a test patched it. A
        bool is taken as the int it is (1 or 0), as asyncio and uvloop take it. A delay that is
        not an int or a float (a Fraction, a Decimal, a numpy scalar) is added to the clock
        exactly, and the sum rounded up to a float, which is then ``when()``: the callback never
        runs before ``loop.time() + delay``.
        """
        if delay is None:
            raise TypeError(DELAY_NONE)
        loop = self.loop
        if loop is None:  # closed: close() let go of the loop
            raise closed_error(delay)
        if type(delay) is bool:
            delay = int(delay)
        loop_time = loop.time
        now = self.clock() if loop_time == self.loop_time else loop_time()  # type: ignore[misc]
        if type(delay) is float or type(delay) is int:
            when = now + delay
        else:
            delay, when = loop_deadline_after(now, delay)
        # Written so that NaN fails the test and goes to the base loop, as asyncio accepts it.
        if -self.far_delay <= delay <= self.far_delay and when < self.latest_deadline:
            on_wheel = delay >= self.min_delay
            handle = self._schedule(now, when, when, on_wheel, callback, args, context)
            return handle  # type: ignore[return-value]  # asyncio's API, not its class
        return self._on_base(when, delay, callback, args, context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """asyncio's ``call_at``, routed as :meth:`call_later` routes ``when - loop.time()``.

        A bool is taken as the int it is. A ``when`` that is not an int or a float (a Fraction, a
        Decimal, a numpy scalar) is rounded up to a float: the callback never runs before
        ``when``; ``when()`` is the number given.
        """
        if when is None:
            raise TypeError(WHEN_NONE)
        loop = self.loop
        if loop is None:
            raise closed_error(0.0)
        if type(when) is bool:
            when = int(when)
        loop_time = loop.time
        now = self.clock() if loop_time == self.loop_time else loop_time()  # type: ignore[misc]
        deadline = when if type(when) is float or type(when) is int else loop_deadline(when)
        delay = deadline - now
        if -self.far_delay <= delay <= self.far_delay and deadline < self.latest_deadline:
            on_wheel = delay >= self.min_delay
            handle = self._schedule(now, when, deadline, on_wheel, callback, args, context)
            return handle  # type: ignore[return-value]  # asyncio's API, not its class
        return self._on_base(when, delay, callback, args, context)

    def _schedule(  # noqa: PLR0917  # the loop's hot path: no keyword arguments
        self,
        now: float,
        when: float,
        deadline: float,
        on_wheel: bool,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> LoopTimerHandle:
        """A timer for ``when`` (``deadline`` is the same time as a float): on the wheel if
        ``on_wheel``, else straight into the near queue."""
        # The checks asyncio's call_at makes (the base loop makes them for its own timers); a
        # closed loop was refused by call_later / call_at.
        timer: LoopTimerHandle = _new_handle(LoopTimerHandle)
        if self.debug:
            self.check_in_debug(callback)
            # From the caller of call_later / call_at: this frame and theirs left out.
            timer._extra = _Extra(when, format_helpers.extract_stack(sys._getframe(2)))
        elif when is deadline:
            timer._extra = None
        else:
            timer._extra = _Extra(when, None)
        _init_entry(timer, deadline, callback)
        timer._argument = args[0] if len(args) == 1 and type(args[0]) is not tuple else args
        if context is None:
            current = _copy_context()
            snapshot = self._snapshot
            # Two empty contexts (the common case) are told apart from others without a call.
            if snapshot is None or (
                (current or snapshot.context) and not same_variables(current, snapshot.context)
            ):
                snapshot = self._snapshot = Snapshot(current)
            timer._ctx = snapshot
        else:
            timer._ctx = context
        timer._core = self
        timer._order = order = self.order
        self.order = order + 1
        if on_wheel and deadline > self.wheel_reach:
            wheel = self.wheel
            if now - self.advanced_to >= self.catch_up_after:
                next_deadline = wheel.next_deadline()
                if next_deadline is None or next_deadline > now:
                    # Only moves the clock up; whatever it returns is not due yet (it was taken
                    # out early, within two ticks), so into the near queue with it.
                    self._take_near(wheel.advance_entries(now))
                    self.advanced_to = now
                    self.wheel_reach = max(self.wheel_reach, now)
            # The routing keeps `deadline` finite and in the wheel's range: add's check is
            # redundant.
            wheel.add_entry(timer)
            self.wheel_timers += 1
        else:
            heappush(self.near, (deadline, order, timer))
            self.near_timers += 1
        if deadline < self.driver_when:
            # Only then can the driver be armed too late. A wheel timer due at or after the
            # driver may sit in a higher-level bucket that expires earlier, but next_due is
            # at the start of the earliest bucket, so the driver is still armed early enough.
            next_due = self.next_due()
            if next_due < self.driver_when:
                self.driver_when = next_due
                self.arm(next_due)
        return timer

    def _on_base(
        self,
        when: float,
        delay: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> asyncio.TimerHandle:
        """A timer the base loop's own way, through the loop's ``call_on_base``."""
        if self.call_on_base is None:
            raise RuntimeError("Event loop is closed")
        timer = self.call_on_base(when, delay, callback, args, context)
        # Drop the frames of the hook, of this method and of call_later / call_at: the
        # traceback ends at their caller.
        traceback = timer._source_traceback  # type: ignore[attr-defined]  # private in typeshed
        if traceback:
            del traceback[-3:]
        return timer

    def _forget(self, handle: LoopTimerHandle) -> None:
        """``handle`` was cancelled: take it off the wheel at once (unless it is in the near
        queue, which drops it when it reaches the top)."""
        emptied = self.wheel.remove_entry(handle)
        if emptied is None:
            return
        self.cancelled += 1
        if emptied:
            if not self.wheel and not self.near:
                self._snapshot = None  # nothing pending: no context kept alive by the core
            # The last entry of its bucket: that may have been the bucket the driver is armed
            # for. Any other cancellation leaves the next deadline where it was.
            self._rearm()

    def _rearm(self) -> None:
        """Point the driver at :meth:`next_due`, if it is not armed for that time already."""
        when = self.next_due()
        if when != self.driver_when:
            self.driver_when = when
            self.arm(when)

    def next_due(self) -> float:
        """When the driver must run next: the near queue's earliest deadline, or the first
        float after the start of the wheel's next bucket (a tick before it expires; every
        deadline in it is later), whichever is earlier; inf if the core holds no timer. Drops
        cancelled timers from the top of the queue."""
        near = self.near
        while near and near[0][2]._core is _CANCELLED:
            heappop(near)
            self.cancelled += 1
        when = near[0][0] if near else math.inf
        next_deadline = self.wheel.next_deadline()
        if next_deadline is not None:
            tick = self.wheel.tick
            # The bucket's deadlines are all after (q - 1) * tick, q its expiration in ticks (the
            # wheel's rounding, ceil_ticks). Just after it, not at it: on a clock that counts
            # whole ticks (uvloop's milliseconds, with the default tick) a pass at the start
            # itself could never find a timer of the bucket due, and would only cost a pass.
            start = math.nextafter((round(next_deadline / tick) - 1) * tick, math.inf)
            if start < when:
                return start
        return when

    def advance(self, now: float) -> list[LoopTimerHandle]:
        """The driver's pass (the driver has run: it is armed no more): the handles due at
        ``now`` (``deadline <= now``), in (deadline, scheduling order); none that a later one
        could precede is left behind. Before it returns, the driver is armed (``arm``) for
        :meth:`next_due`, so that timers the due ones schedule can only move it earlier.

        Every wheel timer that could be due within two ticks first moves to the near queue,
        so that the bucket of a timer due at ``now`` is taken even though it expires later
        (the wheel rounds deadlines up to its tick; two ticks, so that a float rounding of
        ``now + tick`` cannot leave that bucket behind).
        """
        self.driver_when = math.inf
        self.driver_wakeups += 1
        self._snapshot = None  # keep no context's values alive longer than a pass
        reach = now + 2 * self.wheel.tick
        self._take_near(self.wheel.advance_entries(reach))
        self.advanced_to = now
        self.wheel_reach = reach
        near = self.near
        due: list[LoopTimerHandle] = []
        while near and near[0][0] <= now:
            timer = heappop(near)[2]
            if timer._core is _CANCELLED:
                self.cancelled += 1
            else:
                due.append(timer)
        self.fired += len(due)
        self._rearm()
        return due

    def _take_near(self, timers: list[Entry[Callable[..., object]]]) -> None:
        """Move ``timers``, just taken off the wheel, to the near queue."""
        near = self.near
        for timer in cast("list[LoopTimerHandle]", timers):
            heappush(near, (timer.deadline, timer._order, timer))

    def pending(self) -> int:
        """Timers held and not cancelled: on the wheel or in the near queue."""
        live = sum(item[2]._core is not _CANCELLED for item in self.near)
        return len(self.wheel) + live

    def close(self) -> None:
        """Empty the wheel and the near queue: their timers are dropped, not run; and let go of
        the loop and its hooks, so that the loop and its core do not hold each other: a closed
        loop is freed by reference counting alone, as asyncio's. Called once the loop is
        closed."""
        self.closed = True
        self.driver_when = math.inf
        self._snapshot = None
        # Nothing calls the hooks once closed: call_later / call_at refuse first.
        self.loop = None
        self.arm = self.check_in_debug = self.call_on_base = None  # type: ignore[assignment]
        self.loop_time = self.clock = None
        for _, _, timer in self.near:
            if timer._core is not _CANCELLED:  # a cancelled one let go already, and stays so
                _release(timer)
        self.near.clear()
        for timer in cast("list[LoopTimerHandle]", self.wheel.remove_all()):
            _release(timer)
