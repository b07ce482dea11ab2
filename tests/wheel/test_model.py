"""The wheel against a reference model, on random operations (a hypothesis state machine), on both
implementations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from reference import ceil_ticks, floor_ticks

if TYPE_CHECKING:
    from aiowheel._impl import Entry, HierarchicalWheel, Implementation

# -- against a reference model --------------------------------------------------------------------


def align(ticks: int, width: int) -> int:
    """``ticks`` rounded down to a multiple of ``width``: a level's current slot start."""
    return ticks - ticks % width


# Deadlines and times relative to the clock, in ticks.
ADD_UNITS = st.one_of(
    # Quarter ticks near the clock: already due, and several deadlines sharing one tick.
    st.integers(-12, 60).map(lambda k: k / 4),
    st.integers(-3, 5000),  # a few levels up for small wheels
    st.floats(-3, 5000),  # between ticks
    st.integers(5000, 10**7),  # many levels up
)
ADVANCE_UNITS = st.one_of(
    st.integers(-8, 40).map(lambda k: k / 4),  # small steps, including before the clock
    st.floats(-2, 3000),
    st.integers(0, 10**7),
)


class WheelVsModel(RuleBasedStateMachine):
    """Random add / remove / advance on a wheel and on a model: a dict of pending entries.

    Model rule: an entry is due once its deadline's tick (``ceil_ticks``) is at or before the
    clock, which is the furthest ``floor_ticks(now)`` seen (or the start). Due entries come out
    sorted by (deadline, add order); payloads are add-order numbers.
    """

    def __init__(self, twins: Implementation, tick: float) -> None:
        super().__init__()
        self.twins = twins
        self.tick = tick
        self.wheel: HierarchicalWheel[int] = twins.wheel.HierarchicalWheel(tick)
        self.clock = 0  # ticks
        self.levels = 1
        # payload -> (deadline, its tick, entry)
        self.pending: dict[int, tuple[float, int, Entry[int]]] = {}
        self.entries: list[Entry[int]] = []

    def at(self, units: float) -> float:
        return (self.clock + units) * self.tick

    @initialize(wheel_size=st.sampled_from([2, 3, 4, 64]), units=st.integers(-1000, 1000))
    def create(self, wheel_size: int, units: int) -> None:
        start = units * self.tick
        self.wheel = self.twins.wheel.HierarchicalWheel(self.tick, wheel_size, start)
        self.clock = floor_ticks(start, self.tick)

    @rule(units=ADD_UNITS)
    def add(self, units: float) -> None:
        self.check_add(self.at(units))

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def add_tie(self, data: st.DataObject) -> None:
        """The deadline of an earlier entry: filed on another level if the clock moved since,
        the case where Kafka's cascade puts the earlier entry behind the later one."""
        self.check_add(data.draw(st.sampled_from(self.entries)).deadline)

    def check_add(self, deadline: float) -> None:
        payload = len(self.entries)
        entry = self.wheel.add(deadline, payload)
        q = ceil_ticks(deadline, self.tick)
        self.entries.append(entry)
        self.pending[payload] = (deadline, q, entry)
        ws = self.wheel.wheel_size
        if q <= self.clock:
            assert self.wheel.locate(entry) == (0, self.clock % ws)
            return
        # Kafka's placement: the lowest level whose [current, current + span) holds q.
        level = 0
        while q >= align(self.clock, ws**level) + ws ** (level + 1):
            level += 1
        self.levels = max(self.levels, level + 1)
        assert self.wheel.locate(entry) == (level, q // ws**level % ws)

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        payload = data.draw(st.integers(0, len(self.entries) - 1))
        entry = self.entries[payload]
        assert self.wheel.remove(entry) is (payload in self.pending)
        self.pending.pop(payload, None)
        assert not entry.pending
        assert entry.payload is None

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def remove_entry(self, data: st.DataObject) -> None:
        """remove_entry's contract: None if not pending; False: next_deadline() unchanged;
        True: the entry was the last of its bucket, next_deadline() is not earlier."""
        payload = data.draw(st.integers(0, len(self.entries) - 1))
        entry = self.entries[payload]
        where = self.wheel.locate(entry)
        bucket_mates = [
            p
            for p, (_, _, e) in self.pending.items()
            if p != payload and self.wheel.locate(e) == where
        ]
        before = self.wheel.next_deadline()
        emptied = self.wheel.remove_entry(entry)
        after = self.wheel.next_deadline()
        if payload not in self.pending:
            assert emptied is None
        else:
            assert emptied is (not bucket_mates)
        if emptied:
            assert before is not None
            assert after is None or after >= before
        else:
            assert after == before
        self.pending.pop(payload, None)
        assert not entry.pending
        assert entry.payload is None

    @rule(units=ADVANCE_UNITS)
    def advance(self, units: float) -> None:
        self.check_advance(self.at(units))

    @rule()
    def advance_to_next_deadline(self) -> None:
        now = self.wheel.next_deadline()
        if now is not None:
            self.check_advance(now)

    def check_advance(self, now: float) -> None:
        self.clock = max(self.clock, floor_ticks(now, self.tick))
        due = sorted((d, p) for p, (d, q, _) in self.pending.items() if q <= self.clock)
        assert self.wheel.advance(now) == [p for _, p in due]
        for _, payload in due:
            entry = self.pending.pop(payload)[2]
            assert not entry.pending
            assert entry.payload is None

    @invariant()
    def structure_is_consistent(self) -> None:
        self.wheel._check()

    @invariant()
    def counts_match(self) -> None:
        assert len(self.wheel) == len(self.pending)
        assert self.wheel.now == self.clock * self.tick
        assert self.wheel.levels == self.levels

    @invariant()
    def pending_per_level_counts_where_entries_sit(self) -> None:
        counts = [0] * self.wheel.levels
        for _, _, entry in self.pending.values():
            where = self.wheel.locate(entry)
            assert where is not None
            counts[where[0]] += 1
        assert self.wheel.pending_per_level() == tuple(counts)

    @invariant()
    def next_deadline_is_never_after_the_earliest_tick(self) -> None:
        now = self.wheel.next_deadline()
        if not self.pending:
            assert now is None
            return
        earliest = min(q for _, q, _ in self.pending.values())
        assert now is not None
        if earliest <= self.clock:
            assert now == self.clock * self.tick
        else:
            assert self.clock * self.tick < now <= earliest * self.tick

    @invariant()
    def entries_sit_in_live_buckets(self) -> None:
        """Each entry is in the bucket of its tick on some level, in that level's current
        rotation and still in the future; the bucket's expiration is its start."""
        ws = self.wheel.wheel_size
        for _, q, entry in self.pending.values():
            assert entry.pending
            where = self.wheel.locate(entry)
            assert where is not None
            level, slot = where
            if q <= self.clock:
                assert where == (0, self.clock % ws)
                continue
            width = ws**level
            expiration = align(q, width)
            assert slot == q // width % ws
            assert self.wheel.bucket_expiration(level, slot) == expiration * self.tick
            assert self.clock < expiration < align(self.clock, width) + width * ws


@pytest.mark.parametrize("tick", [1, 0.001, 1 / 3])
def test_wheel_matches_reference_model(twins: Implementation, tick: float) -> None:
    run_state_machine_as_test(
        lambda: WheelVsModel(twins, tick),
        settings=settings(
            max_examples=50,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
