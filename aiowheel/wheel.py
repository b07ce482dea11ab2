"""The hierarchical timing wheel: a pure data structure, no event loop, no clock, no I/O.

This module owns everything about levels, slots, placement, cascading, ordering and "never
early". Times are plain numbers (``int`` or ``float``) in the caller's clock; internally every
deadline is converted once to a whole number of ticks, and all placement arithmetic is done on
Python ints, so no float error can move an entry into a bucket that fires before it.

The design is Kafka's ``TimingWheel`` (see the seed articles), with two deliberate differences:

* **Never early.** Kafka files a task under ``expiration // tick`` and fires the whole bucket at
  its start, so a task can run up to one tick early. Here a deadline is first rounded *up* to a
  whole tick, so a bucket never expires before any deadline it holds. The price is that a timer
  can be up to one tick late.
* **Total order.** Kafka keeps FIFO order only inside one bucket; an entry cascaded down from a
  higher level lands *behind* entries added straight into the lower bucket. Here every entry
  carries its add sequence number and each batch of due payloads is sorted by
  ``(deadline, add order)``.

Structure (level ``n`` has ``wheel_size`` slots, each ``wheel_size ** n`` ticks wide):

* a level's ``current`` is the start of its current slot, aligned to the slot width, exactly as
  Kafka's ``currentTime = startMs - startMs % tickMs``; levels above 0 are created on demand
  (Kafka's overflow wheel) when a deadline lies beyond the range of every existing level;
* an entry goes to the lowest level whose range ``[current, current + wheel_size * width)``
  holds its tick deadline ``q``; there ``virtual_id = q // width``, ``slot = virtual_id %
  wheel_size`` and the bucket expires at ``virtual_id * width`` ticks;
* a bucket is a ``dict`` used as an insertion-ordered set, so add and remove are O(1) and a
  removed entry is released at once (no tombstones);
* the expirations of non-empty buckets sit in a heap (the role of Kafka's ``DelayQueue``), one
  heap item per bucket per rotation rather than per entry, so ``next_deadline`` never walks
  empty slots.

Complexity: ``add`` O(levels), ``remove`` O(1), ``next_deadline`` amortised O(1),
``advance`` O(due + cascaded + k log k) for a batch of k due entries.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from operator import attrgetter
from typing import Any, Generic, TypeVar

__all__ = ["Entry", "HierarchicalWheel", "ceil_ticks", "floor_ticks"]

P = TypeVar("P")
E = TypeVar("E", bound="Entry[Any]")

# A bucket: the entries of one slot, in the order they were filed there. The value is unused.
_Bucket = dict["Entry[Any]", None]

_order = attrgetter("deadline", "_seq")
_ABSENT = object()

# Tick counts are kept below 2**52 in magnitude: there every count, and its neighbours used by the
# one-step corrections in ceil_ticks/floor_ticks, is an exact float. From 2**53 on, adjacent
# counts collapse to one float, the corrections can fail and an entry could fire early.
_MAX_TICKS = 2**52


def ceil_ticks(t: float, tick: float) -> int:
    """The smallest q with ``q * tick >= t`` (a float product): where a deadline is filed.

    The one rounding rule of aiowheel: a deadline ``t`` fires at ``ceil_ticks(t, tick) * tick``,
    never before ``t`` and less than a tick after it. ``IdleTimeouts`` and the Spark replay use it
    to compute expiry times that match the wheel's exactly. ValueError if ``t / tick`` is not
    finite or not below 2**52 in magnitude.
    """
    ratio = t / tick
    if not abs(ratio) < _MAX_TICKS:
        raise _out_of_range("deadline", t, tick)
    q = math.ceil(ratio)
    # t / tick is rounded; correct by at most one step so that the float product, which is what
    # next_deadline reports and what the caller's clock is compared with, is exact.
    if q * tick < t:
        q += 1
    elif (q - 1) * tick >= t:
        q -= 1
    return q


def floor_ticks(t: float, tick: float) -> int:
    """The largest q with ``q * tick <= t``: how far a wheel's clock may move at time t."""
    ratio = t / tick
    if not abs(ratio) < _MAX_TICKS:
        raise _out_of_range("time", t, tick)
    q = math.floor(ratio)
    if q * tick > t:
        q -= 1
    elif (q + 1) * tick <= t:
        q += 1
    return q


def _out_of_range(what: str, t: float, tick: float) -> ValueError:
    if not math.isfinite(t):
        return ValueError(f"{what} must be finite, got {t!r}")
    return ValueError(f"{what} {t!r} is too far away for tick {tick!r}")


class Entry(Generic[P]):
    """A pending deadline in a :class:`HierarchicalWheel`, as returned by ``add``.

    Hold on to it to ``remove`` the deadline later. Once the entry has come out of ``advance`` or
    been removed it is inert: it keeps ``deadline`` but drops its payload.
    """

    __slots__ = ("_bucket", "_seq", "_ticks", "deadline", "payload")

    deadline: float
    payload: P | None
    # The deadline rounded up to whole ticks: the smallest q with q * tick >= deadline.
    _ticks: int
    # Add order; ties between equal deadlines are broken by it.
    _seq: int
    # The bucket this entry was last filed in; None before filing and after remove. An entry
    # that came out of advance still points at its (since emptied or reused) bucket: it is
    # pending iff it is in that bucket. This spares advance a store per fired entry.
    _bucket: _Bucket | None

    def __init__(self, deadline: float, payload: P) -> None:
        self.deadline = deadline
        self.payload = payload
        self._bucket = None

    @property
    def pending(self) -> bool:
        """True while the entry sits in its wheel: neither returned by ``advance`` nor removed."""
        bucket = self._bucket
        return bucket is not None and self in bucket

    def __repr__(self) -> str:
        state = "pending" if self.pending else "done"
        return f"<Entry deadline={self.deadline!r} {state}>"


class _Level:
    """One ring of ``wheel_size`` slots, each ``width`` ticks wide."""

    __slots__ = ("buckets", "current", "expirations", "index", "span", "width")

    def __init__(self, index: int, width: int, wheel_size: int, start: int) -> None:
        self.index = index
        # Ticks per slot: wheel_size ** index.
        self.width = width
        # Ticks covered by the whole ring: the width of one slot of the level above.
        self.span = width * wheel_size
        # Start of the current slot; always a multiple of width, never decreases.
        self.current = start - start % width
        self.buckets: list[_Bucket] = [{} for _ in range(wheel_size)]
        # Expiration (ticks) each bucket was last queued with on the heap; None when not queued.
        # An entry is on the heap iff its bucket's expiration is not None.
        self.expirations: list[int | None] = [None] * wheel_size

    def advance_to(self, ticks: int) -> None:
        if ticks >= self.current + self.width:
            self.current = ticks - ticks % self.width


def _check_time(value: object, what: str) -> float:
    """Return ``value`` if it is a finite real number, else raise TypeError or ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be an int or a float, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        raise ValueError(f"{what} {value!r} is too far away") from None
    if not finite:
        raise ValueError(f"{what} must be finite, got {value!r}")
    return value


class HierarchicalWheel(Generic[P]):
    """Kafka's hierarchical timing wheel, never early and totally ordered.

    >>> wheel = HierarchicalWheel(tick=1, wheel_size=20)
    >>> entry = wheel.add(350, "job")
    >>> wheel.locate(entry)
    (1, 17)
    >>> wheel.next_deadline()
    340
    >>> wheel.advance(349)
    []
    >>> wheel.advance(350)
    ['job']

    Args:
        tick: width of one level-0 slot in the caller's time unit; finite and > 0.
        wheel_size: slots per level, >= 2.
        start: the wheel's initial time; level 0's clock starts at ``start`` rounded down to a
            whole tick.

    Guarantees:
        * ``advance(now)`` returns a payload only if its deadline <= ``now`` (never early);
        * called at ``next_deadline()`` each time, ``advance`` returns every payload at most one
          tick after its deadline;
        * each batch is ordered by ``(deadline, add order)``, cascaded or not;
        * a removed entry never comes out; an entry added already due comes out at the next
          ``advance``; each payload comes out at most once.

    Not thread-safe.
    """

    __slots__ = ("_due", "_heap", "_len", "_levels", "_seq", "tick", "wheel_size")

    def __init__(self, tick: float = 0.001, wheel_size: int = 64, start: float = 0.0) -> None:
        if isinstance(tick, bool) or not isinstance(tick, (int, float)):
            raise TypeError(f"tick must be an int or a float, got {tick!r}")
        if not (math.isfinite(tick) and tick > 0):
            raise ValueError(f"tick must be finite and > 0, got {tick!r}")
        if isinstance(wheel_size, bool) or not isinstance(wheel_size, int):
            raise TypeError(f"wheel_size must be an int, got {wheel_size!r}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size!r}")
        _check_time(start, "start")
        self.tick = tick
        self.wheel_size = wheel_size
        self._levels = [_Level(0, 1, wheel_size, floor_ticks(start, self.tick))]
        # Entries that were already due when added; they come out at the next advance.
        self._due: _Bucket = {}
        # (expiration ticks, level index, slot) of every queued bucket.
        self._heap: list[tuple[int, int, int]] = []
        self._len = 0
        self._seq = 0

    # -- public API ---------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of pending entries."""
        return self._len

    @property
    def now(self) -> float:
        """The wheel's clock: the time of the last ``advance`` (or ``start``), rounded down to a
        whole tick."""
        return self._levels[0].current * self.tick

    @property
    def levels(self) -> int:
        """Number of levels created so far (they are never destroyed)."""
        return len(self._levels)

    def level_start(self, level: int) -> float:
        """The aligned start of ``level``'s current slot (Kafka's ``currentTime``)."""
        return self._levels[level].current * self.tick

    def add(self, deadline: float, payload: P) -> Entry[P]:
        """File ``payload`` to come out of ``advance`` once the clock reaches ``deadline``.

        O(levels). Raises TypeError for a non-number and ValueError for NaN, infinity or a
        deadline ``2**52`` ticks or more from zero (beyond that floats cannot tell adjacent
        ticks apart). A deadline at or before the wheel's clock is due at the next ``advance``.
        """
        _check_time(deadline, "deadline")
        return self.add_entry(Entry(deadline, payload))

    def add_entry(self, entry: E) -> E:
        """File a new ``entry`` (an :class:`Entry` or subclass instance) under its ``deadline``.

        The low-level form of ``add`` for layers that subclass :class:`Entry` to carry their own
        data (one object per timer instead of two). ``entry.deadline`` is expected to be checked
        already; a non-number still raises TypeError and NaN or infinity ValueError. An entry
        can be filed once.
        """
        bucket = entry._bucket
        if bucket is not None and entry in bucket:
            raise ValueError(f"{entry!r} is already pending")
        entry._ticks = ceil_ticks(entry.deadline, self.tick)
        entry._seq = seq = self._seq
        self._seq = seq + 1
        self._file(entry)
        self._len += 1
        return entry

    def remove(self, entry: Entry[P]) -> bool:
        """Take ``entry`` out of the wheel and drop its payload; O(1).

        Returns False if it was no longer pending (already returned by ``advance`` or removed).
        """
        bucket = entry._bucket
        if bucket is None or bucket.pop(entry, _ABSENT) is _ABSENT:
            return False
        entry._bucket = None
        entry.payload = None
        self._len -= 1
        return True

    def next_deadline(self) -> float | None:
        """When the earliest non-empty bucket expires (in the caller's time), or None if empty.

        The bucket may sit on a higher level, in which case advancing to this time only cascades
        its entries down; call again after ``advance``. If some entry is already due, the result
        is at or before the wheel's clock. Amortised O(1): buckets emptied by ``remove`` are
        dropped from the heap lazily, here.
        """
        if self._due:
            return self._levels[0].current * self.tick
        heap = self._heap
        levels = self._levels
        while heap:
            expiration, index, slot = heap[0]
            level = levels[index]
            if level.buckets[slot]:
                return expiration * self.tick
            heappop(heap)
            level.expirations[slot] = None
        return None

    def advance(self, now: float) -> list[P]:
        """Move the clock to ``now`` and return the payloads now due, in (deadline, add order).

        Expired higher-level buckets are flushed and their entries re-filed lower (Kafka's
        cascade); entries whose tick has come are returned. The clock never moves backwards:
        a ``now`` before the wheel's clock only returns entries that were added already due.
        """
        payloads: list[P] = []
        append = payloads.append
        for entry in self.advance_entries(now):
            append(entry.payload)  # type: ignore[arg-type]
            entry.payload = None
        return payloads

    def advance_entries(self, now: float) -> list[Entry[P]]:
        """Like ``advance`` but return the due entries themselves, payloads still attached.

        For layers that subclass :class:`Entry`: they own the payload from here on.
        """
        _check_time(now, "now")
        now_ticks = floor_ticks(now, self.tick)
        due = self._due
        batch: list[Entry[P]] = list(due)
        due.clear()
        heap = self._heap
        levels = self._levels
        while heap and heap[0][0] <= now_ticks:
            expiration, index, slot = heappop(heap)
            level = levels[index]
            level.expirations[slot] = None
            bucket = level.buckets[slot]
            if not bucket:
                continue
            for lvl in levels:
                lvl.advance_to(expiration)
            if index == 0:
                # Emptied in place: the fired entries keep pointing at it (see Entry._bucket).
                batch.extend(bucket)
                bucket.clear()
            else:
                # A fresh dict, so that re-filing can never land in the bucket being flushed.
                level.buckets[slot] = {}
                for entry in bucket:
                    self._file(entry)
                # Cascaded entries whose tick has come went to self._due.
                if due:
                    batch.extend(due)
                    due.clear()
        for lvl in levels:
            lvl.advance_to(now_ticks)
        if not batch:
            return batch
        if len(batch) > 1:
            batch.sort(key=_order)
        self._len -= len(batch)
        return batch

    def remove_all(self) -> list[Entry[P]]:
        """Take every pending entry out of the wheel and return them in (deadline, add order).

        O(n). Payloads stay attached: the caller owns them from here on. The clock and the
        levels are kept.
        """
        batch: list[Entry[P]] = list(self._due)
        self._due.clear()
        for level in self._levels:
            for slot, bucket in enumerate(level.buckets):
                if bucket:
                    batch.extend(bucket)
                    level.buckets[slot] = {}
        self._heap.clear()
        for level in self._levels:
            level.expirations = [None] * self.wheel_size
        batch.sort(key=_order)
        for entry in batch:
            entry._bucket = None
        self._len = 0
        return batch

    def locate(self, entry: Entry[P]) -> tuple[int, int] | None:
        """Where ``entry`` is filed as ``(level, slot)``, or None if it is not pending.

        An entry that was already due when added, or was cascaded into the current tick, is
        reported as ``(0, slot of the clock's tick)``: it comes out at the next ``advance``.
        """
        bucket = entry._bucket
        if bucket is None or entry not in bucket:
            return None
        if bucket is self._due:
            return (0, self._levels[0].current % self.wheel_size)
        for level in self._levels:
            slot = (entry._ticks // level.width) % self.wheel_size
            if level.buckets[slot] is bucket:
                return (level.index, slot)
        raise AssertionError(f"{entry!r} is in no bucket of its wheel")  # pragma: no cover

    def bucket_expiration(self, level: int, slot: int) -> float | None:
        """When the bucket at ``(level, slot)`` expires, or None if it is not queued."""
        expiration = self._levels[level].expirations[slot]
        return None if expiration is None else expiration * self.tick

    def __repr__(self) -> str:
        return (
            f"<HierarchicalWheel tick={self.tick!r} wheel_size={self.wheel_size} "
            f"levels={len(self._levels)} pending={self._len} now={self.now!r}>"
        )

    # -- placement ----------------------------------------------------------------------------

    def _file(self, entry: Entry[Any]) -> None:
        """Put ``entry`` in the lowest level whose range holds its tick (Kafka's ``add``)."""
        q = entry._ticks
        levels = self._levels
        level = levels[0]
        if q <= level.current:
            self._due[entry] = None
            entry._bucket = self._due
            return
        if q >= level.current + level.span:
            for level in levels:
                if q < level.current + level.span:
                    break
            else:
                level = self._grow(q)
        virtual_id = q // level.width
        slot = virtual_id % self.wheel_size
        bucket = level.buckets[slot]
        bucket[entry] = None
        entry._bucket = bucket
        expiration = virtual_id * level.width
        if level.expirations[slot] != expiration:
            level.expirations[slot] = expiration
            heappush(self._heap, (expiration, level.index, slot))

    def _grow(self, q: int) -> _Level:
        """Add overflow levels until one covers tick ``q``; return that level."""
        levels = self._levels
        while True:
            below = levels[-1]
            level = _Level(below.index + 1, below.span, self.wheel_size, below.current)
            levels.append(level)
            if q < level.current + level.span:
                return level
