# C plumbing of the compiled parts (cimported by the wheel and the idle core; no module of its
# own): C arithmetic on int64 tick counts that gives Python's results -- floor division and
# modulo for a positive divisor -- and exact comparisons of an int64 with a double, for the
# conversions between times and ticks. Every function is inline: no call crosses a module.

from libc.math cimport floor
from libc.stdint cimport int64_t

cdef extern from *:
    """
    #define AW_EXACT ((int64_t)9007199254740992LL)  /* 2**53 */

    /* Floor division and modulo on int64: Python's // and % for a positive divisor. In C, so
       that they do not depend on the cdivision directive of the part that cimports them. */
    static inline int64_t aw_floordiv(int64_t a, int64_t b) {
        int64_t q = a / b;
        if ((a % b != 0) && (a < 0)) q -= 1;
        return q;
    }
    static inline int64_t aw_floormod(int64_t a, int64_t b) {
        int64_t r = a % b;
        if (r < 0) r += b;
        return r;
    }
    """
    # Ints up to 2**53 in magnitude are exact doubles: the C conversions take only those.
    const int64_t _EXACT "AW_EXACT"
    int64_t _floordiv "aw_floordiv" (int64_t a, int64_t b) noexcept nogil
    int64_t _floormod "aw_floormod" (int64_t a, int64_t b) noexcept nogil


# Exact comparisons of an int64 with a double (|values| < 2**62).

cdef inline bint _lt(int64_t p, double d) noexcept nogil:
    """p < d, exactly."""
    cdef double fl = floor(d)
    cdef int64_t fi = <int64_t>fl
    return p < fi or (p == fi and fl < d)


cdef inline bint _gt(int64_t p, double d) noexcept nogil:
    """p > d, exactly (fi <= d < fi + 1, so p > d iff p > fi)."""
    return p > <int64_t>floor(d)
