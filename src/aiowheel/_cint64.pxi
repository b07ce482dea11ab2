# Part of aiowheel/_cwheel.pyx (included there; see its docstring): C arithmetic on int64 tick
# counts that gives Python's results -- floor division and modulo for a positive divisor -- and
# exact comparisons of an int64 with a double, for the conversions between times and ticks.

# Ints up to 2**53 in magnitude are exact doubles: the C conversions take only those.
cdef int64_t _EXACT = 9007199254740992  # 2**53


# Floor division on int64: Python's // and % for a positive divisor.

@cython.cdivision(True)
cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and (a < 0):
        q -= 1
    return q


@cython.cdivision(True)
cdef inline int64_t _floormod(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t r = a % b
    if r < 0:
        r += b
    return r


# Exact comparisons of an int64 with a double (|values| < 2**62).

cdef inline bint _lt(int64_t p, double d) noexcept nogil:
    """p < d, exactly."""
    cdef double fl = floor(d)
    cdef int64_t fi = <int64_t>fl
    return p < fi or (p == fi and fl < d)


cdef inline bint _gt(int64_t p, double d) noexcept nogil:
    """p > d, exactly (fi <= d < fi + 1, so p > d iff p > fi)."""
    return p > <int64_t>floor(d)
