# Part of aiowheel/_cwheel.pyx (included there; see its docstring): the compiled Entry, the twin of
# aiowheel.wheel.Entry, and its fields' offsets and member descriptors.


# The member definitions of the descriptor fields, found by _init_members with their offsets
# (_OFF_DEADLINE, _OFF_PAYLOAD, _OFF_BUCKET, declared in _cwheel.pxd with _init_entry, _pending,
# _get and _set).
cdef PyMemberDef _MEMBERS[3]


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

    def __init__(self, deadline, payload):
        """A new entry, not filed yet: a subclass's ``__init__`` must call this one."""
        _init_entry(self, deadline, payload)

    @classmethod
    def __class_getitem__(cls, item):
        # Entry[P] in annotations and base classes: the compiled class is not generic at runtime.
        return cls

    # deadline, payload and _bucket as Python sees them: replaced by member descriptors when the
    # module is imported (see _init_members), kept by the CPython fallback build; both behave
    # as the pure Entry's slots do.

    @property
    def deadline(self):
        return _get(self, _OFF_DEADLINE, "deadline")

    @deadline.setter
    def deadline(self, value):
        _set(self, _OFF_DEADLINE, value)

    @deadline.deleter
    def deadline(self):
        _del(self, _OFF_DEADLINE, "deadline")

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


cdef extern from *:
    """
    #define aw_field_offset_deadline(entry) AW_FIELD_OFFSET(entry, c_deadline)
    #define aw_field_offset_payload(entry) AW_FIELD_OFFSET(entry, c_payload)
    #define aw_field_offset_bucket(entry) AW_FIELD_OFFSET(entry, c_bucket)
    """
    Py_ssize_t aw_field_offset_deadline(Entry entry)
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


cdef int _raise_unset(object entry, str name) except -1:
    """Raise the AttributeError reading the deleted field ``name`` of ``entry`` raises."""
    if not AW_CPYTHON_FALLBACK:
        getattr(entry, name)  # the member descriptor's own error
    raise AttributeError(
        f"'{Py_TYPE(entry).tp_name.decode()}' object has no attribute '{name}'"
    )


cdef int _init_members() except -1:
    """Set the three fields' offsets and, unless built as the CPython fallback, add the member
    descriptors (see _cwheel.pxd)."""
    global _OFF_DEADLINE, _OFF_PAYLOAD, _OFF_BUCKET
    cdef Entry probe = Entry.__new__(Entry)
    cdef int i
    _OFF_DEADLINE = aw_field_offset_deadline(probe)
    _OFF_PAYLOAD = aw_field_offset_payload(probe)
    _OFF_BUCKET = aw_field_offset_bucket(probe)
    if AW_CPYTHON_FALLBACK:
        return 0
    _MEMBERS[0].name = b"deadline"
    _MEMBERS[0].offset = _OFF_DEADLINE
    _MEMBERS[1].name = b"payload"
    _MEMBERS[1].offset = _OFF_PAYLOAD
    _MEMBERS[2].name = b"_bucket"
    _MEMBERS[2].offset = _OFF_BUCKET
    for i in range(3):
        _MEMBERS[i].type = T_OBJECT_EX
        _MEMBERS[i].flags = 0
        _MEMBERS[i].doc = NULL
        aw_add_member(<PyTypeObject *>Entry, &_MEMBERS[i])
    return 0


_init_members()
