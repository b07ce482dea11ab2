# What the compiled Timer core (aiowheel/_ctimercore.pyx) declares: the layout of TimerHandle and
# TimerCore (their fields, with the invariant each keeps, and their C methods). No compiled part
# above cimports it today: the Timer holds a core through its Python methods, and the idle core
# talks to its Timer through the host interface (aiowheel.TimerHost).

from aiowheel._cwheel cimport Entry, HierarchicalWheel

# The lateness histogram's buckets (see aiowheel/_lateness.py, their one spec), in C: the bounds
# in a fixed array padded with infinities to 31, where a branchless binary search of five steps
# finds bisect_left's index -- no log() per callback. The sizes and the stride are C constants
# (checked against the spec at import), so that `i % _STRIDE` is a mask.
cdef enum:
    _BUCKETS = 20
    _BOUNDS = _BUCKETS - 1
    _PADDED = 31
    _STRIDE = 16


# The layout, 88 bytes, 11 words (64-bit CPython; no GC header, see the module docstring):
# the object header (2); the entry (6): the deadline as a C double, payload (the callback),
# _bucket, _index and c_flags in one word, _ticks, _seq; the handle's own (3) below.
cdef class TimerHandle(Entry):
    # The callback's arguments: their tuple, or the one argument itself if _ONE_ARG (see the
    # module docstring); () once released. Read as a tuple through _args.
    cdef object _arguments
    cdef public object _context
    # The Timer while the handle is pending; None once it ran, was cancelled or the Timer closed.
    cdef public TimerCore _timer


cdef class TimerCore:
    cdef object _max_pending
    cdef HierarchicalWheel _wheel
    # Read-only attributes of the contract: the clock start() gave (until then a function
    # raising RuntimeError); True from start() to close(); True once close() was called.
    cdef readonly object time
    cdef readonly bint running
    cdef readonly bint closed
    # The Timer's hooks, from start(): arm(when) wakes the driver, report(...) takes an error.
    cdef object _arm
    cdef object _report
    # When the driver is armed to wake; -inf while it is dispatching (run_due until rearm).
    cdef double _armed_at
    cdef object _cancelled_count
    cdef double _max_lateness
    # Callbacks started, by lateness: index i counts the bucket of _lateness_bucket. And the
    # sum of their lateness, in seconds.
    cdef Py_ssize_t _lateness[_BUCKETS]
    cdef double _lateness_sum
    # The context snapshot new handles share while the current context's variables stay the
    # same (None: none yet). Dropped after each pass and when the wheel empties, so that it
    # keeps no context's values alive longer than some pending timer does.
    cdef object _snapshot
    # The due batch run_due is dispatching, out of the wheel already; None between passes.
    # Its handles not run yet are pending still (their _timer is set): close() cancels them
    # too, should a callback of the batch close the Timer.
    cdef list _batch

    cdef TimerHandle _schedule(
        self, object when, object callback, tuple args, object context, bint limited=*
    )
    cdef object _current_snapshot(self)
    cdef int _check_limit(self) except -1
    cdef int _file(self, TimerHandle handle) except -1
    cdef int _arm_earlier(self) except -1
    cdef int _raise_not_running(self) except -1
    cpdef _forget(self, TimerHandle handle)
