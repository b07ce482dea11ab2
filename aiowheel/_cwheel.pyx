# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel._wheel`: the same wheel, in Cython.

:mod:`aiowheel._wheel` is the specification. This module has the same public API, guarantees,
error types and messages and docstrings; the wheel tests run on both (the ``twins`` fixture in
``tests/conftest.py``) and ``tests/test_impl.py`` drives both with the same random operations and
compares every observable result. Pick an implementation through :mod:`aiowheel._impl`, not by
importing this module. Every check of a user's input, and every error message, comes from
:mod:`aiowheel._checks`, which both twins import; this module keeps only C fast paths for exact
floats and ints, and imports nothing of the pure twins.

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
  anything else (bigger ints and ticks, and an entry's ``deadline`` of another type, which only
  ``add_entry`` can be given) runs the pure code on Python objects. The C compiler must not
  contract ``a * b + c`` into a fused multiply-add here: setup.py passes ``-ffp-contract=off``.
* **A bucket is a Python list, not a dict.** An entry knows its list and its index in it
  (``_bucket``, ``_index``); ``remove`` moves the bucket's last entry into the hole, so it is O(1)
  and the removed entry is released at once. Order inside a bucket is therefore not kept, and
  need not be: every batch is sorted by ``(deadline, add order)``, exactly as the pure wheel sorts
  it. A fired or removed entry has ``_bucket`` None, so ``pending`` is one pointer and one index
  check.
* **Bucket expirations are a C array per level and the heap a C array** of ``(expiration, level,
  slot)``, ordered like the pure wheel's tuples, with the same lazy dropping of emptied buckets
  (``bucket_expiration`` shows the same values at every step).
* **Entry's ``payload`` and ``_bucket`` are member descriptors**, like the slots of the pure
  ``Entry`` (see ``_cwheel.pxd``); Cython's own pickling, which would read them as Cython
  attributes, is off: both classes pickle as slotted objects do, see ``__reduce_ex__``.
* **Entry's ``deadline`` is a C double** when it is a float (or an int of at most ``2**53``, kept
  as its exact double), with no object: a pending timer is 24 bytes lighter. Any other number
  (only ``add_entry`` and ``entry.deadline = ...`` keep one) waits in a side table, keyed by the
  entry, released with it. ``entry.deadline`` reads back the number stored (a new float object
  for a float), through a property; the entry's flags share a word with its 32-bit bucket index
  (see ``Entry`` in ``_cwheel.pxd``).

Two differences are deliberate, none of them in the documented API: ``tick`` and
``wheel_size`` are read-only (assigning them on the pure wheel corrupts it); an ``Entry`` made
with ``Entry.__new__`` and no ``__init__`` has ``deadline`` 0.0 and ``payload`` None rather
than unset.

**The parts.** This module is the wheel, the lowest of the compiled parts (see
``docs/how-it-works.md``, "The compiled core"): the Timer core (:mod:`aiowheel._ctimercore`),
the loop core (:mod:`aiowheel._cloopcore`) and the idle core (:mod:`aiowheel._cidlecore`) are
extensions of their own that ``cimport`` what ``_cwheel.pxd`` declares -- the layout of
:class:`Entry` and :class:`HierarchicalWheel`, the access to an entry's fields, the C fast paths
of the conversions and checks. Its source is split by concern into include files, its own:

* ``_cchecks.pxi`` -- the C fast paths of :mod:`aiowheel._checks`;
* ``_cticks.pxi`` -- time <-> ticks, ``ceil_ticks`` and ``floor_ticks``;
* ``_centry.pxi`` -- :class:`Entry`;
* ``_csort.pxi`` -- sorting a due batch;
* this file -- the levels, the heap and :class:`HierarchicalWheel`;

and it cimports the C plumbing the parts share: ``_cint64.pxd`` (int64 arithmetic with Python's
results) and ``_ccpython.pxd`` (CPython internals: member descriptors, in-place list edits).

To add a compiled part (as the loop's timers and IdleTimeouts' touch were added): write its
pure twin first, as the specification, in its own module; write the part as ``_c<name>.pyx``
with a ``_c<name>.pxd`` declaring its classes' fields and C methods, ``cimport`` from the parts
below only what their ``.pxd`` declares, and take its checks and messages from
:mod:`aiowheel._checks`, never from the pure twin; give it the pure twin's ``__all__`` and a
``.pyi`` stub, add it to :data:`aiowheel._impl.TWINS` (``setup.py`` builds what the table names)
and to ``COMPILED_ARROWS`` in ``tests/test_layers.py``, and run its tests on both twins with the
``twins`` fixture. An entry's private fields (``_bucket``, ``_index``, ``_ticks``, ``_seq``) stay
the wheel's -- ``tests/test_layers.py`` greps for them: a part creates entries with
``_init_entry``, takes one out with ``HierarchicalWheel._unfile`` (O(1); it tells whether the
entry's bucket emptied, as ``remove_entry`` does) and reads ``deadline`` and ``payload`` with
``_get``.
"""

cimport cython
from cpython.exc cimport PyErr_Fetch, PyErr_Restore
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact, PyLong_FromDouble
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact, PyFloat_FromDouble
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.math cimport ceil, fabs, floor, isfinite
from libc.stdint cimport INT64_MIN, int64_t
from libc.stdlib cimport free, malloc, qsort, realloc

from aiowheel._ccpython cimport (
    AW_CPYTHON_FALLBACK,
    PyMemberDef,
    T_OBJECT_EX,
    aw_add_member,
    aw_list_put,
)
from aiowheel._cint64 cimport _EXACT, _floordiv, _floormod, _gt, _lt

import copyreg
import math

from aiowheel._defaults import DEFAULT_TICK, DEFAULT_WHEEL_SIZE
from aiowheel._checks import (
    MAX_TICKS,
    MAX_WHEEL_SIZE,
    already_pending,
    check_clock,
    check_count,
    check_deadline,
    check_length,
    deadline_after,
    out_of_range,
)

__all__ = ["Entry", "HierarchicalWheel", "ceil_ticks", "floor_ticks"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd).
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

include "_cchecks.pxi"
include "_cticks.pxi"
include "_centry.pxi"
include "_csort.pxi"


# -- the wheel -------------------------------------------------------------------------------------

# Clamp for a level's span, far beyond any accepted tick (see the module docstring).
cdef int64_t _SPAN_CAP = 4611686018427387904  # 2**62
# bucket expiration "not queued" (the pure wheel's None): below any reachable expiration.
cdef int64_t _NOT_QUEUED = INT64_MIN

cdef inline bint _queued_before(const _Queued *a, const _Queued *b) noexcept nogil:
    if a.expiration != b.expiration:
        return a.expiration < b.expiration
    if a.level != b.level:
        return a.level < b.level
    return a.slot < b.slot


@cython.final
cdef class _Level:
    """One ring of ``wheel_size`` slots, each ``width`` ticks wide (fields: _cwheel.pxd)."""

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

    cdef void advance_to(self, int64_t ticks) noexcept:
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
        tick: width of one level-0 slot in the caller's time unit; a finite real number > 0,
            kept as an int or else as the nearest float (``wheel.tick``).
        wheel_size: slots per level, a whole number from 2 to ``2**40``.
        start: the wheel's initial time; level 0's clock starts at ``start`` rounded down to a
            whole tick.

    Times are any real numbers -- ints, floats, Fractions, Decimals, numpy scalars -- but not
    bools; see ``add`` and ``advance`` for how they are rounded. Bad values raise TypeError or
    ValueError naming them.

    Guarantees:
        * ``advance(now)`` returns a payload only if its deadline <= ``now`` (never early);
        * called at ``next_deadline()`` each time, ``advance`` returns every payload at most one
          tick after its deadline;
        * each batch is ordered by ``(deadline, add order)``, cascaded or not;
        * a removed entry never comes out; an entry added already due comes out at the next
          ``advance``; each payload comes out at most once.

    Not thread-safe.
    """

    # The fields, with the invariant each keeps, are declared in _cwheel.pxd.

    def __init__(self, tick=DEFAULT_TICK, wheel_size=DEFAULT_WHEEL_SIZE, start=0.0):
        cdef int64_t start_ticks
        tick = check_length(tick, "tick")
        wheel_size = check_count(wheel_size, "wheel_size", 2, MAX_WHEEL_SIZE)
        start = _checked_clock(start, "start")
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

    def pending_per_level(self):
        """Pending entries on each level, level 0 first (one number per level created).

        An entry already due -- added at or before the clock, or cascaded into the current tick
        -- counts on level 0, where :meth:`locate` places it. O(levels * wheel_size).
        """
        cdef _Level level
        cdef Py_ssize_t slot, count
        self._ready()
        counts = []
        for level in self._levels:
            count = 0
            for slot in range(self._size):
                count += PyList_GET_SIZE(<object>PyList_GET_ITEM(level.buckets, slot))
            counts.append(count)
        counts[0] += PyList_GET_SIZE(self._due)
        return tuple(counts)

    def level_start(self, level):
        """The aligned start of ``level``'s current slot (Kafka's ``currentTime``)."""
        self._ready()
        found = self._levels[level]
        if not isinstance(found, _Level):
            raise AttributeError(f"{type(found).__name__!r} object has no attribute 'current'")
        return self._time((<_Level>found).current)

    def add(self, deadline, payload):
        """File ``payload`` to come out of ``advance`` once the clock reaches ``deadline``.

        O(levels). ``deadline`` is any real number; one that is not an int or a float is
        converted to the smallest float not below it, which the entry keeps as its
        ``deadline``. Raises TypeError for a non-number (or a bool) and ValueError for NaN,
        infinity or a deadline ``2**52`` ticks or more from zero (beyond that floats cannot
        tell adjacent ticks apart). A deadline at or before the wheel's clock is due at the next
        ``advance``.
        """
        cdef Entry entry = Entry.__new__(Entry)
        _init_entry(entry, _checked_deadline(deadline, "deadline"), payload)
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
            raise already_pending(entry)
        _entry_ticks(filed, self.tick, &self._tick, &ticks)
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
        self._ready()
        return self._unfile(removed) != _NOT_PENDING

    def remove_entry(self, entry):
        """Like ``remove``, and tell whether ``next_deadline()`` may have changed; O(1).

        For a layer that keeps a wake-up armed for ``next_deadline()`` (the wheel-backed event
        loop's driver) and re-arms it only when a removal can move it. Returns:

        * None if ``entry`` was not pending (nothing changed);
        * False if it was removed and ``next_deadline()`` returns what it returned before;
        * True if it was removed and was the last entry of its bucket: ``next_deadline()`` may
          now be later, or None, never earlier. Ask it again (it drops the emptied bucket then).

        No heap work is done here: a removal costs the same whatever it returns.
        """
        cdef Entry removed = _as_entry(entry)
        cdef int removal
        self._ready()
        removal = self._unfile(removed)
        if removal == _NOT_PENDING:
            return None
        return removal == _EMPTIED

    # _unfile, remove_entry in C, is inline in _cwheel.pxd.

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
        ``now`` is any real number; one that is not an int or a float is taken as the largest
        float not above it.
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
        now = _checked_clock(now, "now")
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

    def _check(self):
        """Check every invariant written next to the fields; O(n + levels * wheel_size).

        For tests: raises AssertionError naming the first invariant that does not hold.
        """
        cdef _Level level
        cdef Entry entry
        cdef Py_ssize_t index, slot, i
        cdef int64_t clock, q, width, expiration, start
        self._ready()
        if self._levels[0] is not self._level0:
            raise AssertionError("_level0 is not _levels[0]")
        clock = self._level0.current
        pending = len(self._due)
        for i, entry in enumerate(self._due):
            self._check_entry(entry)
            if not self._holds(self._due, entry, i):
                raise AssertionError(f"{entry!r} is in the due bucket, its _bucket is another")
            if entry._ticks > clock:
                raise AssertionError(f"{entry!r} is due before its tick {entry._ticks}")
        queued = set()
        expected = 1  # wheel_size ** index, as a Python int
        for index, level in enumerate(self._levels):
            span = min(expected * self._size, _SPAN_CAP)
            if (level.index, level.width, level.span) != (index, expected, span):
                found = (level.index, level.width, level.span)
                raise AssertionError(f"level {index} has (index, width, span) {found}")
            expected *= self._size
            width = level.width
            if level.current != clock - _floormod(clock, width):
                raise AssertionError(f"level {index}'s current is not level 0's clock {clock}")
            if not level.size == len(level.buckets) == self._size:
                raise AssertionError(f"level {index} does not have wheel_size slots")
            for slot in range(self._size):
                bucket = level.buckets[slot]
                if type(bucket) is not list:
                    raise AssertionError(f"bucket ({index}, {slot}) is not a list")
                expiration = level.expirations[slot]
                if expiration != _NOT_QUEUED:
                    queued.add((expiration, index, slot))
                elif bucket:
                    raise AssertionError(f"bucket ({index}, {slot}) holds entries, not queued")
                for i, entry in enumerate(bucket):
                    pending += 1
                    self._check_entry(entry)
                    q = entry._ticks
                    if not self._holds(bucket, entry, i):
                        raise AssertionError(f"{entry!r} is in ({index}, {slot}), not its _bucket")
                    if _floormod(_floordiv(q, width), self._size) != slot:
                        raise AssertionError(f"{entry!r} at tick {q} is in slot {slot}")
                    start = q - _floormod(q, width)
                    if not (expiration == start and clock < start < level.current + level.span):
                        raise AssertionError(f"{entry!r} is in a bucket expiring at {expiration}")
        heap = {
            (self._heap[i].expiration, self._heap[i].level, self._heap[i].slot)
            for i in range(self._heap_len)
        }
        if self._heap_len != len(queued) or heap != queued:
            raise AssertionError("the heap does not hold exactly the queued buckets")
        for i in range(1, self._heap_len):
            if _queued_before(&self._heap[i], &self._heap[(i - 1) // 2]):
                raise AssertionError("the heap is not ordered")
        if self._len != pending:
            raise AssertionError(f"len is {self._len} but {pending} entries are filed")

    @cython.final
    cdef bint _holds(self, list bucket, Entry entry, Py_ssize_t index):
        """Whether ``entry`` knows it sits in ``bucket`` at ``index``."""
        return _field(entry, _OFF_BUCKET)[0] == <PyObject *>bucket and entry._index == index

    @cython.final
    cdef int _check_entry(self, Entry entry) except -1:
        cdef int64_t q
        _entry_ticks(entry, self.tick, &self._tick, &q)
        if entry._ticks != q:
            raise AssertionError(f"{entry!r} is filed at tick {entry._ticks}, its tick is {q}")
        if not 0 <= entry._seq < self._seq:
            raise AssertionError(f"{entry!r} has add order {entry._seq}, the next is {self._seq}")
        return 0

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
        if PyList_GET_SIZE(bucket) >= _MAX_BUCKET:
            raise OverflowError(f"a bucket of the wheel holds at most {_MAX_BUCKET} entries")
        entry._index = <int>PyList_GET_SIZE(bucket)
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

