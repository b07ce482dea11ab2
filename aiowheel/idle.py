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

``key in idle``, ``len(idle)`` and ``idle.deadline(key)`` describe the tracking state and never
expire anything: between ``E`` and the moment its expiry is processed, a key is still counted
and ``deadline(key)`` returns ``E``, a time that has passed.

Not thread-safe, like the Timer.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Generic, SupportsFloat, TypeVar

from aiowheel._checks import check_length, check_ticks
from aiowheel._impl import ceil_ticks

if TYPE_CHECKING:
    from aiowheel.timer import Timer, TimerHandle

__all__ = ["IdleTimeouts"]

K = TypeVar("K", bound=Hashable)


class _Deadline:
    """One expiry tick ``when = q * tick``: the deadline shared by every key touched while
    ``after < t + timeout <= when``, and the keys filed to be looked at when it comes due."""

    __slots__ = ("after", "filed", "handle", "when")

    def __init__(self, after: float, when: float) -> None:
        # (q - 1) * tick: a touch at t belongs to this deadline iff after < t + timeout <= when.
        self.after = after
        # q * tick, the deadline E itself.
        self.when = when
        # Keys filed here, each filed in exactly one _Deadline at a time, at or before the
        # deadline of its current period.
        self.filed: list[Hashable] = []
        # The wheel entry that fires at `when`; set while `filed` is non-empty.
        self.handle: TimerHandle | None = None


# A key that is still filed but no longer tracked (discarded, or expired while filed).
_UNTRACKED = _Deadline(-math.inf, -math.inf)
# A key that is neither tracked nor filed; only ever a default of dict.get, never stored.
_ABSENT = _Deadline(-math.inf, -math.inf)


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

    __slots__ = (
        "_closed",
        "_context",
        "_current",
        "_deadlines",
        "_len",
        "_on_expire",
        "_pending",
        "_timeout",
        "_timer",
    )

    def __init__(
        self, timer: Timer, timeout: SupportsFloat, on_expire: Callable[[K], object]
    ) -> None:
        seconds = check_ticks(check_length(timeout, "timeout"), "timeout", timer.tick)
        if not callable(on_expire):
            raise TypeError(f"on_expire must be callable, got {on_expire!r}")
        self._timer = timer
        self._timeout = seconds
        self._on_expire = on_expire
        # Each key's current deadline, or _UNTRACKED while an untracked key is still filed.
        # Every key here is filed exactly once; a key filed nowhere is not here.
        self._deadlines: dict[K, _Deadline] = {}
        # The latest deadline touches went to; w = now + timeout never decreases, so once w
        # leaves its range it never comes back.
        self._current = _ABSENT
        # Deadlines with a wheel entry (a non-empty `filed`), for close().
        self._pending: set[_Deadline] = set()
        # Tracked keys: those in _deadlines that are not _UNTRACKED.
        self._len = 0
        self._closed = False
        # Where the driver runs on_expire; one copy, not one per wheel entry.
        self._context = contextvars.copy_context()

    @property
    def timeout(self) -> float:
        """Seconds of silence after which a key expires."""
        return self._timeout

    @property
    def timer(self) -> Timer:
        """The Timer whose clock and tick define the deadlines."""
        return self._timer

    # -- events -------------------------------------------------------------------------------

    def touch(self, key: K) -> None:
        """Start tracking ``key``, or start a new idle period for it: it now expires at
        ``E(timer.time())`` unless touched or discarded before. O(1), no wheel operation.

        If the key's previous period had already ended (``timer.time() >= E``), it expires
        first: ``on_expire(key)`` is called for that period before the new one starts. Raises
        RuntimeError before the Timer has started and once this object is closed. (Close it
        before the Timer: once the Timer has closed, nothing expires any more.) Raises
        :class:`~aiowheel.PendingLimitError` for a key not tracked yet whose deadline tick has
        no wheel entry yet, if the Timer is at ``max_pending``: the key is then not tracked.
        A key already tracked is never refused, nor is its re-filing in the driver.
        """
        now = self._timer._time()  # timer.time() without its frame: this is the hot path
        w = now + self._timeout
        current = self._current
        if not current.after < w <= current.when:
            current = self._next_deadline(w)
        deadlines = self._deadlines
        try:  # free in CPython 3.11+ when nothing is raised; cheaper than dict.get
            if deadlines[key].when > now:  # tracked, its period still running: the common case
                deadlines[key] = current
                return
        except KeyError:  # a new key
            pass
        self._touch_late(key, current, now)

    def discard(self, key: K) -> bool:
        """Stop tracking ``key``; return whether it was tracked. O(1).

        A key whose period had already ended (``timer.time() >= E``) expires instead:
        ``on_expire(key)`` is called for that period and the result is False.
        """
        deadlines = self._deadlines
        previous = deadlines.get(key, _ABSENT)
        if previous is _ABSENT or previous is _UNTRACKED:
            return False
        if previous.when <= self._timer.time():
            self._expire(key)
            previous = deadlines.get(key, _ABSENT)  # on_expire may have touched it again
            if previous is _ABSENT or previous is _UNTRACKED:
                return False
        deadlines[key] = _UNTRACKED
        self._len -= 1
        return True

    # -- queries ------------------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        """True while ``key`` is tracked (until its expiry is processed or it is discarded)."""
        deadline = self._deadlines.get(key, _ABSENT)  # type: ignore[arg-type]
        return deadline is not _ABSENT and deadline is not _UNTRACKED

    def __len__(self) -> int:
        """Number of tracked keys."""
        return self._len

    def deadline(self, key: K) -> float | None:
        """When ``key`` expires (``E`` of its current period), or None if it is not tracked."""
        deadline = self._deadlines.get(key, _ABSENT)
        if deadline is _ABSENT or deadline is _UNTRACKED:
            return None
        return deadline.when

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop tracking every key without expiring any, and take the wheel entries off the
        Timer. Afterwards ``touch`` raises RuntimeError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for deadline in self._pending:
            if deadline.handle is not None:
                deadline.handle.cancel()
                deadline.handle = None
            deadline.filed = []
        self._pending.clear()
        self._deadlines.clear()
        self._len = 0

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

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
        state = "closed" if self._closed else f"tracked={self._len}"
        return f"<IdleTimeouts timeout={self._timeout!r} {state}>"

    # -- internals ----------------------------------------------------------------------------

    def _next_deadline(self, w: float) -> _Deadline:
        """The deadline for ``t + timeout == w``: a new current one, since time moved on."""
        tick = self._timer.tick
        q = ceil_ticks(w, tick)
        current = self._current = _Deadline((q - 1) * tick, q * tick)
        return current

    def _touch_late(self, key: K, current: _Deadline, now: float) -> None:
        """``touch`` for a key that is new, untracked, or whose period has ended."""
        deadlines = self._deadlines
        previous = deadlines.get(key, _ABSENT)
        if previous is not _ABSENT and previous is not _UNTRACKED:
            # previous.when <= now: the period ended and the driver has not processed it yet.
            self._expire(key)
            previous = deadlines.get(key, _ABSENT)
        if self._closed:
            raise RuntimeError("IdleTimeouts is closed")
        if previous is _ABSENT:  # filed nowhere: file it under its deadline (new work)
            self._file(key, current, self._timer.call_at)
            self._len += 1
        elif previous is _UNTRACKED:  # still filed from an earlier period: reuse that filing
            self._len += 1
        deadlines[key] = current

    def _expire(self, key: K) -> None:
        """End ``key``'s period: untrack it (it stays filed) and run ``on_expire(key)``."""
        self._deadlines[key] = _UNTRACKED
        self._len -= 1
        self._timer._run_now(self._on_expire, (key,))

    def _file(
        self, key: Hashable, deadline: _Deadline, call_at: Callable[..., TimerHandle]
    ) -> None:
        """File ``key`` under ``deadline``, giving the deadline a wheel entry with ``call_at``
        if it has none: the Timer's ``call_at`` for a new key (which ``max_pending`` may
        refuse, at the touch), its ``_refile_at`` for a key already tracked (never refused)."""
        if deadline.handle is None:
            deadline.handle = call_at(deadline.when, self._fire, deadline, context=self._context)
            self._pending.add(deadline)
        deadline.filed.append(key)

    def _fire(self, due: _Deadline) -> None:
        """The wheel entry of ``due`` fired: expire its keys whose period ended, re-file the
        others under their current deadline, drop the untracked ones."""
        filed = due.filed
        due.filed = []
        due.handle = None
        self._pending.discard(due)
        now = self._timer.time()
        deadlines: dict[Hashable, _Deadline] = self._deadlines  # type: ignore[assignment]
        refile = self._timer._refile_at
        index = 0
        try:
            for index, key in enumerate(filed):  # noqa: B007 -- index is used on interrupt
                deadline = deadlines[key]
                if deadline.when <= now and deadline is not _UNTRACKED:
                    self._expire(key)  # type: ignore[arg-type]
                    if self._closed:
                        return
                    deadline = deadlines[key]  # on_expire may have touched it again
                if deadline is _UNTRACKED:
                    del deadlines[key]
                else:
                    self._file(key, deadline, refile)
        except BaseException:
            # An interrupt from on_expire (nothing else leaves _expire). The keys not looked at
            # yet, and the interrupted one (untracked now, or touched again), go back under
            # `due`, due at once: the driver's next pass picks them up where this one stopped.
            if not self._closed:
                for key in filed[index:]:
                    self._file(key, due, refile)
            raise
