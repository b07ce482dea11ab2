# CPython internals the compiled parts use, in one place (cimported by the wheel, the Timer core,
# the loop core and the idle core; no module of its own). Each helper below reaches past the
# public C API -- into an object's layout, a type's flags and slots, a private function -- for
# speed or memory; the comment above each says what it relies on and what it buys. Everything
# else of the compiled parts is plain Cython and the public C API.

from cpython.object cimport PyObject, PyTypeObject, Py_TYPE


cdef extern from *:
    """
    #include <structmember.h>

    /* -- member descriptors and in-place list edits (the wheel) ---------------------------- */

    /* Expose the object field at `offset` of every instance of `type` as a member descriptor,
       as __slots__ are; `def` must outlive the type (a static). Edits the dict of a ready
       static type. */
    static inline int aw_add_member(PyTypeObject *type, PyMemberDef *def) {
        PyObject *descr = PyDescr_NewMember(type, def);
        int result;
        if (descr == NULL) return -1;
        result = PyDict_SetItemString(type->tp_dict, def->name, descr);
        Py_DECREF(descr);
        PyType_Modified(type);
        return result;
    }

    /* Take item i out of `list` by moving the last item into its place (PyListObject's
       ob_item, edited in place). Returns the removed item: the list's reference to it passes to
       the caller. */
    static inline PyObject *aw_list_swap_remove(PyObject *list, Py_ssize_t i) {
        PyListObject *l = (PyListObject *)list;
        Py_ssize_t last = Py_SIZE(l) - 1;
        PyObject *item = l->ob_item[i];
        l->ob_item[i] = l->ob_item[last];
        Py_SET_SIZE(l, last);
        return item;
    }

    /* Put `item` at position i of `list` (a permutation step: no reference changes hands). */
    static inline void aw_list_put(PyObject *list, Py_ssize_t i, PyObject *item) {
        ((PyListObject *)list)->ob_item[i] = item;
    }

    /* -- contexts (the Timer core, the loop core) ------------------------------------------- */

    /* The variables of a contextvars.Context: the pointer after ctx_prev. CPython 3.7 to 3.14
       lay a Context out as PyObject_HEAD, ctx_prev, ctx_vars; _context_vars_readable() checks it
       at import, and snapshots are not shared if it does not hold. */
    static inline void *aw_context_vars(PyObject *ctx) {
        return ((void **)((char *)ctx + sizeof(PyObject)))[1];
    }
    /* The current thread's context itself, not a copy; NULL before any was entered. Read from
       PyThreadState.context, a field of the non-limited API from CPython 3.7 to 3.14, only
       where _context_vars_readable() holds. */
    static inline PyObject *aw_current_context(void) {
        return PyThreadState_GET()->context;
    }
    static inline const char *aw_type_name(void *obj) {
        return Py_TYPE((PyObject *)obj)->tp_name;
    }

    /* -- callbacks (the Timer core) ---------------------------------------------------------- */

    /* co_flags of a plain function's code, or -1 if `obj` is not exactly a function. */
    static inline int aw_function_flags(PyObject *obj) {
        if (!Py_IS_TYPE(obj, &PyFunction_Type)) return -1;
        return ((PyCodeObject *)PyFunction_GET_CODE(obj))->co_flags;
    }
    static inline PyObject *aw_method_function(PyObject *obj) {
        return Py_IS_TYPE(obj, &PyMethod_Type) ? PyMethod_GET_FUNCTION(obj) : NULL;
    }

    /* -- handles without GC support (the Timer core, the loop core) ------------------------- */

    /* Types without GC support whose instances hold object fields at known offsets; see
       aw_drop_gc. Each keeps its own (Cython's) deallocator, for its GC subclasses. One table
       per compiled part that includes this file. */
    #define AW_MAX_FIELDS 12
    #define AW_MAX_TYPES 2
    typedef struct {
        PyTypeObject *type;
        destructor gc_dealloc;
        Py_ssize_t offsets[AW_MAX_FIELDS];
        int count;
    } aw_untracked_type;
    static aw_untracked_type aw_untracked_types[AW_MAX_TYPES];
    static int aw_untracked_type_count = 0;

    static inline void aw_untracked_dealloc(PyObject *o) {
        PyTypeObject *type = Py_TYPE(o);
        aw_untracked_type *record = aw_untracked_types;
        int i;
        while (!PyType_IsSubtype(type, record->type)) record++;
        if (PyType_IS_GC(type)) {  /* a Python subclass: allocated with a GC header */
            record->gc_dealloc(o);
            return;
        }
        if (type->tp_weaklistoffset && *(PyObject **)((char *)o + type->tp_weaklistoffset)) {
            PyObject_ClearWeakRefs(o);
        }
        for (i = 0; i < record->count; i++) {
            Py_CLEAR(*(PyObject **)((char *)o + record->offsets[i]));
        }
        type->tp_free(o);
        if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) Py_DECREF(type);
    }

    /* Clear Py_TPFLAGS_HAVE_GC of `type`, before any instance exists: instances are then
       allocated without a GC header and freed by aw_untracked_dealloc. */
    static inline int aw_drop_gc(PyTypeObject *type, Py_ssize_t *offsets, int count) {
        aw_untracked_type *record;
        int i;
        if (count > AW_MAX_FIELDS || aw_untracked_type_count >= AW_MAX_TYPES) {
            PyErr_SetString(PyExc_SystemError, "aiowheel: too many handle fields or types");
            return -1;
        }
        record = &aw_untracked_types[aw_untracked_type_count++];
        record->type = type;
        for (i = 0; i < count; i++) record->offsets[i] = offsets[i];
        record->count = count;
        record->gc_dealloc = type->tp_dealloc;
        type->tp_dealloc = aw_untracked_dealloc;
        type->tp_free = PyObject_Free;
        type->tp_flags &= ~Py_TPFLAGS_HAVE_GC;
        PyType_Modified(type);
        return 0;
    }

    /* -- the monotonic clock (the idle core) ------------------------------------------------- */

    /* time.monotonic() as a double, by the calls time.monotonic() makes (CPython's
       Modules/timemodule.c): the same clock, converted the same way, so the same value. Below
       3.13 the functions are private (_PyTime_*). */
    #if PY_VERSION_HEX >= 0x030D0000
    static inline int aw_monotonic(double *now) {
        PyTime_t t;
        if (PyTime_Monotonic(&t) < 0) return -1;
        *now = PyTime_AsSecondsDouble(t);
        return 0;
    }
    #else
    static inline int aw_monotonic(double *now) {
        _PyTime_t t;
        if (_PyTime_GetMonotonicClockWithInfo(&t, NULL) < 0) return -1;
        *now = _PyTime_AsSecondsDouble(t);
        return 0;
    }
    #endif
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
    void *aw_context_vars(object ctx)
    PyObject *aw_current_context()
    const char *aw_type_name(void *obj)
    int aw_function_flags(PyObject *obj)
    PyObject *aw_method_function(object obj)
    int aw_drop_gc(PyTypeObject *type, Py_ssize_t *offsets, int count) except -1
    int aw_monotonic(double *now) except -1
    int CO_COROUTINE
    int CO_ITERABLE_COROUTINE


cdef inline Py_ssize_t _find_field(object probe, object marker) except -1:
    """The byte offset of the one object field of ``probe`` that holds ``marker`` (Cython does
    not expose the offsets of a cdef class's fields): found by reading the instance's memory,
    pointer by pointer, after the object header."""
    cdef char *base = <char *><PyObject *>probe
    cdef Py_ssize_t offset
    cdef Py_ssize_t size = Py_TYPE(probe).tp_basicsize
    for offset in range(sizeof(PyObject), size - <Py_ssize_t>sizeof(PyObject *) + 1,
                        sizeof(PyObject *)):
        if (<PyObject **>(base + offset))[0] == <PyObject *>marker:
            return offset
    raise SystemError(f"aiowheel: a field of {type(probe).__name__} was not found")


cdef inline bint _context_vars_readable():
    """Whether aw_context_vars reads a Context's variable mapping on this interpreter."""
    import contextvars
    import sys

    if not ((3, 7) <= sys.version_info[:2] <= (3, 14)):
        return False
    probe = contextvars.ContextVar("aiowheel-probe")
    first = contextvars.Context()
    second = first.copy()
    if aw_context_vars(first) is NULL or aw_context_vars(first) != aw_context_vars(second):
        return False
    if aw_type_name(aw_context_vars(first)) != b"hamt":
        return False
    second.run(probe.set, 1)  # a change of variables is a new mapping
    return (
        aw_context_vars(second) is not NULL
        and aw_context_vars(second) != aw_context_vars(first)
        and aw_type_name(aw_context_vars(second)) == b"hamt"
    )
