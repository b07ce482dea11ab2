# C plumbing of the compiled parts (cimported by the Timer core and the loop core; no module of
# its own): running a callback in a context, by the public C API.

from cpython.contextvars cimport PyContext_CheckExact, PyContext_Enter, PyContext_Exit


cdef inline int _run_in(
    object context, object callback, object args, bint one_arg=False
) except -1:
    """``context.run(callback, *args)`` (``args`` is the one argument itself if ``one_arg``),
    without the method call when context is a Context."""
    if not PyContext_CheckExact(context):
        if one_arg:
            context.run(callback, args)
        else:
            context.run(callback, *args)
        return 0
    PyContext_Enter(context)
    try:
        if one_arg:
            callback(args)
        else:
            callback(*args)
    finally:
        PyContext_Exit(context)
    return 0
