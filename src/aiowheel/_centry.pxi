# Part of aiowheel/_cwheel.pyx (included there; see its docstring): the compiled Entry, the twin of
# aiowheel.wheel.Entry, and the discovery of its fields' offsets for the member descriptors.


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
