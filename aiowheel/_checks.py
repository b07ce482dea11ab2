"""The checks of what a user passes in -- numbers and callbacks -- and their error messages.

One module for every layer and both twins: the pure wheel and Timer core, the compiled extension
(which keeps only C fast paths for an exact ``float`` or ``int`` and calls in here for everything
else) and the layers above, so that a bad value gets the same error and message wherever it
enters. It imports nothing of aiowheel but its exceptions.

**Numbers.** aiowheel takes any real number: ``int``, ``float``, :class:`fractions.Fraction`,
:class:`decimal.Decimal`, numpy scalars, anything registered as :class:`numbers.Real` -- but
not ``bool``. Each is converted once, where it enters, to an exact ``int`` or ``float``. Ints
stay exact ints (the wheel's integer arithmetic is exact for them); the other values become the
float their use needs:

* a **deadline** rounds *up*, to the smallest float not below the value, so that no deadline is
  ever filed before itself (never early). A deadline given as ``now + delay`` is computed
  exactly when the delay is not an int or a float, and the sum rounded up
  (:func:`deadline_after`);
* a **clock reading** -- the time a wheel advances to, or starts at -- rounds *down*: rounding it
  up could release a deadline early;
* a **length** (a tick, a timeout, a minimum delay) rounds to the nearest float.

An exact finite ``float`` passes unchanged and costs one type check and two comparisons.

**Errors.** TypeError for what is not a real number (or a whole number, where one is needed),
ValueError for NaN, infinity, a value beyond float range or outside its allowed range. Every
message names the parameter and the bad value.
"""

from __future__ import annotations

import inspect
import math
import sys
from decimal import Decimal
from fractions import Fraction
from numbers import Integral, Rational, Real
from types import FunctionType, MethodType
from typing import TYPE_CHECKING, NoReturn

from aiowheel.exceptions import PendingLimitError

if TYPE_CHECKING:
    from typing import SupportsFloat, SupportsIndex

__all__ = [
    "CLOSED",
    "COROUTINE_FLAGS",
    "DELAY_NONE",
    "MAX_TICKS",
    "MAX_WHEEL_SIZE",
    "NOT_RUNNING",
    "WHEN_NONE",
    "already_pending",
    "cancelled_repr",
    "check_callback",
    "check_clock",
    "check_count",
    "check_deadline",
    "check_length",
    "check_ticks",
    "closed_error",
    "deadline_after",
    "loop_deadline",
    "loop_deadline_after",
    "not_copyable",
    "not_running",
    "out_of_range",
    "pending_limit",
]

_INF = math.inf

# Ints beyond this magnitude have no finite float: they are refused, as NaN and infinity are.
_MAX_FLOAT_INT = int(sys.float_info.max)

MAX_TICKS = 2**52
"""Times stay below ``2**52`` ticks from zero in magnitude: there every tick count, and its
neighbours used by the one-step corrections of ``ceil_ticks``/``floor_ticks``, is an exact float.
From ``2**53`` on adjacent counts collapse to one float and an entry could fire early."""

MAX_WHEEL_SIZE = 2**40
"""The most slots a wheel level may have: a trillion slots is far beyond any use and any memory."""

# -- numbers ---------------------------------------------------------------------------------------

_UP, _DOWN, _NEAREST = 1, -1, 0


def check_deadline(value: SupportsFloat, what: str) -> float:
    """``value`` as a deadline: an int, or the smallest float not below ``value``.

    TypeError unless ``value`` is a real number (not a bool), ValueError for NaN, infinity or a
    value beyond float range ("too far away").
    """
    if type(value) is float and -_INF < value < _INF:  # the common case, checked cheaply
        return value
    return _convert(value, what, _UP, "is too far away")


def check_clock(value: SupportsFloat, what: str) -> float:
    """``value`` as a clock reading: an int, or the largest float not above ``value``.

    Errors as for :func:`check_deadline`.
    """
    if type(value) is float and -_INF < value < _INF:
        return value
    return _convert(value, what, _DOWN, "is too far away")


def deadline_after(now: float, delay: SupportsFloat, what: str = "delay") -> float:
    """The deadline ``delay`` after ``now`` (a checked clock value): ``now + delay``.

    For an int or float delay this is the float sum, as asyncio computes it; for any other real
    number the exact sum, rounded up to a float, so that it is never before ``now + delay``.
    Errors for ``delay`` as for :func:`check_deadline`.
    """
    if type(delay) is float and -_INF < delay < _INF:
        return now + delay
    checked = _convert(delay, what, _NEAREST, "is too far away")
    if isinstance(delay, int | float):  # exactly what was given: the float sum, as asyncio's
        return now + checked
    return _round(Fraction(now) + _exact(delay), _UP, delay, what, "is too far away")


def loop_deadline_after(now: float, delay: object) -> tuple[float, float]:
    """For the wheel loop's ``call_later``, a ``delay`` that is not an int or a float (a
    Fraction, a Decimal, a numpy scalar): ``(delay, when)``, the delay as the nearest float and
    ``when = now + delay`` computed exactly and rounded up to a float (numpy's float32 + float
    stays float32: never that). A NaN or infinite delay gives ``(it, now + it)`` as floats, for
    the base loop, as asyncio takes a float one.

    A ``delay`` that is not a real number fails as ``now + delay`` fails (asyncio's error); one
    beyond float range is refused with a ValueError naming it.
    """
    if isinstance(delay, bool) or not isinstance(delay, Real | Decimal):
        return delay, now + delay  # type: ignore[return-value, operator]  # asyncio's error
    nearest = _float(delay, "delay")
    if not math.isfinite(nearest):
        return nearest, now + nearest
    return nearest, deadline_after(now, delay)


def loop_deadline(when: object) -> float:
    """For the wheel loop's ``call_at``, a ``when`` that is not an int or a float: the smallest
    float not below it; a NaN or infinite one as that float (for the base loop). Errors as for
    :func:`loop_deadline_after`."""
    if isinstance(when, bool) or not isinstance(when, Real | Decimal):
        return 0.0 + when  # type: ignore[operator]  # asyncio's error
    nearest = _float(when, "when")
    if not math.isfinite(nearest):
        return nearest
    return check_deadline(when, "when")


def _float(value: Real | Decimal, what: str) -> float:
    """The nearest float to a real number: ValueError naming it beyond float range."""
    try:
        return float(value)
    except (OverflowError, ValueError):  # a Fraction beyond float range, a signalling NaN
        if isinstance(value, Decimal) and value.is_nan():
            return math.nan
        raise ValueError(f"{what} {value!r} is too far away") from None


def check_length(
    value: SupportsFloat, what: str, *, zero_ok: bool = False, optional: bool = False
) -> float:
    """``value`` as a length of time (a tick, a timeout, a minimum delay): an int, or the nearest
    float. It must be finite and > 0, or >= 0 if ``zero_ok``.

    ``optional`` only says, in the TypeError's message, that None is accepted too (the caller
    handles None itself).
    """
    if type(value) is float and 0 < value < _INF:
        return value
    finite = " and >= 0" if zero_ok else " and > 0"
    checked = _convert(value, what, _NEAREST, "is too large", finite=finite, optional=optional)
    if not (checked > 0 or (zero_ok and checked == 0)):
        raise ValueError(f"{what} must be finite{finite}, got {value!r}")
    return checked


def check_count(
    value: SupportsIndex,
    what: str,
    minimum: int,
    maximum: int | None = None,
    *,
    optional: bool = False,
) -> int:
    """``value`` as a whole number (an int, a numpy integer; not a bool or a float) in
    ``[minimum, maximum]``: TypeError or ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        kind = "an int or None" if optional else "an int"
        raise TypeError(f"{what} must be {kind}, got {value!r}")
    count = int(value)
    if count < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}")
    if maximum is not None and count > maximum:
        raise ValueError(f"{what} {value!r} is too large: at most {maximum} is allowed")
    return count


def check_ticks(value: float, what: str, tick: float) -> float:
    """``value`` (a checked time or length) if ``value / tick`` is below :data:`MAX_TICKS` in
    magnitude -- within the wheel's reach -- else the ValueError of :func:`out_of_range`."""
    if not abs(value / tick) < MAX_TICKS:
        raise out_of_range(what, value, tick)
    return value


def out_of_range(what: str, t: object, tick: object) -> ValueError:
    """The error for a time ``t`` whose tick count is not finite or not below ``MAX_TICKS``."""
    try:
        finite = math.isfinite(t)  # type: ignore[arg-type]
    except (TypeError, OverflowError):
        finite = True
    if not finite:
        return ValueError(f"{what} must be finite, got {t!r}")
    return ValueError(f"{what} {t!r} is too far away for tick {tick!r}")


def _convert(
    value: object,
    what: str,
    rounding: int,
    too_big: str,
    *,
    finite: str = "",
    optional: bool = False,
) -> float:
    """The slow path of the checks: ``value`` as an exact int or a float rounded ``rounding``.

    ``too_big`` ends the message for a value beyond float range, ``finite`` the requirement
    stated for NaN and infinity; ``optional`` says in the TypeError's message that None is
    accepted too.
    """
    if type(value) is int and -_MAX_FLOAT_INT <= value <= _MAX_FLOAT_INT:
        return value
    if isinstance(value, bool):
        raise _not_a_number(value, what, optional)
    if isinstance(value, Integral):  # int, an int subclass, a numpy integer: an exact int
        whole = int(value)
        if not -_MAX_FLOAT_INT <= whole <= _MAX_FLOAT_INT:
            raise ValueError(f"{what} {value!r} {too_big}")
        return whole
    if not isinstance(value, Real | Decimal):
        raise _not_a_number(value, what, optional)
    try:
        nearest = float(value)
    except OverflowError:  # a Fraction beyond float range
        raise ValueError(f"{what} {value!r} {too_big}") from None
    except ValueError:  # a signalling NaN Decimal
        raise ValueError(f"{what} must be finite{finite}, got {value!r}") from None
    if not math.isfinite(nearest):
        if math.isnan(nearest) or nearest == value:  # NaN, or an infinite value
            raise ValueError(f"{what} must be finite{finite}, got {value!r}")
        raise ValueError(f"{what} {value!r} {too_big}")  # finite, beyond float range
    if rounding == _NEAREST or isinstance(value, float):  # a float subclass is exact
        return nearest
    return _round(_exact(value), rounding, value, what, too_big)


def _round(exact: Fraction, rounding: int, value: object, what: str, too_big: str) -> float:
    """``exact`` as a float, rounded up (``_UP``) or down (``_DOWN``)."""
    try:
        result = float(exact)  # correctly rounded, to nearest
    except OverflowError:
        raise ValueError(f"{what} {value!r} {too_big}") from None
    if rounding == _UP and result < exact:
        result = math.nextafter(result, _INF)
    elif rounding == _DOWN and result > exact:
        result = math.nextafter(result, -_INF)
    if not math.isfinite(result):
        raise ValueError(f"{what} {value!r} {too_big}")
    return result


def _exact(value: object) -> Fraction:
    """The exact value of a finite real number."""
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, float | Decimal):
        return Fraction(value)
    as_integer_ratio = getattr(value, "as_integer_ratio", None)  # numpy floats
    if as_integer_ratio is not None:
        return Fraction(*as_integer_ratio())
    return Fraction(float(value))  # type: ignore[arg-type]  # a Real without it: its float


def _not_a_number(value: object, what: str, optional: bool) -> TypeError:
    kind = "a real number or None" if optional else "a real number"
    return TypeError(f"{what} must be {kind}, got {value!r}")


# -- callbacks -------------------------------------------------------------------------------------

COROUTINE_FLAGS = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE
"""The code flags of a coroutine function: a plain function without them passes
:func:`check_callback`, which a hot path may test inline."""


def check_callback(callback: object, method: str) -> None:
    """The checks and messages of asyncio's ``BaseEventLoop._check_callback``, made always, not
    only in debug mode: TypeError for a coroutine, a coroutine function or a non-callable."""
    # The common cases, a plain function or a method of one: no coroutine, surely callable.
    function = callback.__func__ if type(callback) is MethodType else callback
    if type(function) is FunctionType:
        if function.__code__.co_flags & COROUTINE_FLAGS:
            raise TypeError(f"coroutines cannot be used with {method}()")
        return
    if inspect.iscoroutine(callback) or _is_coroutine_function(callback):
        raise TypeError(f"coroutines cannot be used with {method}()")
    if not callable(callback):
        raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")


def _is_coroutine_function(func: object) -> bool:
    # Fast paths for plain functions and bound methods; inspect for partials and the rest.
    if type(func) is FunctionType:
        return bool(func.__code__.co_flags & COROUTINE_FLAGS)
    if type(func) is MethodType:
        return _is_coroutine_function(func.__func__)
    return inspect.iscoroutinefunction(func)


# -- the Timer's state and limits ----------------------------------------------------------------

NOT_RUNNING = "Timer is not running: use it inside 'async with Timer() as timer:'"
CLOSED = "Timer is closed"
# asyncio's messages for a None delay or time.
DELAY_NONE = "delay must not be None"
WHEN_NONE = "when cannot be None"


def not_running() -> NoReturn:
    """A Timer's clock before it runs: raises RuntimeError(:data:`NOT_RUNNING`)."""
    raise RuntimeError(NOT_RUNNING)


def pending_limit(pending: int, limit: int) -> PendingLimitError:
    """The error for scheduling while ``pending`` timers are pending, ``limit`` allowed."""
    return PendingLimitError(f"{pending} timers are pending, the limit is max_pending={limit}")


def already_pending(entry: object) -> ValueError:
    """The error for filing an entry that is still pending in a wheel."""
    return ValueError(f"{entry!r} is already pending")


# -- handles ---------------------------------------------------------------------------------------


def not_copyable(kind: str) -> TypeError:
    """The error for copying or pickling a handle of kind ``kind`` (``"TimerHandle"``, ``"Job"``,
    ``"LoopTimerHandle"``): every handle of the Timer and of the wheel loop refuses both.

    A handle is its timer's one handle: a copy sharing the timer's place on the wheel could cancel
    the timer behind the original's back (a lost timer the original still reports pending), and a
    copy not sharing it -- or an unpickled one -- would be a handle of no timer at all.
    """
    return TypeError(
        f"a {kind} cannot be copied or pickled: it is the one handle of its timer, "
        "which a copy could cancel or detach from it"
    )


def cancelled_repr(kept: str) -> str:
    """The repr ``kept`` by a handle that ran in debug mode (``<TimerHandle when=...``), as
    asyncio's says once the handle is cancelled after it ran: "cancelled" after the name."""
    name, _, rest = kept.partition(" ")
    return f"{name} cancelled {rest}"


def closed_error(delay: object) -> RuntimeError:
    """The error of a call on a closed loop, as asyncio's: after the TypeError of a ``delay``
    that cannot be added to the clock, which asyncio's ``call_later`` raises first."""
    _ = 0.0 + delay  # type: ignore[operator]
    return RuntimeError("Event loop is closed")
