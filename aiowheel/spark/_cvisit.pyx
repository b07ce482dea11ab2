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
"""

from cpython.exc cimport PyErr_Clear
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_CheckExact, PyLong_FromLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from aiowheel._ccpython cimport AW_CPYTHON_FALLBACK

from aiowheel.spark._shard import MOVE_SHARE as _MOVE_SHARE_OBJECT
from aiowheel.spark._shard import WAKE as _WAKE_OBJECT
from aiowheel.spark._shard import (
    StoredPage,
    check_columns,
    pack_page,
    pickled_states,
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
            size = (
                <Py_ssize_t>data[at + 1] | (<Py_ssize_t>data[at + 2] << 8)
                | (<Py_ssize_t>data[at + 3] << 16) | (<Py_ssize_t>data[at + 4] << 24)
            )
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
        size = (
            <Py_ssize_t>data[start + 1] | (<Py_ssize_t>data[start + 2] << 8)
            | (<Py_ssize_t>data[start + 3] << 16) | (<Py_ssize_t>data[start + 4] << 24)
        )
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


cdef bint _dump_value(_Out *out, object value, int depth) except -1:
    """Append ``value`` as pickle writes it in protocol 3 without a memo; False (``out``
    partly written) if it is not made of None, floats, ints, strs, tuples and lists alone,
    exactly those types, or is nested too deep (the caller then asks pickle)."""
    cdef long long number
    cdef int overflow = 0
    cdef uint64_t magnitude
    cdef Py_ssize_t n, i, size, batch
    cdef char *at
    cdef const char *text
    cdef object encoded, item
    if value is None:
        _byte(out, _NONE)
    elif PyFloat_CheckExact(value):
        at = _room(out, 9)
        at[0] = <char>_BINFLOAT
        PyFloat_Pack8(PyFloat_AS_DOUBLE(value), at + 1, 0)
    elif PyLong_CheckExact(value):
        number = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return False
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
        else:
            # pickle's LONG1: one byte more than the magnitude's bits need, less one if that
            # byte is only the sign of a negative number.
            magnitude = <uint64_t>number if number >= 0 else (~(<uint64_t>number)) + 1
            n = 1  # (bits >> 3) + 1: whole bytes of the magnitude, plus one
            while magnitude >= 0x80:
                magnitude >>= 8
                n += 1
            if magnitude >= 0x80:
                n += 1
            if n > 8:
                return False
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
    elif PyUnicode_CheckExact(value):
        text = PyUnicode_AsUTF8AndSize(value, &size)
        encoded = None
        if text == NULL:  # lone surrogates: pickle's "surrogatepass", as it does
            PyErr_Clear()
            encoded = PyUnicode_AsEncodedString(value, "utf-8", "surrogatepass")
            text = PyBytes_AS_STRING(encoded)
            size = PyBytes_GET_SIZE(encoded)
        if size > 0xFFFFFFFF:
            return False
        at = _room(out, 5 + size)
        at[0] = <char>_BINUNICODE
        for i in range(4):
            at[1 + i] = <char>((size >> (8 * i)) & 0xFF)
        memcpy(at + 5, text, size)
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
    # Per slot: the key's state, or _STORED for the stored state `slot`.
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
        if state is _STORED:
            state = _load_state(
                <const unsigned char *>PyBytes_AS_STRING(self.pickles),
                self.starts[slot],
                self.starts[slot + 1],
            )
            self.states[slot] = state
        return state

    cdef object take(self, object key):
        """Remove ``key`` and return its state."""
        return self._state(self.keys.pop(key))

    cdef object state(self, object key):
        """``key``'s state (it stays where it is in the page)."""
        return self._state(self.keys[key])

    cdef put(self, object key, object state):
        """Set ``key``'s state: where the key is, or last if the page does not hold it."""
        cdef object slot = self.keys.get(key)
        if slot is None:
            self.keys[key] = len(self.states)
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
            if state is not _STORED or overflow:
                if self._state(slot)[WAKE] <= watermark:
                    ready.append(key)
            elif self.wakes[slot] <= upto:
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
    cdef dict wakes, inline, held, home, visiting, pages, incoming, rows
    cdef _Page keys
    cdef dict events = arrived if type(arrived) is dict else dict(arrived)
    cdef set changed = set()
    cdef set opened
    cdef list due, expiries = [], placed, from_map
    cdef tuple found_keys, entry
    cdef object timer, pace, page, key, home_page, stored, after, emitted, expiry, slot
    cdef object visit_stored = rule.visit_stored
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
        held = {page: StoredPage(row) for page, row in read(None).items()} if mapped else {}
        for page, value in inline.items():
            held[page] = StoredPage((value,))
        # Where each key with events lives (the others' pages do not matter).
        home = {}
        for page, found in held.items():
            found_keys = found.keys
            for key in found_keys:
                if key in events:
                    home[key] = page
        visiting = {}
        opened = set()
        for key in events:
            home_page = home.get(key)
            visiting[key] = home_page
            if home_page is not None:
                opened.add(home_page)
        # The states of the pages this visit changes: those of the keys with events, and the
        # due ones.
        pages = {page: _Page.read(held[page]) for page in opened.union(due)}
        for page in due:
            for key in (<_Page>pages[page]).due(watermark):
                if key not in visiting:
                    visiting[key] = page
        placed = []
        incoming = {}
        for key, home_page in visiting.items():
            if home_page is None:
                stored = None
            else:
                stored = (<_Page>pages[home_page]).take(key)
                changed.add(home_page)
            after, emitted = visit_stored(stored, events.get(key, []), watermark)
            if emitted:
                for expiry in emitted:
                    expiries.append((key, *expiry))
            if after is not None:
                slot = after[WAKE] // width
                placed.append((key, home_page, after, slot))
                incoming[slot] = incoming.get(slot, 0) + 1
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
                after, emitted = visit_stored(keys.state(key), [], watermark)
                if emitted:
                    for expiry in emitted:
                        expiries.append((key, *expiry))
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
