# What the compiled Timer core (aiowheel/_ctimercore.pyx) exports to the compiled parts above
# it, which cimport it: the layout of TimerHandle and TimerCore (their fields, with the invariant
# each keeps, and their C methods). The idle core reads a TimerCore's clock (_time) and state
# (_closed) through it; everything else it asks through the Timer's Python methods.

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


cdef class TimerHandle(Entry):
    # The callback's arguments: their tuple, or the one argument itself if _one_arg (see the
    # module docstring); () once released. Read as a tuple through _args.
    cdef object _arguments
    cdef public object _context
    # The Timer while the handle is pending; None once it ran, was cancelled or the Timer closed.
    cdef public TimerCore _timer
    cdef public bint _cancelled
    # Flags as bytes: with _cancelled they fill one word. True if _context is a shared snapshot
    # (the callback then runs in a copy of it); true if _arguments is the one argument itself.
    cdef unsigned char _copy_context
    cdef unsigned char _one_arg


cdef class TimerCore:
    cdef public object _max_pending
    cdef public HierarchicalWheel _wheel
    cdef public object _time
    cdef public object _backend
    cdef public bint _running
    cdef public bint _closed
    # When the driver is armed to wake; -inf while it is dispatching (it re-arms after).
    cdef public double _armed_at
    cdef public object _fired
    cdef public object _cancelled_count
    cdef public object _early
    cdef public double _max_lateness
    # Callbacks started, by lateness: index i counts the bucket of _lateness_bucket; they add
    # up to _fired. And the sum of their lateness, in seconds.
    cdef Py_ssize_t _lateness[_BUCKETS]
    cdef public double _lateness_sum
    # The context snapshot new handles share while the current context's variables stay the
    # same (None: none yet). Dropped after each pass and when the wheel empties, so that it
    # keeps no context's values alive longer than some pending timer does.
    cdef object _snapshot
    # The due batch _run_due is dispatching, out of the wheel already; None between passes.
    # Its handles not run yet are pending still (their _timer is set): _cancel_all cancels
    # them too, should a callback of the batch close the Timer.
    cdef list _batch

    cdef TimerHandle _schedule(
        self, object when, object callback, tuple args, object context, bint limited=*
    )
    cdef object _current_snapshot(self)
    cdef int _check_limit(self) except -1
    cdef int _file(self, TimerHandle handle) except -1
    cdef int _raise_not_running(self) except -1
    cpdef _forget(self, TimerHandle handle)
    cdef int _rearm(self) except -1
