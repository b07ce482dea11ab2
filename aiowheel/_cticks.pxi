# Part of aiowheel/_cwheel.pyx (included there; see its docstring): conversions between times and
# tick counts, aiowheel.wheel.ceil_ticks and floor_ticks, on C doubles and int64 when the time and
# the tick allow it (see the module docstring), on Python objects otherwise.

# Beyond 2**52 ticks floats cannot tell adjacent ticks apart (aiowheel._checks.MAX_TICKS).
cdef double _MAX_TICKS = <double>MAX_TICKS


# How a tick is held (_Tick, TickKind) is declared in _cwheel.pxd, with _tick_of and _to_ticks,
# which the idle core uses.

cdef _Tick _tick_of(object tick) except *:
    cdef _Tick k
    k.kind = TICK_OTHER
    k.d = 0.0
    k.i = 0
    if PyFloat_CheckExact(tick):
        k.d = PyFloat_AS_DOUBLE(tick)
        if isfinite(k.d) and k.d > 0:
            k.kind = TICK_FLOAT
    elif PyLong_CheckExact(tick) and 1 <= tick <= _EXACT:
        k.kind = TICK_INT
        k.i = tick
        k.d = <double>k.i
    return k


cdef int _to_ticks(object t, object tick, const _Tick *k, bint up, int64_t *out) except -1:
    """``up``: the smallest q with ``q * tick >= t`` (where a deadline is filed); else the largest
    q with ``q * tick <= t`` (how far the clock may move at time t). Stores q in ``out``."""
    cdef long long value
    cdef int overflow
    if PyFloat_CheckExact(t):
        return _double_to_ticks(PyFloat_AS_DOUBLE(t), t, tick, k, up, out)
    if PyLong_CheckExact(t):
        value = PyLong_AsLongLongAndOverflow(t, &overflow)
        if overflow or not (-_EXACT <= value <= _EXACT):
            return _to_ticks_python(t, tick, up, out)
        return _double_to_ticks(<double>value, t, tick, k, up, out)
    return _to_ticks_python(t, tick, up, out)


cdef inline int _entry_ticks(Entry entry, object tick, const _Tick *k, int64_t *out) except -1:
    """``_to_ticks(entry.deadline, tick, k, True, out)``: a float or small-int deadline straight
    from its double, with no object made."""
    if entry.c_flags & _DEADLINE_KIND == _DEADLINE_FLOAT:
        return _double_to_ticks(entry.c_deadline, None, tick, k, True, out)
    return _to_ticks(_deadline(entry), tick, k, True, out)


cdef int _double_to_ticks(
    double d, object t, object tick, const _Tick *k, bint up, int64_t *out
) except -1:
    """``_to_ticks`` of the float or int ``t`` whose exact value is ``d`` (``t`` None: the float
    ``d``, made only if an error or the Python path needs it)."""
    cdef double ratio, qd
    cdef int64_t q, p
    if k.kind == TICK_FLOAT:
        # Python's float ops, on doubles; q is an exact double (|q| <= 2**52 + 1).
        ratio = d / k.d
        if not fabs(ratio) < _MAX_TICKS:
            _out_of_range(_boxed(t, d), tick, up)
        if up:
            qd = ceil(ratio)
            # t / tick is rounded; correct by at most one step (see aiowheel.wheel.ceil_ticks).
            if qd * k.d < d:
                qd += 1
            elif (qd - 1) * k.d >= d:
                qd -= 1
        else:
            qd = floor(ratio)
            if qd * k.d > d:
                qd -= 1
            elif (qd + 1) * k.d <= d:
                qd += 1
        out[0] = <int64_t>qd
        return 0
    if k.kind == TICK_INT and fabs(d) <= <double>_EXACT:
        # t / tick of two exact doubles is Python's correctly rounded int or float division;
        # q * tick is an exact int64 (|q * tick| <= |t| + 2 * tick < 2**55), compared exactly.
        ratio = d / k.d
        if not fabs(ratio) < _MAX_TICKS:
            _out_of_range(_boxed(t, d), tick, up)
        if up:
            q = <int64_t>ceil(ratio)
            p = q * k.i
            if _lt(p, d):
                q += 1
            elif not _lt(p - k.i, d):
                q -= 1
        else:
            q = <int64_t>floor(ratio)
            p = q * k.i
            if _gt(p, d):
                q -= 1
            elif not _gt(p + k.i, d):
                q += 1
        out[0] = q
        return 0
    return _to_ticks_python(_boxed(t, d), tick, up, out)


cdef inline object _boxed(object t, double d):
    return PyFloat_FromDouble(d) if t is None else t


cdef int _to_ticks_python(object t, object tick, bint up, int64_t *out) except -1:
    """The pure ceil_ticks / floor_ticks, on Python objects."""
    ratio = t / tick
    if not abs(ratio) < MAX_TICKS:
        _out_of_range(t, tick, up)
    if up:
        q = math.ceil(ratio)
        if q * tick < t:
            q += 1
        elif (q - 1) * tick >= t:
            q -= 1
    else:
        q = math.floor(ratio)
        if q * tick > t:
            q -= 1
        elif (q + 1) * tick <= t:
            q += 1
    out[0] = q
    return 0


cdef int _out_of_range(object t, object tick, bint up) except -1:
    raise out_of_range("deadline" if up else "time", t, tick)


def ceil_ticks(t, tick):
    """The smallest q with ``q * tick >= t`` (a float product): where a deadline is filed.

    The one rounding rule of aiowheel: a deadline ``t`` fires at ``ceil_ticks(t, tick) * tick``,
    never before ``t`` and less than a tick after it. ``IdleTimeouts`` and the Spark replay use it
    to compute expiry times that match the wheel's exactly. ValueError if ``t / tick`` is not
    finite or not below 2**52 in magnitude.
    """
    cdef _Tick k = _tick_of(tick)
    cdef int64_t q
    _to_ticks(t, tick, &k, True, &q)
    return q


def floor_ticks(t, tick):
    """The largest q with ``q * tick <= t``: how far a wheel's clock may move at time t."""
    cdef _Tick k = _tick_of(tick)
    cdef int64_t q
    _to_ticks(t, tick, &k, False, &q)
    return q
