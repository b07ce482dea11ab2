"""The hierarchical timing wheel: a pure data structure, no event loop, no clock, no I/O.

This module owns everything about levels, slots, placement, cascading, ordering and "never
early". Times are numbers in the caller's clock, checked and converted to an ``int`` or a
``float`` where they enter (:mod:`aiowheel._checks`); internally every deadline is converted once
to a whole number of ticks, and all placement arithmetic is done on Python ints, so no float
error can move an entry into a bucket that fires before it.

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
* a bucket is a ``dict`` from each entry's add order to the entry, so add and remove are O(1),
  a removed entry is released at once (no tombstones), and an entry is found by its identity,
  not by its ``__eq__`` (a subclass -- the loop's handle -- may compare as asyncio's handles
  do);
* the expirations of non-empty buckets sit in a heap (the role of Kafka's ``DelayQueue``), one
  heap item per bucket per rotation rather than per entry, so ``next_deadline`` never walks
  empty slots.

Complexity: ``add`` O(levels), ``remove`` and ``remove_entry`` O(1), ``next_deadline`` amortised
O(1), ``advance`` O(due + cascaded + k log k) for a batch of k due entries.

The invariants of the structure are written next to the fields they concern, and
``HierarchicalWheel._check()`` asserts all of them (the property-based tests call it after every
step).
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from aiowheel._checks import (
    MAX_TICKS,
    MAX_WHEEL_SIZE,
    already_pending,
    check_clock,
    check_count,
    check_deadline,
    check_length,
    out_of_range,
)
from aiowheel._defaults import DEFAULT_TICK, DEFAULT_WHEEL_SIZE

if TYPE_CHECKING:
    from typing import SupportsFloat, SupportsIndex

__all__ = ["Entry", "HierarchicalWheel", "ceil_ticks", "floor_ticks"]

P = TypeVar("P")
E = TypeVar("E", bound="Entry[Any]")

# A bucket: the entries of one slot, each under its add order (its _seq), in the order they were
# filed there.
_Bucket = dict[int, "Entry[Any]"]

_order = attrgetter("deadline", "_seq")
_ceil = math.ceil


def ceil_ticks(t: float, tick: float) -> int:
    """The smallest q with ``q * tick >= t`` (a float product): where a deadline is filed.

    The one rounding rule of aiowheel: a deadline ``t`` fires at ``ceil_ticks(t, tick) * tick``,
    never before ``t`` and less than a tick after it. ``IdleTimeouts`` and the Spark replay use it
    to compute expiry times that match the wheel's exactly. ValueError if ``t / tick`` is not
    finite or not below 2**52 in magnitude.
    """
    ratio = t / tick
    if not abs(ratio) < MAX_TICKS:
        raise out_of_range("deadline", t, tick)
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
    if not abs(ratio) < MAX_TICKS:
        raise out_of_range("time", t, tick)
    q = math.floor(ratio)
    if q * tick > t:
        q -= 1
    elif (q + 1) * tick <= t:
        q += 1
    return q


class Entry(Generic[P]):
    """A pending deadline in a :class:`HierarchicalWheel`, as returned by ``add``.

    Hold on to it to ``remove`` the deadline later. Once the entry has come out of ``advance`` or
    been removed it is inert: it keeps ``deadline`` but drops its payload.
    """

    __slots__ = ("_bucket", "_seq", "deadline", "payload")

    deadline: float
    payload: P | None
    # Add order, below the wheel's _seq; ties between equal deadlines are broken by it, and the
    # entry's key in its bucket. Set when filed. The entry's tick, ceil_ticks(deadline, tick),
    # is not kept: the wheel computes it again where it needs it (a cascade), which costs less
    # than an int object per pending entry.
    _seq: int
    # The bucket this entry was last filed in; None before filing and after remove. An entry
    # that came out of advance still points at its (since emptied or reused) bucket: it is
    # pending iff that bucket holds it under its _seq. This spares advance a store per fired
    # entry.
    _bucket: _Bucket | None

    def __init__(self, deadline: float, payload: P) -> None:
        """A new entry, not filed yet: a subclass's ``__init__`` must call this one."""
        self.deadline = deadline
        self.payload = payload
        self._bucket = None

    @property
    def pending(self) -> bool:
        """True while the entry sits in its wheel: neither returned by ``advance`` nor removed."""
        bucket = self._bucket
        return bucket is not None and bucket.get(self._seq) is self

    def __repr__(self) -> str:
        state = "pending" if self.pending else "done"
        return f"<Entry deadline={self.deadline!r} {state}>"


class _Level:
    """One ring of ``wheel_size`` slots, each ``width`` ticks wide."""

    __slots__ = ("buckets", "current", "expirations", "index", "span", "width")

    def __init__(self, index: int, width: int, wheel_size: int, start: int) -> None:
        # This level's place in the wheel's _levels.
        self.index = index
        # Ticks per slot: wheel_size ** index.
        self.width = width
        # Ticks covered by the whole ring: the width of one slot of the level above.
        self.span = width * wheel_size
        # Start of the current slot: level 0's clock rounded down to a multiple of width (every
        # level moves with level 0); never decreases.
        self.current = start - start % width
        # The entries of each slot. An entry with tick q sits in slot (q // width) % wheel_size,
        # under its _seq; its bucket expires at q - q % width, strictly after level 0's clock
        # and before current + span, and its _bucket is that dict.
        self.buckets: list[_Bucket] = [{} for _ in range(wheel_size)]
        # Expiration (ticks) each bucket was last queued with on the heap; None when not queued.
        # A bucket is on the heap, once, iff its expiration is not None; a non-empty bucket is
        # always queued (an emptied one may stay queued until next_deadline drops it).
        self.expirations: list[int | None] = [None] * wheel_size

    def advance_to(self, ticks: int) -> None:
        if ticks >= self.current + self.width:
            self.current = ticks - ticks % self.width


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
        tick: width of one level-0 slot in the caller's time unit; a finite real number > 0,
            kept as an int or else as the nearest float (``wheel.tick``).
        wheel_size: slots per level, a whole number from 2 to ``2**40``.
        start: the wheel's initial time; level 0's clock starts at ``start`` rounded down to a
            whole tick.

    Times are any real numbers -- ints, floats, Fractions, Decimals, numpy scalars -- but not
    bools; see ``add`` and ``advance`` for how they are rounded. Bad values raise TypeError or
    ValueError naming them.

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

    def __init__(
        self,
        tick: SupportsFloat = DEFAULT_TICK,
        wheel_size: SupportsIndex = DEFAULT_WHEEL_SIZE,
        start: SupportsFloat = 0.0,
    ) -> None:
        # The tick as an int or the nearest float (any real number is accepted, see _checks).
        self.tick = check_length(tick, "tick")
        self.wheel_size = check_count(wheel_size, "wheel_size", 2, MAX_WHEEL_SIZE)
        start = check_clock(start, "start")
        # Levels 0, 1, ...: level n is at index n; created on demand, never destroyed.
        self._levels = [_Level(0, 1, self.wheel_size, floor_ticks(start, self.tick))]
        # Entries whose tick is at or before level 0's clock: added already due, or cascaded
        # into the current tick. They come out at the next advance; their _bucket is this dict.
        self._due: _Bucket = {}
        # A heap of (expiration ticks, level index, slot): one item per queued bucket, exactly
        # the buckets whose level.expirations[slot] is not None, with that expiration.
        self._heap: list[tuple[int, int, int]] = []
        # Pending entries: those in _due and in every bucket.
        self._len = 0
        # The add order the next entry gets; above every filed entry's _seq.
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

    def pending_per_level(self) -> tuple[int, ...]:
        """Pending entries on each level, level 0 first (one number per level created).

        An entry already due -- added at or before the clock, or cascaded into the current tick
        -- counts on level 0, where :meth:`locate` places it. O(levels * wheel_size).
        """
        counts = [sum(map(len, level.buckets)) for level in self._levels]
        counts[0] += len(self._due)
        return tuple(counts)

    def level_start(self, level: int) -> float:
        """The aligned start of ``level``'s current slot (Kafka's ``currentTime``)."""
        return self._levels[level].current * self.tick

    def add(self, deadline: SupportsFloat, payload: P) -> Entry[P]:
        """File ``payload`` to come out of ``advance`` once the clock reaches ``deadline``.

        O(levels). ``deadline`` is any real number; one that is not an int or a float is
        converted to the smallest float not below it, which the entry keeps as its
        ``deadline``. Raises TypeError for a non-number (or a bool) and ValueError for NaN,
        infinity or a deadline ``2**52`` ticks or more from zero (beyond that floats cannot
        tell adjacent ticks apart). A deadline at or before the wheel's clock is due at the next
        ``advance``.
        """
        return self.add_entry(Entry(check_deadline(deadline, "deadline"), payload))

    def add_entry(self, entry: E) -> E:
        """File a new ``entry`` (an :class:`Entry` or subclass instance) under its ``deadline``.

        The low-level form of ``add`` for layers that subclass :class:`Entry` to carry their own
        data (one object per timer instead of two). ``entry.deadline`` is expected to be checked
        already; a non-number still raises TypeError and NaN or infinity ValueError. An entry
        can be filed once.
        """
        bucket = entry._bucket
        if bucket is not None and bucket.get(entry._seq) is entry:
            raise already_pending(entry)
        # q = ceil_ticks(entry.deadline, self.tick), inline: every timer's path, where the call
        # costs a tenth of the add.
        t, tick = entry.deadline, self.tick
        ratio = t / tick
        if not -MAX_TICKS < ratio < MAX_TICKS:  # NaN fails it too
            raise out_of_range("deadline", t, tick)
        q = _ceil(ratio)
        if q * tick < t:
            q += 1
        elif (q - 1) * tick >= t:
            q -= 1
        entry._seq = seq = self._seq
        self._seq = seq + 1
        # self._file(entry, q), inline for the same reason.
        level = self._levels[0]
        if q <= level.current:
            self._due[seq] = entry
            entry._bucket = self._due
        else:
            if q >= level.current + level.span:
                for level in self._levels:
                    if q < level.current + level.span:
                        break
                else:
                    level = self._grow(q)
            virtual_id = q // level.width
            slot = virtual_id % self.wheel_size
            entry._bucket = bucket = level.buckets[slot]
            bucket[seq] = entry
            expiration = virtual_id * level.width
            if level.expirations[slot] != expiration:
                level.expirations[slot] = expiration
                heappush(self._heap, (expiration, level.index, slot))
        self._len += 1
        return entry

    def remove(self, entry: Entry[P]) -> bool:
        """Take ``entry`` out of the wheel and drop its payload; O(1).

        Returns False if it was no longer pending (already returned by ``advance`` or removed).
        """
        # remove_entry's body, not a call to it: this is every cancellation's path, and a call
        # costs a fifth more here.
        bucket = entry._bucket
        # An add order is never reused by a wheel: the entry filed under this one is this entry.
        if bucket is None or bucket.pop(entry._seq, None) is None:
            return False
        entry._bucket = None
        entry.payload = None
        self._len -= 1
        return True

    def remove_entry(self, entry: Entry[P]) -> bool | None:
        """Like ``remove``, and tell whether ``next_deadline()`` may have changed; O(1).

        For a layer that keeps a wake-up armed for ``next_deadline()`` (the wheel-backed event
        loop's driver) and re-arms it only when a removal can move it. Returns:

        * None if ``entry`` was not pending (nothing changed);
        * False if it was removed and ``next_deadline()`` returns what it returned before;
        * True if it was removed and was the last entry of its bucket: ``next_deadline()`` may
          now be later, or None, never earlier. Ask it again (it drops the emptied bucket then).

        No heap work is done here: a removal costs the same whatever it returns.
        """
        bucket = entry._bucket
        if bucket is None or bucket.pop(entry._seq, None) is None:
            return None
        entry._bucket = None
        entry.payload = None
        self._len -= 1
        return not bucket

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

    def advance(self, now: SupportsFloat) -> list[P]:
        """Move the clock to ``now`` and return the payloads now due, in (deadline, add order).

        Expired higher-level buckets are flushed and their entries re-filed lower (Kafka's
        cascade); entries whose tick has come are returned. The clock never moves backwards:
        a ``now`` before the wheel's clock only returns entries that were added already due.
        ``now`` is any real number; one that is not an int or a float is taken as the largest
        float not above it.
        """
        payloads: list[P] = []
        append = payloads.append
        for entry in self.advance_entries(now):
            append(entry.payload)  # type: ignore[arg-type]
            entry.payload = None
        return payloads

    def advance_entries(self, now: SupportsFloat) -> list[Entry[P]]:
        """Like ``advance`` but return the due entries themselves, payloads still attached.

        For layers that subclass :class:`Entry`: they own the payload from here on.
        """
        now_ticks = floor_ticks(check_clock(now, "now"), self.tick)
        due = self._due
        batch: list[Entry[P]] = list(due.values())
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
                batch.extend(bucket.values())
                bucket.clear()
            else:
                # A fresh dict, so that re-filing can never land in the bucket being flushed.
                level.buckets[slot] = {}
                tick = self.tick
                for entry in bucket.values():
                    self._file(entry, ceil_ticks(entry.deadline, tick))
                # Cascaded entries whose tick has come went to self._due.
                if due:
                    batch.extend(due.values())
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
        batch: list[Entry[P]] = list(self._due.values())
        self._due.clear()
        for level in self._levels:
            for slot, bucket in enumerate(level.buckets):
                if bucket:
                    batch.extend(bucket.values())
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
        if bucket is None or bucket.get(entry._seq) is not entry:
            return None
        if bucket is self._due:
            return (0, self._levels[0].current % self.wheel_size)
        q = ceil_ticks(entry.deadline, self.tick)
        for level in self._levels:
            slot = (q // level.width) % self.wheel_size
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

    def _check(self) -> None:
        """Check every invariant written next to the fields; O(n + levels * wheel_size).

        For tests: raises AssertionError naming the first invariant that does not hold.
        """
        wheel_size, levels = self.wheel_size, self._levels
        clock = levels[0].current
        pending = len(self._due)
        for key, entry in self._due.items():
            q = self._check_entry(key, entry)
            if entry._bucket is not self._due:
                raise AssertionError(f"{entry!r} is in the due bucket, its _bucket is another")
            if q > clock:
                raise AssertionError(f"{entry!r} is due before its tick {q}")
        queued = set()
        for index, level in enumerate(levels):
            width = wheel_size**index
            if (level.index, level.width, level.span) != (index, width, width * wheel_size):
                found = (level.index, level.width, level.span)
                raise AssertionError(f"level {index} has (index, width, span) {found}")
            if level.current != clock - clock % width:
                raise AssertionError(f"level {index}'s current is not level 0's clock {clock}")
            if not len(level.buckets) == len(level.expirations) == wheel_size:
                raise AssertionError(f"level {index} does not have wheel_size slots")
            for slot, bucket in enumerate(level.buckets):
                expiration = level.expirations[slot]
                if expiration is not None:
                    queued.add((expiration, index, slot))
                elif bucket:
                    raise AssertionError(f"bucket ({index}, {slot}) holds entries, not queued")
                for key, entry in bucket.items():
                    pending += 1
                    q = self._check_entry(key, entry)
                    if entry._bucket is not bucket:
                        raise AssertionError(f"{entry!r} is in ({index}, {slot}), not its _bucket")
                    if expiration is not None and not expiration <= q < expiration + width:
                        last = expiration + width - 1
                        raise AssertionError(
                            f"{entry!r} is filed at ticks {expiration} to {last}, its tick is {q}"
                        )
                    if q // width % wheel_size != slot:
                        raise AssertionError(f"{entry!r} at tick {q} is in slot {slot}")
                    start = q - q % width
                    if not (expiration == start and clock < start < level.current + level.span):
                        raise AssertionError(f"{entry!r} is in a bucket expiring at {expiration}")
        heap = self._heap
        if len(heap) != len(queued) or set(heap) != queued:
            raise AssertionError("the heap does not hold exactly the queued buckets")
        if any(heap[(i - 1) // 2] > heap[i] for i in range(1, len(heap))):
            raise AssertionError("the heap is not ordered")
        if self._len != pending:
            raise AssertionError(f"len is {self._len} but {pending} entries are filed")

    def _check_entry(self, key: int, entry: Entry[Any]) -> int:
        """Check a filed entry's add order and the key it is filed under; return its tick."""
        if key != entry._seq:
            raise AssertionError(f"{entry!r} is filed under {key}, its add order is {entry._seq}")
        if not 0 <= entry._seq < self._seq:
            raise AssertionError(f"{entry!r} has add order {entry._seq}, the next is {self._seq}")
        return ceil_ticks(entry.deadline, self.tick)

    # -- placement ----------------------------------------------------------------------------

    def _file(self, entry: Entry[Any], q: int) -> None:
        """Put ``entry`` in the lowest level whose range holds its tick ``q`` (Kafka's
        ``add``)."""
        levels = self._levels
        level = levels[0]
        if q <= level.current:
            self._due[entry._seq] = entry
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
        bucket[entry._seq] = entry
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
