# Part of aiowheel/_cwheel.pyx (included there; see its docstring): the compiled Entry, the twin of
# aiowheel.wheel.Entry, and its fields' offsets and member descriptors.


# The member definitions of the descriptor fields, found by _init_members with their offsets
# (_OFF_PAYLOAD, _OFF_BUCKET, declared in _cwheel.pxd with _init_entry, _pending, _get and _set).
cdef PyMemberDef _MEMBERS[2]

# The deadlines that are neither a float nor a small int (_DEADLINE_OBJECT, see Entry.c_deadline
# in _cwheel.pxd), keyed by their entry's address: an entry's item is there exactly while its
# kind is _DEADLINE_OBJECT, and is released with the entry (_forget_deadline). Rare: add()
# converts such deadlines to floats; only add_entry and ``entry.deadline = ...`` keep them.
cdef dict _OBJECT_DEADLINES = {}


cdef inline Entry _as_entry(object entry):
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

    # The fields, with the invariant each keeps, are declared in _cwheel.pxd.

    def __cinit__(self):
        self.c_flags = _DEADLINE_FLOAT  # deadline 0.0, as Entry.__new__ leaves it

    def __init__(self, deadline, payload):
        """A new entry, not filed yet: a subclass's ``__init__`` must call this one."""
        _init_entry(self, deadline, payload)

    def __dealloc__(self):
        _forget_deadline(self)

    @classmethod
    def __class_getitem__(cls, item):
        # Entry[P] in annotations and base classes: the compiled class is not generic at runtime.
        return cls

    # The deadline as Python sees it: a C double and its kind (see _cwheel.pxd), read and
    # written as the pure Entry's slot is.

    @property
    def deadline(self):
        return _deadline(self)

    @deadline.setter
    def deadline(self, value):
        _set_deadline(self, value)

    @deadline.deleter
    def deadline(self):
        if self.c_flags & _DEADLINE_KIND == _DEADLINE_UNSET:
            _raise_unset(self, "deadline")
        _forget_deadline(self)
        self.c_flags |= _DEADLINE_UNSET

    # payload and _bucket as Python sees them: replaced by member descriptors when the module is
    # imported (see _init_members), kept by the CPython fallback build; both behave as the pure
    # Entry's slots do.

    @property
    def payload(self):
        return _get(self, _OFF_PAYLOAD, "payload")

    @payload.setter
    def payload(self, value):
        _set(self, _OFF_PAYLOAD, value)

    @payload.deleter
    def payload(self):
        _del(self, _OFF_PAYLOAD, "payload")

    @property
    def _bucket(self):
        return _get(self, _OFF_BUCKET, "_bucket")

    @_bucket.setter
    def _bucket(self, value):
        _set(self, _OFF_BUCKET, value)

    @_bucket.deleter
    def _bucket(self):
        _del(self, _OFF_BUCKET, "_bucket")

    @property
    def pending(self):
        """True while the entry sits in its wheel: neither returned by ``advance`` nor removed."""
        return _pending(self)

    def __repr__(self):
        state = "pending" if _pending(self) else "done"
        return f"<Entry deadline={_deadline(self)!r} {state}>"

    # Pickling and copying, as for the pure Entry (a slotted object): the fields that are set,
    # then a subclass's slots.

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),), self.__getstate__())

    def __getstate__(self):
        cdef PyObject *value
        fields = {}
        if self.c_flags & _DEADLINE_KIND != _DEADLINE_UNSET:
            fields["deadline"] = _deadline(self)
        for name, offset in (("payload", _OFF_PAYLOAD), ("_bucket", _OFF_BUCKET)):
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
        if "deadline" not in fields:
            _forget_deadline(self)
            self.c_flags |= _DEADLINE_UNSET
        for name, offset in (("payload", _OFF_PAYLOAD), ("_bucket", _OFF_BUCKET)):
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


cdef extern from *:
    """
    #define aw_field_offset_payload(entry) AW_FIELD_OFFSET(entry, c_payload)
    #define aw_field_offset_bucket(entry) AW_FIELD_OFFSET(entry, c_bucket)
    """
    Py_ssize_t aw_field_offset_payload(Entry entry)
    Py_ssize_t aw_field_offset_bucket(Entry entry)


cdef int _del(object entry, Py_ssize_t offset, str name) except -1:
    """``del entry.<name>``: leave NULL in the field, as deleting a slot does."""
    cdef PyObject **field = _field(entry, offset)
    cdef PyObject *old = field[0]
    if old is NULL:
        _raise_unset(entry, name)
    field[0] = NULL
    Py_XDECREF(old)
    return 0


cdef object _deadline_slow(Entry entry):
    cdef unsigned int kind = entry.c_flags & _DEADLINE_KIND
    if kind == _DEADLINE_FLOAT:
        return PyFloat_FromDouble(entry.c_deadline)
    if kind == _DEADLINE_INT:
        return PyLong_FromDouble(entry.c_deadline)
    if kind == _DEADLINE_OBJECT:
        return _OBJECT_DEADLINES[<Py_ssize_t><PyObject *>entry]
    _raise_unset(entry, "deadline")


cdef int _set_deadline_slow(Entry entry, object value) except -1:
    """Store a deadline of any kind (see Entry.c_deadline); releases an old side-table deadline
    last, as that may run arbitrary code."""
    cdef long long small = 0
    cdef int overflow = 1
    cdef Py_ssize_t key = <Py_ssize_t><PyObject *>entry
    if PyLong_CheckExact(value):
        small = PyLong_AsLongLongAndOverflow(value, &overflow)
        overflow = overflow or not (-_EXACT <= small <= _EXACT)
    if PyFloat_CheckExact(value) or not overflow:
        old = _OBJECT_DEADLINES.pop(key, None)
        entry.c_deadline = PyFloat_AS_DOUBLE(value) if PyFloat_CheckExact(value) else <double>small
        entry.c_flags = (entry.c_flags & ~(<unsigned int>_DEADLINE_KIND)) | (
            _DEADLINE_FLOAT if PyFloat_CheckExact(value) else _DEADLINE_INT
        )
        return 0
    old = _OBJECT_DEADLINES.get(key)
    _OBJECT_DEADLINES[key] = value
    entry.c_deadline = math.nan  # unused: _deadline_double converts the object
    entry.c_flags = (entry.c_flags & ~(<unsigned int>_DEADLINE_KIND)) | _DEADLINE_OBJECT
    return 0


cdef void _forget_deadline(object entry) noexcept:
    cdef PyObject *error_type
    cdef PyObject *error_value
    cdef PyObject *error_traceback
    if (<Entry>entry).c_flags & _DEADLINE_KIND != _DEADLINE_OBJECT:
        return
    (<Entry>entry).c_flags &= ~(<unsigned int>_DEADLINE_KIND)
    (<Entry>entry).c_deadline = 0.0
    PyErr_Fetch(&error_type, &error_value, &error_traceback)
    try:
        _OBJECT_DEADLINES.pop(<Py_ssize_t><PyObject *>entry, None)
    except BaseException:
        pass  # a deallocator has nowhere to raise it; the item is gone either way
    PyErr_Restore(error_type, error_value, error_traceback)


cdef int _raise_unset(object entry, str name) except -1:
    """Raise the AttributeError reading the deleted field ``name`` of ``entry`` raises."""
    if not AW_CPYTHON_FALLBACK and name != "deadline":  # the deadline is a property: ours
        getattr(entry, name)  # the member descriptor's own error
    raise AttributeError(
        f"'{Py_TYPE(entry).tp_name.decode()}' object has no attribute '{name}'"
    )


cdef int _init_members() except -1:
    """Set the two fields' offsets and, unless built as the CPython fallback, add the member
    descriptors (see _cwheel.pxd)."""
    global _OFF_PAYLOAD, _OFF_BUCKET
    cdef Entry probe = Entry.__new__(Entry)
    cdef int i
    _OFF_PAYLOAD = aw_field_offset_payload(probe)
    _OFF_BUCKET = aw_field_offset_bucket(probe)
    if AW_CPYTHON_FALLBACK:
        return 0
    _MEMBERS[0].name = b"payload"
    _MEMBERS[0].offset = _OFF_PAYLOAD
    _MEMBERS[1].name = b"_bucket"
    _MEMBERS[1].offset = _OFF_BUCKET
    for i in range(2):
        _MEMBERS[i].type = T_OBJECT_EX
        _MEMBERS[i].flags = 0
        _MEMBERS[i].doc = NULL
        aw_add_member(<PyTypeObject *>Entry, &_MEMBERS[i])
    return 0


_init_members()
