"""One key's state in the streaming service, and the idle-expiry rule applied to it.

This module owns what :func:`aiowheel.spark.stream` keeps per key between micro-batches and
how a visit changes it, in plain Python (no Spark here, so it is tested on its own against the
reference). A *visit* hands over the key's :class:`KeyState` (or None), the events that arrived
for the key and the watermark; it returns the state to keep, the expiries to emit, and when
the key must be visited again if nothing arrives for it.

The rule is :func:`aiowheel.spark.replay`'s, for every timeout at once. Its state after an
event depends on that event alone -- tracked since ``ts`` after a touch, untracked after a
close -- and the timeouts only decide *when* each period ends, in ascending order (a deadline
grows with the timeout). So one key's whole clock is ``last_seen`` and ``fired``, the number of
timeouts whose expiry of the current period is already emitted, whatever the number of
timeouts.

Events are applied only once the watermark ``W`` has passed them, in ``(ts, kind)`` order, so
arrival order never matters; until then they are *pending*. Spark drops an event with
``ts <= W`` of the previous micro-batch as late, so every event that arrives sorts after every
applied one. Applied events with an ``event_id`` are remembered until ``W`` is ``delay`` past
them, so that a later copy is dropped. An expiry at ``E`` is emitted once ``W >= E``: no event
before ``E`` can still come.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import NamedTuple

from aiowheel.spark.events import _CLOSE_RANK
from aiowheel.spark.replay import deadline

__all__ = ["Event", "IdleRule", "KeyExpiry", "KeyState", "StoredKey", "Visit", "wake_ms"]

# An event as a visit takes it: (ts seconds, kind rank, event_id or None).
Event = tuple[float, int, "str | None"]
# An expiry of one key: (timeout, expired_at, last_seen).
KeyExpiry = tuple[float, float, float]
# A KeyState as a plain tuple, field for field: how a shard stores it (a plain tuple pickles
# three times faster than the NamedTuple) and how IdleRule.visit_stored takes and returns it.
StoredKey = tuple["float | None", int, int, list[Event], int]


class KeyState(NamedTuple):
    """What one key keeps between visits (as a plain tuple in the state store)."""

    # ts of the touch that started the current period; None while the key is untracked.
    last_seen: float | None
    # Timeouts (ascending) whose expiry of the current period is emitted; < len(timeouts)
    # whenever last_seen is not None.
    fired: int
    # The first `applied` of `recent` are applied events, kept only for their event_id (not
    # None, ts + delay > the watermark of the last visit); the rest are pending, in rule
    # order (ts, kind).
    applied: int
    recent: list[Event]
    # When the key must be visited again (ms) if nothing arrives for it: the first expiry its
    # pending events lead to, or the moment its state can go.
    wake: int


class Visit(NamedTuple):
    """The outcome of :meth:`IdleRule.visit`."""

    # The state to keep, or None: nothing tracked, pending or remembered.
    state: KeyState | None
    # Expiries to emit, in time order.
    expiries: list[KeyExpiry]


def wake_ms(t: float) -> int:
    """The first whole millisecond ``m`` with ``m / 1000 >= t``: when a timer for ``t`` fires."""
    m = math.ceil(t * 1000.0)
    if m / 1000.0 < t:
        m += 1
    elif (m - 1) / 1000.0 >= t:
        m -= 1
    return m


# Rule order of events: (ts, kind rank); a C-level key, the sorts run once per visit.
_ORDER = itemgetter(0, 1)
_TS = itemgetter(0)


class IdleRule:
    """The idle-expiry rule for every timeout of a stream, applied one key visit at a time.

    ``timeouts`` must be sorted ascending and distinct (as
    :func:`aiowheel.spark.replay._check_timeouts` returns them); ``tick`` is the timer's tick
    and ``delay`` the watermark delay, both in seconds.
    """

    __slots__ = ("delay", "tick", "timeouts")

    def __init__(self, timeouts: Sequence[float], tick: float, delay: float) -> None:
        self.timeouts = tuple(timeouts)
        self.tick = tick
        self.delay = delay

    def visit(self, state: KeyState | None, arrived: Iterable[Event], watermark: int) -> Visit:
        """Apply what the watermark (ms) has passed and emit what expired.

        ``arrived`` are the key's new events, each after every applied one (Spark's late-event
        filter ensures it). O(events kept + arrived) and one sort of the pending ones.
        """
        stored, expiries = self.visit_stored(
            None if state is None else tuple(state),  # type: ignore[arg-type]
            list(arrived),
            watermark,
        )
        return Visit(None if stored is None else KeyState._make(stored), expiries)

    def visit_stored(
        self, stored: StoredKey | None, arrived: list[Event], watermark: int
    ) -> tuple[StoredKey | None, list[KeyExpiry]]:
        """:meth:`visit` on a :class:`KeyState` as the shard stores it, a plain tuple (no
        conversion on the hot path); ``arrived`` is the caller's list, not kept."""
        now = watermark / 1000.0
        expiries: list[KeyExpiry] = []
        if stored is None:
            last_seen: float | None = None
            fired = 0
            remembered: list[Event] = []
            pending = list(arrived)
        else:
            last_seen, fired, applied, recent, _ = stored
            remembered = recent[:applied]
            pending = recent[applied:]
            pending += arrived
        # Pending events are kept in rule order: one sort serves applying the ready ones and
        # looking ahead for the wake-up (the sort is stable, so copies keep arrival order).
        if len(pending) > 1:
            pending.sort(key=_ORDER)
        seen: set[str | None] | None = None
        if pending and pending[0][0] <= now:
            split = bisect_right(pending, now, key=_TS)
            ready, pending = pending[:split], pending[split:]
            seen = {event[2] for event in remembered}
            for event in ready:
                ts, rank, event_id = event
                if event_id is not None:
                    if event_id in seen:
                        continue  # a copy: the first by (ts, kind) counts
                    seen.add(event_id)
                    remembered.append(event)
                if last_seen is not None:
                    fired = self._expire(last_seen, fired, ts, expiries)
                if rank == _CLOSE_RANK:
                    last_seen = None
                else:
                    last_seen, fired = ts, 0
        if last_seen is not None:
            fired = self._expire(last_seen, fired, now, expiries)
            if fired == len(self.timeouts):
                last_seen = None
        if remembered:
            # Remembered while a copy may still come: within delay of the watermark.
            forget = now - self.delay
            kept = [event for event in remembered if event[0] > forget]
            if len(kept) < len(remembered):
                remembered, seen = kept, None
        wake = self._wake(last_seen, fired, pending, remembered, seen)
        if wake is None:
            return None, expiries
        return (last_seen, fired, len(remembered), remembered + pending, wake), expiries

    def _expire(self, last_seen: float, fired: int, at: float, out: list[KeyExpiry]) -> int:
        """Emit the expiries of the period started at ``last_seen`` with a deadline <= ``at``;
        return the new ``fired``."""
        timeouts, tick = self.timeouts, self.tick
        while fired < len(timeouts):
            expired_at = deadline(last_seen, timeouts[fired], tick)
            if expired_at > at:
                break
            out.append((timeouts[fired], expired_at, last_seen))
            fired += 1
        return fired

    def _wake(
        self,
        last_seen: float | None,
        fired: int,
        pending: list[Event],
        remembered: list[Event],
        seen: set[str | None] | None,
    ) -> int | None:
        """When the key must be visited again if no event arrives for it (ms), or None if its
        state can go: the first expiry its pending events (in rule order) lead to; failing
        that, once they are all applied and no copy of a remembered id can come any more.
        ``seen`` is the set of ``remembered``'s ids if the caller has it (it is consumed)."""
        if not pending:
            if last_seen is not None:
                return wake_ms(deadline(last_seen, self.timeouts[fired], self.tick))
            if not remembered:
                return None
            return wake_ms(max(event[0] for event in remembered) + self.delay)
        if seen is None:
            seen = {event[2] for event in remembered}
        first = self._first_expiry(last_seen, fired, pending, seen)
        if first is not None:
            return wake_ms(first)
        end = pending[-1][0]
        delay = self.delay
        for event in remembered:
            end = max(end, event[0] + delay)
        for event in pending:
            if event[2] is not None:
                end = max(end, event[0] + delay)
        return wake_ms(end)

    def _first_expiry(
        self,
        last_seen: float | None,
        fired: int,
        pending: list[Event],
        seen: set[str | None],
    ) -> float | None:
        """The first expiry the key would emit if ``pending`` (in rule order) were all the
        events still to come, or None if it would end untracked without one."""
        timeouts, tick = self.timeouts, self.tick
        for ts, rank, event_id in pending:
            if event_id is not None:
                if event_id in seen:
                    continue
                seen.add(event_id)
            if last_seen is not None:
                expired_at = deadline(last_seen, timeouts[fired], tick)
                if expired_at <= ts:
                    return expired_at
            if rank == _CLOSE_RANK:
                last_seen = None
            else:
                last_seen, fired = ts, 0
        if last_seen is not None:
            return deadline(last_seen, timeouts[fired], tick)
        return None
