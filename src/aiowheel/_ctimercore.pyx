# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel._timercore`: the Timer's scheduling and dispatch, in
Cython, over the compiled wheel (which it cimports: ``_cwheel.pxd``).

:mod:`aiowheel._timercore` is the specification: same API, behaviour and error messages (from
:mod:`aiowheel._checks`); the whole test suite runs on both (see :mod:`aiowheel._impl`). What
this part exports to the compiled parts above it (the idle core) is declared in
``_ctimercore.pxd``.

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
  objects its pending callbacks reference alive until the interpreter exits. Python subclasses
  (the Timer's Job) are heap types, which CPython always gives GC support: they are tracked and
  collected as before, through this type's traverse function.
* A callback with exactly one argument keeps that argument, not the tuple of it (``_one_arg``):
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
from cpython.object cimport PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from aiowheel._ccontext cimport _run_in
from aiowheel._ccpython cimport (
    AW_CPYTHON_FALLBACK,
    CO_COROUTINE,
    CO_ITERABLE_COROUTINE,
    _context_vars_readable,
    aw_context_vars,
    aw_drop_gc,
    aw_function_flags,
    aw_method_function,
)
from aiowheel._cwheel cimport (
    _OFF_BUCKET,
    _OFF_DEADLINE,
    _OFF_PAYLOAD,
    Entry,
    HierarchicalWheel,
    _checked_deadline,
    _deadline_after,
    _field,
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


cdef inline double _deadline_seconds(Entry entry) except? -1.0:
    """An entry's deadline as a double (a checked deadline: a float or an int within float
    range), as Python converts it in ``now - deadline``."""
    cdef PyObject *deadline = _field(entry, _OFF_DEADLINE)[0]
    if deadline is not NULL and PyFloat_CheckExact(<object>deadline):
        return PyFloat_AS_DOUBLE(<object>deadline)
    return _get(entry, _OFF_DEADLINE, "deadline")


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


cdef inline object _deadline(Entry entry):
    return _get(entry, _OFF_DEADLINE, "deadline")


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
        self._cancelled = False
        self._copy_context = False
        self._one_arg = False

    @property
    def _args(self):
        """The callback's arguments, a tuple; () once the handle ran or was cancelled."""
        return (self._arguments,) if self._one_arg else self._arguments

    def when(self):
        """The time (in the loop's clock) the callback is scheduled for."""
        return _deadline(self)

    def cancel(self):
        """Cancel the callback: it will not run. At once, the timer leaves the wheel and the
        callback and its arguments are released. Cancelling twice or after it ran does nothing
        more than mark the handle cancelled, as asyncio does."""
        if self._cancelled:
            return
        self._cancelled = True
        if self._timer is not None:
            self._timer._forget(self)

    def cancelled(self):
        """True if ``cancel()`` was called."""
        return self._cancelled

    def __reduce_ex__(self, protocol):
        """Refused: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise TypeError (see
        :func:`aiowheel._checks.not_copyable`), pending, run or cancelled alike."""
        raise not_copyable(type(self).__name__)

    def __repr__(self):
        state = "cancelled" if self._cancelled else "pending" if _pending(self) else "done"
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
    cdef Py_ssize_t offsets[6]
    offsets[0], offsets[1], offsets[2] = _OFF_DEADLINE, _OFF_PAYLOAD, _OFF_BUCKET
    aw_timer_handle_offsets(probe, &offsets[3])
    del probe  # freed by Cython's deallocator while the type still has GC support
    aw_drop_gc(<PyTypeObject *>TimerHandle, offsets, 6)
    return 0

_drop_gc()


cdef inline void _release_handle(TimerHandle handle) noexcept:
    handle._arguments = ()
    handle._one_arg = False
    handle._context = None
    handle._timer = None
    _set(handle, _OFF_PAYLOAD, None)  # may run the callback's finaliser: last


cdef class TimerCore:
    """The wheel, the handles and the dispatch of one Timer; see :class:`aiowheel.Timer`.

    The Timer sets ``_wheel``, ``_time``, ``_backend`` and ``_running`` when it starts, and
    implements ``_report`` (where a callback's error goes).
    """

    # The fields, with the invariant each keeps, are declared in _ctimercore.pxd.

    def __init__(self, tick, wheel_size, max_pending):
        cdef Py_ssize_t i
        self._max_pending = max_pending
        # Validates tick and wheel_size now: a bad argument is a bug at the call site. Replaced
        # by a wheel starting at the loop's time when the Timer starts.
        self._wheel = HierarchicalWheel(tick, wheel_size)
        self._time = not_running
        self._running = False
        self._closed = False
        self._armed_at = math.inf
        self._fired = 0
        self._cancelled_count = 0
        self._early = 0
        self._max_lateness = 0.0
        self._lateness_sum = 0.0
        for i in range(_BUCKETS):
            self._lateness[i] = 0

    def call_later(self, delay, callback, *args, context=None):
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
            self._raise_not_running()
        if delay is None:
            raise TypeError(DELAY_NONE)
        when = _deadline_after(self._time(), delay)
        _check_callback_fast(callback, "call_later")
        return self._schedule(when, callback, args, context)

    def call_at(self, when, callback, *args, context=None):
        """Run ``callback(*args)`` at loop time ``when``; like ``loop.call_at``.

        ``when`` is any real number; one that is not an int or a float is rounded up to a float
        (``handle.when()``). Checks and errors as for :meth:`call_later`.
        """
        if not self._running:
            self._raise_not_running()
        if when is None:
            raise TypeError(WHEN_NONE)
        deadline = _checked_deadline(when, "when")
        _check_callback_fast(callback, "call_at")
        return self._schedule(deadline, callback, args, context)

    def _refile_at(self, when, callback, *args, context=None):
        """``call_at`` for the library's own bookkeeping, which ``max_pending`` never refuses.

        For filing again work the Timer already accepted, when the entry standing for it fires
        early: an idle key touched since its entry was filed, a Timeout whose deadline moved
        later (:mod:`aiowheel.idle`, :mod:`aiowheel.timeouts`). The limit refuses new work at
        the call that asks for it; refused here, inside the driver's pass, the work would be
        lost. RuntimeError if the Timer is not running.
        """
        if not self._running:
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
            handle._one_arg = True
        else:
            handle._arguments = args
        if context is None:
            handle._context = self._current_snapshot()
            handle._copy_context = True
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
        cdef object deadline
        self._wheel.add_entry(handle)
        deadline = _deadline(handle)
        if PyFloat_CheckExact(deadline):
            if PyFloat_AS_DOUBLE(deadline) < self._armed_at:
                self._rearm()
        elif deadline < self._armed_at:
            self._rearm()
        return 0

    def _add(self, handle):
        """File ``handle`` (made by the Timer: a Job) on the wheel."""
        self._check_limit()
        self._file(handle)
        return handle

    def _check_running(self):
        self._raise_not_running()

    cdef int _raise_not_running(self) except -1:
        if self._closed:
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

    def _cancel_all(self):
        """Cancel every pending timer, as the Timer closes; return them in deadline order.

        Pending are the wheel's entries and, when a callback of the driver's pass closes the
        Timer (a coroutine started eagerly can, by ``await timer.aclose()``), the rest of the
        batch that pass took out of the wheel: none of it runs on the closed Timer.
        """
        cdef list handles = []
        cdef TimerHandle handle
        if self._batch:
            for entry in self._batch:
                if (<TimerHandle>entry)._timer is not None:
                    handles.append(entry)
        handles += self._wheel.remove_all()
        self._snapshot = None
        for entry in handles:
            handle = <TimerHandle?>entry
            self._cancelled_count += 1
            handle._cancelled = True
            _release_handle(handle)
        return handles

    @staticmethod
    def _release(TimerHandle handle):
        _release_handle(handle)

    cdef int _rearm(self) except -1:
        next_deadline = self._wheel.next_deadline()
        if next_deadline is not None and next_deadline < self._armed_at:
            self._armed_at = next_deadline
            self._backend.arm(next_deadline)
        return 0

    def _lateness_counts(self):
        """Callbacks started so far, per bucket of :mod:`aiowheel._lateness`."""
        return tuple([self._lateness[i] for i in range(_BUCKETS)])

    def _run_due(self):
        """Run every callback due at the clock's current time, in (deadline, scheduling order),
        and count each one's lateness (see :mod:`aiowheel._lateness`)."""
        cdef list due
        cdef Py_ssize_t n, index = 0, skipped = 0, i
        cdef TimerHandle handle
        cdef object callback, args, context
        cdef bint one_arg
        cdef double now_seconds, lateness
        now = self._time()
        due = self._wheel.advance_entries(now)
        n = PyList_GET_SIZE(due)
        if not n:
            return
        # The batch is in deadline order: its last entry is the latest.
        if _deadline(<Entry>PyList_GET_ITEM(due, n - 1)) > now:  # impossible; counted as proof
            self._early += sum(1 for entry in due if _deadline(<Entry>entry) > now)
        now_seconds = now
        self._batch = due
        try:
            for i in range(n):
                if i and i % _STRIDE == 0:
                    # Before the cancelled check (every 16th entry, cancelled or not) and before
                    # index moves on (if the clock raises, this entry is re-filed below).
                    now_seconds = self._time()
                index = i
                handle = <TimerHandle?>due[i]
                if handle._cancelled:  # by an earlier callback of this batch
                    skipped += 1
                    continue
                # Counted per callback, so that stats() in a callback adds up: fired is the
                # histogram's count.
                lateness = now_seconds - _deadline_seconds(handle)
                self._lateness[_lateness_bucket(lateness)] += 1
                self._lateness_sum += lateness
                if lateness > self._max_lateness:
                    self._max_lateness = lateness
                callback = _get(handle, _OFF_PAYLOAD, "payload")
                args = handle._arguments
                one_arg = handle._one_arg
                context = handle._context
                if handle._copy_context:
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
                if not handle._cancelled:
                    self._wheel.add_entry(handle)
            raise
        finally:
            self._fired += index + 1 - skipped
            self._snapshot = None
            self._batch = None

