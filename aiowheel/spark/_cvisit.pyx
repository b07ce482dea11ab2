# cython: language_level=3, initializedcheck=False
# cython: binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel.spark._visit`: a shard's visit, :func:`visit` and
:func:`add_events`, in Cython.

:mod:`aiowheel.spark._visit` is the specification: same API, same results, same errors;
tests/spark/test_shard.py drives each twin through the same visits, byte for byte, and the
stream's tests run on each. After the rule (compiled in :mod:`aiowheel.spark._ckeystate`), this
is what a Spark worker spends a visit with input in: grouping the rows by key, finding the keys
in the pages, and placing them in their new ones, one dict or list operation at a time.

What is different is how, never what. The same code with its containers typed, so that each of
their operations is a call into CPython's C API instead of the interpreter's; and a page it
changes is a :class:`_Page`, which decodes a key's state only when the visit takes it, and
copies the stored bytes of every state it did not take when it is written back. A page's states
are pickled in protocol 3, without frames or a memo (:func:`aiowheel.spark._shard.pickled_states`),
so each state is one contiguous run of bytes, the same wherever it stands: :func:`_scan_states`
finds the runs (and each state's wake-up) without building an object, :func:`_load_state`
decodes one, and :func:`_dump_state` encodes one byte for byte as pickle does. A page whose
bytes are not such runs (written by an earlier version, or holding a value outside the opcodes
below) is decoded whole by pickle instead, and a state outside them is encoded by pickle: the
same bytes either way. What the shard stores, and how it is encoded, is
:mod:`aiowheel.spark._shard`'s, as for the pure twin. Bounds stay checked: a malformed state
raises the pure twin's IndexError or TypeError.

With the compiled rule, a key's visit makes no Python object of its state or of its events: its
stored bytes are read into a C record (:func:`_read_record`; its ``event_id`` strs stay bytes,
borrowed from the page), its new events too (:func:`_read_arrived`), the rule visits the record
(:meth:`aiowheel.spark._ckeystate.IdleRule.visit_record`) and the record is written back as
pickle's bytes (:func:`_dump_record`, a :class:`_Run` of the page). A state or events a record
does not hold (anything but float times, int64 ints, str or None ids; more than RECORD_EVENTS
events), or a visit the record cannot follow (:meth:`~IdleRule.visit_record`'s RECORD_UNFIT), is
visited as objects by ``visit_stored``, as with the pure rule: the same bytes and expiries
either way (tests/spark/test_keystate.py and the twins' test in tests/spark/test_shard.py).
"""

from cpython.exc cimport PyErr_Clear
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_CheckExact, PyLong_FromLongLong, PyLong_FromSsize_t
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcmp, memcpy, memmove, memset

from aiowheel._ccpython cimport AW_CPYTHON_FALLBACK
from aiowheel.spark._ckeystate cimport (
    RECORD_EVENTS,
    RECORD_GONE,
    RECORD_UNFIT,
    IdleRule,
    Record,
    RecordEvent,
)

from aiowheel.spark._shard import MOVE_SHARE as _MOVE_SHARE_OBJECT
from aiowheel.spark._shard import WAKE as _WAKE_OBJECT
from aiowheel.spark._shard import (
    StoredPage,
    check_columns,
    pack_page,
    page_pickles,
    pickled_states,
    stored_pickles,
    write_back,
)

__all__ = ["add_events", "visit"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd); it uses no
#: CPython internal either way, but reports the build as every compiled part does.
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

cdef Py_ssize_t MOVE_SHARE = _MOVE_SHARE_OBJECT
cdef Py_ssize_t WAKE = _WAKE_OBJECT


cdef extern from "Python.h":
    # Public C API since CPython 3.11 (IEEE 754 doubles, big-endian with le=0, as pickle's).
    double PyFloat_Unpack8(const char *data, int le) except? -1.0
    int PyFloat_Pack8(double x, char *data, int le) except -1
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1
    # NULL with an exception set for lone surrogates: cleared by the caller, as pickle does.
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size)
    object PyUnicode_AsEncodedString(object text, const char *encoding, const char *errors)
    object PyUnicode_DecodeUTF8(const char *data, Py_ssize_t size, const char *errors)
    bint PyFloat_CheckExact(object value)
    bint PyUnicode_CheckExact(object value)
    double PyFloat_AS_DOUBLE(object value)
    double PyFloat_AsDouble(object value) except? -1.0


# The pickle opcodes of a page's states (protocol 3, as pickle writes them without a memo).
cdef enum:
    _PROTO = 0x80
    _STOP = 0x2E  # .
    _MARK = 0x28  # (
    _NONE = 0x4E  # N
    _BINFLOAT = 0x47  # G: 8 bytes, big-endian
    _BININT1 = 0x4B  # K: 1 byte
    _BININT2 = 0x4D  # M: 2 bytes, little-endian
    _BININT = 0x4A  # J: 4 bytes, little-endian, signed
    _LONG1 = 0x8A  # 1 byte n, then n bytes, little-endian, signed
    _BINUNICODE = 0x58  # X: 4 bytes n, little-endian, then n bytes of UTF-8
    _EMPTY_TUPLE = 0x29  # )
    _TUPLE = 0x74  # t: the values since the last MARK
    _TUPLE1 = 0x85
    _TUPLE2 = 0x86
    _TUPLE3 = 0x87
    _EMPTY_LIST = 0x5D  # ]
    _APPEND = 0x61  # a
    _APPENDS = 0x65  # e: the values since the last MARK
    # Pickle's own limits: a list is appended in batches of this many; LONG1 within int64.
    _BATCH = 1000
    # Nesting (MARKs open at once) a state may have here; a StoredKey has 2.
    _DEPTH = 16


cdef inline list _as_list(object column):
    return column if type(column) is list else list(column)


# ----------------------------------------------------------------------------------------
# Reading a page's states: the runs of bytes, then one state at a time.


cdef inline bint _int_at(
    const unsigned char *data, Py_ssize_t at, Py_ssize_t end, Py_ssize_t *after, int64_t *value
):
    """Read the int opcode at ``at`` into ``value`` and ``after``; False if it is none (or
    past ``end``, or a LONG1 of more than 8 bytes)."""
    cdef unsigned char op = data[at]
    cdef Py_ssize_t n, i
    cdef uint64_t bits = 0
    if op == _BININT1:
        if at + 2 > end:
            return False
        value[0] = data[at + 1]
        after[0] = at + 2
    elif op == _BININT2:
        if at + 3 > end:
            return False
        value[0] = data[at + 1] | (<int64_t>data[at + 2] << 8)
        after[0] = at + 3
    elif op == _BININT:
        if at + 5 > end:
            return False
        bits = (
            <uint64_t>data[at + 1] | (<uint64_t>data[at + 2] << 8)
            | (<uint64_t>data[at + 3] << 16) | (<uint64_t>data[at + 4] << 24)
        )
        value[0] = <int64_t>(<int>(<unsigned int>bits))
        after[0] = at + 5
    elif op == _LONG1:
        if at + 2 > end:
            return False
        n = data[at + 1]
        if n > 8 or at + 2 + n > end:
            return False
        for i in range(n):
            bits |= <uint64_t>data[at + 2 + i] << (8 * i)
        if 0 < n < 8 and data[at + 1 + n] & 0x80:
            bits |= ~(<uint64_t>0) << (8 * n)  # negative: extend the sign
        value[0] = <int64_t>bits
        after[0] = at + 2 + n
    else:
        return False
    return True


cdef inline Py_ssize_t _text_size(const unsigned char *data, Py_ssize_t at) noexcept:
    """The size of the BINUNICODE at ``at``."""
    return (
        <Py_ssize_t>data[at + 1] | (<Py_ssize_t>data[at + 2] << 8)
        | (<Py_ssize_t>data[at + 3] << 16) | (<Py_ssize_t>data[at + 4] << 24)
    )


cdef Py_ssize_t _skip_state(
    const unsigned char *data, Py_ssize_t at, Py_ssize_t end, int64_t *wake
):
    """The end of the state whose bytes start at ``at``: a MARK ... TUPLE of five values, the
    last an int (its wake-up, into ``wake``), each value made of the opcodes above. -1 if the
    bytes are not such a state."""
    cdef Py_ssize_t counts[_DEPTH]
    cdef Py_ssize_t depth = 0, after, size
    cdef int64_t number = 0
    cdef bint last_int = False, closes_int
    cdef unsigned char op
    if at >= end or data[at] != _MARK:
        return -1
    counts[0] = 0
    at += 1
    while at < end:
        op = data[at]
        if op == _BININT1 or op == _BININT2 or op == _BININT or op == _LONG1:
            if not _int_at(data, at, end, &after, &number):
                return -1
            at = after
            counts[depth] += 1
            last_int = True
            continue
        closes_int = last_int
        last_int = False
        if op == _NONE or op == _EMPTY_TUPLE or op == _EMPTY_LIST:
            counts[depth] += 1
            at += 1
        elif op == _BINFLOAT:
            if at + 9 > end:
                return -1
            at += 9
            counts[depth] += 1
        elif op == _BINUNICODE:
            if at + 5 > end:
                return -1
            size = _text_size(data, at)
            if at + 5 + size > end:
                return -1
            at += 5 + size
            counts[depth] += 1
        elif op == _MARK:
            depth += 1
            if depth == _DEPTH:
                return -1
            counts[depth] = 0
            at += 1
        elif op == _TUPLE:
            if depth == 0:
                # The state's own end: five values, the last an int read just before.
                if counts[0] != 5 or not closes_int:
                    return -1
                wake[0] = number
                return at + 1
            depth -= 1
            counts[depth] += 1
            at += 1
        elif op == _TUPLE1 or op == _TUPLE2 or op == _TUPLE3:
            if counts[depth] < op - _TUPLE1 + 1:
                return -1
            counts[depth] -= op - _TUPLE1
            at += 1
        elif op == _APPEND:
            if counts[depth] < 2:
                return -1
            counts[depth] -= 1
            at += 1
        elif op == _APPENDS:
            if depth == 0 or counts[depth - 1] < 1:
                return -1
            depth -= 1
            at += 1
        else:
            return -1
    return -1


cdef bint _scan_states(
    bytes pickles, Py_ssize_t at, Py_ssize_t count, Py_ssize_t *starts, int64_t *wakes
):
    """Find the ``count`` states of the states' pickle that starts at ``at`` in ``pickles``
    and ends with them: state ``i`` is ``pickles[starts[i]:starts[i + 1]]``, its wake-up
    ``wakes[i]``. False if that pickle is not ``count`` states as :func:`_skip_state` reads
    them, in a tuple, in protocol 3."""
    cdef const unsigned char *data = <const unsigned char *>PyBytes_AS_STRING(pickles)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(pickles), i
    if count < 1 or at + 4 > end or data[at] != _PROTO or data[at + 1] != 3:
        return False
    at += 2
    if count > 3:
        if data[at] != _MARK:
            return False
        at += 1
    for i in range(count):
        starts[i] = at
        at = _skip_state(data, at, end, &wakes[i])
        if at < 0:
            return False
    starts[count] = at
    if count > 3:
        if at >= end or data[at] != _TUPLE:
            return False
    elif at >= end or data[at] != _TUPLE1 + count - 1:
        return False
    return at + 2 == end and data[at + 1] == _STOP


cdef object _atom(const unsigned char *data, Py_ssize_t *at, Py_ssize_t end, bint *ok):
    """The None, float, int or str whose opcode is at ``at[0]`` (``at[0]`` moves past it);
    ``ok`` false if there is none there."""
    cdef Py_ssize_t start = at[0], size
    cdef int64_t number
    cdef unsigned char op
    ok[0] = True
    if start >= end:
        ok[0] = False
        return None
    op = data[start]
    if op == _BINFLOAT and start + 9 <= end:
        at[0] = start + 9
        return PyFloat_Unpack8(<const char *>data + start + 1, 0)
    if op == _NONE:
        at[0] = start + 1
        return None
    if op == _BINUNICODE and start + 5 <= end:
        size = _text_size(data, start)
        if start + 5 + size <= end:
            at[0] = start + 5 + size
            return PyUnicode_DecodeUTF8(<const char *>data + start + 5, size, "surrogatepass")
    elif _int_at(data, start, end, at, &number):
        return PyLong_FromLongLong(number)
    ok[0] = False
    return None


cdef object _load_event(const unsigned char *data, Py_ssize_t *at, Py_ssize_t end):
    """The tuple of three atoms (:func:`_atom`) at ``at[0]`` (``at[0]`` moves past it), or
    None if there is none there."""
    cdef tuple event = PyTuple_New(3)
    cdef Py_ssize_t item
    cdef object value
    cdef bint ok
    for item in range(3):
        value = _atom(data, at, end, &ok)
        if not ok:
            return None
        Py_INCREF(value)
        PyTuple_SET_ITEM(event, item, value)
    if at[0] >= end or data[at[0]] != _TUPLE3:
        return None
    at[0] += 1
    return event


cdef object _load_stored(const unsigned char *data, Py_ssize_t at, Py_ssize_t end):
    """The state whose bytes are ``data[at:end]`` if they have a StoredKey's shape: a tuple of
    five values, each an atom (:func:`_atom`) or a list of tuples of three atoms (its
    events); else None (:func:`_load_state` then reads them as pickle would)."""
    cdef tuple state
    cdef list events
    cdef object value, event
    cdef Py_ssize_t field, mark
    cdef bint ok
    if data[at] != _MARK:
        return None
    at += 1
    state = PyTuple_New(5)
    for field in range(5):
        if at < end and data[at] == _EMPTY_LIST:
            at += 1
            events = []
            # Its events: batches of MARK ... APPENDS, or one and APPEND, or none.
            while at < end:
                if data[at] == _MARK:
                    at += 1
                    while at < end and data[at] != _APPENDS:
                        event = _load_event(data, &at, end)
                        if event is None:
                            return None
                        events.append(event)
                    if at >= end:
                        return None
                    at += 1
                    continue
                mark = at
                event = _load_event(data, &at, end)
                if event is not None and at < end and data[at] == _APPEND:
                    events.append(event)
                    at += 1
                else:
                    at = mark  # no event: the list ends here
                break
            value = events
        else:
            value = _atom(data, &at, end, &ok)
            if not ok:
                return None
        Py_INCREF(value)
        PyTuple_SET_ITEM(state, field, value)
    if at + 1 != end or data[at] != _TUPLE:
        return None
    return state


cdef object _load_state(const unsigned char *data, Py_ssize_t at, Py_ssize_t end):
    """The state whose bytes are ``data[at:end]``, as :func:`_scan_states` found them: what
    pickle would load from them."""
    cdef object state = _load_stored(data, at, end)
    if state is not None:
        return state
    cdef list stack = []
    cdef Py_ssize_t marks[_DEPTH]
    cdef Py_ssize_t depth = 0, start, i, n
    cdef unsigned char op
    cdef object value, items
    cdef bint ok
    while at < end:
        value = _atom(data, &at, end, &ok)
        if ok:
            stack.append(value)
            continue
        op = data[at]
        if op == _EMPTY_TUPLE:
            stack.append(())
            at += 1
        elif op == _EMPTY_LIST:
            stack.append([])
            at += 1
        elif op == _MARK:
            marks[depth] = len(stack)
            depth += 1
            at += 1
        elif op == _TUPLE or (_TUPLE1 <= op <= _TUPLE3):
            if op == _TUPLE:
                depth -= 1
                start = marks[depth]
            else:
                start = len(stack) - (op - _TUPLE1 + 1)
            n = len(stack) - start
            value = PyTuple_New(n)
            for i in range(n):
                items = stack[start + i]
                Py_INCREF(items)
                PyTuple_SET_ITEM(value, i, items)
            del stack[start:]
            stack.append(value)
            at += 1
        elif op == _APPEND:
            value = stack.pop()
            (<list?>stack[len(stack) - 1]).append(value)
            at += 1
        elif op == _APPENDS:
            depth -= 1
            items = stack[marks[depth]:]
            del stack[marks[depth]:]
            (<list?>stack[len(stack) - 1]).extend(items)
            at += 1
        else:
            break
    if at != end or len(stack) != 1:
        raise ValueError("a page's state is not as its page's scan found it")
    return stack[0]


cdef bint _read_event(
    const unsigned char *data, Py_ssize_t *at, Py_ssize_t end, RecordEvent *event
) noexcept:
    """Read the event at ``at[0]`` into ``event`` if it is one a record holds: a float
    ``ts``, an int64 rank and a str or None id (``at[0]`` moves past it); else False."""
    cdef Py_ssize_t start = at[0], after = 0, size
    cdef int64_t rank = 0
    if start + 10 > end or data[start] != _BINFLOAT:
        return False
    event.ts = PyFloat_Unpack8(<const char *>data + start + 1, 0)
    if not _int_at(data, start + 9, end, &after, &rank):
        return False
    event.rank = rank
    if after < end and data[after] == _NONE:
        event.id = NULL
        event.id_size = 0
        after += 1
    elif after + 5 <= end and data[after] == _BINUNICODE:
        size = _text_size(data, after)
        if after + 5 + size > end:
            return False
        event.id = <const char *>data + after + 5
        event.id_size = size
        after += 5 + size
    else:
        return False
    if after >= end or data[after] != _TUPLE3:
        return False
    at[0] = after + 1
    return True


cdef bint _read_record(
    const unsigned char *data, Py_ssize_t at, Py_ssize_t end, Record *record
) noexcept:
    """Read the state whose bytes are ``data[at:end]`` into ``record`` if it is one (its
    ids borrowed from ``data``): a StoredKey whose ``last_seen`` is a float or None, whose
    ints fit int64 and whose events (RECORD_EVENTS at most) :func:`_read_event` reads; else
    False (the state is then decoded, and the rule visits it as objects)."""
    cdef Py_ssize_t after = 0
    cdef int64_t number = 0
    if at >= end or data[at] != _MARK:
        return False
    at += 1
    if at < end and data[at] == _NONE:
        record.tracked = False
        record.last_seen = 0.0
        at += 1
    elif at + 9 <= end and data[at] == _BINFLOAT:
        record.tracked = True
        record.last_seen = PyFloat_Unpack8(<const char *>data + at + 1, 0)
        at += 9
    else:
        return False
    if at >= end or not _int_at(data, at, end, &after, &number):
        return False
    record.fired = number
    at = after
    if at >= end or not _int_at(data, at, end, &after, &number):
        return False
    record.applied = <Py_ssize_t>number
    at = after
    if at >= end or data[at] != _EMPTY_LIST:
        return False
    at += 1
    record.count = 0
    if at < end and data[at] == _MARK:
        # Two events or more: one batch of MARK ... APPENDS (a second would be over 1000).
        at += 1
        while at < end and data[at] != _APPENDS:
            if record.count == RECORD_EVENTS:
                return False
            if not _read_event(data, &at, end, &record.events[record.count]):
                return False
            record.count += 1
        at += 1
    elif at < end and data[at] == _BINFLOAT:
        # One event, then APPEND.
        if not _read_event(data, &at, end, &record.events[0]):
            return False
        if at >= end or data[at] != _APPEND:
            return False
        record.count = 1
        at += 1
    if at >= end or not _int_at(data, at, end, &after, &number):
        return False
    record.wake = number
    return after + 1 == end and data[after] == _TUPLE


cdef bint _read_arrived(object arrived, RecordEvent *events, Py_ssize_t *count) except -1:
    """Read a key's new events (a list of Event tuples, or None for none) into ``events``
    if a record can hold them (:func:`_read_event`'s, RECORD_EVENTS at most); else False.
    The ids are borrowed from the strs (their UTF-8, which each str keeps)."""
    cdef Py_ssize_t n, i, size = 0
    cdef object item, ts, rank, event_id
    cdef long long number
    cdef int overflow = 0
    cdef const char *text
    count[0] = 0
    if arrived is None:
        return True
    if type(arrived) is not list:
        return False
    n = len(<list>arrived)
    if n > RECORD_EVENTS:
        return False
    for i in range(n):
        item = (<list>arrived)[i]
        if type(item) is not tuple or len(<tuple>item) != 3:
            return False
        ts, rank, event_id = <tuple>item
        if not PyFloat_CheckExact(ts) or not PyLong_CheckExact(rank):
            return False
        number = PyLong_AsLongLongAndOverflow(rank, &overflow)
        if overflow:
            return False
        events[i].ts = PyFloat_AS_DOUBLE(ts)
        events[i].rank = number
        if event_id is None:
            events[i].id = NULL
            events[i].id_size = 0
        elif PyUnicode_CheckExact(event_id):
            text = PyUnicode_AsUTF8AndSize(event_id, &size)
            if text == NULL:  # lone surrogates: the object rule takes them
                PyErr_Clear()
                return False
            events[i].id = text
            events[i].id_size = size
        else:
            return False
    count[0] = n
    return True


# ----------------------------------------------------------------------------------------
# Writing a page's states: pickle's own bytes for protocol 3, without a memo.


cdef struct _Out:
    char *data
    Py_ssize_t size
    Py_ssize_t room


cdef inline char *_room(_Out *out, Py_ssize_t more) except NULL:
    """Where the next ``more`` bytes of ``out`` go (it grows as needed)."""
    cdef Py_ssize_t room
    cdef char *data
    if out.size + more > out.room:
        room = max(2 * out.room, out.size + more, 256)
        data = <char *>PyMem_Realloc(out.data, room)
        if data == NULL:
            raise MemoryError()
        out.data = data
        out.room = room
    data = out.data + out.size
    out.size += more
    return data


cdef inline int _byte(_Out *out, unsigned char byte) except -1:
    _room(out, 1)[0] = <char>byte
    return 0


cdef inline int _dump_float(_Out *out, double value) except -1:
    cdef char *at = _room(out, 9)
    at[0] = <char>_BINFLOAT
    PyFloat_Pack8(value, at + 1, 0)
    return 0


cdef int _dump_int(_Out *out, long long number) except -1:
    """Append the int ``number`` as pickle writes it (its smallest opcode)."""
    cdef uint64_t magnitude
    cdef Py_ssize_t n, i
    cdef char *at
    if -0x80000000 <= number <= 0x7FFFFFFF:
        if 0 <= number <= 0xFF:
            at = _room(out, 2)
            at[0] = <char>_BININT1
            at[1] = <char>number
        elif 0 <= number <= 0xFFFF:
            at = _room(out, 3)
            at[0] = <char>_BININT2
            at[1] = <char>(number & 0xFF)
            at[2] = <char>(number >> 8)
        else:
            at = _room(out, 5)
            at[0] = <char>_BININT
            for i in range(4):
                at[1 + i] = <char>((number >> (8 * i)) & 0xFF)
        return 0
    # pickle's LONG1: one byte more than the magnitude's bits need, less one if that byte is
    # only the sign of a negative number (8 bytes at most for an int64).
    magnitude = <uint64_t>number if number >= 0 else (~(<uint64_t>number)) + 1
    n = 1  # (bits >> 3) + 1: whole bytes of the magnitude, plus one
    while magnitude >= 0x80:
        magnitude >>= 8
        n += 1
    if magnitude >= 0x80:
        n += 1
    if n > 8:
        n = 8  # -2**63 alone: of pickle's nine bytes, it drops the last, a sign byte
    if (
        number < 0 and n > 1
        and ((number >> (8 * (n - 1))) & 0xFF) == 0xFF
        and ((number >> (8 * (n - 2))) & 0x80)
    ):
        n -= 1
    at = _room(out, 2 + n)
    at[0] = <char>_LONG1
    at[1] = <char>n
    for i in range(n):
        at[2 + i] = <char>((number >> (8 * i)) & 0xFF)
    return 0


cdef object _str_bytes(object text, const char **data, Py_ssize_t *size):
    """Point ``data`` and ``size`` at the bytes pickle writes for the str ``text``: its UTF-8,
    with "surrogatepass" for lone surrogates. Returns the bytes object that holds them where
    the str itself does not (the caller keeps it alive while it reads them), else None."""
    cdef object encoded
    data[0] = PyUnicode_AsUTF8AndSize(text, size)
    if data[0] != NULL:
        return None
    PyErr_Clear()  # lone surrogates: pickle's "surrogatepass", as it does
    encoded = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass")
    data[0] = PyBytes_AS_STRING(encoded)
    size[0] = PyBytes_GET_SIZE(encoded)
    return encoded


cdef inline int _dump_text(_Out *out, const char *text, Py_ssize_t size) except -1:
    """Append a str whose UTF-8 ("surrogatepass") is ``text[:size]`` (under 4 GiB)."""
    cdef char *at = _room(out, 5 + size)
    cdef Py_ssize_t i
    at[0] = <char>_BINUNICODE
    for i in range(4):
        at[1 + i] = <char>((size >> (8 * i)) & 0xFF)
    memcpy(at + 5, text, size)
    return 0


cdef bint _dump_value(_Out *out, object value, int depth) except -1:
    """Append ``value`` as pickle writes it in protocol 3 without a memo; False (``out``
    partly written) if it is not made of None, floats, ints, strs, tuples and lists alone,
    exactly those types, or is nested too deep (the caller then asks pickle)."""
    cdef long long number
    cdef int overflow = 0
    cdef Py_ssize_t n, i, size = 0, batch
    cdef const char *text = NULL
    cdef object encoded, item
    if value is None:
        _byte(out, _NONE)
    elif PyFloat_CheckExact(value):
        _dump_float(out, PyFloat_AS_DOUBLE(value))
    elif PyLong_CheckExact(value):
        number = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return False
        _dump_int(out, number)
    elif PyUnicode_CheckExact(value):
        encoded = _str_bytes(value, &text, &size)
        if size > 0xFFFFFFFF:
            return False
        _dump_text(out, text, size)
        del encoded  # it held the bytes `text` points into, if the str did not
    elif type(value) is tuple:
        n = len(<tuple>value)
        if n == 0:
            _byte(out, _EMPTY_TUPLE)
            return True
        if depth == _DEPTH:
            return False
        if n > 3:
            _byte(out, _MARK)
        for item in <tuple>value:
            if not _dump_value(out, item, depth + 1):
                return False
        _byte(out, _TUPLE if n > 3 else _TUPLE1 + n - 1)
    elif type(value) is list:
        _byte(out, _EMPTY_LIST)
        n = len(<list>value)
        if n == 0:
            return True
        if depth == _DEPTH:
            return False
        if n == 1:
            if not _dump_value(out, (<list>value)[0], depth + 1):
                return False
            _byte(out, _APPEND)
            return True
        i = 0
        while i < n:
            _byte(out, _MARK)
            batch = min(n, i + _BATCH)
            while i < batch:
                if i >= len(<list>value):
                    return False  # changed while written
                if not _dump_value(out, (<list>value)[i], depth + 1):
                    return False
                i += 1
            _byte(out, _APPENDS)
    else:
        return False
    return True


cdef int _dump_state(_Out *out, object state) except -1:
    """Append ``state``'s bytes as the states' pickle holds them: :func:`_dump_value`'s, or
    pickle's own for a state outside what it writes."""
    cdef Py_ssize_t start = out.size
    cdef bytes alone
    if not _dump_value(out, state, 0):
        out.size = start
        # Pickle's bytes of a tuple of this one state: PROTO 3, the state, TUPLE1, STOP.
        alone = pickled_states((state,))
        memcpy(_room(out, len(alone) - 4), PyBytes_AS_STRING(alone) + 2, len(alone) - 4)
    return 0


cdef int _dump_event(_Out *out, const RecordEvent *event) except -1:
    _dump_float(out, event.ts)
    _dump_int(out, event.rank)
    if event.id == NULL:
        _byte(out, _NONE)
    else:
        _dump_text(out, event.id, event.id_size)
    _byte(out, _TUPLE3)
    return 0


cdef int _dump_record(_Out *out, const Record *record) except -1:
    """Append the state ``record`` holds as pickle writes the StoredKey tuple it stands for
    (:func:`_dump_value`'s bytes for it)."""
    cdef Py_ssize_t i
    _byte(out, _MARK)
    if record.tracked:
        _dump_float(out, record.last_seen)
    else:
        _byte(out, _NONE)
    _dump_int(out, record.fired)
    _dump_int(out, record.applied)
    _byte(out, _EMPTY_LIST)
    if record.count == 1:
        _dump_event(out, &record.events[0])
        _byte(out, _APPEND)
    elif record.count > 1:  # RECORD_EVENTS, one batch of pickle's
        _byte(out, _MARK)
        for i in range(record.count):
            _dump_event(out, &record.events[i])
        _byte(out, _APPENDS)
    _dump_int(out, record.wake)
    _byte(out, _TUPLE)
    return 0


# Where _Run.of writes a record before it copies the bytes out: it keeps the room it grew to.
cdef _Out _scratch
_scratch.data = NULL
_scratch.size = _scratch.room = 0


cdef class _Run:
    """A state a visit changed as a record: its bytes (:func:`_dump_record`) and wake-up."""

    cdef bytes data
    cdef int64_t wake

    @staticmethod
    cdef _Run of(const Record *record):
        cdef _Run run = _Run.__new__(_Run)
        _scratch.size = 0
        _dump_record(&_scratch, record)
        run.data = PyBytes_FromStringAndSize(_scratch.data, _scratch.size)
        run.wake = record.wake
        return run


# ----------------------------------------------------------------------------------------
# A page a visit changes.


# A state a _Page has not decoded: its bytes are still those of the page as stored.
cdef object _STORED = object()


cdef class _Page:
    """A page a visit changes: its keys in its order, each with its state, decoded only when
    the visit takes it. Written back, it gives :func:`pack_page`'s bytes for its keys and their
    states, as :func:`aiowheel.spark._shard.page_bytes` would for them decoded: the bytes of
    a state it did not decode are copied as stored."""

    # key -> its slot in `states`, in the page's order (a dict's: a key set again keeps its
    # place; removed and set again, it goes last).
    cdef dict keys
    # Per slot: the key's state (a StoredKey, or a _Run the visit encoded), or _STORED for the
    # stored state `slot`.
    cdef list states
    # The stored page's pickles (None: nothing stored to copy), and each stored state's bytes
    # (pickles[starts[i]:starts[i + 1]]) and wake-up.
    cdef bytes pickles
    cdef Py_ssize_t *starts
    cdef int64_t *wakes

    def __dealloc__(self):
        PyMem_Free(self.starts)
        PyMem_Free(self.wakes)

    def __len__(self):
        return len(self.keys)

    @staticmethod
    cdef _Page empty():
        cdef _Page page = _Page.__new__(_Page)
        page.keys = {}
        page.states = []
        return page

    @staticmethod
    cdef _Page of(dict states):
        """A page of these states, all decoded."""
        cdef _Page page = _Page.__new__(_Page)
        page.keys = dict(zip(states, range(len(states))))
        page.states = list(states.values())
        return page

    @staticmethod
    cdef _Page read(object found):
        """The page as read (a StoredPage): its states' bytes found, or all its states decoded
        (by pickle) if they cannot be."""
        cdef _Page page
        cdef tuple keys = found.keys
        cdef Py_ssize_t count = len(keys)
        cdef object at = found.states_at
        if at is None or not count:
            return _Page.of(found.states())
        page = _Page.__new__(_Page)
        if not page._find(found.pickles, at, count):
            return _Page.of(found.states())
        page.keys = dict(zip(keys, range(count)))
        return page

    cdef bint _find(self, bytes pickles, Py_ssize_t at, Py_ssize_t count) except -1:
        """Take the ``count`` states of the states' pickle at ``at`` in ``pickles`` as stored,
        none decoded (:func:`_scan_states`); False if their runs cannot be found."""
        self.starts = <Py_ssize_t *>PyMem_Malloc((count + 1) * sizeof(Py_ssize_t))
        self.wakes = <int64_t *>PyMem_Malloc(max(count, 1) * sizeof(int64_t))
        if self.starts == NULL or self.wakes == NULL:
            raise MemoryError()
        if not _scan_states(pickles, at, count, self.starts, self.wakes):
            return False
        self.pickles = pickles
        self.states = [_STORED] * count
        return True

    cdef object _state(self, Py_ssize_t slot):
        cdef object state = self.states[slot]
        cdef bytes data
        if state is _STORED:
            state = _load_state(
                <const unsigned char *>PyBytes_AS_STRING(self.pickles),
                self.starts[slot],
                self.starts[slot + 1],
            )
            self.states[slot] = state
        elif type(state) is _Run:
            data = (<_Run>state).data
            state = _load_state(
                <const unsigned char *>PyBytes_AS_STRING(data), 0, PyBytes_GET_SIZE(data)
            )
            self.states[slot] = state
        return state

    cdef bint record(self, Py_ssize_t slot, Record *record) noexcept:
        """Read the state of ``slot`` into ``record`` if it is stored and a record holds it
        (:func:`_read_record`; its ids are borrowed from the page's pickles)."""
        if self.states[slot] is not _STORED:
            return False
        return _read_record(
            <const unsigned char *>PyBytes_AS_STRING(self.pickles),
            self.starts[slot],
            self.starts[slot + 1],
            record,
        )

    cdef Py_ssize_t pop(self, object key) except -1:
        """Remove ``key``; return its slot (its state stays there, for :meth:`_state` and
        :meth:`record`)."""
        return self.keys.pop(key)

    cdef Py_ssize_t slot(self, object key) except -1:
        """``key``'s slot (it stays where it is in the page)."""
        return self.keys[key]

    cdef put(self, object key, object state):
        """Set ``key``'s state: where the key is, or last if the page does not hold it."""
        cdef object last = PyLong_FromSsize_t(len(self.states))
        cdef object slot = self.keys.setdefault(key, last)
        if slot is last:
            self.states.append(state)
        else:
            self.states[<Py_ssize_t>slot] = state

    cdef remove(self, object key):
        del self.keys[key]

    cdef list due(self, object watermark):
        """The keys whose wake-up the watermark (ms) has reached, in the page's order."""
        cdef list ready = []
        cdef object key, state
        cdef Py_ssize_t slot
        cdef int64_t upto = 0
        cdef int overflow = 1
        if PyLong_CheckExact(watermark):
            upto = PyLong_AsLongLongAndOverflow(watermark, &overflow)
        for key, slot in self.keys.items():
            state = self.states[slot]
            if overflow or (state is not _STORED and type(state) is not _Run):
                if self._state(slot)[WAKE] <= watermark:
                    ready.append(key)
            elif (self.wakes[slot] if state is _STORED else (<_Run>state).wake) <= upto:
                ready.append(key)
        return ready

    def earliest(self):
        """The earliest wake-up (ms) of the page's keys (it has some)."""
        cdef object best = None, wake, state
        cdef Py_ssize_t slot
        for slot in self.keys.values():
            state = self.states[slot]
            if state is _STORED:
                wake = PyLong_FromLongLong(self.wakes[slot])
            elif type(state) is _Run:
                wake = PyLong_FromLongLong((<_Run>state).wake)
            else:
                wake = state[WAKE]
            if best is None or wake < best:
                best = wake
        return best

    def encode(self):
        """The page as stored: :func:`pack_page` of its keys and their states' pickle."""
        return pack_page(tuple(self.keys), self.states_pickle())

    cdef bytes states_pickle(self):
        """Its states' pickle, as :func:`pickled_states` gives it for them decoded."""
        cdef _Out out
        cdef object state
        cdef Py_ssize_t count = len(self.keys), slot, start, size
        cdef const char *stored = NULL
        cdef char *at
        if self.pickles is not None:
            stored = PyBytes_AS_STRING(self.pickles)
        out.data = NULL
        out.size = out.room = 0
        try:
            # Room for what is copied, and about what a new state takes.
            _room(&out, 8 + (0 if stored == NULL else PyBytes_GET_SIZE(self.pickles)) + 64 * count)
            out.size = 0
            at = _room(&out, 2)
            at[0] = <char>_PROTO
            at[1] = 3
            if count == 0:
                _byte(&out, _EMPTY_TUPLE)
            elif count > 3:
                _byte(&out, _MARK)
            for slot in self.keys.values():
                state = self.states[slot]
                if state is _STORED:
                    start = self.starts[slot]
                    size = self.starts[slot + 1] - start
                    memcpy(_room(&out, size), stored + start, size)
                elif type(state) is _Run:
                    size = PyBytes_GET_SIZE((<_Run>state).data)
                    memcpy(_room(&out, size), PyBytes_AS_STRING((<_Run>state).data), size)
                else:
                    _dump_state(&out, state)
            if count > 3:
                _byte(&out, _TUPLE)
            elif count:
                _byte(&out, _TUPLE1 + count - 1)
            _byte(&out, _STOP)
            return PyBytes_FromStringAndSize(out.data, out.size)
        finally:
            PyMem_Free(out.data)


def _dump_states(tuple states):
    """The states' pickle of ``states`` as this twin writes it (for the tests: the bytes of
    :func:`aiowheel.spark._shard.pickled_states`)."""
    return _Page.of(dict(enumerate(states))).states_pickle()


def _load_states(bytes pickles, Py_ssize_t count):
    """The ``count`` states of a states' pickle and their wake-ups (ms), each decoded from its
    run (for the tests); None if the runs cannot be found (pickle then decodes the page)."""
    cdef _Page page = _Page.__new__(_Page)
    if not page._find(pickles, 0, count):
        return None
    wakes = [page.wakes[slot] for slot in range(count)]
    return tuple([page._state(slot) for slot in range(count)]), wakes


# What _record_visit returns where records cannot take a key's visit.
cdef object _UNFIT = object()


cdef object _record_visit(
    IdleRule records, _Page page, Py_ssize_t slot, object arrived, double now, list emitted
):
    """The compiled rule's visit of a key as records (:meth:`IdleRule.visit_record`): its
    state is ``page``'s at ``slot`` (no page: it has none), its new events ``arrived`` (a
    list, or None). Returns the state to keep, a :class:`_Run` or None, its expiries at the
    end of ``emitted`` (as the rule gives them); or _UNFIT, nothing emitted, if records do
    not hold the state or the events, or cannot follow the rule on them."""
    cdef Record record
    cdef RecordEvent events[RECORD_EVENTS]
    cdef Py_ssize_t count = 0
    cdef int outcome
    if not _read_arrived(arrived, events, &count):
        return _UNFIT
    if page is None:
        record.tracked = False
        record.last_seen = 0.0
        record.fired = record.applied = record.count = record.wake = 0
    elif not page.record(slot, &record):
        return _UNFIT
    outcome = records.visit_record(&record, events, count, now, emitted)
    if outcome == RECORD_UNFIT:
        return _UNFIT
    return None if outcome == RECORD_GONE else _Run.of(&record)


cdef object _visit_key(
    object visit_stored,
    IdleRule records,
    object key,
    _Page page,
    Py_ssize_t slot,
    object arrived,
    object watermark,
    double now,
    list expiries,
    list emitted,
):
    """Visit one key: its state is ``page``'s at ``slot`` (no page: it has none), its new
    events ``arrived`` (a list, or None). Its expiries go to the end of ``expiries``, as rows;
    returns the state to keep: None, a StoredKey, or a :class:`_Run`. With the compiled rule
    (``records``), as records where they hold the key (:func:`_record_visit`, its expiries
    through ``emitted``, left empty); else by ``visit_stored``, the rule's, on the objects."""
    cdef object stored, after, expiry
    cdef list found
    if records is not None:
        after = _record_visit(records, page, slot, arrived, now, emitted)
        if after is not _UNFIT:
            for expiry in emitted:
                expiries.append((key, *expiry))
            del emitted[:]
            return after
    stored = None if page is None else page._state(slot)
    after, found = visit_stored(stored, [] if arrived is None else arrived, watermark)
    if found:
        for expiry in found:
            expiries.append((key, *expiry))
    return after


cdef inline object _wake_of(object state):
    """The wake-up (ms) of a state to keep (a StoredKey or a :class:`_Run`)."""
    if type(state) is _Run:
        return PyLong_FromLongLong((<_Run>state).wake)
    return state[WAKE]


def _visit_as_record(IdleRule rule, stored, arrived, watermark):
    """``rule.visit_stored(stored, arrived, watermark)`` as the visit makes it on records,
    ``stored`` read from its bytes in a page: the same pair, or None where records do not take
    this visit (the visit then asks visit_stored). For the tests."""
    cdef _Page page = None
    cdef list emitted = []
    cdef object after
    cdef bytes data
    if stored is not None:
        page = _Page.__new__(_Page)
        if not page._find(pickled_states((stored,)), 0, 1):
            return None
    after = _record_visit(rule, page, 0, arrived, PyFloat_AsDouble(watermark) / 1000.0, emitted)
    if after is _UNFIT:
        return None
    if after is not None:
        data = (<_Run>after).data
        after = _load_state(<const unsigned char *>PyBytes_AS_STRING(data), 0, len(data))
    return after, emitted


# ----------------------------------------------------------------------------------------
# A visit with input, by the keys' bytes.
#
# A visit with input must find its keys in every page of the shard, and writes back most of
# the pages it reads. Found as objects, each key held would be decoded into a str, hashed
# and put into a dict, and each page written would pickle its keys again. Here a key is its
# bytes as the page's keys' pickle holds them (UTF-8, "surrogatepass", as pickle writes a
# str): the keys with events are found by those bytes (:class:`_Names`), a page's keys are
# runs of its pickle (:class:`_Held`), and a page written back (:func:`_build`) gets its
# keys' pickle written from the bytes, as pickle writes it (:func:`_frame_keys`), and its
# states copied as stored or written from their records. The str of a key is made only for
# the expiries of a key without events. What is stored and emitted is the same, byte for
# byte, as the visit on objects (the rest of :func:`visit`) gives, which takes any shard
# this cannot read so.


cdef extern from *:
    """
    #define AW_FNV_OFFSET 0xcbf29ce484222325ULL
    #define AW_FNV_PRIME 0x100000001b3ULL
    """
    uint64_t AW_FNV_OFFSET
    uint64_t AW_FNV_PRIME


# The opcodes of a page's keys' pickle (protocol 5, as pickle writes a tuple of strs) beyond
# those above, and pickle's framing (its FRAME_SIZE_TARGET and FRAME_SIZE_MIN).
cdef enum:
    _SHORT_BINUNICODE = 0x8C  # 1 byte n, then n bytes of UTF-8
    _BINUNICODE8 = 0x8D  # 8 bytes n, little-endian
    _FRAME = 0x95  # 8 bytes: the size of the frame that follows
    _FRAME_HEADER = 9
    _FRAME_TARGET = 65536
    _FRAME_MIN = 4


cdef inline uint64_t _text_hash(const char *text, Py_ssize_t size) noexcept:
    """FNV-1a (64 bits) of a key's bytes, its high half folded into the low one (the table
    takes the low bits, which a multiplication leaves to the bytes' low bits alone)."""
    cdef uint64_t h = AW_FNV_OFFSET
    cdef Py_ssize_t i
    for i in range(size):
        h = (h ^ <unsigned char>text[i]) * AW_FNV_PRIME
    return h ^ (h >> 32)


cdef inline uint64_t _size_at(const unsigned char *data, Py_ssize_t n) noexcept:
    """The little-endian unsigned number of ``n`` bytes at ``data``."""
    cdef uint64_t value = 0
    cdef Py_ssize_t i
    for i in range(n):
        value |= <uint64_t>data[i] << (8 * i)
    return value


cdef class _Names:
    """The keys with events of a visit, in their order: their strs, their bytes as a page's
    keys' pickle holds them, and a table that finds a key by those bytes."""

    cdef list keys
    cdef list lists  # each key's events
    cdef list kept  # the bytes of keys whose UTF-8 their str does not keep (lone surrogates)
    cdef Py_ssize_t count, mask
    cdef const char **texts
    cdef Py_ssize_t *sizes
    cdef Py_ssize_t *table  # -1: empty

    def __dealloc__(self):
        PyMem_Free(self.texts)
        PyMem_Free(self.sizes)
        PyMem_Free(self.table)

    @staticmethod
    cdef _Names of(dict events):
        """The keys of ``events``; None if one is not a str."""
        cdef _Names names = _Names.__new__(_Names)
        cdef Py_ssize_t i, size = 0, room = 8, at
        cdef object key, encoded
        cdef const char *text = NULL
        names.keys = list(events)
        names.lists = list(events.values())
        names.kept = []
        names.count = len(names.keys)
        while room < 2 * names.count:
            room *= 2
        names.mask = room - 1
        names.texts = <const char **>PyMem_Malloc(max(names.count, 1) * sizeof(char *))
        names.sizes = <Py_ssize_t *>PyMem_Malloc(max(names.count, 1) * sizeof(Py_ssize_t))
        names.table = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        if names.texts == NULL or names.sizes == NULL or names.table == NULL:
            raise MemoryError()
        for i in range(room):
            names.table[i] = -1
        for i in range(names.count):
            key = names.keys[i]
            if not PyUnicode_CheckExact(key):
                return None
            encoded = _str_bytes(key, &text, &size)
            if encoded is not None:
                names.kept.append(encoded)
            names.texts[i] = text
            names.sizes[i] = size
            at = <Py_ssize_t>(_text_hash(text, size) & <uint64_t>names.mask)
            while names.table[at] != -1:  # distinct keys: no key is there already
                at = (at + 1) & names.mask
            names.table[at] = i
        return names

    cdef inline Py_ssize_t find(self, const char *text, Py_ssize_t size) noexcept:
        """The key whose bytes are ``text[:size]``, or -1."""
        cdef Py_ssize_t at = <Py_ssize_t>(_text_hash(text, size) & <uint64_t>self.mask)
        cdef Py_ssize_t i = self.table[at]
        while i != -1:
            if self.sizes[i] == size and memcmp(self.texts[i], text, size) == 0:
                return i
            at = (at + 1) & self.mask
            i = self.table[at]
        return -1


cdef class _Held:
    """A page as stored, read without decoding its keys or states: where each key's bytes
    stand in its pickles, and (once :meth:`scan` found them) each state's run and wake-up."""

    cdef bytes pickles
    cdef const char *data
    cdef Py_ssize_t count, states_at
    cdef Py_ssize_t *texts  # offsets of the keys' bytes in `pickles`
    cdef Py_ssize_t *sizes
    cdef Py_ssize_t *starts  # count + 1 (scanned)
    cdef int64_t *wakes
    cdef unsigned char *taken  # per key: the visit takes it out of the page
    cdef bint scanned

    def __dealloc__(self):
        PyMem_Free(self.texts)
        PyMem_Free(self.sizes)
        PyMem_Free(self.starts)
        PyMem_Free(self.wakes)
        PyMem_Free(self.taken)

    @staticmethod
    cdef _Held read(bytes pickles):
        """The page whose two pickles are ``pickles``; None if its keys' pickle is not a
        tuple of strs as pickle writes it in protocol 5 (then objects take the visit)."""
        cdef _Held page = _Held.__new__(_Held)
        cdef Py_ssize_t count = _read_keys(pickles, NULL, NULL, &page.states_at)
        if count < 0:
            return None
        page.pickles = pickles
        page.data = PyBytes_AS_STRING(pickles)
        page.count = count
        page.texts = <Py_ssize_t *>PyMem_Malloc(max(count, 1) * sizeof(Py_ssize_t))
        page.sizes = <Py_ssize_t *>PyMem_Malloc(max(count, 1) * sizeof(Py_ssize_t))
        page.taken = <unsigned char *>PyMem_Malloc(max(count, 1))
        if page.texts == NULL or page.sizes == NULL or page.taken == NULL:
            raise MemoryError()
        memset(page.taken, 0, max(count, 1))
        _read_keys(pickles, page.texts, page.sizes, &page.states_at)
        return page

    cdef bint scan(self) except -1:
        """Find its states' runs and wake-ups (:func:`_scan_states`) if not yet done; False if
        they cannot be found."""
        if self.scanned:
            return True
        self.starts = <Py_ssize_t *>PyMem_Malloc((self.count + 1) * sizeof(Py_ssize_t))
        self.wakes = <int64_t *>PyMem_Malloc(max(self.count, 1) * sizeof(int64_t))
        if self.starts == NULL or self.wakes == NULL:
            raise MemoryError()
        if self.count == 0:
            self.starts[0] = self.states_at
        elif not _scan_states(self.pickles, self.states_at, self.count, self.starts, self.wakes):
            return False
        self.scanned = True
        return True


cdef Py_ssize_t _read_keys(
    bytes pickles, Py_ssize_t *texts, Py_ssize_t *sizes, Py_ssize_t *states_at
) noexcept:
    """Count the keys of the keys' pickle at the start of ``pickles``, and (where ``texts`` is
    not NULL) note where each key's bytes stand; ``states_at`` gets the offset after it.
    -1 if it is not a tuple of strs in protocol 4 or 5, written without a memo."""
    cdef const unsigned char *data = <const unsigned char *>PyBytes_AS_STRING(pickles)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(pickles), at = 2, count = 0, n
    cdef uint64_t size
    cdef bint marked = False
    cdef unsigned char op
    if end < 4 or data[0] != _PROTO or not 4 <= data[1] <= 5:
        return -1
    while True:
        while at < end and data[at] == _FRAME:
            at += _FRAME_HEADER
        if at >= end:
            return -1
        op = data[at]
        if op == _SHORT_BINUNICODE or op == _BINUNICODE or op == _BINUNICODE8:
            n = 2 if op == _SHORT_BINUNICODE else 5 if op == _BINUNICODE else 9
            if at + n > end:
                return -1
            size = _size_at(data + at + 1, n - 1)
            if size > <uint64_t>(end - at - n):
                return -1
            if texts != NULL:
                texts[count] = at + n
                sizes[count] = <Py_ssize_t>size
            at += n + <Py_ssize_t>size
            count += 1
        elif op == _MARK and count == 0 and not marked:
            marked = True
            at += 1
        elif op == _EMPTY_TUPLE and count == 0 and not marked:
            at += 1
            break
        elif op == _TUPLE and marked:
            at += 1
            break
        elif _TUPLE1 <= op <= _TUPLE3 and not marked and count == op - _TUPLE1 + 1:
            at += 1
            break
        else:
            return -1
    while at < end and data[at] == _FRAME:
        at += _FRAME_HEADER
    if at >= end or data[at] != _STOP:
        return -1
    states_at[0] = at + 1
    return count


# ----------------------------------------------------------------------------------------
# Writing a page's keys' pickle as pickle does (protocol 5, framed, without a memo).


cdef struct _Framer:
    _Out out
    Py_ssize_t frame  # where the open frame's header stands; -1: none open


cdef inline int _framed(_Framer *framer, const char *data, Py_ssize_t size) except -1:
    """Write ``data[:size]`` into the open frame (opened here if none is)."""
    if framer.frame == -1:
        framer.frame = framer.out.size
        _room(&framer.out, _FRAME_HEADER)
    memcpy(_room(&framer.out, size), data, size)
    return 0


cdef void _commit(_Framer *framer) noexcept:
    """Close the open frame: its header written, or removed if the frame is too small."""
    cdef Py_ssize_t size
    cdef char *header
    cdef int i
    if framer.frame == -1:
        return
    size = framer.out.size - framer.frame - _FRAME_HEADER
    header = framer.out.data + framer.frame
    if size >= _FRAME_MIN:
        header[0] = <char>_FRAME
        for i in range(8):
            header[1 + i] = <char>((<uint64_t>size >> (8 * i)) & 0xFF)
    else:
        memmove(header, header + _FRAME_HEADER, size)
        framer.out.size -= _FRAME_HEADER
    framer.frame = -1


cdef inline void _boundary(_Framer *framer) noexcept:
    """Before each object pickle saves: close the open frame once it reached the target."""
    if framer.frame != -1 and framer.out.size - framer.frame - _FRAME_HEADER >= _FRAME_TARGET:
        _commit(framer)


cdef bint _frame_text(_Framer *framer, const char *text, Py_ssize_t size) except -1:
    """Append a key as pickle saves a str; False for a key of a frame's target or more (pickle
    writes it outside any frame: the caller then asks pickle)."""
    cdef char header[5]
    cdef int i
    if size >= _FRAME_TARGET:
        return False
    _boundary(framer)
    if size <= 0xFF:
        header[0] = <char>_SHORT_BINUNICODE
        header[1] = <char>size
        _framed(framer, header, 2)
    else:
        header[0] = <char>_BINUNICODE
        for i in range(4):
            header[1 + i] = <char>((size >> (8 * i)) & 0xFF)
        _framed(framer, header, 5)
    _framed(framer, text, size)
    return True


# ----------------------------------------------------------------------------------------
# The visit.


cdef class _Built:
    """A page a visit by bytes wrote: its number of keys, earliest wake-up and stored bytes
    (what :func:`aiowheel.spark._shard.write_back` asks of it)."""

    cdef Py_ssize_t count
    cdef object first
    cdef bytes stored

    def __len__(self):
        return self.count

    def earliest(self):
        return self.first

    def encode(self):
        return self.stored


cdef class _ByBytes:
    """The C arrays of one visit by bytes (freed with it): per key visited, where it lives
    (its page among `held`, -1: none, and its place there), its events (its index among the
    `names`, -1: none) and its bytes; per key kept, its state's run in `runs` and where it
    goes."""

    cdef Py_ssize_t *home
    cdef Py_ssize_t *place
    cdef Py_ssize_t *named
    cdef const char **texts
    cdef Py_ssize_t *sizes
    cdef Py_ssize_t *visit_of  # per key kept: its visit
    cdef Py_ssize_t *run_at
    cdef Py_ssize_t *run_size
    cdef int64_t *wake
    cdef int64_t *slot
    cdef Py_ssize_t *goes  # its page: among `held`, or after them, among the new ones
    cdef _Out runs

    def __dealloc__(self):
        PyMem_Free(self.home)
        PyMem_Free(self.place)
        PyMem_Free(self.named)
        PyMem_Free(self.texts)
        PyMem_Free(self.sizes)
        PyMem_Free(self.visit_of)
        PyMem_Free(self.run_at)
        PyMem_Free(self.run_size)
        PyMem_Free(self.wake)
        PyMem_Free(self.slot)
        PyMem_Free(self.goes)
        PyMem_Free(self.runs.data)

    cdef int grow(self, Py_ssize_t room) except -1:
        """Room for ``room`` keys visited."""
        room = max(room, 1)
        self.home = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.place = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.named = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.texts = <const char **>PyMem_Malloc(room * sizeof(char *))
        self.sizes = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.visit_of = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.run_at = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.run_size = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        self.wake = <int64_t *>PyMem_Malloc(room * sizeof(int64_t))
        self.slot = <int64_t *>PyMem_Malloc(room * sizeof(int64_t))
        self.goes = <Py_ssize_t *>PyMem_Malloc(room * sizeof(Py_ssize_t))
        if (
            self.home == NULL or self.place == NULL or self.named == NULL or self.texts == NULL
            or self.sizes == NULL or self.visit_of == NULL or self.run_at == NULL
            or self.run_size == NULL or self.wake == NULL or self.slot == NULL
            or self.goes == NULL
        ):
            raise MemoryError()
        return 0


cdef object _key_of(_ByBytes work, _Names names, Py_ssize_t visit):
    """The str of a key visited."""
    if work.named[visit] >= 0:
        return names.keys[work.named[visit]]
    return PyUnicode_DecodeUTF8(work.texts[visit], work.sizes[visit], "surrogatepass")


# How many visits _visit_by_bytes took (for the tests: which visits the objects took instead).
cdef Py_ssize_t _by_bytes = 0


def _visits_by_bytes():
    """How many visits with input this process made by the keys' bytes (for the tests)."""
    return _by_bytes


cdef object _visit_by_bytes(
    IdleRule records,
    object visit_stored,
    dict events,
    dict rows,
    dict inline,
    list due,
    dict wakes,
    object mapped,
    object watermark,
    object width,
    object timer,
    object pace,
):
    """The visit with input (``events``, not empty) of the shard whose pages are ``rows``
    (the map state's, as read) and ``inline``, by the keys' bytes; None, nothing done, where it
    cannot take the shard (a key not a str, a page or state not as this twin writes them, a
    watermark, width or wake-up beyond int64): the visit on objects then takes it."""
    cdef int64_t upto, width_c, run_c = 0
    cdef int overflow = 0
    cdef double now
    cdef _Names names
    cdef _Held page, home
    cdef _ByBytes work
    cdef dict held = {}, numbers = {}, incoming = {}, fresh = {}, built = {}
    cdef list pages, numbered, emitted = [], expiries = []
    cdef set changed = set()
    cdef object number, found, key, after, stored, expiry, slot, run_slot = None, wake
    cdef object events_of, emitted_objects
    cdef Py_ssize_t i, j, n, visit, visits, kept, at, goes, count, run = 0, total
    cdef Py_ssize_t run_page = -1
    cdef bint run_few = False
    cdef Record record
    cdef RecordEvent arrived[RECORD_EVENTS]
    cdef Py_ssize_t arrived_count = 0
    cdef int outcome
    cdef Py_ssize_t *first
    cdef Py_ssize_t *order
    if not PyLong_CheckExact(watermark) or not PyLong_CheckExact(width):
        return None
    upto = PyLong_AsLongLongAndOverflow(watermark, &overflow)
    if overflow:
        return None
    width_c = PyLong_AsLongLongAndOverflow(width, &overflow)
    if overflow or width_c <= 0:
        return None
    names = _Names.of(events)
    if names is None:
        return None
    # The pages, in the order the visit on objects reads them (the map's, then the index's).
    for number, found in rows.items():
        page = _Held.read(page_pickles(found[0]))
        if page is None:
            return None
        held[number] = page
    for number, found in inline.items():
        page = _Held.read(page_pickles(found))
        if page is None:
            return None
        held[number] = page
    pages = list(held.values())
    numbered = list(held)
    for i in range(len(numbered)):
        numbers[numbered[i]] = i
    work = _ByBytes.__new__(_ByBytes)
    n = names.count
    total = n
    for number in due:
        if number not in held:
            return None  # the visit on objects says which page is missing
        total += (<_Held>held[number]).count
    work.grow(total)
    # Where each key with events lives.
    for i in range(n):
        work.home[i] = -1
        work.place[i] = 0
        work.named[i] = i
        work.texts[i] = names.texts[i]
        work.sizes[i] = names.sizes[i]
    for i in range(len(pages)):
        page = <_Held>pages[i]
        for j in range(page.count):
            at = names.find(page.data + page.texts[j], page.sizes[j])
            if at < 0:
                continue
            if work.home[at] != -1:
                return None  # a key in two pages: not as this twin writes them
            work.home[at] = i
            work.place[at] = j
            page.taken[j] = 1
    # The pages of keys with events all change (each added once); so do the due pages with a
    # due key.
    for i in range(n):
        if work.home[i] != -1:
            page = <_Held>pages[work.home[i]]
            if not page.scanned:
                if not page.scan():
                    return None
                changed.add(numbered[work.home[i]])
    visit = n
    for number in due:
        i = numbers[number]
        page = <_Held>pages[i]
        if not page.scan():
            return None
        for j in range(page.count):
            if page.taken[j] or page.wakes[j] > upto:
                continue
            page.taken[j] = 1
            work.home[visit] = i
            work.place[visit] = j
            work.named[visit] = -1
            work.texts[visit] = page.data + page.texts[j]
            work.sizes[visit] = page.sizes[j]
            visit += 1
            changed.add(number)
    visits = visit
    # The visits: as records where they hold the key (the compiled rule), else as objects.
    now = PyFloat_AsDouble(watermark) / 1000.0
    kept = 0
    for visit in range(visits):
        home = None if work.home[visit] == -1 else <_Held>pages[work.home[visit]]
        j = work.place[visit]
        events_of = None if work.named[visit] < 0 else names.lists[work.named[visit]]
        outcome = RECORD_UNFIT
        if records is not None and _read_arrived(events_of, arrived, &arrived_count):
            if home is None:
                record.tracked = False
                record.last_seen = 0.0
                record.fired = record.applied = record.count = record.wake = 0
                outcome = records.visit_record(&record, arrived, arrived_count, now, emitted)
            elif _read_record(
                <const unsigned char *>home.data, home.starts[j], home.starts[j + 1], &record
            ):
                outcome = records.visit_record(&record, arrived, arrived_count, now, emitted)
        if outcome != RECORD_UNFIT:
            if emitted:
                key = _key_of(work, names, visit)
                for expiry in emitted:
                    expiries.append((key, *expiry))
                del emitted[:]
            if outcome == RECORD_GONE:
                continue
            work.run_at[kept] = work.runs.size
            _dump_record(&work.runs, &record)
            work.wake[kept] = record.wake
        else:
            stored = None
            if home is not None:
                stored = _load_state(
                    <const unsigned char *>home.data, home.starts[j], home.starts[j + 1]
                )
            after, emitted_objects = visit_stored(
                stored, [] if events_of is None else events_of, watermark
            )
            if emitted_objects:
                key = _key_of(work, names, visit)
                for expiry in emitted_objects:
                    expiries.append((key, *expiry))
            if after is None:
                continue
            wake = after[WAKE]
            if not PyLong_CheckExact(wake):
                return None
            work.wake[kept] = PyLong_AsLongLongAndOverflow(wake, &overflow)
            if overflow:
                return None
            work.run_at[kept] = work.runs.size
            _dump_state(&work.runs, after)
        work.run_size[kept] = work.runs.size - work.run_at[kept]
        work.visit_of[kept] = visit
        # Its new page: the slot of its wake-up (// rounds down, as Python's). incoming counts
        # the keys each slot receives, a run of the same slot at a time.
        work.slot[kept] = work.wake[kept] // width_c
        if run and work.slot[kept] == run_c:
            run += 1
        else:
            if run:
                slot = PyLong_FromLongLong(run_c)
                incoming[slot] = incoming.get(slot, 0) + run
            run_c = work.slot[kept]
            run = 1
        kept += 1
    if run:
        slot = PyLong_FromLongLong(run_c)
        incoming[slot] = incoming.get(slot, 0) + run
    # Where each key kept goes, as the visit on objects decides it (see MOVE_SHARE): its
    # page, or the page of its new wake-up.
    # What a slot's page is (held or not) and whether it receives few of its keys is the same
    # for a run of keys of that slot; whether it changes is not (a key moving there changes it).
    run = 0
    for i in range(kept):
        visit = work.visit_of[i]
        if not run or work.slot[i] != run_c:
            run_c = work.slot[i]
            run_slot = PyLong_FromLongLong(run_c)
            run = 1
            run_page = numbers.get(run_slot, -1)
            run_few = (
                run_page != -1
                and <Py_ssize_t>incoming[run_slot] * MOVE_SHARE < (<_Held>pages[run_page]).count
            )
        if work.home[visit] != -1 and run_few and run_slot not in changed:
            work.goes[i] = work.home[visit]  # stays: see MOVE_SHARE
            continue
        if run_page != -1:
            goes = run_page
            if not (<_Held>pages[goes]).scan():
                return None
        else:
            goes = fresh.get(run_slot, -1)
            if goes == -1:
                goes = len(pages) + len(fresh)
                fresh[run_slot] = goes
        work.goes[i] = goes
        changed.add(run_slot)
    # The keys kept, grouped by the page they go to, in their order (a counting sort).
    count = len(pages) + len(fresh)
    first = <Py_ssize_t *>PyMem_Malloc((count + 1) * sizeof(Py_ssize_t))
    order = <Py_ssize_t *>PyMem_Malloc(max(kept, 1) * sizeof(Py_ssize_t))
    try:
        if first == NULL or order == NULL:
            raise MemoryError()
        memset(first, 0, (count + 1) * sizeof(Py_ssize_t))
        for i in range(kept):
            first[work.goes[i] + 1] += 1
        for i in range(count):
            first[i + 1] += first[i]
        for i in range(kept):
            order[first[work.goes[i]]] = i
            first[work.goes[i]] += 1
        for i in range(count - 1, -1, -1):
            first[i + 1] = first[i]
        first[0] = 0
        for number in changed:
            goes = numbers[number] if number in numbers else fresh[number]
            page = <_Held>pages[goes] if goes < len(pages) else None
            found = _build(work, page, order + first[goes], first[goes + 1] - first[goes])
            if found is not None:
                built[number] = found
    finally:
        PyMem_Free(first)
        PyMem_Free(order)
    global _by_bytes
    _by_bytes += 1
    return write_back(
        changed,
        built,
        wakes,
        inline,
        mapped,
        expiries=expiries,
        watermark=watermark,
        timer=timer,
        pace=pace,
        earliest=_Built.earliest,
        encode=_Built.encode,
    )


cdef _Built _build(_ByBytes work, _Held page, const Py_ssize_t *order, Py_ssize_t placed):
    """The page that holds the keys of ``page`` (None: a new page) the visit did not take,
    in their order, then the keys kept that go to it (``order[:placed]``), in theirs; None
    if it holds none."""
    cdef _Built built
    cdef _Framer out
    cdef Py_ssize_t count = placed, i, j, k, visit, size, start
    cdef int64_t first = 0
    cdef bint any = False
    cdef char *at
    cdef list strs = None
    cdef bytes pickles
    cdef const char **texts = NULL
    cdef Py_ssize_t *sizes = NULL
    if page is not None:
        for j in range(page.count):
            if not page.taken[j]:
                count += 1
                if not any or page.wakes[j] < first:
                    first = page.wakes[j]
                    any = True
    if count == 0:
        return None
    for i in range(placed):
        k = order[i]
        if not any or work.wake[k] < first:
            first = work.wake[k]
            any = True
    out.out.data = NULL
    out.out.size = out.out.room = 0
    out.frame = -1
    try:
        # The keys' pickle, as pickle writes a tuple of strs (protocol 5, framed, no memo).
        texts = <const char **>PyMem_Malloc(count * sizeof(char *))
        sizes = <Py_ssize_t *>PyMem_Malloc(count * sizeof(Py_ssize_t))
        if texts == NULL or sizes == NULL:
            raise MemoryError()
        k = 0
        if page is not None:
            for j in range(page.count):
                if not page.taken[j]:
                    texts[k] = page.data + page.texts[j]
                    sizes[k] = page.sizes[j]
                    k += 1
        for i in range(placed):
            visit = work.visit_of[order[i]]
            texts[k] = work.texts[visit]
            sizes[k] = work.sizes[visit]
            k += 1
        if not _frame_keys(&out, texts, sizes, count):
            # A key of a frame's target or more, which pickle writes outside any frame: the
            # keys' pickle is pickle's (pack_page), from the keys' strs.
            out.out.size = 0
            out.frame = -1
            strs = [
                PyUnicode_DecodeUTF8(texts[k], sizes[k], "surrogatepass") for k in range(count)
            ]
        # The states' pickle (protocol 3, no memo): the runs as stored, or as the visit wrote
        # them.
        at = _room(&out.out, 2)
        at[0] = <char>_PROTO
        at[1] = 3
        if count > 3:
            _byte(&out.out, _MARK)
        if page is not None:
            for j in range(page.count):
                if not page.taken[j]:
                    start = page.starts[j]
                    size = page.starts[j + 1] - start
                    memcpy(_room(&out.out, size), page.data + start, size)
        for i in range(placed):
            k = order[i]
            size = work.run_size[k]
            memcpy(_room(&out.out, size), work.runs.data + work.run_at[k], size)
        _byte(&out.out, _TUPLE if count > 3 else _TUPLE1 + count - 1)
        _byte(&out.out, _STOP)
        pickles = PyBytes_FromStringAndSize(out.out.data, out.out.size)
        built = _Built.__new__(_Built)
        built.count = count
        built.first = PyLong_FromLongLong(first)
        built.stored = stored_pickles(pickles) if strs is None else pack_page(tuple(strs), pickles)
        return built
    finally:
        PyMem_Free(out.out.data)
        PyMem_Free(texts)
        PyMem_Free(sizes)


cdef bint _frame_keys(
    _Framer *out, const char **texts, const Py_ssize_t *sizes, Py_ssize_t count
) except -1:
    """Write into ``out`` (empty) the pickle of a tuple of ``count`` strs whose bytes are
    ``texts[i][:sizes[i]]``, as pickle writes it (protocol 5, framed, without a memo); False
    if a str is a frame's target or more (pickle writes it outside any frame)."""
    cdef Py_ssize_t i
    cdef char op
    cdef char *at = _room(&out.out, 2)
    at[0] = <char>_PROTO
    at[1] = 5
    _boundary(out)  # before the tuple, as before each object pickle saves
    if count == 0:
        op = <char>_EMPTY_TUPLE
        _framed(out, &op, 1)
    elif count > 3:
        op = <char>_MARK
        _framed(out, &op, 1)
    for i in range(count):
        if not _frame_text(out, texts[i], sizes[i]):
            return False
    if count:
        op = <char>(_TUPLE if count > 3 else _TUPLE1 + count - 1)
        _framed(out, &op, 1)
    op = <char>_STOP
    _framed(out, &op, 1)
    _commit(out)
    return True


def _keys_pickle(tuple keys):
    """The keys' pickle of ``keys`` (strs) as :func:`_frame_keys` writes it from their bytes,
    or None where pickle must (for the tests: the bytes of pickle's own)."""
    cdef _Framer out
    cdef Py_ssize_t count = len(keys), i
    cdef const char **texts = <const char **>PyMem_Malloc(max(count, 1) * sizeof(char *))
    cdef Py_ssize_t *sizes = <Py_ssize_t *>PyMem_Malloc(max(count, 1) * sizeof(Py_ssize_t))
    cdef list kept = []
    cdef object encoded
    out.out.data = NULL
    out.out.size = out.out.room = 0
    out.frame = -1
    try:
        if texts == NULL or sizes == NULL:
            raise MemoryError()
        for i in range(count):
            encoded = _str_bytes(keys[i], &texts[i], &sizes[i])
            if encoded is not None:
                kept.append(encoded)
        if not _frame_keys(&out, texts, sizes, count):
            return None
        return PyBytes_FromStringAndSize(out.out.data, out.out.size)
    finally:
        PyMem_Free(out.out.data)
        PyMem_Free(texts)
        PyMem_Free(sizes)


def add_events(arrived, names, ts, ranks, event_ids):
    """Add the events of a visit's rows, given column by column, to ``arrived``: row ``i``'s
    event ``(ts[i], ranks[i], event_ids[i])`` goes to the end of key ``names[i]``'s list, so a
    key's events keep the rows' order. O(rows).

    Raises ValueError if the columns' lengths differ (``arrived`` is then unchanged).
    """
    check_columns(names, ts, ranks, event_ids)
    cdef list name_column = _as_list(names)
    cdef list ts_column = _as_list(ts)
    cdef list rank_column = _as_list(ranks)
    cdef list id_column = _as_list(event_ids)
    cdef bint exact = type(arrived) is dict
    cdef Py_ssize_t row
    cdef object name, event, events
    for row in range(len(name_column)):
        name = name_column[row]
        event = (ts_column[row], rank_column[row], id_column[row])
        events = (<dict>arrived).get(name) if exact else arrived.get(name)
        if events is None:
            arrived[name] = [event]
        else:
            events.append(event)


def visit(rule, shard, arrived, watermark, read, *, width, firing=None):
    """Visit the keys of the shard that have new events (``arrived``) or whose wake-up time
    the watermark (ms) has reached; emit their expiries and set the shard's timer.

    ``read`` (the map state) is called at most once: for all its pages when keys arrived, else
    for its due ones; not at all when the pages it would read are all kept in the index.
    ``width`` is the slot width of new pages (:func:`aiowheel.spark._shard.slot_width`).
    ``firing`` is the timer (ms) that triggered this visit, which Spark deletes afterwards.
    Without input: O(keys in the due pages), plus an :meth:`IdleRule.visit` per due key. With
    input: O(keys held) to find them (their names only), O(keys) of the pages it changes, plus
    a visit per key with events or due.
    """
    cdef dict wakes, inline, held, visiting, pages, incoming, rows
    cdef object outcome
    cdef _Page keys
    cdef dict events = arrived if type(arrived) is dict else dict(arrived)
    cdef set changed = set()
    cdef set opened
    cdef list due, expiries = [], placed, from_map
    cdef tuple found_keys, entry
    cdef object timer, pace, page, key, home_page, after, slot
    cdef object visit_stored = rule.visit_stored
    # The compiled rule visits the keys it can as C records (_visit_key).
    cdef IdleRule records = rule if type(rule) is IdleRule else None
    cdef double now = PyFloat_AsDouble(watermark) / 1000.0
    cdef list emitted = []
    # The slots of new wake-ups (see the placing below).
    cdef int64_t width_c = 0, slot_c = 0, run_c = 0
    cdef int overflow = 1
    cdef bint in_c = False, run_in_c = False
    cdef object run_slot = None
    cdef Py_ssize_t run = 0
    if shard is None:
        wakes = {}
        inline = {}
        timer = pace = None
    else:
        wakes = dict(shard.wakes)
        inline = dict(shard.inline)
        timer = None if shard.timer == firing else shard.timer
        pace = watermark - shard.upto
    # The pages that are entries of the map state before this visit.
    mapped = wakes.keys() - inline.keys()
    due = [page for page, wake in wakes.items() if wake <= watermark]
    if events:
        rows = dict(read(None)) if mapped else {}
        # By the keys' bytes where it can; else on objects, below.
        outcome = _visit_by_bytes(
            records, visit_stored, events, rows, inline, due, wakes, mapped, watermark, width,
            timer, pace,
        )
        if outcome is not None:
            return outcome
        held = {page: StoredPage(row) for page, row in rows.items()}
        for page, value in inline.items():
            held[page] = StoredPage((value,))
        # Each key with events, in their order, with the page it lives in (None: a new key;
        # the others' pages do not matter). dict.fromkeys copies a dict's keys and hashes.
        visiting = dict.fromkeys(events)
        for page, found in held.items():
            found_keys = found.keys
            for key in found_keys:
                if key in visiting:
                    visiting[key] = page
        opened = set()
        for home_page in visiting.values():
            if home_page is not None:
                opened.add(home_page)
        # The states of the pages this visit changes: those of the keys with events, and the
        # due ones.
        pages = {page: _Page.read(held[page]) for page in opened.union(due)}
        # Every page a visited key lives in changes: the opened ones, and the due ones with
        # a due key (added here, once each, not once per key).
        changed.update(opened)
        for page in due:
            for key in (<_Page>pages[page]).due(watermark):
                if key not in visiting:
                    visiting[key] = page
                    changed.add(page)
        placed = []
        incoming = {}
        if PyLong_CheckExact(width):
            width_c = PyLong_AsLongLongAndOverflow(width, &overflow)
        for key, home_page in visiting.items():
            if home_page is None:
                keys = None
            else:
                keys = <_Page>pages[home_page]
            after = _visit_key(
                visit_stored,
                records,
                key,
                keys,
                0 if keys is None else keys.pop(key),
                events.get(key),
                watermark,
                now,
                expiries,
                emitted,
            )
            if after is not None:
                if type(after) is _Run and not overflow and width_c > 0:
                    # The slot in C (// rounds down, as Python's); consecutive keys mostly
                    # share it, and its int.
                    slot_c = (<_Run>after).wake // width_c
                    if run_in_c and slot_c == run_c:
                        slot = run_slot
                    else:
                        slot = PyLong_FromLongLong(slot_c)
                    in_c = True
                else:
                    slot = _wake_of(after) // width
                    in_c = False
                placed.append((key, home_page, after, slot))
                # incoming counts the keys placed per slot, a run of the same slot at a time.
                if slot is not run_slot:
                    if run:
                        incoming[run_slot] = incoming.get(run_slot, 0) + run
                    run_slot = slot
                    run_in_c = in_c
                    run_c = slot_c
                    run = 0
                run += 1
        if run:
            incoming[run_slot] = incoming.get(run_slot, 0) + run
        for entry in placed:
            key, home_page, after, slot = entry
            if (
                home_page is not None
                and slot in held
                and slot not in changed
                and incoming[slot] * MOVE_SHARE < len(held[slot].keys)
            ):
                (<_Page>pages[home_page]).put(key, after)  # stays: see MOVE_SHARE
                continue
            # The key moves to the page of its new wake-up.
            keys = pages.get(slot)
            if keys is None:
                keys = _Page.read(held[slot]) if slot in held else _Page.empty()
                pages[slot] = keys
            keys.put(key, after)
            changed.add(slot)
    else:
        from_map = [page for page in due if page in mapped]
        rows = dict(read(from_map)) if from_map else {}
        for page in due:
            if page in inline:
                rows[page] = (inline[page],)
        pages = {page: _Page.read(StoredPage(row)) for page, row in rows.items()}
        for page in due:
            keys = pages.get(page)
            if keys is None:
                keys = pages[page] = _Page.empty()
            for key in keys.due(watermark):
                after = _visit_key(
                    visit_stored,
                    records,
                    key,
                    keys,
                    keys.slot(key),
                    None,
                    watermark,
                    now,
                    expiries,
                    emitted,
                )
                if after is None:
                    keys.remove(key)
                else:
                    keys.put(key, after)  # stays in its page: see aiowheel.spark._shard
            changed.add(page)
    return write_back(
        changed,
        pages,
        wakes,
        inline,
        mapped,
        expiries=expiries,
        watermark=watermark,
        timer=timer,
        pace=pace,
        earliest=_Page.earliest,
        encode=_Page.encode,
    )
