# Part of aiowheel/_cwheel.pyx (included there; see its docstring): the slow paths of the checks'
# C fast paths (_exact_number, _checked_deadline, _deadline_after, inline in _cwheel.pxd): an
# exact finite float, or an exact int of int64 range, passes there without a call; anything else
# comes here, to aiowheel._checks, which converts it and owns every error message.


cdef object _check_deadline_slow(object value, str what):
    """``aiowheel._checks.check_deadline(value, what)``."""
    return check_deadline(value, what)


cdef object _deadline_after_slow(object now, object delay):
    """``aiowheel._checks.deadline_after(now, delay)``."""
    return deadline_after(now, delay)


cdef inline object _checked_clock(object value, str what):
    """``aiowheel._checks.check_clock(value, what)``."""
    return value if _exact_number(value) else check_clock(value, what)
