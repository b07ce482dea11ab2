# CPython internals the compiled parts use, in one place (cimported by the wheel, the Timer core,
# the loop core and the idle core; no module of its own). Everything else of the compiled parts
# is plain Cython and the public C API.
#
# Each trick below reaches past the public C API -- into an object's layout, a type's flags and
# slots, a private function -- for speed or memory. For each: what it relies on, what it buys,
# the CPython versions it was checked against (the suite passes on each), and its fallback.
#
# The fallback build. With AIOWHEEL_CPYTHON_FALLBACK=1 in the environment at build time,
# setup.py defines the C macro AIOWHEEL_CPYTHON_FALLBACK, and every trick here is compiled as a
# plain fallback on the public C API or plain Cython: the same behaviour for callers, a little
# slower, and some memory more per handle. ``AW_CPYTHON_FALLBACK`` (below) is true in that build;
# each compiled part publishes it as its module constant ``CPYTHON_FALLBACK``, and
# ``aiowheel._impl.CPYTHON_FALLBACK`` tells whether the running core is such a build. The suite
# runs on it too (scripts/test), so the day a trick breaks there is a known-good path.
#
# Nothing here can fail an import on a layout surprise: the one layout read at run time (the
# Context's, trick 3) is checked when a part is imported, and a check that fails makes that part
# take its fallback path at run time (snapshots are then not shared). Every other trick is fixed
# at compile time from CPython's headers.

from cpython.object cimport PyObject, PyTypeObject


cdef extern from *:
    """
    #include <structmember.h>

    #ifdef AIOWHEEL_CPYTHON_FALLBACK
    #define AW_CPYTHON_FALLBACK 1
    #else
    #define AW_CPYTHON_FALLBACK 0
    #endif

    /* Not a trick: the byte offset of an object field of a cdef class instance, from the C
       struct Cython declares for it (plain C, nothing guessed). */
    #define AW_FIELD_OFFSET(obj, field) ((Py_ssize_t)((char *)&(obj)->field - (char *)(obj)))

    /* -- 1. member descriptors (the wheel's Entry) ---------------------------------------------
       Relies on: adding to the tp_dict of a ready static type, then PyType_Modified.
       Buys: Entry's payload and _bucket are member descriptors, as slots are, which CPython's
       attribute specialisation reads at slot speed in Python subclasses. Checked: 3.11, 3.12, 3.13. Fallback: Entry's Cython properties, which behave the
       same (_centry.pxi). */
    #if !AW_CPYTHON_FALLBACK
    static inline int aw_add_member(PyTypeObject *type, PyMemberDef *def) {
        PyObject *descr = PyDescr_NewMember(type, def);
        int result;
        if (descr == NULL) return -1;
        result = PyDict_SetItemString(type->tp_dict, def->name, descr);
        Py_DECREF(descr);
        PyType_Modified(type);
        return result;
    }
    #else
    static inline int aw_add_member(PyTypeObject *type, PyMemberDef *def) {
        (void)type; (void)def;
        return 0;
    }
    #endif

    /* -- 2. in-place list edits (the wheel) ----------------------------------------------------
       Relies on: PyListObject's ob_item array and Py_SET_SIZE on a list.
       Buys: O(1) removal from a bucket with no reference-count traffic (aw_list_swap_remove), and
       a sorted batch stored back without a second list (aw_list_put).
       Checked: 3.11, 3.12, 3.13. Fallback: PyList_GET_ITEM / PyList_SetItem / PyList_SetSlice,
       and a sorted batch stored through a new list (aw_list_put is then not called: see
       _csort.pxi). */
    #if !AW_CPYTHON_FALLBACK
    /* Take item i out of `list` by moving the last item into its place. Returns the removed
       item: the list's reference to it passes to the caller. */
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
    #else
    static inline PyObject *aw_list_swap_remove(PyObject *list, Py_ssize_t i) {
        Py_ssize_t last = PyList_GET_SIZE(list) - 1;
        PyObject *item = PyList_GET_ITEM(list, i);
        Py_INCREF(item);  /* the reference passed to the caller; the list's goes below */
        if (i != last) {
            PyObject *moved = PyList_GET_ITEM(list, last);
            Py_INCREF(moved);
            PyList_SetItem(list, i, moved);  /* steals `moved`, releases the list's `item` */
        }
        /* Releases the last slot's reference: `moved`'s (still held at i) or `item`'s. */
        PyList_SetSlice(list, last, last + 1, NULL);
        return item;
    }
    static inline void aw_list_put(PyObject *list, Py_ssize_t i, PyObject *item) {
        (void)list; (void)i; (void)item;
    }
    #endif

    /* -- 3. the Context's variables (the Timer core, the loop core) ----------------------------
       Relies on: a contextvars.Context laid out as PyObject_HEAD, ctx_prev, ctx_vars (CPython 3.7
       to 3.14), and the field PyThreadState.context (the current context, not a copy).
       _context_vars_readable() checks the layout when a part is imported; where it does not
       hold, the part runs its fallback path at run time.
       Buys: handles scheduled from the same context share one snapshot (one Context object per
       change of the variables instead of one per timer).
       Checked: 3.11, 3.12, 3.13. Fallback: no shared snapshots, one PyContext_CopyCurrent per
       handle, as when the check fails. */
    #if !AW_CPYTHON_FALLBACK
    static inline void *aw_context_vars(PyObject *ctx) {
        return ((void **)((char *)ctx + sizeof(PyObject)))[1];
    }
    static inline PyObject *aw_current_context(void) {
        return PyThreadState_GET()->context;
    }
    #else
    static inline void *aw_context_vars(PyObject *ctx) { (void)ctx; return NULL; }
    static inline PyObject *aw_current_context(void) { return NULL; }
    #endif
    static inline const char *aw_type_name(void *obj) {
        return Py_TYPE((PyObject *)obj)->tp_name;
    }

    /* -- 4. a function's code flags (the Timer core) ---------------------------------------------
       Relies on: PyCodeObject's co_flags field.
       Buys: call_later/call_at refuse a coroutine function without a Python call.
       Checked: 3.11, 3.12, 3.13. Fallback: -1 ("not a plain function"): every callback goes
       through aiowheel._checks.check_callback, which gives the same answer. */
    #if !AW_CPYTHON_FALLBACK
    static inline int aw_function_flags(PyObject *obj) {
        if (!Py_IS_TYPE(obj, &PyFunction_Type)) return -1;
        return ((PyCodeObject *)PyFunction_GET_CODE(obj))->co_flags;
    }
    #else
    static inline int aw_function_flags(PyObject *obj) { (void)obj; return -1; }
    #endif
    static inline PyObject *aw_method_function(PyObject *obj) {
        return Py_IS_TYPE(obj, &PyMethod_Type) ? PyMethod_GET_FUNCTION(obj) : NULL;
    }

    /* -- 5. handles without GC support (the Timer core, the loop core) ----------------------------
       Relies on: clearing Py_TPFLAGS_HAVE_GC of a ready type before any instance exists, and
       swapping its tp_dealloc and tp_free; Python subclasses (heap types) still get GC support
       from CPython and keep Cython's deallocator.
       Buys: no GC header per handle (16 bytes) and nothing for a full collection to walk: about
       half the CPU a pending timer cost (see the parts' docstrings for why it is safe).
       Checked: 3.11, 3.12, 3.13. Fallback: the handles keep their GC support (tracked, 16 bytes
       more each). */
    #define AW_MAX_FIELDS 12
    #if !AW_CPYTHON_FALLBACK
    /* Types without GC support whose instances hold object fields at known offsets; each keeps
       its own (Cython's) deallocator, for its GC subclasses. One table per compiled part. */
    #define AW_MAX_TYPES 2
    typedef struct {
        PyTypeObject *type;
        destructor gc_dealloc;
        void (*release)(PyObject *);
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
        if (record->release) {
            /* Resurrected while `release` runs, as CPython's own deallocators do around a
               finaliser: a reference it takes and drops must not free the object twice. */
            Py_SET_REFCNT(o, 1);
            record->release(o);
            Py_SET_REFCNT(o, 0);
        }
        for (i = 0; i < record->count; i++) {
            Py_CLEAR(*(PyObject **)((char *)o + record->offsets[i]));
        }
        type->tp_free(o);
        if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) Py_DECREF(type);
    }

    /* Clear Py_TPFLAGS_HAVE_GC of `type`, before any instance exists: instances are then
       allocated without a GC header and freed by aw_untracked_dealloc, which calls `release`
       (if not NULL: what the type's Cython deallocators would do besides clearing fields; it
       must keep a raised exception) and clears the object fields at `offsets`. */
    static inline int aw_drop_gc(PyTypeObject *type, Py_ssize_t *offsets, int count,
                                 void (*release)(PyObject *)) {
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
        record->release = release;
        record->gc_dealloc = type->tp_dealloc;
        type->tp_dealloc = aw_untracked_dealloc;
        type->tp_free = PyObject_Free;
        type->tp_flags &= ~Py_TPFLAGS_HAVE_GC;
        PyType_Modified(type);
        return 0;
    }
    #else
    static inline int aw_drop_gc(PyTypeObject *type, Py_ssize_t *offsets, int count,
                                 void (*release)(PyObject *)) {
        (void)type; (void)offsets; (void)count; (void)release;
        return 0;
    }
    #endif

    /* -- 6. the monotonic clock (the idle core) --------------------------------------------------
       Relies on: below 3.13, CPython's private _PyTime_GetMonotonicClockWithInfo and
       _PyTime_AsSecondsDouble (3.13 made them public as PyTime_Monotonic and
       PyTime_AsSecondsDouble, which every build uses there).
       Buys: IdleTimeouts.touch reads time.monotonic() -- the same clock, converted the same way,
       so the same double -- without a call through Python or a float object.
       Checked: 3.11, 3.12 (private), 3.13 (public). Fallback below 3.13: AW_HAVE_C_MONOTONIC is
       0 and touch calls the Timer's clock as it does any other clock. */
    #if PY_VERSION_HEX >= 0x030D0000
    #define AW_HAVE_C_MONOTONIC 1
    static inline int aw_monotonic(double *now) {
        PyTime_t t;
        if (PyTime_Monotonic(&t) < 0) return -1;
        *now = PyTime_AsSecondsDouble(t);
        return 0;
    }
    #elif !AW_CPYTHON_FALLBACK
    #define AW_HAVE_C_MONOTONIC 1
    static inline int aw_monotonic(double *now) {
        _PyTime_t t;
        if (_PyTime_GetMonotonicClockWithInfo(&t, NULL) < 0) return -1;
        *now = _PyTime_AsSecondsDouble(t);
        return 0;
    }
    #else
    #define AW_HAVE_C_MONOTONIC 0
    static inline int aw_monotonic(double *now) {
        (void)now;
        PyErr_SetString(PyExc_SystemError, "aiowheel: no C monotonic clock in this build");
        return -1;
    }
    #endif

    /* -- 7. a type's version tag (the loop core) ----------------------------------------------
       Relies on: PyTypeObject.tp_version_tag, the tag of the interpreter's method cache: nonzero
       while valid, and given a new value (or 0) whenever an attribute of the type or of one of
       its bases is set or deleted (PyType_Modified, which setattr on a class calls).
       Buys: the loop core tells, for every timer, that no test patched ``time`` on the loop's
       class or a base (mock.patch.object(asyncio.BaseEventLoop, "time")) with one comparison,
       and reads the clock the fast way; a patch on the loop itself goes through the loop
       classes' ClockWatch, which tells the core.
       Checked: 3.11, 3.12, 3.13, 3.14. Fallback: 0 ("no valid tag"), so that the core looks
       loop.time up for every timer, as asyncio's loops do. */
    #if !AW_CPYTHON_FALLBACK
    static inline unsigned int aw_type_version(PyObject *obj) {
        return Py_TYPE(obj)->tp_version_tag;
    }
    #else
    static inline unsigned int aw_type_version(PyObject *obj) { (void)obj; return 0; }
    #endif
    """
    # True in the fallback build (see the top of this file).
    const bint AW_CPYTHON_FALLBACK
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
    unsigned int aw_type_version(object obj)
    int aw_drop_gc(
        PyTypeObject *type, Py_ssize_t *offsets, int count, void (*release)(object) noexcept
    ) except -1
    const bint AW_HAVE_C_MONOTONIC
    int aw_monotonic(double *now) except -1
    int CO_COROUTINE
    int CO_ITERABLE_COROUTINE


cdef inline bint _context_vars_readable():
    """Whether aw_context_vars reads a Context's variable mapping on this interpreter (trick 3):
    False in the fallback build, and wherever the layout is not the one checked."""
    import contextvars
    import sys

    if AW_CPYTHON_FALLBACK or not ((3, 7) <= sys.version_info[:2] <= (3, 14)):
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
