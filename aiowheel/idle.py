"""Idle expiry: call ``on_expire(key)`` once a key has gone ``timeout`` seconds without a touch.

This module owns :class:`IdleTimeouts`, the timer behind "mark a connection offline after 30 s
without a packet": ``touch(key)`` on every packet, ``discard(key)`` on a clean close, and
``on_expire(key)`` for each key that went silent. It is built for a million keys and a hundred
thousand touches a second in pure Python.

The rule -- exact, because :mod:`aiowheel.spark.replay` reproduces it on an event log:

* times are the Timer's clock (``timer.time()``); ``tick`` is the Timer's tick;
* a key touched last at ``t`` expires at ``E``: ``t + timeout`` rounded *up* to a whole multiple
  of ``tick``, with the wheel's float rule (the same as ``HierarchicalWheel`` files a deadline)::

      w = t + timeout                       # one float addition
      q = math.ceil(w / tick)
      if q * tick < w:                      # the quotient was rounded down: one step up
          q += 1
      elif (q - 1) * tick >= w:             # ... or up: one step down
          q -= 1
      E = q * tick                          # the smallest float product q * tick >= w

* unless it is touched or discarded *strictly before* ``E``: a touch at ``t' < E`` starts a new
  idle period with ``E' = E(t')``, a discard at ``t' < E`` stops tracking it;
* a touch or discard at ``timer.time() >= E`` comes too late: the key expires first, then the
  event applies -- a touch starts a new idle period, a discard finds nothing left to discard and
  returns False. This holds whether or not the Timer's driver has got to time ``E`` yet: if it
  has not, ``touch``/``discard`` call ``on_expire`` for the ended period right there, before
  applying the event.

Guarantees that follow: ``on_expire(key)`` is called once per idle period, never twice for one
period, and never early (always with ``timer.time() >= E``); in virtual time it is called at
exactly ``E``, and otherwise at most one tick plus the loop's latency after it. ``on_expire``
may touch or discard any key, including the one expiring (a touch then starts a new period).

``on_expire`` may be a plain function or a coroutine function. A plain function is called from
the Timer's driver (or inside the ``touch``/``discard`` that found the key due); a coroutine
function's coroutine runs as a task the Timer owns, cancelled when the Timer closes. Either way
its error -- any exception, ``BaseException`` included -- is reported like a timer callback's
(the Timer's ``exception_handler``, else ``loop.call_exception_handler`` on asyncio, the
``aiowheel`` logger on trio) and stops nothing. ``KeyboardInterrupt`` and ``SystemExit``
propagate as from a timer callback (see :class:`aiowheel.Timer`), and no key is lost to them.

How it stays cheap -- lazy re-filing, grouped by tick:

* A key's state is one dict entry, ``key -> _Deadline`` of its current period. A ``_Deadline``
  stands for one tick ``E`` and is shared by every key touched while ``t + timeout`` rounds up
  to that tick, so a touch is a clock read, an addition, a range check against the current
  ``_Deadline``, a dict lookup and a dict store: no rounding, no allocation, no wheel
  operation.
* Separately, each key is *filed* in exactly one ``_Deadline``'s list, at or before its current
  deadline, and each ``_Deadline`` with a non-empty list is one entry on the Timer's wheel. When
  it comes due, each filed key whose deadline is still that time expires; a key touched since is
  re-filed under its current deadline. So a key costs about one re-filing per ``timeout``
  however often it is touched (tokio's ``reset`` and aiohttp's keep-alive do the same), and the
  wheel holds one entry per tick with expiring keys, not one per key.
* Re-filing is bookkeeping, not new work: the Timer's ``max_pending`` never refuses it (it may
  take the Timer past its limit by one entry per tick of ``timeout``); only a new key whose tick
  has no entry yet can be refused, at its ``touch``.
* ``discard`` marks the key untracked and leaves its filing in place: the dict entry goes when
  that filing comes due (at most ``timeout`` plus a tick later), or is reused by a new touch.
* The state and the hot path live in the idle core, which ``IdleTimeouts`` holds: pure Python
  in :mod:`aiowheel._idlecore` (the specification), compiled (``aiowheel._cidlecore``) when
  the extensions are built; an ``IdleTimeouts`` runs the implementation its Timer runs
  (``timer.implementation``).
  Its ``touch``, ``discard`` and ``deadline`` are the core's own methods, bound on the
  ``IdleTimeouts``: the compiled ``touch`` runs no Python frame. Both twins pass the same
  tests.
* ``touch`` reads the Timer's clock (``timer.time()``) every time, never a time cached for the
  loop's pass. The rule and the driver use that clock; a touch dated by an older reading would
  let its key expire before ``timeout`` had passed since the touch (in the clock everyone else
  reads), and could extend a period that had already ended. (A Timer whose clock were itself
  cached per pass would keep the guarantees, every reader seeing the same time; none of the
  backends' is: asyncio's, uvloop's -- to the millisecond -- and trio's are read afresh at each
  call.) On asyncio's own loops the clock is ``time.monotonic``, which the compiled touch
  reads through the C function behind it: the same value, without making a float object.

``key in idle``, ``len(idle)`` and ``idle.deadline(key)`` describe the tracking state and never
expire anything: between ``E`` and the moment its expiry is processed, a key is still counted
and ``deadline(key)`` returns ``E``, a time that has passed.

Not thread-safe, like the Timer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Generic, SupportsFloat, TypeVar

from aiowheel import _impl
from aiowheel._checks import check_length, check_ticks
from aiowheel.timer import Timer

__all__ = ["IdleTimeouts"]

K = TypeVar("K", bound=Hashable)


# One text per method: what the core does, the pure idle core's docstrings say, and these members
# take them from there.
@_impl.documented_by(
    _impl.PURE.idle.IdleCore,
    "touch",
    "discard",
    "__contains__",
    "__len__",
    "deadline",
    "close",
    "timeout",
    "closed",
)
class IdleTimeouts(Generic[K]):
    """Call ``on_expire(key)`` once ``key`` has not been touched for ``timeout`` seconds.

    >>> async with Timer(tick=0.01) as timer:                       # doctest: +SKIP
    ...     with IdleTimeouts(timer, 30, mark_offline) as idle:
    ...         async for key, packet in packets():
    ...             idle.touch(key)

    Args:
        timer: the running (or about to run) :class:`~aiowheel.Timer` whose clock and tick
            define the deadlines.
        timeout: seconds of silence after which a key expires: a finite real number > 0, kept
            as an int or else as the nearest float, less than ``2**52`` ticks of the Timer (a
            longer one could not be filed on its wheel).
        on_expire: called with the key when it expires; a plain function or a coroutine
            function (run as a task the Timer owns).

    See the module documentation for the exact expiry rule. Complexity: ``touch``, ``discard``,
    ``in``, ``len``, ``deadline`` O(1); each expiring or re-filed key costs O(1) when its filing
    comes due. Memory: one dict entry per tracked key plus one list slot -- about 55 bytes a
    key at a million keys, against about 265 for an asyncio ``loop.call_later`` handle.
    """

    def __init__(
        self, timer: Timer, timeout: SupportsFloat, on_expire: Callable[[K], object]
    ) -> None:
        if not isinstance(timer, Timer):
            raise TypeError(f"timer must be an aiowheel.Timer, got {timer!r}")
        seconds = check_ticks(check_length(timeout, "timeout"), "timeout", timer.tick)
        if not callable(on_expire):
            raise TypeError(f"on_expire must be callable, got {on_expire!r}")
        core = _impl.implementation_named(timer.implementation).idle.IdleCore(
            timer, seconds, on_expire
        )
        self._core = core
        self._timer = timer
        # The hot path without a frame of this class's: the core's methods, bound on the
        # instance, stand in for the ones below (documented by the core's: see the decorator).
        vars(self).update(touch=core.touch, discard=core.discard, deadline=core.deadline)

    def touch(self, key: K) -> None:
        self._core.touch(key)

    def discard(self, key: K) -> bool:
        return bool(self._core.discard(key))

    def __contains__(self, key: object) -> bool:
        return key in self._core

    def __len__(self) -> int:
        return len(self._core)

    def deadline(self, key: K) -> float | None:
        return self._core.deadline(key)

    def close(self) -> None:
        self._core.close()

    @property
    def timeout(self) -> float:
        return self._core.timeout

    @property
    def closed(self) -> bool:
        return bool(self._core.closed)

    @property
    def timer(self) -> Timer:
        """The Timer whose clock and tick define the deadlines."""
        return self._timer

    def __enter__(self) -> IdleTimeouts[K]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        core = self._core
        state = "closed" if core.closed else f"tracked={len(core)}"
        return f"<IdleTimeouts timeout={core.timeout!r} {state}>"
