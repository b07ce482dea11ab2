# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel.spark._keystate`: the idle-expiry rule of one key's
visit, :class:`IdleRule` and :func:`wake_ms`, in Cython.

:mod:`aiowheel.spark._keystate` is the specification: same API, same results to the bit, same
errors; tests/spark/test_keystate.py drives both twins side by side, and the shard and stream
tests run on each. It is what a Spark worker spends most of a visit in (docs/spark.md), so it
is the part of the streaming service that is compiled.

What is different is how, never what:

* the times are C doubles: an event's ``ts``, the watermark and the timeouts are converted once
  (a float as it is, an int as Python's ``float()`` does); every deadline, comparison and
  wake-up is the pure twin's double arithmetic, operation by operation (the build turns off
  fused multiply-add). A deadline or wake-up whose tick count is too large for that arithmetic
  to be exact is handed to the pure functions, which compute it or raise their error;
* what a visit returns holds the objects it was given: ``last_seen`` is the event's own ``ts``
  object and the kept events are the caller's tuples, as in the pure twin;
* the compiled visit (:mod:`aiowheel.spark._cvisit`) has it visit a key as a C record instead
  (:meth:`IdleRule.visit_record`, declared in ``_ckeystate.pxd``): the same steps on the same
  doubles, the event ids compared as their UTF-8 bytes, and no Python object but the expiries.
  Where C values cannot follow :meth:`IdleRule.visit_stored` (more than ``RECORD_EVENTS``
  events, a NaN time to sort, a ``fired`` outside the timeouts, a wake-up past int64), it says
  so before it changes anything, and the visit asks :meth:`IdleRule.visit_stored`.

The contract both twins keep: ``ts`` is a float, as the stream's double column gives it (an int
``ts`` beyond 2**53 compares differently once converted).
"""

cimport cython
from cpython.float cimport PyFloat_AsDouble
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject
from libc.math cimport ceil, fabs
from libc.string cimport memcmp, memcpy, memmove
from libc.stdlib cimport free, malloc

from aiowheel._ccpython cimport AW_CPYTHON_FALLBACK

from aiowheel.spark import _keystate
from aiowheel.spark._keystate import _ORDER, KeyState, Visit
from aiowheel.spark.events import _CLOSE_RANK as _CLOSE_RANK_OBJECT
from aiowheel.spark.replay import deadline as _py_deadline

__all__ = ["IdleRule", "wake_ms"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd); it uses no
#: CPython internal either way, but reports the build as every compiled part does.
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

cdef long _CLOSE_RANK = _CLOSE_RANK_OBJECT
# Beyond 2**52 ticks a float cannot tell adjacent ticks apart (aiowheel._checks.MAX_TICKS).
cdef double _MAX_TICKS = 4503599627370496.0
# Below 2**53 a double is an exact whole number of milliseconds and converts to int64 exactly.
cdef double _EXACT_MS = 9007199254740992.0


cdef inline double _ts(object event) except? -1.0:
    return PyFloat_AsDouble((<tuple?>event)[0])


# Pending lists up to this long are sorted in C (most hold one to three events).
cdef enum:
    _SMALL = 8


cdef int _sort_pending(list pending) except -1:
    """``pending.sort(key=itemgetter(0, 1))``: the same stable order, by (ts, kind rank), sorted
    in C when the list is short and its keys are floats and ints that compare as C values (no
    NaN); by list.sort otherwise."""
    cdef Py_ssize_t n = len(pending)
    cdef Py_ssize_t i, j, moved = 0
    cdef double ts[_SMALL]
    cdef long long rank[_SMALL]
    cdef Py_ssize_t order[_SMALL]
    cdef PyObject *items[_SMALL]
    cdef double t
    cdef long long r
    cdef Py_ssize_t o
    cdef tuple event
    if n > _SMALL:
        pending.sort(key=_ORDER)
        return 0
    for i in range(n):
        event = <tuple?>pending[i]
        if len(event) < 2 or not PyLong_CheckExact(event[1]):
            pending.sort(key=_ORDER)
            return 0
        ts[i] = PyFloat_AsDouble(event[0])
        if ts[i] != ts[i]:  # NaN: list.sort's comparisons are not an order then
            pending.sort(key=_ORDER)
            return 0
        rank[i] = event[1]
        order[i] = i
    # Insertion sort, stable: an event moves before another only if its key is smaller.
    for i in range(1, n):
        t, r, o = ts[i], rank[i], order[i]
        j = i
        while j > 0 and (t < ts[j - 1] or (t == ts[j - 1] and r < rank[j - 1])):
            ts[j], rank[j], order[j] = ts[j - 1], rank[j - 1], order[j - 1]
            j -= 1
        if j != i:
            ts[j], rank[j], order[j] = t, r, o
            moved = 1
    if moved:
        for i in range(n):
            items[i] = PyList_GET_ITEM(pending, i)
        for i in range(n):
            PyList_SET_ITEM(pending, i, <object>items[order[i]])
    return 0


cdef inline bint _is_copy(set seen, object event_id) except -1:
    """True if the event with ``event_id`` is a copy of one in ``seen``; else ``event_id`` is
    noted there. An event without an id (None) is never a copy."""
    if event_id is None:
        return False
    if event_id in seen:
        return True
    seen.add(event_id)
    return False


cdef object _wake_ms(double t):
    """:func:`wake_ms` of a double: in C when the millisecond count is exact, else the pure
    twin's (which raises for an infinite or NaN ``t``)."""
    cdef double m = ceil(t * 1000.0)
    if not fabs(m) < _EXACT_MS:
        return _keystate.wake_ms(t)
    if m / 1000.0 < t:
        m += 1
    elif (m - 1) / 1000.0 >= t:
        m -= 1
    return <long long>m


def wake_ms(t):
    """The first whole millisecond ``m`` with ``m / 1000 >= t``: when a timer for ``t`` fires."""
    return _wake_ms(PyFloat_AsDouble(t))


cdef class IdleRule:
    """The idle-expiry rule for every timeout of a stream, applied one key visit at a time.

    ``timeouts`` must be sorted ascending and distinct (as
    :func:`aiowheel.spark.replay._check_timeouts` returns them); ``tick`` is the timer's tick
    and ``delay`` the watermark delay, both in seconds.
    """

    # Its fields are declared in aiowheel/spark/_ckeystate.pxd.

    def __cinit__(self, timeouts, tick, delay):
        self._timeouts = NULL

    def __init__(self, timeouts, tick, delay):
        cdef Py_ssize_t i
        cdef tuple values = tuple(timeouts)
        cdef double *doubles = <double *>malloc(max(1, len(values)) * sizeof(double))
        if doubles == NULL:
            raise MemoryError()
        try:
            for i in range(len(values)):
                doubles[i] = PyFloat_AsDouble(values[i])
            self._tick = PyFloat_AsDouble(tick)
            self._delay = PyFloat_AsDouble(delay)
        except BaseException:
            free(doubles)
            raise
        free(self._timeouts)
        self._timeouts = doubles
        self._count = len(values)
        self.timeouts = values
        self.tick = tick
        self.delay = delay

    def __dealloc__(self):
        free(self._timeouts)

    def visit(self, state, arrived, watermark):
        """Apply what the watermark (ms) has passed and emit what expired.

        ``arrived`` are the key's new events, each after every applied one (Spark's late-event
        filter ensures it). O(events kept + arrived) and one sort of the pending ones.
        """
        stored, expiries = self.visit_stored(
            None if state is None else tuple(state), list(arrived), watermark
        )
        return Visit(None if stored is None else KeyState._make(stored), expiries)

    def visit_stored(self, stored, list arrived, watermark):
        """:meth:`visit` on a :class:`KeyState` as the shard stores it, a plain tuple (no
        conversion on the hot path); ``arrived`` is the caller's list, not kept."""
        cdef double now = PyFloat_AsDouble(watermark) / 1000.0
        cdef list expiries = []
        cdef object last_seen = None  # the ts object of the period's touch; None: untracked
        cdef double seen_at = 0.0  # last_seen as a double, while tracked
        cdef Py_ssize_t fired = 0
        cdef Py_ssize_t applied, split, low, high, middle
        cdef list remembered, pending, ready, kept, recent
        cdef set seen = None
        cdef tuple event
        cdef double ts, forget
        cdef object wake
        if stored is None:
            remembered = []
            pending = list(arrived)
        else:
            last_seen, fired_object, applied, recent, _ = stored
            fired = fired_object
            remembered = recent[:applied]
            pending = recent[applied:]
            pending += arrived
            if last_seen is not None:
                seen_at = PyFloat_AsDouble(last_seen)
        # Pending events in rule order: one sort serves applying the ready ones and looking
        # ahead for the wake-up (stable, so copies keep arrival order).
        if len(pending) > 1:
            _sort_pending(pending)
        if pending and _ts(pending[0]) <= now:
            # bisect_right(pending, now, key=ts), step for step.
            low, high = 0, len(pending)
            while low < high:
                middle = (low + high) // 2
                if now < _ts(pending[middle]):
                    high = middle
                else:
                    low = middle + 1
            split = low
            ready, pending = pending[:split], pending[split:]
            seen = {(<tuple?>item)[2] for item in remembered}
            for item in ready:
                event = <tuple?>item
                ts_object, rank, event_id = event
                if _is_copy(seen, event_id):
                    continue  # a copy: the first by (ts, kind) counts
                if event_id is not None:
                    remembered.append(event)
                ts = PyFloat_AsDouble(ts_object)
                if last_seen is not None:
                    fired = self._expire(last_seen, seen_at, fired, ts, expiries)
                if rank == _CLOSE_RANK:
                    last_seen = None
                else:
                    last_seen, seen_at, fired = ts_object, ts, 0
        if last_seen is not None:
            fired = self._expire(last_seen, seen_at, fired, now, expiries)
            if fired == self._count:
                last_seen = None
        if remembered:
            # Remembered while a copy may still come: within delay of the watermark.
            forget = now - self._delay
            kept = [item for item in remembered if _ts(item) > forget]
            if len(kept) < len(remembered):
                remembered, seen = kept, None
        wake = self._wake(last_seen, seen_at, fired, pending, remembered, seen)
        if wake is None:
            return None, expiries
        return (last_seen, fired, len(remembered), remembered + pending, wake), expiries

    cdef double _deadline(self, double last_seen, Py_ssize_t fired) except? -1.0:
        """deadline(last_seen, timeouts[fired], tick) of aiowheel.spark.replay, in doubles."""
        cdef double tick = self._tick
        cdef double t = last_seen + self._timeouts[fired]
        cdef double ratio = t / tick
        cdef double q
        if not fabs(ratio) < _MAX_TICKS:
            return PyFloat_AsDouble(_py_deadline(last_seen, self.timeouts[fired], self.tick))
        q = ceil(ratio) + 0.0  # + 0.0: a ceiling of -0.0 is Python's int 0
        if q * tick < t:
            q += 1
        elif (q - 1) * tick >= t:
            q -= 1
        return q * tick + 0.0

    cdef Py_ssize_t _expire(
        self, object last_seen, double seen_at, Py_ssize_t fired, double at, list out
    ) except -1:
        """Emit the expiries of the period started at ``last_seen`` with a deadline <= ``at``;
        return the new ``fired``. ``last_seen`` is the ts object of the period's touch, or
        None for a float of ``seen_at``, made if an expiry needs it (a record's)."""
        cdef double expired_at
        while fired < self._count:
            expired_at = self._deadline(seen_at, fired)
            if expired_at > at:
                break
            if last_seen is None:
                last_seen = seen_at
            out.append((self.timeouts[fired], expired_at, last_seen))
            fired += 1
        return fired

    cdef object _wake(
        self,
        object last_seen,
        double seen_at,
        Py_ssize_t fired,
        list pending,
        list remembered,
        set seen,
    ):
        """When the key must be visited again if no event arrives for it (ms), or None if its
        state can go (see the pure twin)."""
        cdef double end, ts, delay = self._delay
        cdef bint found = False
        cdef double first = 0.0
        cdef tuple event
        if not pending:
            if last_seen is not None:
                return _wake_ms(self._deadline(seen_at, fired))
            if not remembered:
                return None
            end = _ts(remembered[0])
            for item in remembered:
                ts = _ts(item)
                if ts > end:
                    end = ts
            return _wake_ms(end + delay)
        if seen is None:
            seen = {(<tuple?>item)[2] for item in remembered}
        # The first expiry the key would emit if the pending events were all still to come.
        for item in pending:
            event = <tuple?>item
            ts_object, rank, event_id = event
            if _is_copy(seen, event_id):
                continue
            ts = PyFloat_AsDouble(ts_object)
            if last_seen is not None:
                first = self._deadline(seen_at, fired)
                if first <= ts:
                    found = True
                    break
            if rank == _CLOSE_RANK:
                last_seen = None
            else:
                last_seen, seen_at, fired = ts_object, ts, 0
        if not found and last_seen is not None:
            first = self._deadline(seen_at, fired)
            found = True
        if found:
            return _wake_ms(first)
        end = _ts(pending[len(pending) - 1])
        for item in remembered:
            ts = _ts(item) + delay
            if ts > end:
                end = ts
        for item in pending:
            if (<tuple?>item)[2] is not None:
                ts = _ts(item) + delay
                if ts > end:
                    end = ts
        return _wake_ms(end)

    cdef int visit_record(
        self,
        Record *record,
        const RecordEvent *arrived,
        Py_ssize_t count,
        double now,
        list expiries,
    ) except -1:
        """:meth:`visit_stored` on C values: ``record`` is the key's state (all zeros for
        none), ``arrived[:count]`` its new events, ``now`` the watermark in seconds; the
        expiries go to the end of ``expiries``. The same steps on the same doubles, so the
        same result: RECORD_KEPT with ``record`` the state to keep, or RECORD_GONE. Where C
        values cannot follow it -- more than RECORD_EVENTS events, a pending ``ts`` that is
        NaN (list.sort's order then), a ``fired`` outside the timeouts, a wake-up beyond
        int64 milliseconds -- RECORD_UNFIT, with ``record`` and ``expiries`` as they were:
        the caller then asks :meth:`visit_stored`."""
        cdef RecordEvent kept[RECORD_EVENTS]
        cdef RecordEvent pending[RECORD_EVENTS]
        cdef const RecordEvent *seen[RECORD_EVENTS]
        cdef Py_ssize_t applied = record.applied
        cdef Py_ssize_t held = record.count
        cdef Py_ssize_t n_kept, n_pending, n_seen, split, i, j
        cdef Py_ssize_t emitted = len(expiries)
        cdef bint tracked = record.tracked, found = False, copy
        cdef double seen_at = record.last_seen, first = 0.0, end, ts, forget, m
        cdef long long fired = record.fired
        cdef RecordEvent event
        if (
            self._count < 1
            or held + count > RECORD_EVENTS
            or not 0 <= applied <= held
            or (tracked and not 0 <= fired < self._count)
        ):
            return RECORD_UNFIT
        n_kept = applied
        memcpy(kept, record.events, applied * sizeof(RecordEvent))
        n_pending = held - applied
        memcpy(pending, record.events + applied, n_pending * sizeof(RecordEvent))
        memcpy(pending + n_pending, arrived, count * sizeof(RecordEvent))
        n_pending += count
        for i in range(n_pending):
            if pending[i].ts != pending[i].ts:
                return RECORD_UNFIT
        # Rule order, (ts, kind rank), stable: an event moves before another only if its key
        # is smaller.
        for i in range(1, n_pending):
            event = pending[i]
            j = i
            while j > 0 and (
                event.ts < pending[j - 1].ts
                or (event.ts == pending[j - 1].ts and event.rank < pending[j - 1].rank)
            ):
                pending[j] = pending[j - 1]
                j -= 1
            pending[j] = event
        if n_pending and pending[0].ts <= now:
            split = 0  # bisect_right(pending, now, key=ts)
            while split < n_pending and not now < pending[split].ts:
                split += 1
            for i in range(split):
                event = pending[i]
                if event.id != NULL:
                    if _has_id(kept, n_kept, &event):
                        continue  # a copy: the first by (ts, kind) counts
                    kept[n_kept] = event
                    n_kept += 1
                if tracked:
                    fired = self._expire(None, seen_at, fired, event.ts, expiries)
                if event.rank == _CLOSE_RANK:
                    tracked = False
                else:
                    tracked, seen_at, fired = True, event.ts, 0
            n_pending -= split
            memmove(pending, pending + split, n_pending * sizeof(RecordEvent))
        if tracked:
            fired = self._expire(None, seen_at, fired, now, expiries)
            if fired == self._count:
                tracked = False
        if n_kept:
            # Remembered while a copy may still come: within delay of the watermark.
            forget = now - self._delay
            j = 0
            for i in range(n_kept):
                if kept[i].ts > forget:
                    kept[j] = kept[i]
                    j += 1
            n_kept = j
        # The wake-up: _wake's steps, on a look-ahead copy of the state.
        cdef bint ahead = tracked
        cdef double ahead_at = seen_at
        cdef long long ahead_fired = fired
        if not n_pending:
            if tracked:
                first = self._deadline(seen_at, fired)
            elif not n_kept:
                return RECORD_GONE
            else:
                end = kept[0].ts
                for i in range(n_kept):
                    if kept[i].ts > end:
                        end = kept[i].ts
                first = end + self._delay
        else:
            # The first expiry the key would emit if the pending events were all still to
            # come, the copies of remembered (or earlier pending) ids skipped.
            n_seen = 0
            for i in range(n_kept):
                if kept[i].id != NULL:
                    seen[n_seen] = &kept[i]
                    n_seen += 1
            for i in range(n_pending):
                if pending[i].id != NULL:
                    copy = False
                    for j in range(n_seen):
                        if _same_id(seen[j], &pending[i]):
                            copy = True
                            break
                    if copy:
                        continue
                    seen[n_seen] = &pending[i]
                    n_seen += 1
                ts = pending[i].ts
                if ahead:
                    first = self._deadline(ahead_at, ahead_fired)
                    if first <= ts:
                        found = True
                        break
                if pending[i].rank == _CLOSE_RANK:
                    ahead = False
                else:
                    ahead, ahead_at, ahead_fired = True, ts, 0
            if not found and ahead:
                first = self._deadline(ahead_at, ahead_fired)
                found = True
            if not found:
                end = pending[n_pending - 1].ts
                for i in range(n_kept):
                    ts = kept[i].ts + self._delay
                    if ts > end:
                        end = ts
                for i in range(n_pending):
                    if pending[i].id != NULL:
                        ts = pending[i].ts + self._delay
                        if ts > end:
                            end = ts
                first = end
        # wake_ms(first), in C while the milliseconds are exact (_wake_ms).
        m = ceil(first * 1000.0)
        if not fabs(m) < _EXACT_MS:
            del expiries[emitted:]
            return RECORD_UNFIT
        if m / 1000.0 < first:
            m += 1
        elif (m - 1) / 1000.0 >= first:
            m -= 1
        record.tracked = tracked
        record.last_seen = seen_at if tracked else 0.0
        record.fired = fired
        record.applied = n_kept
        memcpy(record.events, kept, n_kept * sizeof(RecordEvent))
        memcpy(record.events + n_kept, pending, n_pending * sizeof(RecordEvent))
        record.count = n_kept + n_pending
        record.wake = <long long>m
        return RECORD_KEPT


cdef inline bint _same_id(const RecordEvent *a, const RecordEvent *b) noexcept:
    """True if the two events' ids (neither None) are equal."""
    return a.id_size == b.id_size and memcmp(a.id, b.id, a.id_size) == 0


cdef inline bint _has_id(
    const RecordEvent *events, Py_ssize_t count, const RecordEvent *event
) noexcept:
    """True if one of ``events[:count]`` has ``event``'s id (not None)."""
    cdef Py_ssize_t i
    for i in range(count):
        if events[i].id != NULL and _same_id(&events[i], event):
            return True
    return False
