# Part of aiowheel/_cwheel.pyx (included there; see its docstring): C plumbing for object
# fields and lists that Cython does not offer.
#
# * Member descriptors. Entry's deadline, payload and _bucket are exposed as member descriptors,
#   as the slots of the pure Entry are, not as Cython properties: CPython specialises attribute
#   access on them, so a Python subclass (the Timer's handles) builds and reads them at slot
#   speed. A member can be deleted (``del entry.payload``), leaving NULL in the field, so the
#   extension reads and writes those fields only through _get and _set.
# * In-place list edits: O(1) swap-remove, and a permutation store for sorting.

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


# Byte offsets of Entry's deadline, payload and _bucket fields, found at import (see
# _init_members in _centry.pxi).
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
