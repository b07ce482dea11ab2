# What the compiled idle core (aiowheel/_cidlecore.pyx) declares: the layout of IdleCore and of
# its deadlines (their fields, with the invariant each keeps, and their C methods). No compiled
# part cimports it today; idle expiry above uses its Python API.

cimport cython


@cython.final
cdef class _IdleDeadline:
    # (q - 1) * tick and q * tick, as computed (floats, or ints for an int tick).
    cdef object after
    cdef object when
    # after and when as doubles; valid, and equal to them, iff `exact` (see _exact_double).
    cdef double after_d
    cdef double when_d
    cdef bint exact
    # Keys filed here, each filed in exactly one deadline at a time, at or before the deadline
    # of its current period.
    cdef list filed
    # The wheel entry that fires at `when`; set while `filed` is non-empty.
    cdef object handle


cdef class IdleCore:
    # The Timer (any TimerHost): everything the core asks of it goes through its public names.
    cdef object _timer
    # The host's clock, kept from the first time it gave a time on (a TimerHost's ``time``
    # does not change from then on); None until then.
    cdef object _clock
    cdef object _timeout
    cdef object _on_expire
    # Each key's current deadline, or _UNTRACKED while an untracked key is still filed.
    # Every key here is filed exactly once; a key filed nowhere is not here.
    cdef dict _deadlines
    # The latest deadline touches went to; w = now + timeout never decreases.
    cdef _IdleDeadline _current
    # Deadlines with a wheel entry (a non-empty `filed`), for close().
    cdef set _pending
    # Tracked keys: those in _deadlines that are not _UNTRACKED.
    cdef Py_ssize_t _len
    cdef bint _closed
    # Where the driver runs on_expire; one copy, not one per wheel entry.
    cdef object _context
    # _timeout as a double; True if a float plus _timeout is that float plus _timeout_d (a
    # float timeout, or an int Python converts to a double without overflow).
    cdef double _timeout_d
    cdef bint _timeout_exact

    cdef int _touch_objects(self, object key, object now) except -1
    cdef object _now(self)
    cdef object _read_clock(self)
    cdef _IdleDeadline _next_deadline(self, object w)
    cdef int _touch_late(self, object key, _IdleDeadline current, object now) except -1
    cdef int _expire(self, object key) except -1
    cdef int _file(self, object key, _IdleDeadline deadline, object call_at) except -1
