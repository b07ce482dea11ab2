# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel._loopcore`: the wheel-backed event loop's timers, in
Cython, over the compiled wheel (which it cimports: ``_cwheel.pxd``), so that filing, cancelling
and advancing reach the wheel's C fields and methods directly.

:mod:`aiowheel._loopcore` is the specification: same names (``LoopCore``, ``LoopTimerHandle``),
API, behaviour and contract with the loop (the pure ``LoopCore``'s docstring: what the loop
hands its core, the core's ``call_later`` / ``call_at`` bound on the loop instance, the
handles); the loop's test suite runs on both in one process (see :mod:`aiowheel._impl`). The
loop publishes the handle as :class:`aiowheel.loop.LoopTimerHandle`, its ``__name__`` on both
twins, so its repr starts ``<LoopTimerHandle`` where asyncio's starts ``<TimerHandle``.

One representation difference, not observable through the API: the handle is a C object and
is itself the wheel entry (its payload is the callback), so a pending timer costs one object
and no Python frame is run to make, cancel or run it. Like the pure one, it is not an
asyncio.TimerHandle (a Python class with its own slot layout); like uvloop's handles it has that
class's API:
when(), cancel(), cancelled(), get_context(), ordering, hashing, the same repr, and the private
fields and _run() asyncio's loop uses (_cancelled, _callback, _args, _context, _loop,
_source_traceback, _repr, _when).

A pending timer is the handle alone, 96 bytes (its layout, word by word, is in
``_cloopcore.pxd``): the deadline is a C double in the entry, a lone argument is kept without a
tuple, the flags share the entry's index word, the scheduling order is the wheel's add order,
and asyncio's fields are properties over these. What few handles need -- a debug-mode
traceback and kept repr, a ``when`` that is not the float deadline -- is in an ``_Extras``
object made for those handles only.

The handle is not tracked by the cyclic garbage collector, and its type has no GC support (see
``_drop_gc``, and the Timer core, which does the same for the Timer's handles): a loop with many
pending timers is that many objects fewer for every full collection to walk. A handle holds its
callback, arguments, context, core and loop only while it is pending -- reachable from its
loop's wheel or near queue -- and releases all of them the moment it runs, is cancelled or its
loop closes, so that a handle kept by anyone (an exception handler's ``context["handle"]``)
keeps no loop alive. The price: a loop dropped without ``close()`` while a timer is pending is
never collected (the cycle loop -> core -> wheel -> handle -> loop goes through an untracked
object); tracking the handles would cost about 180 instructions per timer (bench_loop's churn),
so it is documented instead (docs/loop.md). Observable difference from asyncio: once run or
cancelled, get_context() is None.

Timers scheduled from the same context share one context snapshot, as the Timer's handles do
(see the Timer core): the core keeps the snapshot it made last and hands it out again while
the current context's variables are the same mapping -- read without copying the current
context -- and a callback runs in a fresh copy of it, so that its ContextVar.set() leaks
nowhere, as in asyncio. ``get_context()`` gives the handle a copy of its own first, so that
what its caller sets there reaches no other timer. A cancelled timer, the common case, never
costs a Context of its own.
"""

cimport cython
from cpython.contextvars cimport PyContext_Copy, PyContext_CopyCurrent
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.math cimport INFINITY as _C_INFINITY, nextafter as _c_nextafter, round as _c_round

from aiowheel._ccontext cimport _run_in
from aiowheel._chandle cimport (
    _CANCELLED,
    _COPY_CONTEXT,
    _ONE_ARG,
    _is_cancelled,
    _set_cancelled,
)
from aiowheel._ccpython cimport (
    AW_CPYTHON_FALLBACK,
    _context_vars_readable,
    aw_context_vars,
    aw_current_context,
    aw_type_version,
)
from aiowheel._cwheel cimport (
    _EMPTIED,
    _NOT_PENDING,
    _OFF_PAYLOAD,
    Entry,
    HierarchicalWheel,
    _add_order,
    _deadline,
    _drop_entry_gc,
    _get,
    _init_entry,
    _init_entry_at,
    _next_add_order,
    _set,
    _take_add_order,
)

import asyncio as _asyncio
import time as _time
from asyncio import format_helpers as _format_helpers
from heapq import heappop as _heappop, heappush as _heappush

import math
import sys as _sys

from aiowheel._checks import (
    DELAY_NONE,
    WHEN_NONE,
    cancelled_repr,
    closed_error,
    loop_deadline,
    loop_deadline_after,
    not_copyable,
)

__all__ = ["ClockWatch", "LoopCore", "LoopTimerHandle"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd).
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

# The class asyncio's handles are compared with; ours compare with theirs as theirs do.
_ASYNCIO_TIMER_HANDLE = _asyncio.TimerHandle

# Whether timers share context snapshots (see the module docstring).
cdef bint _SHARE_SNAPSHOTS = _context_vars_readable()


cdef object _callback_source(object callback, object args):
    return _format_helpers._format_callback_source(callback, args)


cdef class LoopTimerHandle(Entry):
    """The handle of a timer of a wheel-backed event loop.

    It has ``asyncio.TimerHandle``'s API -- ``when()``, ``cancel()``, ``cancelled()``,
    ``get_context()``, ordering, hashing and ``repr`` -- but is not an instance of it, as
    uvloop's handles are not. ``cancel()`` takes the timer off the wheel at once.
    """

    # The fields, with the invariant each keeps, are declared in _cloopcore.pxd; asyncio's
    # fields are the properties below.

    def __init__(self, *args, **kwargs):
        raise TypeError("LoopTimerHandle is made by the loop's call_later / call_at")

    @property
    def _callback(self):
        return _get(self, _OFF_PAYLOAD, "payload")

    @_callback.setter
    def _callback(self, value):
        _set(self, _OFF_PAYLOAD, value)

    @property
    def _args(self):
        """The callback's arguments, a tuple; None once the handle ran or was cancelled."""
        return _args_of(self)

    @_args.setter
    def _args(self, value):
        if self.c_flags & _EXTRAS:
            (<_Extras>self._arguments).args = value
        else:
            self._arguments = value
            self.c_flags &= ~(<unsigned int>_ONE_ARG)

    @property
    def _when(self):
        return _when_of(self)

    @property
    def _loop(self):
        """The loop, while the timer is pending; None once it ran, was cancelled or its loop
        closed (so that a handle kept by anyone keeps no loop alive)."""
        core = self._core
        return None if core is None else core.loop

    @property
    def _cancelled(self):
        return _is_cancelled(self)

    @_cancelled.setter
    def _cancelled(self, bint value):
        _set_cancelled(self, value)

    @property
    def _source_traceback(self):
        return (<_Extras>self._arguments).source_traceback if self.c_flags & _EXTRAS else None

    @_source_traceback.setter
    def _source_traceback(self, value):
        _extras_of(self).source_traceback = value

    @property
    def _repr(self):
        return (<_Extras>self._arguments).repr if self.c_flags & _EXTRAS else None

    @_repr.setter
    def _repr(self, value):
        _extras_of(self).repr = value

    def when(self):
        """The time the callback is scheduled for, as asked (a float, or the number given)."""
        return _when_of(self)

    def cancelled(self):
        return _is_cancelled(self)

    def get_context(self):
        """The context the callback runs in: the handle's own (a copy of a shared snapshot is
        made here, once, so that what a caller sets in it reaches no other timer)."""
        if self.c_flags & _COPY_CONTEXT:
            self._context = PyContext_Copy(self._context)
            self.c_flags &= ~(<unsigned int>_COPY_CONTEXT)
        return self._context

    def __reduce_ex__(self, protocol):
        """Refused, unlike asyncio's handle: a copy would share the timer's place on the wheel
        (see aiowheel._checks.not_copyable)."""
        raise not_copyable("LoopTimerHandle")

    def cancel(self):
        """Cancel the callback: at once the timer leaves the wheel and the callback and its
        arguments are released. Cancelling twice does nothing more; cancelling after it ran
        only marks it cancelled (its repr says so, as asyncio's)."""
        cdef LoopCore core
        cdef _Extras extras
        if self.c_flags & _CANCELLED:
            return
        self.c_flags |= _CANCELLED
        core = self._core
        if core is not None and core.debug:
            # As asyncio: the repr it had, now that the callback goes.
            _extras_of(self).repr = repr(self)
        elif core is None and self.c_flags & _EXTRAS:
            extras = <_Extras>self._arguments
            if extras.repr is not None:  # it ran in debug mode: the repr it kept
                extras.repr = cancelled_repr(extras.repr)
        self._core = None
        if core is not None:
            core._forget(self)
        _release(self)

    def _run(self):
        """Run the callback in its context, as ``asyncio.Handle._run``: an exception goes to the
        loop's exception handler. The handle releases its callback, arguments and context first
        (see the module docstring)."""
        cdef _Extras extras = <_Extras>self._arguments if self.c_flags & _EXTRAS else None
        cdef bint one_arg = self.c_flags & _ONE_ARG
        callback = _get(self, _OFF_PAYLOAD, "payload")
        args = self._arguments if extras is None else extras.args
        core = self._core
        loop = None if core is None else (<LoopCore>core).loop
        context = PyContext_Copy(self._context) if self.c_flags & _COPY_CONTEXT else self._context
        if extras is not None and extras.repr is None and extras.source_traceback is not None:
            extras.repr = repr(self)  # debug mode: the repr it had, now that the callback goes
        _release(self)
        try:
            _run_in(context, callback, args, one_arg)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if one_arg:
                args = (args,)
            context = {
                "message": f"Exception in callback {_callback_source(callback, args)}",
                "exception": exc,
                "handle": self,
            }
            if extras is not None and extras.source_traceback:
                context["source_traceback"] = extras.source_traceback
            loop.call_exception_handler(context)

    def _repr_info(self):
        cdef bint cancelled = self.c_flags & _CANCELLED
        info = [type(self).__name__]
        if cancelled:
            info.append("cancelled")
        callback = _get(self, _OFF_PAYLOAD, "payload")
        if callback is not None:
            info.append(_callback_source(callback, _args_of(self)))
        traceback = self._source_traceback
        if traceback:
            frame = traceback[len(traceback) - 1]
            info.append(f"created at {frame[0]}:{frame[1]}")
        info.insert(2 if cancelled else 1, f"when={_when_of(self)}")
        return info

    def __repr__(self):
        if self.c_flags & _EXTRAS and (<_Extras>self._arguments).repr is not None:
            return (<_Extras>self._arguments).repr
        return "<{}>".format(" ".join(self._repr_info()))

    def __hash__(self):
        return hash(_when_of(self))

    def __richcmp__(self, other, int op):
        if not isinstance(other, (LoopTimerHandle, _ASYNCIO_TIMER_HANDLE)):
            return NotImplemented
        when = _when_of(self)
        if op == 0:
            return when < other._when
        if op == 1:
            return when <= other._when
        if op == 4:
            return when > other._when
        if op == 5:
            return when >= other._when
        equal = (
            when == other._when
            and self._callback == other._callback
            and _args_of(self) == other._args
            and self._cancelled == other._cancelled
        )
        return equal if op == 2 else not equal


@cython.final
cdef class _Extras:
    """What few handles need (see _cloopcore.pxd): held by the handle, in its _arguments."""


cdef inline object _args_of(LoopTimerHandle handle):
    """The arguments as a tuple (asyncio's ``_args``); None once released."""
    if handle.c_flags & _ONE_ARG:
        return (handle._arguments,)
    if handle.c_flags & _EXTRAS:
        return (<_Extras>handle._arguments).args
    return handle._arguments


cdef inline object _when_of(LoopTimerHandle handle):
    """``when()``: the number given, which is the deadline unless _Extras says otherwise."""
    if handle.c_flags & _EXTRAS and (<_Extras>handle._arguments).when is not None:
        return (<_Extras>handle._arguments).when
    return _deadline(handle)


cdef _Extras _extras_of(LoopTimerHandle handle):
    """The handle's _Extras, made (holding the arguments' tuple) if it has none yet."""
    cdef _Extras extras
    if handle.c_flags & _EXTRAS:
        return <_Extras>handle._arguments
    extras = _Extras.__new__(_Extras)
    extras.args = _args_of(handle)
    handle._arguments = extras
    handle.c_flags = (handle.c_flags & ~(<unsigned int>_ONE_ARG)) | _EXTRAS
    return extras


cdef inline void _release(LoopTimerHandle handle) noexcept:
    """Let go of what a pending handle holds: it ran, was cancelled or its loop closed. Keeps
    its _Extras (when(), the traceback and the repr), without the arguments."""
    _set(handle, _OFF_PAYLOAD, None)
    if handle.c_flags & _EXTRAS:
        (<_Extras>handle._arguments).args = None
    else:
        handle._arguments = None
    handle.c_flags &= ~(<unsigned int>(_ONE_ARG | _COPY_CONTEXT))
    handle._context = None
    handle._core = None


cdef extern from *:
    """
    #define aw_loop_handle_offsets(h, out) ( \
        (out)[0] = AW_FIELD_OFFSET(h, _arguments), \
        (out)[1] = AW_FIELD_OFFSET(h, _context), \
        (out)[2] = AW_FIELD_OFFSET(h, _core))
    """
    void aw_loop_handle_offsets(LoopTimerHandle handle, Py_ssize_t *out)


cdef int _drop_gc() except -1:
    """Take GC support away from LoopTimerHandle (see the module docstring; a no-op in the CPython
    fallback build), telling the deallocator which fields hold references."""
    cdef LoopTimerHandle probe = LoopTimerHandle.__new__(LoopTimerHandle)
    cdef Py_ssize_t offsets[3]
    aw_loop_handle_offsets(probe, offsets)
    del probe  # freed by Cython's deallocator while the type still has GC support
    _drop_entry_gc(LoopTimerHandle, offsets, 3)
    return 0

_drop_gc()


cdef extern from "Python.h":
    # PyObject_GenericSetAttr, with NULL for a deletion.
    int _generic_setattr "PyObject_GenericSetAttr" (
        object obj, object name, PyObject *value
    ) except -1


cdef class ClockWatch:
    """A base of the wheel-backed loop classes: it lets the loop core know when ``time`` is set
    or deleted on the loop (a test patching the loop's clock, as ``mock.patch.object(loop,
    "time")`` and pytest's ``monkeypatch.setattr`` do), so that the core can read the clock
    without looking ``loop.time`` up for every timer while nobody did. A patch on the loop's
    class or one of its bases is seen without it. ``time`` written into the loop's ``__dict__``
    directly is not seen by the compiled core once it trusts the clock.

    This pure twin's core looks ``loop.time`` up for every timer, as asyncio's loops do, so it
    needs to be told nothing: this class adds no behaviour.
    """

    # The compiled twin: attributes are set and deleted as object's own __setattr__ and
    # __delattr__ do (the loop classes' bases define neither), and a write of `time` makes the
    # loop's compiled core look loop.time up again (LoopCore._now).

    def __setattr__(self, name, value):
        _generic_setattr(self, name, <PyObject *>value)
        if name == "time":
            _clock_written(self)

    def __delattr__(self, name):
        _generic_setattr(self, name, NULL)
        if name == "time":
            _clock_written(self)


cdef int _clock_written(object loop) except -1:
    """`time` was set or deleted on ``loop``: its compiled core, if it has one, stops trusting
    its clock until it has looked loop.time up again."""
    core = getattr(loop, "_core", None)
    if type(core) is LoopCore:
        (<LoopCore>core)._clock_trusted = False
    return 0


cdef class LoopCore:
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

    # The fields, with the invariant each keeps, are declared in _cloopcore.pxd.

    def __init__(self, loop, tick, wheel_size, min_delay, far_delay, *, arm, check_in_debug,
                 call_on_base):
        now = loop.time()
        wheel = HierarchicalWheel(tick, wheel_size, start=now)
        self.loop = loop
        self.arm = arm
        self.check_in_debug = check_in_debug
        self.call_on_base = call_on_base
        # loop.time as the loop's class defines it (see _now).
        self.loop_time = loop.time
        self._watched = isinstance(loop, ClockWatch)
        self._clock_trusted = False  # until the first timer finds loop.time unpatched
        uses_monotonic = getattr(loop.time, "__func__", None) is _asyncio.BaseEventLoop.time
        self.clock = _time.monotonic if uses_monotonic else loop.time
        self.wheel = wheel
        self.near = []
        self.closed = False
        self.debug = loop.get_debug()
        self.min_delay = min_delay
        self.far_delay = far_delay
        self.latest_deadline = 2**50 * wheel.tick
        self._min_delay = min_delay
        self._far_delay = far_delay
        self._latest_deadline = self.latest_deadline
        self.driver_when = math.inf
        self.advanced_to = now
        self.wheel_reach = now
        self.catch_up_after = wheel.wheel_size * wheel.tick
        self.wheel_timers = 0
        self.near_timers = 0
        self.cancelled = 0
        self.fired = 0
        self.driver_wakeups = 0

    # The scheduling order the next timer gets: the wheel's next add order (no docstring: the
    # pure twin's is a plain attribute).
    @property
    def order(self):
        return _next_add_order(self.wheel)

    cdef LoopTimerHandle _schedule(
        self, double now, object when, object deadline, double deadline_value, bint on_wheel,
        object callback, tuple args, object context, int caller_frame,
    ):
        """schedule; ``deadline`` is None for the float ``deadline_value`` (not boxed), ``when``
        None for the deadline itself. ``caller_frame`` is the frame (from the innermost Python
        one) where the traceback of a debug-mode handle ends: none of this extension's
        functions has one."""
        cdef LoopTimerHandle handle
        cdef HierarchicalWheel wheel
        cdef _Extras extras
        cdef double next_due
        handle = LoopTimerHandle.__new__(LoopTimerHandle)
        if deadline is None:
            _init_entry_at(handle, deadline_value, callback)
        else:
            _init_entry(handle, deadline, callback)
        if PyTuple_GET_SIZE(args) == 1:
            handle._arguments = <object>PyTuple_GET_ITEM(args, 0)
            handle.c_flags |= _ONE_ARG
        else:
            handle._arguments = args
        if self.debug or (when is not None and when is not deadline):
            extras = _extras_of(handle)
            if when is not deadline:
                extras.when = when
            if self.debug:
                self.check_in_debug(callback)
                extras.source_traceback = _format_helpers.extract_stack(
                    _sys._getframe(caller_frame)
                )
        if context is None:
            handle._context = self._current_snapshot()
            handle.c_flags |= _COPY_CONTEXT
        else:
            handle._context = context
        handle._core = self
        wheel = self.wheel
        if on_wheel and deadline_value > self.wheel_reach:
            if now - self.advanced_to >= self.catch_up_after:
                next_deadline = wheel.next_deadline()
                if next_deadline is None or next_deadline > now:
                    # Only moves the clock up; what it returns goes to the near queue.
                    self._take_near(wheel.advance_entries(now))
                    self.advanced_to = now
                    if now > self.wheel_reach:
                        self.wheel_reach = now
            wheel.add_entry(handle)
            self.wheel_timers += 1
        else:
            if deadline is None:
                deadline = deadline_value
            _heappush(self.near, (deadline, _take_add_order(wheel), handle))
            self.near_timers += 1
        if deadline_value < self.driver_when:
            # Only then can the driver be armed too late (see the pure twin).
            next_due = self._next_due()
            if next_due < self.driver_when:
                self.driver_when = next_due
                self.arm(next_due)
        return handle

    cdef object _current_snapshot(self):
        """A snapshot of the current context: the last one made, if the variables are the same."""
        cdef PyObject *current
        if _SHARE_SNAPSHOTS and self._snapshot is not None:
            current = aw_current_context()
            if current is not NULL and aw_context_vars(<object>current) == aw_context_vars(
                self._snapshot
            ):
                return self._snapshot
        self._snapshot = PyContext_CopyCurrent()
        return self._snapshot

    cdef int _forget(self, LoopTimerHandle handle) except -1:
        cdef int removal = self.wheel._unfile(handle)
        if removal == _NOT_PENDING:
            return 0
        self.cancelled += 1
        if removal == _EMPTIED:
            if not self.wheel._len and not self.near:
                self._snapshot = None  # nothing pending: no context kept alive by the core
            # The last entry of its bucket: maybe the one the driver is armed for.
            self._rearm()
        return 0

    cdef int _rearm(self) except -1:
        """Point the driver at next_due, if it is not armed for that time already."""
        cdef double when = self._next_due()
        if when != self.driver_when:
            self.driver_when = when
            self.arm(when)
        return 0

    def next_due(self):
        """When the driver must run next: the near queue's earliest deadline, or the first
        float after the start of the wheel's next bucket (a tick before it expires; every
        deadline in it is later), whichever is earlier; inf if the core holds no timer. Drops
        cancelled timers from the top of the queue."""
        return self._next_due()

    cdef double _next_due(self) except? -1.0:
        cdef list near = self.near
        cdef double when = math.inf
        while near and (<LoopTimerHandle>(<tuple>near[0])[2]).c_flags & _CANCELLED:
            _heappop(near)
            self.cancelled += 1
        if near:
            when = (<tuple>near[0])[0]
        cdef double start, tick_value
        next_deadline = self.wheel.next_deadline()
        if next_deadline is not None:
            # Just after the start of the bucket (see the pure twin), as the pure twin computes
            # it: in C when both are floats, the common case.
            tick = self.wheel.tick
            if PyFloat_CheckExact(next_deadline) and PyFloat_CheckExact(tick):
                tick_value = PyFloat_AS_DOUBLE(tick)
                start = (_c_round(PyFloat_AS_DOUBLE(next_deadline) / tick_value) - 1) * tick_value
            else:
                start = (round(next_deadline / tick) - 1) * tick
            start = _c_nextafter(start, _C_INFINITY)
            if start < when:
                return start
        return when

    def advance(self, double now):
        """The driver's pass (the driver has run: it is armed no more): the handles due at
        ``now`` (``deadline <= now``), in (deadline, scheduling order); none that a later one
        could precede is left behind. Before it returns, the driver is armed (``arm``) for
        :meth:`next_due`, so that timers the due ones schedule can only move it earlier.

        Every wheel timer that could be due within two ticks first moves to the near queue,
        so that the bucket of a timer due at ``now`` is taken even though it expires later
        (the wheel rounds deadlines up to its tick; two ticks, so that a float rounding of
        ``now + tick`` cannot leave that bucket behind).
        """
        cdef list near = self.near
        cdef list due = []
        cdef LoopTimerHandle handle
        self.driver_when = math.inf
        self.driver_wakeups += 1
        self._snapshot = None  # keep no context's values alive longer than a pass
        reach = now + 2 * self.wheel.tick
        self._take_near(self.wheel.advance_entries(reach))
        self.advanced_to = now
        self.wheel_reach = reach
        while near and (<tuple>near[0])[0] <= now:
            handle = <LoopTimerHandle>(<tuple>_heappop(near))[2]
            if handle.c_flags & _CANCELLED:
                self.cancelled += 1
            else:
                due.append(handle)
        self.fired += PyList_GET_SIZE(due)
        self._rearm()
        return due

    cdef int _take_near(self, list entries) except -1:
        """Move ``entries``, just taken off the wheel, to the near queue."""
        cdef LoopTimerHandle handle
        near = self.near
        for entry in entries:
            handle = <LoopTimerHandle>entry
            _heappush(near, (_deadline(handle), _add_order(handle), handle))
        return 0

    def pending(self):
        """Timers held and not cancelled: on the wheel or in the near queue."""
        cdef Py_ssize_t live = 0
        for item in self.near:
            if not (<LoopTimerHandle>(<tuple>item)[2]).c_flags & _CANCELLED:
                live += 1
        return len(self.wheel) + live

    def close(self):
        """Empty the wheel and the near queue: their timers are dropped, not run; and let go of
        the loop and its hooks, so that the loop and its core do not hold each other: a closed
        loop is freed by reference counting alone, as asyncio's. Called once the loop is
        closed."""
        self.closed = True
        self.driver_when = math.inf
        self._snapshot = None
        self.loop = self.arm = self.check_in_debug = self.call_on_base = None
        self.loop_time = self.clock = None
        self._clock_trusted = False
        near = self.near
        self.near = []
        for item in near:
            _release(<LoopTimerHandle>(<tuple>item)[2])
        for entry in self.wheel.remove_all():
            _release(<LoopTimerHandle>entry)

    cdef object _now(self, object loop):
        """loop.time() as the loop's user sees it: through ``clock`` while nothing can have
        patched loop.time since it was last found unpatched (one comparison: see
        _clock_trusted), else as :meth:`_now_looked_up` finds it."""
        if self._clock_trusted and aw_type_version(loop) == self._clock_version:
            return self.clock()
        return self._now_looked_up(loop)

    cdef object _now_looked_up(self, object loop):
        """loop.time() looked up as asyncio's loops call self.time(): through ``clock`` if it is
        the method the loop's class had when the core was made (and from then on without a
        lookup, until the loop's ClockWatch or its class's version tag says it may have changed),
        else by calling what a test put there."""
        time = loop.time
        if time != self.loop_time:
            self._clock_trusted = False
            return time()
        if self._watched:
            version = aw_type_version(loop)
            if version != 0:
                self._clock_version = version
                self._clock_trusted = True
        return self.clock()

    def call_later(self, delay, callback, *args, context=None):
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
        cdef double now_value, delay_value, when_value
        now = self._now(loop)
        if PyFloat_CheckExact(delay) and PyFloat_CheckExact(now):
            # The common case, in C: the same sums and tests as below, without a boxed number.
            now_value = PyFloat_AS_DOUBLE(now)
            delay_value = PyFloat_AS_DOUBLE(delay)
            when_value = now_value + delay_value
            if (
                -self._far_delay <= delay_value <= self._far_delay
                and when_value < self._latest_deadline
            ):
                return self._schedule(
                    now_value, None, None, when_value, delay_value >= self._min_delay, callback,
                    args, context, 0,
                )
        if type(delay) is float or type(delay) is int:
            when = now + delay
        else:
            delay, when = loop_deadline_after(now, delay)
        # Written so that NaN fails the test and goes to the base loop, as asyncio accepts it.
        if -self.far_delay <= delay <= self.far_delay and when < self.latest_deadline:
            return self._schedule(
                now, None, when, when, delay >= self.min_delay, callback, args, context, 0
            )
        return self._on_base(when, delay, callback, args, context)

    def call_at(self, when, callback, *args, context=None):
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
        cdef double now_value, delay_value, when_value
        now = self._now(loop)
        if PyFloat_CheckExact(when) and PyFloat_CheckExact(now):
            # The common case, in C (see call_later).
            now_value = PyFloat_AS_DOUBLE(now)
            when_value = PyFloat_AS_DOUBLE(when)
            delay_value = when_value - now_value
            if (
                -self._far_delay <= delay_value <= self._far_delay
                and when_value < self._latest_deadline
            ):
                return self._schedule(
                    now_value, None, None, when_value, delay_value >= self._min_delay, callback,
                    args, context, 0,
                )
        deadline = when if type(when) is float or type(when) is int else loop_deadline(when)
        delay = deadline - now
        if -self.far_delay <= delay <= self.far_delay and deadline < self.latest_deadline:
            return self._schedule(
                now, when, deadline, deadline, delay >= self.min_delay, callback, args, context, 0
            )
        return self._on_base(when, delay, callback, args, context)

    cdef object _on_base(self, object when, object delay, object callback, tuple args,
                         object context):
        """A timer the base loop's own way, through the loop's ``call_on_base``."""
        if self.call_on_base is None:
            raise RuntimeError("Event loop is closed")
        timer = self.call_on_base(when, delay, callback, args, context)
        # Drop the hook's frame (none of ours has one): the traceback ends at the caller.
        traceback = timer._source_traceback
        if traceback:
            del traceback[len(traceback) - 1]
        return timer
