# What the compiled loop core (aiowheel/_cloopcore.pyx) declares: the layout of its LoopTimerHandle
# and LoopCore (their fields, with the invariant each keeps, and their C methods). No compiled
# part cimports it today; the loop layer above uses its Python API.

from libc.stdint cimport int64_t

from aiowheel._cwheel cimport Entry, HierarchicalWheel


cdef class LoopTimerHandle(Entry):
    # The time asked for (handle.when()); the entry's deadline is the same time as a float.
    cdef public object _when
    cdef public object _args
    cdef public object _context
    cdef public object _loop
    cdef public bint _cancelled
    cdef public object _source_traceback
    cdef public object _repr
    # The loop's core while the timer may still be on the wheel; None once cancelled.
    cdef LoopCore _core
    # Scheduling order among all the core's timers: ties between equal deadlines by it.
    cdef readonly int64_t _order
    # True if _context is the core's shared snapshot: the callback runs in a copy of it.
    cdef bint _copy_context
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
    # A heap of (deadline, order, handle): see the pure twin.
    cdef readonly list near
    cdef readonly int64_t order
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
        self, double now, object when, object deadline, bint on_wheel, object callback,
        tuple args, object context, int caller_frame,
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
