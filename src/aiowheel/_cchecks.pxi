# Part of aiowheel/_cwheel.pyx (included there; see its docstring): the C fast paths of the checks
# in aiowheel._checks. An exact finite float, or an exact int of int64 range, passes here without
# a call; anything else goes to aiowheel._checks, which converts it and owns every error message.


cdef inline bint _exact_number(object value) except -1:
    """True for a finite exact float or an exact int of int64 range: a checked time as it is."""
    cdef int overflow
    if PyFloat_CheckExact(value):
        return isfinite(PyFloat_AS_DOUBLE(value))
    if PyLong_CheckExact(value):
        PyLong_AsLongLongAndOverflow(value, &overflow)
        return overflow == 0
    return False


cdef inline object _checked_deadline(object value, str what):
    """``aiowheel._checks.check_deadline(value, what)``."""
    return value if _exact_number(value) else check_deadline(value, what)


cdef inline object _checked_clock(object value, str what):
    """``aiowheel._checks.check_clock(value, what)``."""
    return value if _exact_number(value) else check_clock(value, what)


cdef inline object _deadline_after(object now, object delay):
    """``aiowheel._checks.deadline_after(now, delay)``."""
    if PyFloat_CheckExact(delay) and isfinite(PyFloat_AS_DOUBLE(delay)):
        return now + delay
    return deadline_after(now, delay)
