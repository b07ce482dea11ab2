# What the compiled loop core (aiowheel/_cloopcore.pyx) declares: the layout of its LoopTimerHandle
# and LoopCore (their fields, with the invariant each keeps, and their C methods). No compiled
# part cimports it today; the loop layer above uses its Python API.

cimport cython

from aiowheel._chandle cimport _FIRST_CORE_FLAG
from aiowheel._cwheel cimport Entry, HierarchicalWheel

# A handle's own flag, beside those every compiled handle has (_chandle.pxd): _arguments is the
# handle's _Extras.
cdef enum:
    _EXTRAS = _FIRST_CORE_FLAG


# What few handles need, in an object of its own, made only for them: a handle made in debug
# mode (its traceback, its repr kept once it ran or was cancelled), or by call_at with a `when`
# that is not an int or a float (rounded up to a float deadline: when() is the number given).
@cython.final
cdef class _Extras:
    # The arguments' tuple while the handle holds them; None once released.
    cdef object args
    # when(), if it is not the entry's deadline; else None.
    cdef object when
    cdef object source_traceback
    cdef object repr


# The layout, 96 bytes, 12 words (64-bit CPython; no GC header, see the module docstring): the
# object header (2); the entry (6): the deadline as a C double, payload (the callback),
# _bucket, _index and c_flags in one word (the flags above), _ticks, _seq (the scheduling
# order, which ties equal deadlines); the handle's own (4) below. asyncio's fields are
# properties over them: _when is the deadline (or _Extras.when), _callback the payload, _args
# the arguments as a tuple, _loop the core's loop while pending, _cancelled a flag,
# _source_traceback and _repr the _Extras' or None.
cdef class LoopTimerHandle(Entry):
    # The callback's arguments: the one argument itself if _ONE_ARG, the handle's _Extras if
    # _EXTRAS (which holds their tuple), else their tuple; None once released.
    cdef object _arguments
    cdef public object _context
    # The loop's core while the timer may still be on the wheel; None once it ran, was cancelled
    # or its loop closed.
    cdef LoopCore _core
    cdef object __weakref__


cdef class LoopCore:
    cdef readonly object loop
    # What the loop hands its core (see the pure twin's docstring): the only ways back to it.
    cdef readonly object arm
    cdef readonly object check_in_debug
    cdef readonly object call_on_base
    cdef readonly object clock
    # loop.time when the core was made (bound): see _now.
    cdef readonly object loop_time
    # True while loop.time was last found to be loop_time and nothing may have changed it since:
    # no write of `time` on the loop (its class's ClockWatch clears it) and the loop's class
    # still has _clock_version as its version tag (see _ccpython.pxd, trick 7). Never true if
    # the loop's class has no ClockWatch of this part, or in the fallback build.
    cdef readonly bint _clock_trusted
    cdef unsigned int _clock_version
    # Whether the loop's class mixes in this part's ClockWatch.
    cdef bint _watched
    cdef readonly HierarchicalWheel wheel
    # A heap of (deadline, order, handle): see the pure twin. The orders are the wheel's add
    # orders (a near timer takes one without being filed, _take_add_order), so that a timer
    # moved from the wheel keeps its place among equal deadlines.
    cdef readonly list near
    # The context snapshot handed out last (see the module docstring); None after each pass.
    cdef object _snapshot
    cdef readonly bint closed
    # loop.get_debug(), kept by the loop's set_debug: read on every schedule and cancel.
    cdef public bint debug
    cdef readonly object min_delay
    cdef readonly object far_delay
    cdef readonly object latest_deadline
    # The three above as C doubles, for the routing of float times without boxing.
    cdef double _min_delay
    cdef double _far_delay
    cdef double _latest_deadline
    # The time the driver is armed for: the core's own (it calls arm).
    cdef readonly double driver_when
    cdef public double advanced_to
    # The time the wheel's clock was last moved to: a deadline not after it goes to the near
    # queue (see the pure twin).
    cdef readonly double wheel_reach
    cdef readonly double catch_up_after
    cdef readonly Py_ssize_t wheel_timers
    cdef readonly Py_ssize_t near_timers
    cdef readonly Py_ssize_t cancelled
    cdef readonly Py_ssize_t fired
    cdef readonly Py_ssize_t driver_wakeups

    cdef LoopTimerHandle _schedule(
        self, double now, object when, object deadline, double deadline_value, bint on_wheel,
        object callback, tuple args, object context, int caller_frame,
    )
    cdef object _current_snapshot(self)
    cdef object _now(self, object loop)
    cdef object _now_looked_up(self, object loop)
    cdef int _forget(self, LoopTimerHandle handle) except -1
    cdef int _rearm(self) except -1
    cdef double _next_due(self) except? -1.0
    cdef int _take_near(self, list entries) except -1
    cdef object _on_base(
        self, object when, object delay, object callback, tuple args, object context
    )
