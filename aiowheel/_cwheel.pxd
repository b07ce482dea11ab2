# What the compiled wheel (aiowheel/_cwheel.pyx) exports to the compiled parts above it -- the
# Timer core, the loop core, the idle core -- which cimport it: the layout of Entry and
# HierarchicalWheel (their fields, with the invariant each keeps, and their C methods), the
# access to an entry's descriptor fields, and the C fast paths of the conversions and checks.
#
# A part above creates entries with _init_entry (or _init_entry_at), files one with
# HierarchicalWheel.add_entry, takes one out with HierarchicalWheel._unfile (O(1); it tells
# whether the entry's bucket emptied, as remove_entry does), reads or writes the deadline with
# _deadline, _deadline_double and _set_deadline and the payload with _get and _set, and keeps
# its own flags in Entry.c_flags from _FIRST_SUBCLASS_FLAG up. An entry's other private fields
# (_bucket, _index, _ticks, _seq) stay the wheel's: tests/test_layers.py greps for them. The inline functions here are compiled into each part
# that cimports this file; the others are called through Cython's C-API table, one indirect
# call.

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact, PyFloat_FromDouble
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.math cimport isfinite
from libc.stdint cimport int64_t

from aiowheel._ccpython cimport aw_drop_gc, aw_list_swap_remove


# How a tick is held, which decides the fast path of the conversions.
cdef enum TickKind:
    TICK_FLOAT  # an exact float, finite and > 0
    TICK_INT  # an exact int in [1, 2**53]
    TICK_OTHER  # anything else: the pure code on Python objects


cdef struct _Tick:
    TickKind kind
    double d  # the tick as a double (TICK_FLOAT and TICK_INT)
    int64_t i  # the tick (TICK_INT)


cdef struct _Queued:
    # A queued bucket, ordered like the pure wheel's heap tuples (expiration, level, slot).
    int64_t expiration
    Py_ssize_t level
    Py_ssize_t slot


# What HierarchicalWheel._unfile did: the entry was not pending; it was taken out of a bucket that
# still holds entries (next_deadline unchanged); it was the last entry of its bucket.
cdef enum:
    _NOT_PENDING = 0
    _KEPT = 1
    _EMPTIED = 2


cdef class Entry:
    # The deadline as a C double when it is an exact float (no float object per entry): the
    # deadline's kind, in the low bits of c_flags, says how to read it -- _DEADLINE_FLOAT: this
    # is the deadline; _DEADLINE_INT: an exact int of at most 2**53 in magnitude, this its
    # exact double; _DEADLINE_OBJECT: any other object, kept in the wheel's side table
    # (_OBJECT_DEADLINES, keyed by the entry's address, released with the entry), this its
    # float value or NaN; _DEADLINE_UNSET: deleted (reading it raises AttributeError). Read and
    # written in C only through _deadline, _deadline_double and _set_deadline; Python sees it
    # as ``deadline``, the number stored.
    cdef double c_deadline
    # payload and _bucket: exposed to Python under those names (see "an entry's fields" below),
    # read and written in C only through _get and _set, at _OFF_PAYLOAD and _OFF_BUCKET.
    cdef object c_payload
    # The bucket (a list) this entry sits in, or None before filing and after it fired or was
    # removed. Pending iff _bucket[_index] is this entry.
    cdef object c_bucket
    # The entry's position in _bucket while pending; meaningless otherwise. 32 bits: a bucket
    # holds at most _MAX_BUCKET entries (HierarchicalWheel._file checks it), so that the index
    # and the flags share one word.
    cdef int _index
    # Flags: the two lowest bits are the deadline's kind (_DEADLINE_KIND), the wheel's; the bits
    # from _FIRST_SUBCLASS_FLAG up are a compiled subclass's own (the handles keep their
    # cancelled, shared-context and one-argument flags there). Zero in a new entry.
    cdef unsigned int c_flags
    # The deadline rounded up to whole ticks, ceil_ticks(deadline, tick): the smallest q with
    # q * tick >= deadline. Set when filed; only the wheel reads or writes it.
    cdef int64_t _ticks
    # Add order, below the wheel's _seq; ties between equal deadlines are broken by it.
    cdef int64_t _seq


# The deadline's kinds (see Entry.c_deadline) and the flag bits left to subclasses.
cdef enum:
    _DEADLINE_FLOAT = 0
    _DEADLINE_INT = 1
    _DEADLINE_OBJECT = 2
    _DEADLINE_UNSET = 3
    _DEADLINE_KIND = 3
    _FIRST_SUBCLASS_FLAG = 1 << 8
    # The most entries a bucket (or the due list) holds: Entry._index is a C int.
    _MAX_BUCKET = 2147483647


@cython.final
cdef class _Level:
    # This level's place in the wheel's _levels.
    cdef Py_ssize_t index
    # Ticks per slot: wheel_size ** index; below 2**55 (see the module docstring).
    cdef int64_t width
    # Ticks covered by the whole ring, width * wheel_size, clamped to _SPAN_CAP.
    cdef int64_t span
    # Start of the current slot: level 0's clock rounded down to a multiple of width (every
    # level moves with level 0); never decreases.
    cdef int64_t current
    # wheel_size lists: the entries of each slot, in no particular order. An entry with tick q
    # sits in slot (q // width) % wheel_size at its _index, its bucket expires at
    # q - q % width, strictly after level 0's clock and before current + span.
    cdef list buckets
    # Expiration (ticks) each bucket was last queued with on the heap, or _NOT_QUEUED. A bucket
    # has an item on the heap, once, iff its expiration is not _NOT_QUEUED; a non-empty bucket
    # is always queued (an emptied one may stay queued until next_deadline drops it).
    cdef int64_t *expirations
    # The wheel's wheel_size: the length of buckets and of expirations.
    cdef Py_ssize_t size

    cdef void advance_to(self, int64_t ticks) noexcept
    cdef object expirations_list(self)


cdef class HierarchicalWheel:
    # The tick as an int or the nearest float (any real number is accepted, see _checks).
    cdef readonly object tick
    cdef readonly object wheel_size
    # wheel_size, in C.
    cdef Py_ssize_t _size
    # The tick as the conversions take it (see _tick_of).
    cdef _Tick _tick
    # Levels 0, 1, ...: level n is at index n; created on demand, never destroyed. None until
    # __init__ ran.
    cdef list _levels
    # _levels[0].
    cdef _Level _level0
    # Entries whose tick is at or before level 0's clock: added already due, or cascaded into
    # the current tick. They come out at the next advance; their _bucket is this list.
    cdef list _due
    # Min-heap of queued buckets, ordered as the pure wheel's heapq list of tuples: one item per
    # queued bucket, exactly the buckets whose level.expirations[slot] is not _NOT_QUEUED, with
    # that expiration. _heap_len items in an array of _heap_cap.
    cdef _Queued *_heap
    cdef Py_ssize_t _heap_len
    cdef Py_ssize_t _heap_cap
    # Pending entries: those in _due and in every bucket.
    cdef Py_ssize_t _len
    # The add order the next entry gets; above every filed entry's _seq.
    cdef int64_t _seq

    cpdef add_entry(self, entry)
    cpdef bint remove(self, entry) except -1
    cpdef list advance_entries(self, now)
    @cython.final
    cdef inline int _unfile(self, Entry entry) except -1:
        """``remove_entry`` in C: _NOT_PENDING, _KEPT (next_deadline unchanged) or _EMPTIED (the
        entry was the last of its bucket). O(1): what a compiled caller's cancel costs, inline
        in the part that calls it."""
        cdef PyObject *item
        cdef Py_ssize_t left
        if not _pending(entry):
            return _NOT_PENDING
        bucket = <object>_field(entry, _OFF_BUCKET)[0]
        item = aw_list_swap_remove(bucket, entry._index)
        left = PyList_GET_SIZE(bucket)
        if entry._index < left:
            (<Entry>PyList_GET_ITEM(bucket, entry._index))._index = entry._index
        _set(entry, _OFF_BUCKET, None)
        self._len -= 1
        try:
            _set(entry, _OFF_PAYLOAD, None)  # may run the payload's finaliser: last
        finally:
            Py_DECREF(<object>item)  # the bucket's reference; the caller still holds one
        return _KEPT if left else _EMPTIED

    @cython.final
    cdef int _ready(self) except -1
    @cython.final
    cdef object _time(self, int64_t ticks)
    @cython.final
    cdef bint _holds(self, list bucket, Entry entry, Py_ssize_t index)
    @cython.final
    cdef int _check_entry(self, Entry entry) except -1
    @cython.final
    cdef int _file(self, Entry entry) except -1
    @cython.final
    cdef _Level _level_for(self, int64_t q)
    @cython.final
    cdef int _push(self, int64_t expiration, Py_ssize_t level, Py_ssize_t slot) except -1
    @cython.final
    cdef _Queued _pop(self) noexcept


# -- an entry's fields --------------------------------------------------------------------------
#
# Entry's payload and _bucket are exposed as member descriptors, as the slots of the pure Entry
# are, not as Cython properties: CPython specialises attribute access on them, so a Python
# subclass builds and reads them at slot speed (a trick, see aw_add_member in _ccpython.pxd; the
# fallback build keeps Entry's properties, which behave the same). Either way a field can be
# deleted (``del entry.payload``), leaving NULL in it, so every compiled part reads and writes
# those fields only through _get and _set, at these byte offsets (set when the wheel is
# imported, from the C layout: see _init_members). The deadline is a property (a C double and
# a kind, see Entry.c_deadline), read and written in C through _deadline, _deadline_double and
# _set_deadline.

cdef Py_ssize_t _OFF_PAYLOAD
cdef Py_ssize_t _OFF_BUCKET


cdef inline PyObject **_field(object entry, Py_ssize_t offset) noexcept:
    return <PyObject **>((<char *><PyObject *>entry) + offset)


# The AttributeError of reading a deleted field (out of line: the cold path of _get).
cdef int _raise_unset(object entry, str name) except -1


cdef inline object _get(object entry, Py_ssize_t offset, str name):
    """The field's value; a deleted one raises AttributeError, as reading a slot does."""
    cdef PyObject *value = _field(entry, offset)[0]
    if value is NULL:
        _raise_unset(entry, name)
    return <object>value


cdef inline void _set(object entry, Py_ssize_t offset, object value) noexcept:
    """Store ``value``. Releases the old value last: that may run arbitrary code."""
    cdef PyObject **field = _field(entry, offset)
    cdef PyObject *old = field[0]
    Py_INCREF(value)
    field[0] = <PyObject *>value
    Py_XDECREF(old)


# The deadline of another kind than _DEADLINE_FLOAT, and storing one that is not an exact float
# (out of line: the side table, _DEADLINE_INT's int, the unset error).
cdef object _deadline_slow(Entry entry)
cdef int _set_deadline_slow(Entry entry, object value) except -1
# Release the entry's side-table deadline, if it has one; keeps a raised exception. The
# deallocators call it (Entry's, and aw_untracked_dealloc for the handles without GC support).
cdef void _forget_deadline(object entry) noexcept


cdef inline object _deadline(Entry entry):
    """The deadline as stored (``entry.deadline``): a float, or the number given."""
    if entry.c_flags & _DEADLINE_KIND == _DEADLINE_FLOAT:
        return PyFloat_FromDouble(entry.c_deadline)
    return _deadline_slow(entry)


cdef inline double _deadline_double(Entry entry) except? -1.0:
    """The deadline as a double, as Python converts it in ``now - deadline`` (for a checked
    deadline: a float or an int in float range); a deleted one raises AttributeError."""
    if entry.c_flags & _DEADLINE_KIND <= _DEADLINE_INT:
        return entry.c_deadline
    return _deadline_slow(entry)


cdef inline int _set_deadline(Entry entry, object value) except -1:
    """``entry.deadline = value``: an exact float is kept as a C double, with no object."""
    if PyFloat_CheckExact(value) and entry.c_flags & _DEADLINE_KIND != _DEADLINE_OBJECT:
        entry.c_deadline = PyFloat_AS_DOUBLE(value)
        entry.c_flags &= ~(<unsigned int>_DEADLINE_KIND)
        return 0
    return _set_deadline_slow(entry, value)


cdef inline void _init_entry_at(Entry entry, double deadline, object payload) noexcept:
    """``_init_entry`` with a float deadline given as a double: no float object is made."""
    entry.c_deadline = deadline
    entry.c_flags = _DEADLINE_FLOAT
    _set(entry, _OFF_PAYLOAD, payload)
    _set(entry, _OFF_BUCKET, None)


cdef inline int _init_entry(Entry entry, object deadline, object payload) except -1:
    """What ``Entry.__init__`` does, for the compiled constructors (``add``, the cores'
    handles): a new entry, not filed yet."""
    _set_deadline(entry, deadline)
    _set(entry, _OFF_PAYLOAD, payload)
    _set(entry, _OFF_BUCKET, None)
    return 0


cdef inline int64_t _add_order(Entry entry) noexcept:
    """The add order ``entry`` was filed with (see Entry._seq): for a part that merges
    entries out of the wheel with its own, in one order (the loop core's near queue)."""
    return entry._seq


cdef inline int64_t _next_add_order(HierarchicalWheel wheel) noexcept:
    """The add order the next entry filed (or _take_add_order) gets."""
    return wheel._seq


cdef inline int64_t _take_add_order(HierarchicalWheel wheel) noexcept:
    """The next add order, taken without filing an entry: a part's own timers, ordered with
    the wheel's entries in one sequence (the loop core's near queue)."""
    wheel._seq += 1
    return wheel._seq - 1


cdef inline int _drop_entry_gc(type subclass, Py_ssize_t *own, int count) except -1:
    """Take GC support away from the compiled Entry subclass ``subclass`` (trick 5 of
    _ccpython.pxd; a no-op in the fallback build), before any instance of it exists: its
    deallocator then releases what the entry holds (payload, _bucket, a side-table deadline)
    and the ``count`` object fields of the subclass at the byte offsets ``own``."""
    cdef Py_ssize_t offsets[8]
    cdef int i
    if count > 6:
        raise SystemError("aiowheel: too many handle fields")
    offsets[0], offsets[1] = _OFF_PAYLOAD, _OFF_BUCKET
    for i in range(count):
        offsets[2 + i] = own[i]
    aw_drop_gc(<PyTypeObject *>subclass, offsets, count + 2, _forget_deadline)
    return 0


cdef inline bint _pending(Entry entry) except -1:
    """True iff ``entry`` sits in its bucket: ``entry._bucket[entry._index] is entry``."""
    cdef PyObject *bucket = _field(entry, _OFF_BUCKET)[0]
    if bucket is NULL:
        _raise_unset(entry, "_bucket")  # as the pure wheel does
        return False
    if not PyList_CheckExact(<object>bucket):
        return False
    return (
        entry._index < PyList_GET_SIZE(<object>bucket)
        and PyList_GET_ITEM(<object>bucket, entry._index) == <PyObject *>entry
    )


# -- conversions and checks (_cticks.pxi, _cchecks.pxi) ------------------------------------------

cdef _Tick _tick_of(object tick) except *
cdef int _to_ticks(object t, object tick, const _Tick *k, bint up, int64_t *out) except -1
cdef int _double_to_ticks(
    double d, object t, object tick, const _Tick *k, bint up, int64_t *out
) except -1
cdef object _check_deadline_slow(object value, str what)
cdef object _deadline_after_slow(object now, object delay)


cdef inline bint _exact_number(object value) except -1:
    """True for a finite exact float or an exact int of int64 range: a checked time as it is."""
    cdef int overflow
    if PyFloat_CheckExact(value):
        return isfinite(PyFloat_AS_DOUBLE(value))
    if PyLong_CheckExact(value):
        PyLong_AsLongLongAndOverflow(value, &overflow)
        return overflow == 0
    return False


cdef inline object _checked_deadline(object value, str what):
    """``aiowheel._checks.check_deadline(value, what)``."""
    return value if _exact_number(value) else _check_deadline_slow(value, what)


cdef inline object _deadline_after(object now, object delay):
    """``aiowheel._checks.deadline_after(now, delay)``."""
    if PyFloat_CheckExact(delay) and isfinite(PyFloat_AS_DOUBLE(delay)):
        return now + delay
    return _deadline_after_slow(now, delay)
