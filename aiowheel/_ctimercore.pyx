# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel._timercore`: the Timer's scheduling and dispatch, in
Cython, over the compiled wheel (which it cimports: ``_cwheel.pxd``).

:mod:`aiowheel._timercore` is the specification: same API, behaviour and error messages (from
:mod:`aiowheel._checks`); the whole test suite runs on both (see :mod:`aiowheel._impl`). Its
layout is declared in ``_ctimercore.pxd``; the Timer holds a core and uses only its Python
methods (the contract in the class docstring), and no compiled part above cimports it: the idle
core talks to its Timer through the host interface.

Three representation changes make a pending timer cheaper, none of them observable:

* Handles made by call_at/call_later are not tracked by the cyclic garbage collector, and their
  type has no GC support at all (Py_TPFLAGS_HAVE_GC is cleared at import, see ``_drop_gc`` and
  ``aw_drop_gc`` in ``_ccpython.pxd``): no GC header, 16 bytes less per timer. A million pending
  timers are then a million objects fewer for every full collection to walk (measured: about
  half of the CPU a timer cost). It is safe because a handle holds references only while it is
  pending -- reachable from its Timer's wheel -- and releases its callback, arguments, context
  and Timer the moment it runs, is cancelled or its Timer closes; a handle out of the wheel
  references nothing, so it can close no cycle the collector would need to find. A callback that
  references its own handle (a closure, a bound method of an object holding it) makes a cycle
  only while the handle is pending, and the wheel holds it then anyway. The one cost: a Timer
  dropped while running, never closed (its task neither finished nor cancelled), keeps the
  objects its pending callbacks reference alive until the interpreter exits. A Job, which holds
  its handle, is a Python object and is tracked; its handle references it (as the callback's
  argument) only while pending. A Python subclass would be a heap type, which CPython always
  gives GC support: tracked and collected through this type's traverse function.
* A callback with exactly one argument keeps that argument, not the tuple of it (``_ONE_ARG``):
  one tuple less per timer (48 bytes); ``_args`` still reads as the tuple.
* Handles scheduled from the same context share one context snapshot instead of one copy each.
  The pure handle copies the current context when it is scheduled and runs its callback in that
  copy, so a callback's ContextVar.set() is seen by nobody else. Here the snapshot is a copy
  made when the current context's variables last changed (checked by identity of the
  Context's variable mapping, see ``_context_vars_readable`` in ``_ccpython.pxd``), and each
  callback runs in a fresh copy of it: the same values, the same isolation, one Context object
  per change instead of one per timer.
"""

cimport cython
from cpython.contextvars cimport PyContext_Copy, PyContext_CopyCurrent
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

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
    CO_COROUTINE,
    CO_ITERABLE_COROUTINE,
    _context_vars_readable,
    aw_context_vars,
    aw_function_flags,
    aw_method_function,
)
from aiowheel._cwheel cimport (
    _DEADLINE_INT,
    _DEADLINE_KIND,
    _OFF_PAYLOAD,
    Entry,
    HierarchicalWheel,
    _checked_deadline,
    _deadline,
    _deadline_after,
    _deadline_double,
    _drop_entry_gc,
    _get,
    _init_entry,
    _pending,
    _set,
)

import math

from aiowheel._checks import (
    CLOSED,
    DELAY_NONE,
    NOT_RUNNING,
    WHEN_NONE,
    check_callback,
    not_copyable,
    not_running,
    pending_limit,
)
from aiowheel._lateness import CLOCK_STRIDE, LATENESS_BOUNDS, LATENESS_BUCKETS

__all__ = ["TimerCore", "TimerHandle"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd).
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

# The lateness histogram's bounds, padded with infinities (the sizes: _ctimercore.pxd).
cdef double _LATENESS_BOUNDS[_PADDED]


cdef int _load_lateness_bounds() except -1:
    cdef Py_ssize_t i
    if LATENESS_BUCKETS != _BUCKETS or CLOCK_STRIDE != _STRIDE:
        raise SystemError(
            f"aiowheel._ctimercore counts {_BUCKETS} lateness buckets and reads the clock every "
            f"{_STRIDE} callbacks, aiowheel._lateness says {LATENESS_BUCKETS} and "
            f"{CLOCK_STRIDE}: rebuild the extension"
        )
    for i in range(_PADDED):
        _LATENESS_BOUNDS[i] = LATENESS_BOUNDS[i] if i < _BOUNDS else math.inf
    return 0


_load_lateness_bounds()


cdef inline Py_ssize_t _lateness_bucket(double lateness) noexcept nogil:
    """``aiowheel._lateness.lateness_bucket``: how many bounds are below ``lateness``."""
    cdef Py_ssize_t position = 0
    if _LATENESS_BOUNDS[position + 15] < lateness:
        position += 16
    if _LATENESS_BOUNDS[position + 7] < lateness:
        position += 8
    if _LATENESS_BOUNDS[position + 3] < lateness:
        position += 4
    if _LATENESS_BOUNDS[position + 1] < lateness:
        position += 2
    if _LATENESS_BOUNDS[position] < lateness:
        position += 1
    return position


# Whether handles share context snapshots (see the module docstring; trick 3 of _ccpython.pxd).
cdef bint _SHARE_SNAPSHOTS = _context_vars_readable()


cdef inline int _check_callback_fast(object callback, str method) except -1:
    """``check_callback`` with the common cases -- a plain function, a method of one -- in C."""
    cdef int flags = aw_function_flags(<PyObject *>callback)
    cdef PyObject *function
    if flags < 0:
        function = aw_method_function(callback)
        if function is not NULL:
            flags = aw_function_flags(function)
    if flags < 0:
        check_callback(callback, method)
    elif flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE):
        raise TypeError(f"coroutines cannot be used with {method}()")
    return 0


cdef class TimerHandle(Entry):
    """A callback scheduled on a Timer, as returned by ``call_later``/``call_at``.

    Mirrors :class:`asyncio.TimerHandle`: ``when()``, ``cancel()``, ``cancelled()``. The handle is
    itself the wheel entry (its ``payload`` is the callback), so a pending timer costs one object.
    Once the callback has run or been cancelled the handle holds nothing but its deadline: the
    callback, its arguments and its context are released. It is its timer's one handle: copying
    or pickling it raises TypeError.
    """

    # The fields, with the invariant each keeps, are declared in _ctimercore.pxd.

    def __init__(self, when, callback, args, timer, context):
        _init_entry(self, when, callback)
        self._arguments = args
        self._context = PyContext_CopyCurrent() if context is None else context
        self._timer = timer

    @property
    def _args(self):
        """The callback's arguments, a tuple; () once the handle ran or was cancelled."""
        return (self._arguments,) if self.c_flags & _ONE_ARG else self._arguments

    @property
    def _cancelled(self):
        """True if ``cancel()`` was called (asyncio's field)."""
        return _is_cancelled(self)

    @_cancelled.setter
    def _cancelled(self, bint value):
        _set_cancelled(self, value)

    def when(self):
        """The time (in the loop's clock) the callback is scheduled for."""
        return _deadline(self)

    def cancel(self):
        """Cancel the callback: it will not run. At once, the timer leaves the wheel and the
        callback and its arguments are released. Cancelling twice or after it ran does nothing
        more than mark the handle cancelled, as asyncio does."""
        if self.c_flags & _CANCELLED:
            return
        self.c_flags |= _CANCELLED
        if self._timer is not None:
            self._timer._forget(self)

    def cancelled(self):
        """True if ``cancel()`` was called."""
        return _is_cancelled(self)

    def __reduce_ex__(self, protocol):
        """Refused: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise TypeError (see
        :func:`aiowheel._checks.not_copyable`), pending, run or cancelled alike."""
        raise not_copyable(type(self).__name__)

    def __repr__(self):
        state = "cancelled" if self.c_flags & _CANCELLED else "pending" if _pending(self) else "done"
        return (
            f"<{type(self).__name__} when={_deadline(self)!r} {state} "
            f"{_get(self, _OFF_PAYLOAD, 'payload')!r}>"
        )


cdef extern from *:
    """
    #define aw_timer_handle_offsets(h, out) ( \
        (out)[0] = AW_FIELD_OFFSET(h, _arguments), \
        (out)[1] = AW_FIELD_OFFSET(h, _context), \
        (out)[2] = AW_FIELD_OFFSET(h, _timer))
    """
    void aw_timer_handle_offsets(TimerHandle handle, Py_ssize_t *out)


cdef int _drop_gc() except -1:
    """Take GC support away from TimerHandle (see the module docstring; a no-op in the CPython
    fallback build), telling the deallocator which fields hold references."""
    cdef TimerHandle probe = TimerHandle.__new__(TimerHandle)
    cdef Py_ssize_t offsets[3]
    aw_timer_handle_offsets(probe, offsets)
    del probe  # freed by Cython's deallocator while the type still has GC support
    _drop_entry_gc(TimerHandle, offsets, 3)
    return 0

_drop_gc()


cdef inline void _release_handle(TimerHandle handle) noexcept:
    handle._arguments = ()
    handle.c_flags &= ~(<unsigned int>(_ONE_ARG | _COPY_CONTEXT))
    handle._context = None
    handle._timer = None
    _set(handle, _OFF_PAYLOAD, None)  # may run the callback's finaliser: last


cdef class TimerCore:
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

    # The fields, with the invariant each keeps, are declared in _ctimercore.pxd.

    def __init__(self, tick, wheel_size, max_pending):
        cdef Py_ssize_t i
        self._max_pending = max_pending
        # Validates tick and wheel_size now: a bad argument is a bug at the call site. Replaced
        # by a wheel starting at the loop's time by start().
        self._wheel = HierarchicalWheel(tick, wheel_size)
        self.time = not_running
        self.running = False
        self.closed = False
        self._arm = _not_started
        self._report = _not_started
        self._armed_at = math.inf
        self._cancelled_count = 0
        self._max_lateness = 0.0
        self._lateness_sum = 0.0
        for i in range(_BUCKETS):
            self._lateness[i] = 0

    @property
    def tick(self):
        """The wheel's tick, as it checked and converted it."""
        return self._wheel.tick

    @property
    def wheel_size(self):
        """Slots per wheel level."""
        return self._wheel.wheel_size

    def start(self, clock, arm, report):
        """Start filing: ``clock`` is the loop's clock (the wheel starts at its current time),
        ``arm(when)`` wakes the driver at ``when`` (None: never), ``report(callback, args,
        exc, handle)`` takes a callback's error. Once, before anything is scheduled."""
        self._wheel = HierarchicalWheel(self._wheel.tick, self._wheel.wheel_size, start=clock())
        self.time = clock
        self._arm = arm
        self._report = report
        self.running = True

    def call_later(self, delay, callback, *args, context=None):
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
            self._raise_not_running()
        if delay is None:
            raise TypeError(DELAY_NONE)
        when = _deadline_after(self.time(), delay)
        _check_callback_fast(callback, "call_later")
        return self._schedule(when, callback, args, context)

    def call_at(self, when, callback, *args, context=None):
        """Run ``callback(*args)`` at loop time ``when``; like ``loop.call_at``.

        ``when`` is any real number; one that is not an int or a float is rounded up to a float
        (``handle.when()``). Checks and errors as for :meth:`call_later`.
        """
        if not self.running:
            self._raise_not_running()
        if when is None:
            raise TypeError(WHEN_NONE)
        deadline = _checked_deadline(when, "when")
        _check_callback_fast(callback, "call_at")
        return self._schedule(deadline, callback, args, context)

    def refile_at(self, when, callback, *args, context=None):
        """``call_at`` for the feature layers' own bookkeeping, which ``max_pending`` never
        refuses (see :meth:`aiowheel.Timer.refile_at`). RuntimeError if not running."""
        if not self.running:
            self._raise_not_running()
        return self._schedule(_checked_deadline(when, "when"), callback, args, context, False)

    def __len__(self):
        """Timers and jobs pending in the wheel."""
        return self._wheel._len

    cdef TimerHandle _schedule(
        self, object when, object callback, tuple args, object context, bint limited=True
    ):
        cdef TimerHandle handle
        if limited:
            self._check_limit()
        handle = TimerHandle.__new__(TimerHandle)  # untracked: see the module docstring
        _init_entry(handle, when, callback)
        if PyTuple_GET_SIZE(args) == 1:
            handle._arguments = <object>PyTuple_GET_ITEM(args, 0)
            handle.c_flags |= _ONE_ARG
        else:
            handle._arguments = args
        if context is None:
            handle._context = self._current_snapshot()
            handle.c_flags |= _COPY_CONTEXT
        else:
            handle._context = context
        handle._timer = self
        self._file(handle)
        return handle

    cdef object _current_snapshot(self):
        cdef object current = PyContext_CopyCurrent()
        if not _SHARE_SNAPSHOTS:
            return current
        if self._snapshot is not None and aw_context_vars(self._snapshot) == aw_context_vars(current):
            return self._snapshot
        self._snapshot = current
        return current

    cdef int _check_limit(self) except -1:
        limit = self._max_pending
        if limit is not None and self._wheel._len >= limit:
            raise pending_limit(self._wheel._len, limit)
        return 0

    cdef int _file(self, TimerHandle handle) except -1:
        """Put ``handle`` in the wheel, and arm the driver if it is now due earlier (the first
        rule of arming, in the class docstring)."""
        self._wheel.add_entry(handle)
        if handle.c_flags & _DEADLINE_KIND <= _DEADLINE_INT:  # a float or a small int: exact
            if handle.c_deadline < self._armed_at:
                self._arm_earlier()
        elif _deadline(handle) < self._armed_at:
            self._arm_earlier()
        return 0

    cdef int _arm_earlier(self) except -1:
        next_deadline = self._wheel.next_deadline()
        if next_deadline is not None and next_deadline < self._armed_at:
            self._armed_at = next_deadline
            self._arm(next_deadline)
        return 0

    cdef int _raise_not_running(self) except -1:
        if self.closed:
            raise RuntimeError(CLOSED)
        raise RuntimeError(NOT_RUNNING)

    cpdef _forget(self, TimerHandle handle):
        """A handle was cancelled before it ran: take it out of the wheel (unless an earlier
        callback of its due batch cancelled it, when it is out already) and release what it
        holds."""
        self._wheel._unfile(handle)
        self._cancelled_count += 1
        _release_handle(handle)
        if not self._wheel._len:
            self._snapshot = None

    def close(self):
        """Stop: cancel every pending timer and return ``(callback, args)`` of each, in deadline
        order. Idempotent (later calls return ``[]``); afterwards scheduling raises
        RuntimeError.

        Pending are the wheel's entries and, when a callback of the driver's pass closes the
        Timer (a coroutine started eagerly can, by ``await timer.aclose()``), the rest of the
        batch that pass took out of the wheel: none of it runs on the closed Timer.
        """
        cdef list handles = []
        cdef list cancelled = []
        cdef TimerHandle handle
        self.closed = True
        if not self.running:
            return cancelled
        self.running = False
        if self._batch:
            for entry in self._batch:
                if (<TimerHandle>entry)._timer is not None:
                    handles.append(entry)
        handles += self._wheel.remove_all()
        self._snapshot = None
        for entry in handles:
            handle = <TimerHandle?>entry
            self._cancelled_count += 1
            handle.c_flags |= _CANCELLED
            cancelled.append((_get(handle, _OFF_PAYLOAD, "payload"), handle._args))
            _release_handle(handle)
        return cancelled

    def rearm(self):
        """Arm the driver for the wheel's next deadline (None if nothing is pending), whatever
        was armed: the second rule of arming, after a pass (or once an interrupt that left it
        has gone). Nothing once closed."""
        if self.running:
            next_deadline = self._wheel.next_deadline()
            self._armed_at = math.inf if next_deadline is None else next_deadline
            self._arm(next_deadline)

    def counters(self):
        """``(started, lateness_sum, max_lateness, cancelled)`` so far: the callbacks started
        per bucket of :mod:`aiowheel._lateness`, the sum of their lateness and the largest, in
        seconds, and the timers cancelled before they ran."""
        return (
            tuple([self._lateness[i] for i in range(_BUCKETS)]),
            self._lateness_sum,
            self._max_lateness,
            self._cancelled_count,
        )

    def pending_per_level(self):
        """Timers pending on each level of the wheel, level 0 first (see
        :meth:`aiowheel.HierarchicalWheel.pending_per_level`)."""
        return self._wheel.pending_per_level()

    def run_due(self):
        """The driver's pass: run every callback due at the clock's current time, in (deadline,
        scheduling order), and count each one's lateness (see :mod:`aiowheel._lateness`).

        From here until :meth:`rearm` the driver counts as dispatching: filing arms nothing.
        An interrupt (or an error of the clock) leaves with the rest of the batch back in the
        wheel, due at once."""
        cdef list due
        cdef Py_ssize_t n, index = 0, i
        cdef TimerHandle handle
        cdef object callback, args, context
        cdef bint one_arg
        cdef double now_seconds, lateness
        self._armed_at = -math.inf
        now = self.time()
        due = self._wheel.advance_entries(now)
        n = PyList_GET_SIZE(due)
        if not n:
            return
        now_seconds = now
        self._batch = due
        try:
            for i in range(n):
                if i and i % _STRIDE == 0:
                    # Before the cancelled check (every 16th entry, cancelled or not) and before
                    # index moves on (if the clock raises, this entry is re-filed below).
                    now_seconds = self.time()
                index = i
                handle = <TimerHandle?>due[i]
                if handle.c_flags & _CANCELLED:  # by an earlier callback of this batch
                    continue
                # Counted per callback, so that stats() in a callback adds up: fired is the
                # histogram's count.
                lateness = now_seconds - _deadline_double(handle)
                self._lateness[_lateness_bucket(lateness)] += 1
                self._lateness_sum += lateness
                if lateness > self._max_lateness:
                    self._max_lateness = lateness
                callback = _get(handle, _OFF_PAYLOAD, "payload")
                args = handle._arguments
                one_arg = handle.c_flags & _ONE_ARG
                context = handle._context
                if handle.c_flags & _COPY_CONTEXT:
                    context = PyContext_Copy(context)
                _release_handle(handle)
                try:
                    _run_in(context, callback, args, one_arg)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # as asyncio's Handle._run
                    self._report(callback, (args,) if one_arg else args, exc, handle)
        except BaseException:
            # SystemExit or KeyboardInterrupt from a callback (or an error of the clock): the
            # rest of the batch stays scheduled (due at once) instead of being lost.
            for i in range(index + 1, n):
                handle = <TimerHandle>due[i]
                if not handle.c_flags & _CANCELLED:
                    self._wheel.add_entry(handle)
            raise
        finally:
            self._snapshot = None
            self._batch = None


def _not_started(*args):
    """``arm`` and ``report`` before :meth:`TimerCore.start` (never called: nothing is filed)."""
    raise RuntimeError(NOT_RUNNING)


