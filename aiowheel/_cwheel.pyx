# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel.wheel`: the same wheel, in Cython.

:mod:`aiowheel.wheel` is the specification. This module has the same public API, guarantees,
error types and messages and docstrings; the wheel tests run on both (the ``wheel_impl`` fixture in
``tests/conftest.py``) and ``tests/test_impl.py`` drives both with the same random operations and
compares every observable result. Pick an implementation through :mod:`aiowheel._impl`, not by
importing this module.

Only the representation differs:

* **Ticks are C ``int64``.** The pure wheel refuses times ``2**52`` ticks or more from zero, so every
  tick count fits: level 0's clock stays within ``2**52 + 1`` of zero, a level is created only
  when some tick lies beyond the levels below, which keeps every level's width below ``2**55`` and
  its ``current`` above ``-2**56``. A level's span (``width * wheel_size``) can still exceed
  ``int64`` on a huge wheel; it is clamped to ``_SPAN_CAP`` (``2**62``), which changes no
  comparison ``q < current + span`` for any tick the wheel accepts.
* **Time <-> ticks in C doubles, bit for bit as in Python.** When the time is a ``float`` or an
  ``int`` of at most ``2**53`` in magnitude and the tick a ``float`` or an ``int`` in ``[1,
  2**53]``, the pure code's ``t / tick``, ``ceil``, ``q * tick`` and comparisons are done on
  doubles (and exact int64 products for an int tick) that give the same results as Python's;
  anything else (bigger ints, ``float`` or ``int`` subclasses, other number types) runs the pure
  code on Python objects. The C compiler must not contract ``a * b + c`` into a fused
  multiply-add here: setup.py passes ``-ffp-contract=off``.
* **A bucket is a Python list, not a dict.** An entry knows its list and its index in it
  (``_bucket``, ``_index``); ``remove`` moves the bucket's last entry into the hole, so it is O(1)
  and the removed entry is released at once. Order inside a bucket is therefore not kept, and
  need not be: every batch is sorted by ``(deadline, add order)``, exactly as the pure wheel sorts
  it. A fired or removed entry has ``_bucket`` None, so ``pending`` is one pointer and one index
  check.
* **Bucket expirations are a C array per level and the heap a C array** of ``(expiration, level,
  slot)``, ordered like the pure wheel's tuples, with the same lazy dropping of emptied buckets
  (``bucket_expiration`` shows the same values at every step).
* **Entry's ``deadline``, ``payload`` and ``_bucket`` are member descriptors**, like the slots of
  the pure ``Entry``, not Cython properties: CPython specialises attribute access on them, which
  keeps ``TimerHandle`` (a Python subclass) as cheap to build and read as with the pure wheel.
  A member can be deleted (``del entry.payload``), leaving NULL in the field, so this module reads
  and writes those three fields only through ``_get``/``_set``, never as Cython attributes (and
  Cython's own pickling, which would read them, is off: both classes pickle as slotted objects
  do, see ``__reduce_ex__``).

Three differences are deliberate, none of them in the documented API: ``tick`` and
``wheel_size`` are read-only (assigning them on the pure wheel corrupts it); an ``Entry`` made
with ``Entry.__new__`` and no ``__init__`` has ``deadline`` and ``payload`` None rather than
unset; a ``wheel_size`` above ``2**40`` raises MemoryError at once (the pure wheel runs out of
memory slowly).
"""

cimport cython
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.math cimport ceil, fabs, floor, isfinite
from libc.stdint cimport INT64_MIN, int64_t
from libc.stdlib cimport free, malloc, qsort, realloc

import copyreg
import math

__all__ = ["Entry", "HierarchicalWheel", "TimerCore", "TimerHandle", "ceil_ticks", "floor_ticks"]

cdef extern from *:
    """
    #include <structmember.h>

    /* Expose the object field at `offset` of every instance of `type` as a member descriptor,
       as __slots__ are; `def` must outlive the type (a static). */
    static int aw_add_member(PyTypeObject *type, PyMemberDef *def) {
        PyObject *descr = PyDescr_NewMember(type, def);
        int result;
        if (descr == NULL) return -1;
        result = PyDict_SetItemString(type->tp_dict, def->name, descr);
        Py_DECREF(descr);
        PyType_Modified(type);
        return result;
    }

    /* Take item i out of `list` by moving the last item into its place. Returns the removed item:
       the list's reference to it passes to the caller. */
    static PyObject *aw_list_swap_remove(PyObject *list, Py_ssize_t i) {
        PyListObject *l = (PyListObject *)list;
        Py_ssize_t last = Py_SIZE(l) - 1;
        PyObject *item = l->ob_item[i];
        l->ob_item[i] = l->ob_item[last];
        Py_SET_SIZE(l, last);
        return item;
    }

    /* Put `item` at position i of `list` (a permutation step: no reference changes hands). */
    static void aw_list_put(PyObject *list, Py_ssize_t i, PyObject *item) {
        ((PyListObject *)list)->ob_item[i] = item;
    }
    """
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    int T_OBJECT_EX
    int aw_add_member(PyTypeObject *type, PyMemberDef *member) except -1
    PyObject *aw_list_swap_remove(object list, Py_ssize_t i)
    void aw_list_put(object list, Py_ssize_t i, PyObject *item)

# Beyond 2**52 ticks floats cannot tell adjacent ticks apart (see aiowheel.wheel._MAX_TICKS).
cdef double _MAX_TICKS = 4503599627370496.0  # 2**52
_MAX_TICKS_INT = 2**52
# Ints up to 2**53 in magnitude are exact doubles: the C conversions below take only those.
cdef int64_t _EXACT = 9007199254740992  # 2**53
# Clamp for a level's span, far beyond any accepted tick (see the module docstring).
cdef int64_t _SPAN_CAP = 4611686018427387904  # 2**62
# bucket expiration "not queued" (the pure wheel's None): below any reachable expiration.
cdef int64_t _NOT_QUEUED = INT64_MIN



# -- floor division on int64 (Python's // and % for a positive divisor) -------------------------

@cython.cdivision(True)
cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and (a < 0):
        q -= 1
    return q


@cython.cdivision(True)
cdef inline int64_t _floormod(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t r = a % b
    if r < 0:
        r += b
    return r


# -- exact comparisons of an int64 with a double (|values| < 2**62) --------------------------------

cdef inline bint _lt(int64_t p, double d) noexcept nogil:
    """p < d, exactly."""
    cdef double fl = floor(d)
    cdef int64_t fi = <int64_t>fl
    return p < fi or (p == fi and fl < d)


cdef inline bint _gt(int64_t p, double d) noexcept nogil:
    """p > d, exactly (fi <= d < fi + 1, so p > d iff p > fi)."""
    return p > <int64_t>floor(d)


# -- Entry fields exposed as member descriptors ----------------------------------------------------

# Byte offsets of Entry's deadline, payload and _bucket fields, found at import (see _init_members).
cdef Py_ssize_t _OFF_DEADLINE = 0
cdef Py_ssize_t _OFF_PAYLOAD = 0
cdef Py_ssize_t _OFF_BUCKET = 0
cdef PyMemberDef _MEMBERS[3]


cdef inline PyObject **_field(object entry, Py_ssize_t offset) noexcept:
    return <PyObject **>((<char *><PyObject *>entry) + offset)


cdef inline object _get(object entry, Py_ssize_t offset, str name):
    """The field's value; a deleted one raises AttributeError, as reading a slot does."""
    cdef PyObject *value = _field(entry, offset)[0]
    if value is NULL:
        return getattr(entry, name)
    return <object>value


cdef inline void _set(object entry, Py_ssize_t offset, object value) noexcept:
    """Store ``value``. Releases the old value last: that may run arbitrary code."""
    cdef PyObject **field = _field(entry, offset)
    cdef PyObject *old = field[0]
    Py_INCREF(value)
    field[0] = <PyObject *>value
    Py_XDECREF(old)


cdef inline bint _pending(Entry entry) except -1:
    """True iff ``entry`` sits in its bucket: ``entry._bucket[entry._index] is entry``."""
    cdef PyObject *bucket = _field(entry, _OFF_BUCKET)[0]
    if bucket is NULL:
        getattr(entry, "_bucket")  # raises AttributeError, as the pure wheel does
        return False
    if not PyList_CheckExact(<object>bucket):
        return False
    return (
        entry._index < PyList_GET_SIZE(<object>bucket)
        and PyList_GET_ITEM(<object>bucket, entry._index) == <PyObject *>entry
    )


cdef Entry _as_entry(object entry):
    """``entry`` as an Entry; another object raises what the pure wheel's first access would."""
    if isinstance(entry, Entry):
        return <Entry>entry
    getattr(entry, "_bucket")
    raise TypeError(f"expected an aiowheel._cwheel.Entry, got {entry!r}")


cdef class Entry:
    """A pending deadline in a :class:`HierarchicalWheel`, as returned by ``add``.

    Hold on to it to ``remove`` the deadline later. Once the entry has come out of ``advance`` or
    been removed it is inert: it keeps ``deadline`` but drops its payload.
    """

    # Exposed as member descriptors (see _init_members); accessed only through _get and _set.
    cdef object deadline
    cdef object payload
    # The bucket (a list) this entry sits in, or None before filing and after it fired or was
    # removed. While pending, _bucket[_index] is this entry.
    cdef object _bucket
    cdef Py_ssize_t _index
    # The deadline rounded up to whole ticks: the smallest q with q * tick >= deadline.
    cdef int64_t _ticks
    # Add order; ties between equal deadlines are broken by it.
    cdef int64_t _seq

    def __init__(self, deadline, payload):
        _set(self, _OFF_DEADLINE, deadline)
        _set(self, _OFF_PAYLOAD, payload)
        _set(self, _OFF_BUCKET, None)

    @classmethod
    def __class_getitem__(cls, item):
        # Entry[P] in annotations and base classes: the compiled class is not generic at runtime.
        return cls

    @property
    def pending(self):
        """True while the entry sits in its wheel: neither returned by ``advance`` nor removed."""
        return _pending(self)

    def __repr__(self):
        state = "pending" if _pending(self) else "done"
        return f"<Entry deadline={_get(self, _OFF_DEADLINE, 'deadline')!r} {state}>"

    # Pickling and copying, as for the pure Entry (a slotted object): the fields that are set,
    # then a subclass's slots.

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),), self.__getstate__())

    def __getstate__(self):
        cdef PyObject *value
        fields = {}
        for name, offset in (
            ("deadline", _OFF_DEADLINE), ("payload", _OFF_PAYLOAD), ("_bucket", _OFF_BUCKET)
        ):
            value = _field(self, offset)[0]
            if value is not NULL:
                fields[name] = <object>value
        fields["_index"] = self._index
        fields["_ticks"] = self._ticks
        fields["_seq"] = self._seq
        _get_slots(self, fields)
        return (None, fields)

    def __setstate__(self, state):
        cdef PyObject **field
        cdef PyObject *old
        fields = dict(state[1])
        self._index = fields.pop("_index")
        self._ticks = fields.pop("_ticks")
        self._seq = fields.pop("_seq")
        for name, offset in (
            ("deadline", _OFF_DEADLINE), ("payload", _OFF_PAYLOAD), ("_bucket", _OFF_BUCKET)
        ):
            if name not in fields:  # it was deleted: leave it unset, as a slot would be
                field = _field(self, offset)
                old = field[0]
                field[0] = NULL
                Py_XDECREF(old)
        _set_slots(self, fields)


cdef int _get_slots(object obj, dict fields) except -1:
    """Add the __slots__ of ``obj``'s Python subclasses that are set to ``fields``."""
    for name in copyreg._slotnames(type(obj)):
        try:
            fields[name] = getattr(obj, name)
        except AttributeError:
            pass
    return 0


cdef int _set_slots(object obj, dict fields) except -1:
    for name, value in fields.items():
        setattr(obj, name, value)
    return 0


cdef Py_ssize_t _find_field(Entry probe, object marker) except -1:
    """The byte offset of the one field of ``probe`` that holds ``marker``."""
    cdef char *base = <char *><PyObject *>probe
    cdef Py_ssize_t offset
    cdef Py_ssize_t size = (<PyTypeObject *>Entry).tp_basicsize
    for offset in range(sizeof(PyObject), size - <Py_ssize_t>sizeof(PyObject *) + 1,
                        sizeof(PyObject *)):
        if (<PyObject **>(base + offset))[0] == <PyObject *>marker:
            return offset
    raise SystemError("aiowheel._cwheel: an Entry field was not found")


cdef int _init_members() except -1:
    """Find the three fields' offsets (Cython does not expose them) and add the descriptors."""
    global _OFF_DEADLINE, _OFF_PAYLOAD, _OFF_BUCKET
    cdef Entry probe = Entry.__new__(Entry)
    markers = (object(), object(), object())
    # Cython-typed stores: the fields are still the None Cython initialised them to.
    probe.deadline, probe.payload, probe._bucket = markers
    _OFF_DEADLINE = _find_field(probe, markers[0])
    _OFF_PAYLOAD = _find_field(probe, markers[1])
    _OFF_BUCKET = _find_field(probe, markers[2])
    _MEMBERS[0].name = b"deadline"
    _MEMBERS[0].offset = _OFF_DEADLINE
    _MEMBERS[1].name = b"payload"
    _MEMBERS[1].offset = _OFF_PAYLOAD
    _MEMBERS[2].name = b"_bucket"
    _MEMBERS[2].offset = _OFF_BUCKET
    cdef int i
    for i in range(3):
        _MEMBERS[i].type = T_OBJECT_EX
        _MEMBERS[i].flags = 0
        _MEMBERS[i].doc = NULL
        aw_add_member(<PyTypeObject *>Entry, &_MEMBERS[i])
    return 0


_init_members()


# -- sorting a batch by (deadline, add order) ------------------------------------------------------

cdef struct _SortKey:
    double deadline
    int64_t seq
    PyObject *entry


cdef int _compare_keys(const void *a, const void *b) noexcept nogil:
    cdef const _SortKey *x = <const _SortKey *>a
    cdef const _SortKey *y = <const _SortKey *>b
    if x.deadline < y.deadline:
        return -1
    if x.deadline > y.deadline:
        return 1
    return -1 if x.seq < y.seq else (1 if x.seq > y.seq else 0)


def _order_key(entry):
    """The pure wheel's sort key, ``(deadline, add order)``, for batches sorted in Python."""
    return (_get(entry, _OFF_DEADLINE, "deadline"), (<Entry>entry)._seq)


cdef bint _deadline_as_double(PyObject *deadline, double *out) noexcept:
    """Store an exact double equal to ``deadline`` if it is a non-NaN float or a small int."""
    cdef long long value
    cdef int overflow
    if deadline is NULL:
        return False
    if PyFloat_CheckExact(<object>deadline):
        out[0] = PyFloat_AS_DOUBLE(<object>deadline)
        return out[0] == out[0]
    if PyLong_CheckExact(<object>deadline):
        value = PyLong_AsLongLongAndOverflow(<object>deadline, &overflow)
        if overflow == 0 and -_EXACT <= value <= _EXACT:
            out[0] = <double>value
            return True
    return False


cdef int _release_and_sort(list batch) except -1:
    """Mark every entry of ``batch`` as out of the wheel, then sort it by (deadline, add order).

    With every deadline a float or a small int, the doubles compare exactly as the Python numbers
    do and add orders are unique, so any correct sort gives the pure wheel's order: checked in
    one pass (batches are often sorted already), else qsort. Anything else: list.sort, as the
    pure wheel does.
    """
    cdef Py_ssize_t n = PyList_GET_SIZE(batch)
    cdef Py_ssize_t i
    cdef PyObject *item
    cdef bint fast = True
    cdef bint ordered = True
    cdef _SortKey *keys
    for i in range(n):
        _set(<object>PyList_GET_ITEM(batch, i), _OFF_BUCKET, None)
    if n < 2:
        return 0
    keys = <_SortKey *>malloc(n * sizeof(_SortKey))
    if keys is NULL:
        raise MemoryError()
    try:
        for i in range(n):
            item = PyList_GET_ITEM(batch, i)
            if not _deadline_as_double(_field(<object>item, _OFF_DEADLINE)[0], &keys[i].deadline):
                fast = False
                break
            keys[i].seq = (<Entry>item)._seq
            keys[i].entry = item
            if i and ordered and _compare_keys(&keys[i - 1], &keys[i]) > 0:
                ordered = False
        if not fast:
            batch.sort(key=_order_key)
        elif not ordered:
            qsort(keys, n, sizeof(_SortKey), _compare_keys)
            for i in range(n):
                aw_list_put(batch, i, keys[i].entry)
    finally:
        free(keys)
    return 0


# -- time <-> ticks: aiowheel.wheel.ceil_ticks and floor_ticks -----------------------------------

# How a tick is held, which decides the fast path of the conversions.
cdef enum TickKind:
    TICK_FLOAT  # an exact float, finite and > 0
    TICK_INT  # an exact int in [1, 2**53]
    TICK_OTHER  # anything else: the pure code on Python objects


cdef struct _Tick:
    TickKind kind
    double d  # the tick as a double (TICK_FLOAT and TICK_INT)
    int64_t i  # the tick (TICK_INT)


cdef _Tick _tick_of(object tick) except *:
    cdef _Tick k
    k.kind = TICK_OTHER
    k.d = 0.0
    k.i = 0
    if PyFloat_CheckExact(tick):
        k.d = PyFloat_AS_DOUBLE(tick)
        if isfinite(k.d) and k.d > 0:
            k.kind = TICK_FLOAT
    elif PyLong_CheckExact(tick) and 1 <= tick <= _EXACT:
        k.kind = TICK_INT
        k.i = tick
        k.d = <double>k.i
    return k


cdef int _to_ticks(object t, object tick, const _Tick *k, bint up, int64_t *out) except -1:
    """``up``: the smallest q with ``q * tick >= t`` (where a deadline is filed); else the largest
    q with ``q * tick <= t`` (how far the clock may move at time t). Stores q in ``out``."""
    cdef double d, ratio, qd
    cdef int64_t q, p
    cdef long long value
    cdef int overflow
    if PyFloat_CheckExact(t):
        d = PyFloat_AS_DOUBLE(t)
    elif PyLong_CheckExact(t):
        value = PyLong_AsLongLongAndOverflow(t, &overflow)
        if overflow or not (-_EXACT <= value <= _EXACT):
            return _to_ticks_python(t, tick, up, out)
        d = <double>value
    else:
        return _to_ticks_python(t, tick, up, out)
    if k.kind == TICK_FLOAT:
        # Python's float ops, on doubles; q is an exact double (|q| <= 2**52 + 1).
        ratio = d / k.d
        if not fabs(ratio) < _MAX_TICKS:
            _out_of_range(t, tick, up)
        if up:
            qd = ceil(ratio)
            # t / tick is rounded; correct by at most one step (see aiowheel.wheel.ceil_ticks).
            if qd * k.d < d:
                qd += 1
            elif (qd - 1) * k.d >= d:
                qd -= 1
        else:
            qd = floor(ratio)
            if qd * k.d > d:
                qd -= 1
            elif (qd + 1) * k.d <= d:
                qd += 1
        out[0] = <int64_t>qd
        return 0
    if k.kind == TICK_INT and fabs(d) <= <double>_EXACT:
        # t / tick of two exact doubles is Python's correctly rounded int or float division;
        # q * tick is an exact int64 (|q * tick| <= |t| + 2 * tick < 2**55), compared exactly.
        ratio = d / k.d
        if not fabs(ratio) < _MAX_TICKS:
            _out_of_range(t, tick, up)
        if up:
            q = <int64_t>ceil(ratio)
            p = q * k.i
            if _lt(p, d):
                q += 1
            elif not _lt(p - k.i, d):
                q -= 1
        else:
            q = <int64_t>floor(ratio)
            p = q * k.i
            if _gt(p, d):
                q -= 1
            elif not _gt(p + k.i, d):
                q += 1
        out[0] = q
        return 0
    return _to_ticks_python(t, tick, up, out)


cdef int _to_ticks_python(object t, object tick, bint up, int64_t *out) except -1:
    """The pure ceil_ticks / floor_ticks, on Python objects."""
    ratio = t / tick
    if not abs(ratio) < _MAX_TICKS_INT:
        _out_of_range(t, tick, up)
    if up:
        q = math.ceil(ratio)
        if q * tick < t:
            q += 1
        elif (q - 1) * tick >= t:
            q -= 1
    else:
        q = math.floor(ratio)
        if q * tick > t:
            q -= 1
        elif (q + 1) * tick <= t:
            q += 1
    out[0] = q
    return 0


cdef int _out_of_range(object t, object tick, bint up) except -1:
    what = "deadline" if up else "time"
    if not math.isfinite(t):
        raise ValueError(f"{what} must be finite, got {t!r}")
    raise ValueError(f"{what} {t!r} is too far away for tick {tick!r}")


def ceil_ticks(t, tick):
    """The smallest q with ``q * tick >= t`` (a float product): where a deadline is filed.

    The one rounding rule of aiowheel: a deadline ``t`` fires at ``ceil_ticks(t, tick) * tick``,
    never before ``t`` and less than a tick after it. ``IdleTimeouts`` and the Spark replay use it
    to compute expiry times that match the wheel's exactly. ValueError if ``t / tick`` is not
    finite or not below 2**52 in magnitude.
    """
    cdef _Tick k = _tick_of(tick)
    cdef int64_t q
    _to_ticks(t, tick, &k, True, &q)
    return q


def floor_ticks(t, tick):
    """The largest q with ``q * tick <= t``: how far a wheel's clock may move at time t."""
    cdef _Tick k = _tick_of(tick)
    cdef int64_t q
    _to_ticks(t, tick, &k, False, &q)
    return q


# -- argument checks -----------------------------------------------------------------------------

cdef inline int _check_time(object value, str what) except -1:
    """Raise TypeError unless ``value`` is an int or a float, ValueError unless it is finite."""
    if PyFloat_CheckExact(value):
        if isfinite(PyFloat_AS_DOUBLE(value)):
            return 0
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be an int or a float, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        raise ValueError(f"{what} {value!r} is too far away") from None
    if not finite:
        raise ValueError(f"{what} must be finite, got {value!r}")
    return 0


# -- the wheel -----------------------------------------------------------------------------------

cdef struct _Queued:
    # A queued bucket, ordered like the pure wheel's heap tuples (expiration, level, slot).
    int64_t expiration
    Py_ssize_t level
    Py_ssize_t slot


cdef inline bint _queued_before(const _Queued *a, const _Queued *b) noexcept nogil:
    if a.expiration != b.expiration:
        return a.expiration < b.expiration
    if a.level != b.level:
        return a.level < b.level
    return a.slot < b.slot


@cython.final
cdef class _Level:
    """One ring of ``wheel_size`` slots, each ``width`` ticks wide."""

    cdef Py_ssize_t index
    # Ticks per slot: wheel_size ** index; below 2**55 (see the module docstring).
    cdef int64_t width
    # Ticks covered by the whole ring, width * wheel_size, clamped to _SPAN_CAP.
    cdef int64_t span
    # Start of the current slot; always a multiple of width, never decreases.
    cdef int64_t current
    # wheel_size lists: the entries of each slot, in no particular order.
    cdef list buckets
    # Expiration (ticks) each bucket was last queued with on the heap, or _NOT_QUEUED. A bucket
    # has an item on the heap iff its expiration is not _NOT_QUEUED.
    cdef int64_t *expirations
    # The wheel's wheel_size: the length of buckets and of expirations.
    cdef Py_ssize_t size

    def __cinit__(self, Py_ssize_t index, int64_t width, Py_ssize_t wheel_size, int64_t start):
        cdef Py_ssize_t slot
        self.expirations = <int64_t *>malloc(wheel_size * sizeof(int64_t))
        if self.expirations is NULL:
            raise MemoryError()
        self.size = wheel_size
        for slot in range(wheel_size):
            self.expirations[slot] = _NOT_QUEUED
        self.index = index
        self.width = width
        self.span = width * wheel_size if width <= _SPAN_CAP // wheel_size else _SPAN_CAP
        self.current = start - _floormod(start, width)
        self.buckets = [[] for _ in range(wheel_size)]

    def __dealloc__(self):
        free(self.expirations)

    cdef inline void advance_to(self, int64_t ticks) noexcept:
        if ticks >= self.current + self.width:
            self.current = ticks - _floormod(ticks, self.width)

    cdef object expirations_list(self):
        """The expirations as the pure wheel's list of ints and Nones."""
        return [None if self.expirations[i] == _NOT_QUEUED else self.expirations[i]
                for i in range(self.size)]


cdef class HierarchicalWheel:
    """Kafka's hierarchical timing wheel, never early and totally ordered.

    >>> wheel = HierarchicalWheel(tick=1, wheel_size=20)
    >>> entry = wheel.add(350, "job")
    >>> wheel.locate(entry)
    (1, 17)
    >>> wheel.next_deadline()
    340
    >>> wheel.advance(349)
    []
    >>> wheel.advance(350)
    ['job']

    Args:
        tick: width of one level-0 slot in the caller's time unit; finite and > 0.
        wheel_size: slots per level, >= 2.
        start: the wheel's initial time; level 0's clock starts at ``start`` rounded down to a
            whole tick.

    Guarantees:
        * ``advance(now)`` returns a payload only if its deadline <= ``now`` (never early);
        * called at ``next_deadline()`` each time, ``advance`` returns every payload at most one
          tick after its deadline;
        * each batch is ordered by ``(deadline, add order)``, cascaded or not;
        * a removed entry never comes out; an entry added already due comes out at the next
          ``advance``; each payload comes out at most once.

    Not thread-safe.
    """

    cdef readonly object tick
    cdef readonly object wheel_size
    cdef Py_ssize_t _size
    # The tick as the conversions take it (see _tick_of).
    cdef _Tick _tick
    # Levels 0, 1, ...; created on demand, never destroyed. None until __init__ ran.
    cdef list _levels
    cdef _Level _level0
    # Entries that were already due when added; they come out at the next advance.
    cdef list _due
    # Min-heap of queued buckets (the pure wheel's heapq list of tuples).
    cdef _Queued *_heap
    cdef Py_ssize_t _heap_len
    cdef Py_ssize_t _heap_cap
    cdef Py_ssize_t _len
    cdef int64_t _seq

    def __init__(self, tick=0.001, wheel_size=64, start=0.0):
        cdef int64_t start_ticks
        if isinstance(tick, bool) or not isinstance(tick, (int, float)):
            raise TypeError(f"tick must be an int or a float, got {tick!r}")
        if not (math.isfinite(tick) and tick > 0):
            raise ValueError(f"tick must be finite and > 0, got {tick!r}")
        if isinstance(wheel_size, bool) or not isinstance(wheel_size, int):
            raise TypeError(f"wheel_size must be an int, got {wheel_size!r}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size!r}")
        _check_time(start, "start")
        if wheel_size > (<Py_ssize_t>1 << 40):  # the pure wheel runs out of memory too
            raise MemoryError(f"wheel_size {wheel_size!r} is too large")
        self.tick = tick
        self.wheel_size = wheel_size
        self._size = wheel_size
        self._tick = _tick_of(tick)
        _to_ticks(start, tick, &self._tick, False, &start_ticks)
        self._level0 = _Level(0, 1, self._size, start_ticks)
        self._levels = [self._level0]
        self._due = []
        self._heap_len = 0
        self._len = 0
        self._seq = 0

    def __dealloc__(self):
        free(self._heap)

    @classmethod
    def __class_getitem__(cls, item):
        # HierarchicalWheel[P] in annotations: the compiled class is not generic at runtime.
        return cls

    @cython.final
    cdef int _ready(self) except -1:
        if self._level0 is None:
            raise AttributeError("HierarchicalWheel.__init__ was not called")
        return 0

    @cython.final
    cdef object _time(self, int64_t ticks):
        """``ticks * tick`` as the pure wheel computes it (a float for a float tick)."""
        if self._tick.kind == TICK_FLOAT:
            return <double>ticks * self._tick.d
        return ticks * self.tick

    # -- public API ---------------------------------------------------------------------------

    def __len__(self):
        """Number of pending entries."""
        return self._len

    @property
    def now(self):
        """The wheel's clock: the time of the last ``advance`` (or ``start``), rounded down to a
        whole tick."""
        self._ready()
        return self._time(self._level0.current)

    @property
    def levels(self):
        """Number of levels created so far (they are never destroyed)."""
        self._ready()
        return len(self._levels)

    def level_start(self, level):
        """The aligned start of ``level``'s current slot (Kafka's ``currentTime``)."""
        self._ready()
        found = self._levels[level]
        if not isinstance(found, _Level):
            raise AttributeError(f"{type(found).__name__!r} object has no attribute 'current'")
        return self._time((<_Level>found).current)

    def add(self, deadline, payload):
        """File ``payload`` to come out of ``advance`` once the clock reaches ``deadline``.

        O(levels). Raises TypeError for a non-number and ValueError for NaN, infinity or a
        deadline ``2**52`` ticks or more from zero (beyond that floats cannot tell adjacent
        ticks apart). A deadline at or before the wheel's clock is due at the next ``advance``.
        """
        _check_time(deadline, "deadline")
        cdef Entry entry = Entry.__new__(Entry)
        _set(entry, _OFF_DEADLINE, deadline)
        _set(entry, _OFF_PAYLOAD, payload)
        return self.add_entry(entry)

    cpdef add_entry(self, entry):
        """File a new ``entry`` (an :class:`Entry` or subclass instance) under its ``deadline``.

        The low-level form of ``add`` for layers that subclass :class:`Entry` to carry their own
        data (one object per timer instead of two). ``entry.deadline`` is expected to be checked
        already; a non-number still raises TypeError and NaN or infinity ValueError. An entry
        can be filed once.
        """
        cdef Entry filed = _as_entry(entry)
        cdef int64_t ticks
        self._ready()
        if _pending(filed):
            raise ValueError(f"{entry!r} is already pending")
        _to_ticks(_get(filed, _OFF_DEADLINE, "deadline"), self.tick, &self._tick, True, &ticks)
        filed._ticks = ticks
        filed._seq = self._seq
        self._seq += 1
        self._file(filed)
        self._len += 1
        return entry

    cpdef bint remove(self, entry) except -1:
        """Take ``entry`` out of the wheel and drop its payload; O(1).

        Returns False if it was no longer pending (already returned by ``advance`` or removed).
        """
        cdef Entry removed = _as_entry(entry)
        cdef PyObject *item
        self._ready()
        if not _pending(removed):
            return False
        bucket = <object>_field(removed, _OFF_BUCKET)[0]
        item = aw_list_swap_remove(bucket, removed._index)
        if removed._index < PyList_GET_SIZE(bucket):
            (<Entry>PyList_GET_ITEM(bucket, removed._index))._index = removed._index
        _set(removed, _OFF_BUCKET, None)
        self._len -= 1
        try:
            _set(removed, _OFF_PAYLOAD, None)  # may run the payload's finaliser: last
        finally:
            Py_DECREF(<object>item)  # the bucket's reference; the caller still holds one
        return True

    def next_deadline(self):
        """When the earliest non-empty bucket expires (in the caller's time), or None if empty.

        The bucket may sit on a higher level, in which case advancing to this time only cascades
        its entries down; call again after ``advance``. If some entry is already due, the result
        is at or before the wheel's clock. Amortised O(1): buckets emptied by ``remove`` are
        dropped from the heap lazily, here.
        """
        cdef _Level level
        cdef _Queued top
        self._ready()
        if PyList_GET_SIZE(self._due):
            return self._time(self._level0.current)
        while self._heap_len:
            top = self._heap[0]
            level = <_Level>PyList_GET_ITEM(self._levels, top.level)
            if PyList_GET_SIZE(<object>PyList_GET_ITEM(level.buckets, top.slot)):
                return self._time(top.expiration)
            self._pop()
            level.expirations[top.slot] = _NOT_QUEUED
        return None

    def advance(self, now):
        """Move the clock to ``now`` and return the payloads now due, in (deadline, add order).

        Expired higher-level buckets are flushed and their entries re-filed lower (Kafka's
        cascade); entries whose tick has come are returned. The clock never moves backwards:
        a ``now`` before the wheel's clock only returns entries that were added already due.
        """
        cdef list batch = self.advance_entries(now)
        cdef Py_ssize_t i
        cdef list payloads = [None] * PyList_GET_SIZE(batch)
        for i in range(PyList_GET_SIZE(batch)):
            entry = <object>PyList_GET_ITEM(batch, i)
            payloads[i] = _get(entry, _OFF_PAYLOAD, "payload")
            _set(entry, _OFF_PAYLOAD, None)  # payloads holds it: nothing is released here
        return payloads

    cpdef list advance_entries(self, now):
        """Like ``advance`` but return the due entries themselves, payloads still attached.

        For layers that subclass :class:`Entry`: they own the payload from here on.
        """
        cdef int64_t now_ticks
        cdef _Queued item
        cdef _Level level, lvl
        cdef list batch, bucket
        cdef Py_ssize_t n
        self._ready()
        _check_time(now, "now")
        _to_ticks(now, self.tick, &self._tick, False, &now_ticks)
        if PyList_GET_SIZE(self._due):
            batch = self._due
            self._due = []
        else:
            batch = []
        levels = self._levels
        while self._heap_len and self._heap[0].expiration <= now_ticks:
            item = self._pop()
            level = <_Level>PyList_GET_ITEM(levels, item.level)
            level.expirations[item.slot] = _NOT_QUEUED
            bucket = <list>PyList_GET_ITEM(level.buckets, item.slot)
            if not PyList_GET_SIZE(bucket):
                continue
            for lvl in levels:
                lvl.advance_to(item.expiration)
            # A fresh list in the slot: re-filing can never land in the bucket being flushed.
            level.buckets[item.slot] = []
            if item.level == 0:
                if PyList_GET_SIZE(batch):
                    batch.extend(bucket)
                else:
                    batch = bucket
            else:
                for entry in bucket:
                    self._file(<Entry>entry)
                # Cascaded entries whose tick has come went to self._due.
                if PyList_GET_SIZE(self._due):
                    batch.extend(self._due)
                    self._due = []
        for lvl in levels:
            lvl.advance_to(now_ticks)
        n = PyList_GET_SIZE(batch)
        if not n:
            return batch
        _release_and_sort(batch)
        self._len -= n
        return batch

    def remove_all(self):
        """Take every pending entry out of the wheel and return them in (deadline, add order).

        O(n). Payloads stay attached: the caller owns them from here on. The clock and the
        levels are kept.
        """
        cdef list batch = self._due
        cdef _Level level
        cdef Py_ssize_t slot
        self._ready()
        self._due = []
        for level in self._levels:
            for slot in range(self._size):
                if PyList_GET_SIZE(<object>PyList_GET_ITEM(level.buckets, slot)):
                    batch.extend(<list>PyList_GET_ITEM(level.buckets, slot))
                    level.buckets[slot] = []
                level.expirations[slot] = _NOT_QUEUED
        self._heap_len = 0
        _release_and_sort(batch)
        self._len = 0
        return batch

    def locate(self, entry):
        """Where ``entry`` is filed as ``(level, slot)``, or None if it is not pending.

        An entry that was already due when added, or was cascaded into the current tick, is
        reported as ``(0, slot of the clock's tick)``: it comes out at the next ``advance``.
        """
        cdef Entry filed = _as_entry(entry)
        cdef _Level level
        cdef Py_ssize_t slot
        self._ready()
        if not _pending(filed):
            return None
        bucket = <object>_field(filed, _OFF_BUCKET)[0]
        if bucket is self._due:
            return (0, _floormod(self._level0.current, self._size))
        for level in self._levels:
            slot = _floormod(_floordiv(filed._ticks, level.width), self._size)
            if PyList_GET_ITEM(level.buckets, slot) == <PyObject *>bucket:
                return (level.index, slot)
        raise AssertionError(f"{entry!r} is in no bucket of its wheel")  # pragma: no cover

    def bucket_expiration(self, level, slot):
        """When the bucket at ``(level, slot)`` expires, or None if it is not queued."""
        cdef Py_ssize_t index
        cdef int64_t expiration
        self._ready()
        found = self._levels[level]
        if not isinstance(found, _Level):
            raise AttributeError(f"{type(found).__name__!r} object has no attribute 'expirations'")
        if type(slot) is int and -self._size <= slot < self._size:
            index = slot
            if index < 0:
                index += self._size
            expiration = (<_Level>found).expirations[index]
            return None if expiration == _NOT_QUEUED else self._time(expiration)
        # Anything else behaves as indexing the pure wheel's list of expirations does.
        value = (<_Level>found).expirations_list()[slot]
        return None if value is None else value * self.tick

    def __repr__(self):
        return (
            f"<HierarchicalWheel tick={self.tick!r} wheel_size={self.wheel_size} "
            f"levels={self.levels} pending={self._len} now={self.now!r}>"
        )

    # Pickling and copying, as for the pure wheel (a slotted object): the whole state, buckets
    # and entries included, then a subclass's slots.

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),), self.__getstate__())

    def __getstate__(self):
        cdef _Level level
        self._ready()
        fields = {
            "tick": self.tick,
            "wheel_size": self.wheel_size,
            "levels": [
                (level.width, level.current, level.buckets, level.expirations_list())
                for level in self._levels
            ],
            "due": self._due,
            "heap": [
                (self._heap[i].expiration, self._heap[i].level, self._heap[i].slot)
                for i in range(self._heap_len)
            ],
            "len": self._len,
            "seq": self._seq,
        }
        _get_slots(self, fields)
        return (None, fields)

    def __setstate__(self, state):
        cdef _Level level
        fields = dict(state[1])
        self.__init__(fields.pop("tick"), fields.pop("wheel_size"))
        self._levels = []
        for index, (width, current, buckets, expirations) in enumerate(fields.pop("levels")):
            level = _Level(index, width, self._size, current)
            level.buckets = buckets
            for slot, expiration in enumerate(expirations):
                level.expirations[slot] = _NOT_QUEUED if expiration is None else expiration
            self._levels.append(level)
        self._level0 = self._levels[0]
        self._due = fields.pop("due")
        for expiration, index, slot in fields.pop("heap"):
            self._push(expiration, index, slot)
        self._len = fields.pop("len")
        self._seq = fields.pop("seq")
        _set_slots(self, fields)

    # -- placement ----------------------------------------------------------------------------

    @cython.final
    cdef int _file(self, Entry entry) except -1:
        """Put ``entry`` in the lowest level whose range holds its tick (Kafka's ``add``)."""
        cdef int64_t q = entry._ticks
        cdef _Level level = self._level0
        cdef int64_t virtual_id, expiration
        cdef Py_ssize_t slot
        cdef list bucket
        if q <= level.current:
            bucket = self._due
        else:
            if q >= level.current + level.span:
                level = self._level_for(q)
            virtual_id = _floordiv(q, level.width)
            slot = _floormod(virtual_id, self._size)
            bucket = <list>PyList_GET_ITEM(level.buckets, slot)
            expiration = virtual_id * level.width
            if level.expirations[slot] != expiration:
                self._push(expiration, level.index, slot)
                level.expirations[slot] = expiration
        entry._index = PyList_GET_SIZE(bucket)
        bucket.append(entry)
        _set(entry, _OFF_BUCKET, bucket)
        return 0

    @cython.final
    cdef _Level _level_for(self, int64_t q):
        """The lowest level whose range holds tick ``q``; adds overflow levels as needed."""
        cdef _Level level
        for level in self._levels:
            if q < level.current + level.span:
                return level
        while True:
            below = <_Level>self._levels[len(self._levels) - 1]
            # below.span < _SPAN_CAP: a clamped span covers every accepted tick.
            level = _Level(below.index + 1, below.span, self._size, below.current)
            self._levels.append(level)
            if q < level.current + level.span:
                return level

    # -- the heap -----------------------------------------------------------------------------

    @cython.final
    cdef int _push(self, int64_t expiration, Py_ssize_t level, Py_ssize_t slot) except -1:
        cdef Py_ssize_t i, parent
        cdef _Queued item
        cdef _Queued *grown
        if self._heap_len == self._heap_cap:
            grown = <_Queued *>realloc(
                self._heap, (2 * self._heap_cap + 16) * sizeof(_Queued)
            )
            if grown is NULL:
                raise MemoryError()
            self._heap = grown
            self._heap_cap = 2 * self._heap_cap + 16
        item.expiration = expiration
        item.level = level
        item.slot = slot
        i = self._heap_len
        self._heap_len += 1
        while i > 0:
            parent = (i - 1) >> 1
            if not _queued_before(&item, &self._heap[parent]):
                break
            self._heap[i] = self._heap[parent]
            i = parent
        self._heap[i] = item
        return 0

    @cython.final
    cdef _Queued _pop(self) noexcept:
        """Remove and return the smallest item; the heap must not be empty."""
        cdef _Queued top = self._heap[0]
        cdef _Queued last
        cdef Py_ssize_t n, i, child
        self._heap_len -= 1
        n = self._heap_len
        if n:
            last = self._heap[n]
            i = 0
            while True:
                child = 2 * i + 1
                if child >= n:
                    break
                if child + 1 < n and _queued_before(&self._heap[child + 1], &self._heap[child]):
                    child += 1
                if not _queued_before(&self._heap[child], &last):
                    break
                self._heap[i] = self._heap[child]
                i = child
            self._heap[i] = last
        return top


# -- the Timer core ------------------------------------------------------------------------------

include "_ctimercore.pxi"
