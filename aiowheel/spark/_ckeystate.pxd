# What the compiled rule (aiowheel/spark/_ckeystate.pyx) declares for the compiled visit
# (aiowheel/spark/_cvisit.pyx), which cimports it: IdleRule's layout, and a key's state as a C
# record, which IdleRule.visit_record changes without a Python object per state or event.

cimport cython

# Events a record holds at most: its kept ones and those that arrived, together. A key with more
# goes through IdleRule.visit_stored.
cdef enum:
    RECORD_EVENTS = 16


# An event (aiowheel.spark._keystate.Event) as C values. `id` is the event_id's UTF-8 bytes
# (pickle's, "surrogatepass"; two ids are equal iff their bytes are), borrowed from whoever
# holds them (a page's pickles, or the str): NULL for None.
cdef struct RecordEvent:
    double ts
    long long rank
    const char *id
    Py_ssize_t id_size


# A StoredKey as C values: (last_seen if tracked else None, fired, applied, events, wake). A key
# without a state is all zeros.
cdef struct Record:
    bint tracked
    double last_seen
    long long fired
    Py_ssize_t applied
    Py_ssize_t count
    RecordEvent events[RECORD_EVENTS]
    long long wake


# What IdleRule.visit_record returns.
cdef enum:
    RECORD_GONE = 0  # the key's state can go (visit_stored's None)
    RECORD_KEPT = 1  # the record is the state to keep
    RECORD_UNFIT = 2  # C values cannot give visit_stored's result: ask it (nothing was emitted)


@cython.final
cdef class IdleRule:
    cdef readonly tuple timeouts
    cdef readonly object tick
    cdef readonly object delay
    cdef double _tick
    cdef double _delay
    cdef double *_timeouts
    cdef Py_ssize_t _count

    cdef int visit_record(
        self,
        Record *record,
        const RecordEvent *arrived,
        Py_ssize_t count,
        double now,
        list expiries,
    ) except -1
    cdef double _deadline(self, double last_seen, Py_ssize_t fired) except? -1.0
    cdef Py_ssize_t _expire(
        self, object last_seen, double seen_at, Py_ssize_t fired, double at, list out
    ) except -1
    cdef object _wake(
        self,
        object last_seen,
        double seen_at,
        Py_ssize_t fired,
        list pending,
        list remembered,
        set seen,
    )
