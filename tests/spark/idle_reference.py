"""The idle-expiry rule as a plain per-key loop: the reference the Spark pipeline must equal.

Deliberately naive and independent of :mod:`aiowheel.spark`: a dict of per-key event lists,
sorted, de-duplicated and walked one event at a time. Only the deadline comes from the real
wheel (:func:`aiowheel._wheel.ceil_ticks`), since that rounding *is* the rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from aiowheel._wheel import ceil_ticks

Event = tuple[str, float, str, "str | None"]
Expiry = tuple[str, float, float, float]

RANK = {"open": 0, "data": 1, "close": 2}


def reference_expiries(
    events: Iterable[Event],
    *,
    timeouts: Sequence[float],
    tick: float,
    horizon: float | None = None,
) -> set[Expiry]:
    """Every ``(key, timeout, expired_at, last_seen)`` of the rule, by walking each key."""
    rows = list(events)
    if horizon is None:
        horizon = max(ts for _key, ts, _kind, _id in rows)
    per_key: dict[str, list[tuple[float, int, str | None]]] = defaultdict(list)
    for key, ts, kind, event_id in rows:
        if ts <= horizon:
            per_key[key].append((ts, RANK[kind], event_id))
    expiries: set[Expiry] = set()
    for key, log in per_key.items():
        log.sort(key=lambda event: (event[0], event[1]))
        seen: set[str] = set()
        unique = []
        for ts, rank, event_id in log:
            if event_id is not None:
                if event_id in seen:
                    continue
                seen.add(event_id)
            unique.append((ts, rank))
        for timeout in timeouts:
            last_seen: float | None = None
            expires = 0.0
            for ts, rank in unique:
                if last_seen is not None and ts >= expires:
                    expiries.add((key, float(timeout), expires, last_seen))
                    last_seen = None
                if rank == RANK["close"]:
                    last_seen = None
                else:
                    last_seen = ts
                    expires = ceil_ticks(ts + timeout, tick) * tick
            if last_seen is not None and expires <= horizon:
                expiries.add((key, float(timeout), expires, last_seen))
    return expiries


def reference_series(
    events: Iterable[Event],
    *,
    timeout: float,
    tick: float,
    bucket: float,
    horizon: float | None = None,
) -> dict[int, tuple[int, int, int]]:
    """Per bucket index: (pending at its end, peak pending inside it, expirations in it).

    Walks each key like :func:`reference_expiries`, collecting +1 when a key becomes tracked and
    -1 when it stops (expiry, close), then sweeps the changes in time order, ends first.
    """
    rows = list(events)
    if horizon is None:
        horizon = max(ts for _key, ts, _kind, _id in rows)
    per_key: dict[str, list[tuple[float, int, str | None]]] = defaultdict(list)
    for key, ts, kind, event_id in rows:
        if ts <= horizon:
            per_key[key].append((ts, RANK[kind], event_id))
    changes: list[tuple[float, int]] = []
    fired: dict[int, int] = defaultdict(int)
    for log in per_key.values():
        log.sort(key=lambda event: (event[0], event[1]))
        seen: set[str] = set()
        tracked = False
        expires = 0.0
        for ts, rank, event_id in log:
            if event_id is not None:
                if event_id in seen:
                    continue
                seen.add(event_id)
            if tracked and ts >= expires:
                changes.append((expires, -1))
                fired[int(expires // bucket)] += 1
                tracked = False
            if rank == RANK["close"]:
                if tracked:
                    changes.append((ts, -1))
                tracked = False
            else:
                if not tracked:
                    changes.append((ts, +1))
                tracked = True
                expires = ceil_ticks(ts + timeout, tick) * tick
        if tracked and expires <= horizon:
            changes.append((expires, -1))
            fired[int(expires // bucket)] += 1
    changes.sort()
    first = int(min(ts for log in per_key.values() for ts, _r, _i in log) // bucket)
    last = int(horizon // bucket)
    series: dict[int, tuple[int, int, int]] = {}
    level = 0
    i = 0
    for index in range(first, last + 1):
        peak = level
        while i < len(changes) and int(changes[i][0] // bucket) <= index:
            level += changes[i][1]
            peak = max(peak, level)
            i += 1
        series[index] = (level, peak, fired.get(index, 0))
    return series
