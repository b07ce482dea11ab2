# Part of aiowheel/_cwheel.pyx (included there; see its docstring): sorting a due batch by
# (deadline, add order) -- in C with qsort when every deadline is an exact double, as the pure
# wheel's list.sort otherwise -- and marking its entries as out of the wheel.

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
    return (_deadline(<Entry>entry), (<Entry>entry)._seq)


cdef inline bint _deadline_as_double(Entry entry, double *out) noexcept:
    """Store an exact double equal to the entry's deadline if it is a non-NaN float or a small
    int (then kept as that double, see Entry.c_deadline)."""
    out[0] = entry.c_deadline
    return entry.c_flags & _DEADLINE_KIND <= _DEADLINE_INT and out[0] == out[0]


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
            if not _deadline_as_double(<Entry>item, &keys[i].deadline):
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
            if AW_CPYTHON_FALLBACK:  # trick 2 of _ccpython.pxd: a new list, stored by slice
                batch[:] = [<object>keys[i].entry for i in range(n)]
            else:
                for i in range(n):
                    aw_list_put(batch, i, keys[i].entry)
    finally:
        free(keys)
    return 0
