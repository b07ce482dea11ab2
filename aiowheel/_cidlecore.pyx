# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel._idlecore`: idle expiry's touch, discard, queries and
filing, in Cython, over the compiled wheel's tick conversions (``_cwheel.pxd``).

:mod:`aiowheel._idlecore` is the specification: same API, behaviour and errors; the idle tests
run on both (see :mod:`aiowheel._impl`) and tests/idle/ drives both twins together against
a reference model. Like the pure twin, it talks to its Timer only through the host interface,
:class:`aiowheel.TimerHost` (``time``, ``tick``, ``closed``, ``call_at``, ``refile_at``,
``run_now``), so it runs on a Timer of either twin, and cimports no Timer core.

What is different is how, never what:

* touch is a C method: no Python frame, the dict probed with PyDict_GetItemWithError, and the
  times compared as C doubles wherever that is exactly Python's comparison -- a float clock
  reading, and deadline bounds that are floats or ints within 2**53 (``exact``). Anything else
  (an int clock, a huge int tick) takes the same steps on Python objects.
* The clock is still the Timer's own, read at every touch (see aiowheel/_idlecore.py for why
  never a time cached per pass); what is kept is the clock itself, ``timer.time``, once it has
  given a time (the host interface says it does not change from then on), so that a touch looks
  up no attribute of the Timer's. When it is time.monotonic -- asyncio's own loops, see
  aiowheel/_backends/_asyncio.py -- it is read through the C function time.monotonic itself
  calls (``aw_monotonic`` in ``_ccpython.pxd``), which gives the same double, without making a
  float object; any other clock (uvloop's loop.time, a virtual-time loop's, trio's
  current_time) is called as it is.
"""

cimport cython
from cpython.dict cimport PyDict_GetItemWithError
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact, PyFloat_FromDouble
from cpython.list cimport PyList_GET_SIZE
from cpython.long cimport PyLong_AsDouble, PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from libc.stdint cimport int64_t

from aiowheel._ccpython cimport AW_CPYTHON_FALLBACK, AW_HAVE_C_MONOTONIC, aw_monotonic
from aiowheel._cint64 cimport _EXACT
from aiowheel._cwheel cimport _Tick, _tick_of, _to_ticks

import contextvars as _contextvars
import math
from time import monotonic as _MONOTONIC
from types import GenericAlias as _GenericAlias

__all__ = ["IdleCore"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd).
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

# time.monotonic, the clock asyncio's own loops give the Timer (compared by identity), where it
# is read in C (trick 6 of _ccpython.pxd); None where this build cannot (the fallback below 3.13).
_C_MONOTONIC = _MONOTONIC if AW_HAVE_C_MONOTONIC else None

cdef inline bint _exact_double(object value, double *out) except -1:
    """Store ``value`` in ``out`` and return True if comparing a float with it is comparing
    doubles: a float, or an int within 2**53. False (and nothing stored) otherwise."""
    cdef long long whole
    cdef int overflow
    if PyFloat_CheckExact(value):
        out[0] = PyFloat_AS_DOUBLE(value)
        return True
    if PyLong_CheckExact(value):
        whole = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and -_EXACT <= whole <= _EXACT:
            out[0] = <double>whole
            return True
    return False


@cython.final
cdef class _IdleDeadline:
    """One expiry tick ``when = q * tick``: the deadline shared by every key touched while
    ``after < t + timeout <= when``, and the keys filed to be looked at when it comes due."""

    # The fields, with the invariant each keeps, are declared in _cidlecore.pxd.


cdef _IdleDeadline _new_deadline(object after, object when):
    cdef _IdleDeadline deadline = _IdleDeadline.__new__(_IdleDeadline)
    deadline.after = after
    deadline.when = when
    deadline.exact = _exact_double(after, &deadline.after_d) and _exact_double(
        when, &deadline.when_d
    )
    deadline.filed = []
    deadline.handle = None
    return deadline


# A key that is still filed but no longer tracked (discarded, or expired while filed).
cdef _IdleDeadline _UNTRACKED = _new_deadline(-math.inf, -math.inf)
# A key that is neither tracked nor filed; never stored.
cdef _IdleDeadline _ABSENT = _new_deadline(-math.inf, -math.inf)


cdef inline _IdleDeadline _deadline_of(dict deadlines, object key):
    """deadlines.get(key, _ABSENT); an error of the key's __hash__ or __eq__ propagates."""
    cdef PyObject *found = PyDict_GetItemWithError(deadlines, key)
    if found is NULL:
        return _ABSENT
    return <_IdleDeadline>found


cdef class IdleCore:
    """The keys, their deadlines and their filing on the Timer; see
    :class:`aiowheel.IdleTimeouts`, which checks the arguments before passing them here."""

    # The fields, with the invariant each keeps, are declared in _cidlecore.pxd.

    def __init__(self, timer, timeout, on_expire):
        self._timer = timer
        self._clock = None
        self._timeout = timeout
        self._on_expire = on_expire
        self._deadlines = {}
        self._current = _ABSENT
        self._pending = set()
        self._len = 0
        self._closed = False
        self._context = _contextvars.copy_context()
        self._timeout_exact = False
        if PyFloat_CheckExact(timeout):
            self._timeout_d = PyFloat_AS_DOUBLE(timeout)
            self._timeout_exact = True
        elif PyLong_CheckExact(timeout):
            try:
                self._timeout_d = PyLong_AsDouble(timeout)  # what float + int converts it to
                self._timeout_exact = True
            except OverflowError:  # float + timeout raises it too, on the slow path
                pass

    @classmethod
    def __class_getitem__(cls, item):
        # IdleCore[K] in base classes, and IdleTimeouts[str] (which inherits this) anywhere: an
        # alias, as subscripting the pure twin's Generic gives.
        return _GenericAlias(cls, item)

    @property
    def timeout(self):
        """Seconds of silence after which a key expires."""
        return self._timeout

    @property
    def closed(self):
        """True once ``close()`` was called."""
        return self._closed

    # -- events -------------------------------------------------------------------------------

    def touch(self, key):
        """Start tracking ``key``, or start a new idle period for it: it now expires at
        ``E(timer.time())`` unless touched or discarded before. O(1), no wheel operation.

        If the key's previous period had already ended (``timer.time() >= E``), it expires
        first: ``on_expire(key)`` is called for that period before the new one starts. Raises
        RuntimeError before the Timer has started and once this object is closed. (Close it
        before the Timer: once the Timer has closed, nothing expires any more.) Raises
        :class:`~aiowheel.PendingLimitError` for a key not tracked yet whose deadline tick has
        no wheel entry yet, if the Timer is at ``max_pending``: the key is then not tracked.
        A key already tracked is never refused, nor is its re-filing in the driver. An
        unhashable key raises TypeError, and an error of the key's ``__hash__`` or ``__eq__``
        propagates, as from a dict; the key is then not tracked (or its period is unchanged).
        """
        cdef double now_d, w_d
        cdef _IdleDeadline current, previous
        clock = self._clock
        if clock is None:
            now = self._read_clock()
            if not PyFloat_CheckExact(now):
                self._touch_objects(key, now)
                return
            now_d = PyFloat_AS_DOUBLE(now)
        elif clock is _C_MONOTONIC:
            aw_monotonic(&now_d)
        else:
            now = clock()
            if not PyFloat_CheckExact(now):
                self._touch_objects(key, now)
                return
            now_d = PyFloat_AS_DOUBLE(now)
        if not self._timeout_exact:
            self._touch_objects(key, PyFloat_FromDouble(now_d))
            return
        w_d = now_d + self._timeout_d
        current = self._current
        if not (current.exact and current.after_d < w_d <= current.when_d):
            if current.exact or not current.after < w_d <= current.when:
                current = self._next_deadline(w_d)
        previous = _deadline_of(self._deadlines, key)
        if previous.exact:
            if previous.when_d > now_d:  # tracked, its period still running: the common case
                self._deadlines[key] = current
                return
        elif previous.when > now_d:
            self._deadlines[key] = current
            return
        self._touch_late(key, current, PyFloat_FromDouble(now_d))

    cdef int _touch_objects(self, object key, object now) except -1:
        """touch, on Python objects: a clock that is not a float, or an int timeout too big
        for a double."""
        cdef _IdleDeadline current, previous
        w = now + self._timeout
        current = self._current
        if not current.after < w <= current.when:
            current = self._next_deadline(w)
        previous = _deadline_of(self._deadlines, key)
        if previous is not _ABSENT and previous.when > now:
            self._deadlines[key] = current
            return 0
        self._touch_late(key, current, now)
        return 0

    def discard(self, key):
        """Stop tracking ``key``; return whether it was tracked. O(1).

        A key whose period had already ended (``timer.time() >= E``) expires instead:
        ``on_expire(key)`` is called for that period and the result is False.
        """
        cdef _IdleDeadline previous = _deadline_of(self._deadlines, key)
        if previous is _ABSENT or previous is _UNTRACKED:
            return False
        if previous.when <= self._now():
            self._expire(key)
            previous = _deadline_of(self._deadlines, key)  # on_expire may have touched it again
            if previous is _ABSENT or previous is _UNTRACKED:
                return False
        self._deadlines[key] = _UNTRACKED
        self._len -= 1
        return True

    # -- queries ------------------------------------------------------------------------------

    def __contains__(self, key):
        """True while ``key`` is tracked (until its expiry is processed or it is discarded)."""
        cdef _IdleDeadline deadline = _deadline_of(self._deadlines, key)
        return deadline is not _ABSENT and deadline is not _UNTRACKED

    def __len__(self):
        """Number of tracked keys."""
        return self._len

    def deadline(self, key):
        """When ``key`` expires (``E`` of its current period), or None if it is not tracked."""
        cdef _IdleDeadline deadline = _deadline_of(self._deadlines, key)
        if deadline is _ABSENT or deadline is _UNTRACKED:
            return None
        return deadline.when

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self):
        """Stop tracking every key without expiring any, and take the wheel entries off the
        Timer. Afterwards ``touch`` raises RuntimeError. Idempotent."""
        cdef _IdleDeadline deadline
        if self._closed:
            return
        self._closed = True
        for item in self._pending:
            deadline = <_IdleDeadline>item
            if deadline.handle is not None:
                deadline.handle.cancel()
                deadline.handle = None
            deadline.filed = []
        self._pending.clear()
        self._deadlines.clear()
        self._len = 0

    # -- internals ----------------------------------------------------------------------------

    cdef object _now(self):
        """timer.time(): the Timer's clock, read as touch reads it."""
        cdef double now_d
        clock = self._clock
        if clock is None:
            return self._read_clock()
        if clock is _C_MONOTONIC:
            aw_monotonic(&now_d)
            return PyFloat_FromDouble(now_d)
        return clock()

    cdef object _read_clock(self):
        """The host's clock read through ``timer.time``, which is kept once it gave a time:
        before the Timer starts it raises, and from then on it is the loop's clock itself."""
        clock = self._timer.time
        now = clock()
        self._clock = clock
        return now

    cdef _IdleDeadline _next_deadline(self, object w):
        """The deadline for ``t + timeout == w``: a new current one, since time moved on."""
        cdef _Tick k
        cdef int64_t ticks
        tick = self._timer.tick
        k = _tick_of(tick)
        _to_ticks(w, tick, &k, True, &ticks)
        q = ticks
        self._current = _new_deadline((q - 1) * tick, q * tick)
        return self._current

    cdef int _touch_late(self, object key, _IdleDeadline current, object now) except -1:
        """``touch`` for a key that is new, untracked, or whose period has ended."""
        cdef _IdleDeadline previous = _deadline_of(self._deadlines, key)
        if previous is not _ABSENT and previous is not _UNTRACKED:
            # previous.when <= now: the period ended and the driver has not processed it yet.
            self._expire(key)
            previous = _deadline_of(self._deadlines, key)
        if self._closed:
            raise RuntimeError("IdleTimeouts is closed")
        if previous is _ABSENT:  # filed nowhere: file it under its deadline (new work)
            self._file(key, current, self._timer.call_at)
            self._len += 1
        elif previous is _UNTRACKED:  # still filed from an earlier period: reuse that filing
            self._len += 1
        self._deadlines[key] = current
        return 0

    cdef int _expire(self, object key) except -1:
        """End ``key``'s period: untrack it (it stays filed) and run ``on_expire(key)``."""
        self._deadlines[key] = _UNTRACKED
        self._len -= 1
        self._timer.run_now(self._on_expire, (key,))
        return 0

    cdef int _file(self, object key, _IdleDeadline deadline, object call_at) except -1:
        """File ``key`` under ``deadline``, giving the deadline a wheel entry with ``call_at``
        if it has none: the Timer's ``call_at`` for a new key (which ``max_pending`` may
        refuse, at the touch), its ``refile_at`` for a key already tracked (never refused)."""
        if deadline.handle is None:
            deadline.handle = call_at(deadline.when, self._fire, deadline, context=self._context)
            self._pending.add(deadline)
        deadline.filed.append(key)
        return 0

    def _fire(self, _IdleDeadline due):
        """The wheel entry of ``due`` fired: expire its keys whose period ended, re-file the
        others under their current deadline, drop the untracked ones."""
        cdef list filed = due.filed
        cdef Py_ssize_t index = 0, n = PyList_GET_SIZE(filed)
        cdef _IdleDeadline deadline
        cdef dict deadlines = self._deadlines
        due.filed = []
        due.handle = None
        self._pending.discard(due)
        now = self._now()
        refile = self._timer.refile_at
        try:
            while index < n:
                key = filed[index]
                deadline = <_IdleDeadline>deadlines[key]
                if deadline.when <= now and deadline is not _UNTRACKED:
                    self._expire(key)
                    if self._closed or self._timer.closed:
                        # on_expire closed this object, or the Timer (a coroutine started
                        # eagerly can): nothing more expires, nothing is filed on it again.
                        return
                    deadline = <_IdleDeadline>deadlines[key]  # on_expire may have touched it
                if deadline is _UNTRACKED:
                    del deadlines[key]
                else:
                    self._file(key, deadline, refile)
                index += 1
        except BaseException:
            # An interrupt from on_expire (nothing else leaves _expire). The keys not looked at
            # yet, and the interrupted one (untracked now, or touched again), go back under
            # `due`, due at once: the driver's next pass picks them up where this one stopped.
            if not (self._closed or self._timer.closed):
                for key in filed[index:]:
                    self._file(key, due, refile)
            raise
