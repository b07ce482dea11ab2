"""Idle expiry's hot path -- touch, discard, the queries and the filing -- in pure Python.

:class:`IdleCore` is the core :class:`aiowheel.IdleTimeouts` holds: it owns a key's state (one
dict entry, ``key -> _Deadline`` of its current period), the ``_Deadline`` shared by every key
touched while ``t + timeout`` rounds up to the same tick, and the filing of keys on the Timer's
wheel (one entry per tick with keys to look at, re-filed lazily when it comes due).
:class:`aiowheel.IdleTimeouts` (``aiowheel/idle.py``) adds the checks of its arguments and the
context manager, and documents the rule and the guarantees. The core talks to its Timer only
through the host interface, :class:`aiowheel.TimerHost` (``time``, ``tick``, ``closed``,
``call_at``, ``refile_at``, ``run_now``).

This module is the specification of that hot path; ``aiowheel/_cidlecore.pyx`` is its compiled
twin (the extension ``aiowheel._cidlecore``), with the same behaviour and errors, and
:mod:`aiowheel._impl` declares both: an IdleTimeouts runs the twin its Timer runs. The idle
tests run on both, and ``tests/idle/`` drives both twins together against a reference
model.

The clock: every ``touch`` and ``discard`` reads the Timer's own clock (``timer.time()``, which
from the Timer's start is the loop's clock itself), never a time cached for the loop's pass. The
rule is stated in that clock, the driver expires keys by it, and a touch that used an older
reading would date its period earlier than ``timer.time()`` at the touch: the key would expire
up to a pass's length before ``timeout`` had passed since it was last touched (early, in the
clock everyone else reads), and a touch at ``timer.time() >= E`` could still extend an ended
period.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from aiowheel._wheel import ceil_ticks

if TYPE_CHECKING:
    from aiowheel._host import FiledHandle, TimerHost

__all__ = ["IdleCore"]

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
        self.handle: FiledHandle | None = None


# A key that is still filed but no longer tracked (discarded, or expired while filed).
_UNTRACKED = _Deadline(-math.inf, -math.inf)
# A key that is neither tracked nor filed; only ever a default of dict.get, never stored.
_ABSENT = _Deadline(-math.inf, -math.inf)


class IdleCore(Generic[K]):
    """The keys, their deadlines and their filing on the Timer; see
    :class:`aiowheel.IdleTimeouts`, which checks the arguments before passing them here."""

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

    def __init__(self, timer: TimerHost, timeout: float, on_expire: Callable[[K], object]) -> None:
        self._timer = timer
        self._timeout = timeout
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
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

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
        A key already tracked is never refused, nor is its re-filing in the driver. An
        unhashable key raises TypeError, and an error of the key's ``__hash__`` or ``__eq__``
        propagates, as from a dict; the key is then not tracked (or its period is unchanged).
        """
        now = self._timer.time()  # the loop's clock itself: no frame of the Timer's
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
        self._timer.run_now(self._on_expire, (key,))

    def _file(
        self, key: Hashable, deadline: _Deadline, call_at: Callable[..., FiledHandle]
    ) -> None:
        """File ``key`` under ``deadline``, giving the deadline a wheel entry with ``call_at``
        if it has none: the Timer's ``call_at`` for a new key (which ``max_pending`` may
        refuse, at the touch), its ``refile_at`` for a key already tracked (never refused)."""
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
        refile = self._timer.refile_at
        index = 0
        try:
            for index, key in enumerate(filed):  # noqa: B007 -- index is used on interrupt
                deadline = deadlines[key]
                if deadline.when <= now and deadline is not _UNTRACKED:
                    self._expire(key)  # type: ignore[arg-type]
                    if self._closed or self._timer.closed:
                        # on_expire closed this object, or the Timer (a coroutine started
                        # eagerly can): nothing more expires, nothing is filed on it again.
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
            if not (self._closed or self._timer.closed):
                for key in filed[index:]:
                    self._file(key, due, refile)
            raise
