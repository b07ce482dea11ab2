"""IdleRule and the shards' pages, the streaming service's logic, driven as Spark drives it.

A small model of a stateful streaming query in event time: events arrive in micro-batches, the
watermark of a batch is the largest ts of the batches before it minus the delay, an event at or
before the previous batch's watermark is dropped as late, each key with input is visited, then
each key whose timer the watermark has passed. Whatever the batching and the arrival order, the
expiries emitted when the watermark stands at W must be the reference's up to horizon W.

Every test runs on both implementations of the rule and of the shard's visit (the ``rule`` and
``visit`` twins of ``aiowheel._impl.EDGE_TWINS``): the ``implementation`` fixture selects one,
:func:`make_rule` makes its ``IdleRule`` and :func:`shard_visit` is its visit, as the stream's
processors choose them.
"""

from __future__ import annotations

import math
import pickle
import zlib
from collections import defaultdict
from collections.abc import Collection
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from idle_reference import Event, reference_expiries

from aiowheel import _impl
from aiowheel.spark import _shard as shard
from aiowheel.spark._keystate import IdleRule, KeyState
from aiowheel.spark.events import KIND_RANK

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("implementation")]
needs_compiled = pytest.mark.skipif(
    _impl.compiled_implementation() is None, reason="the compiled implementation is not built"
)


def make_rule(timeouts: list[float], tick: float, delay: float) -> IdleRule:
    """The rule twin of the implementation under test (the ``implementation`` fixture's)."""
    rule: IdleRule = _impl.edge_twin("rule").IdleRule(timeouts, tick, delay)
    return rule


def shard_visit() -> Any:
    """The visit twin of the implementation under test: ``add_events`` and ``visit``."""
    return _impl.edge_twin("visit")


ExpiryRow = tuple[str, float, float, float]


class Model:
    """Spark's side of the contract: batches, watermarks, late events, one timer per shard."""

    def __init__(self, rule: IdleRule, shards: int = 3, twin: Any = None) -> None:
        self.rule = rule
        self.shards = shards
        # The visit twin (add_events and visit): the implementation under test's by default.
        self.twin = shard_visit() if twin is None else twin
        # Per shard: its index row, and its pages' rows (the map state).
        self.stored: dict[int, tuple[bytes, int, int | None, int]] = {}
        self.pages: dict[int, dict[int, tuple[bytes]]] = defaultdict(dict)
        self.width = shard.slot_width(rule.timeouts)
        # Per visit: (with input?, keys read from the map state, keys the shard held).
        self.reads: list[tuple[bool, int, int]] = []
        # Per visit: the keys of the pages it wrote, to the map state or in the index.
        self.writes: list[int] = []
        # Per visit: the map state's entries it read, wrote or removed (one state call each,
        # but for a whole read, one pass of the map's iterator).
        self.calls: list[int] = []
        self.emitted: list[ExpiryRow] = []
        self.max_ts = -math.inf
        self.watermark = -(2**62)  # ms; no watermark yet
        self.visits = 0
        self.timer_moves = 0

    def shard_of(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self.shards

    def batch(self, events: list[Event]) -> None:
        late = self.watermark
        # The eviction watermark of this batch: from the batches before it.
        if self.max_ts > -math.inf:
            self.watermark = max(self.watermark, math.floor((self.max_ts - self.rule.delay) * 1000))
        # Each shard's rows, column by column, as the pandas processor gets them.
        columns: dict[int, tuple[list[Any], ...]] = defaultdict(lambda: ([], [], [], []))
        for key, ts, kind, event_id in events:
            self.max_ts = max(self.max_ts, ts)
            if math.floor(ts * 1_000_000) <= late * 1000:
                continue  # late: Spark drops it before the processor sees it
            for column, value in zip(
                columns[self.shard_of(key)], (key, ts, KIND_RANK[kind], event_id), strict=True
            ):
                column.append(value)
        for number, rows in columns.items():
            new: dict[str, list[tuple[float, int, str | None]]] = {}
            self.twin.add_events(new, *rows)
            self.visit(number, new, None)
        for number in list(self.stored):
            timer = self.stored[number][2]
            if timer is not None and timer <= self.watermark:
                self.visit(number, {}, timer)

    def visit(
        self, number: int, new: dict[str, list[tuple[float, int, str | None]]], firing: int | None
    ) -> None:
        pages = self.pages[number]
        read: list[int] = []

        def load(wanted: Collection[int] | None) -> dict[int, shard.PageRow]:
            assert not read, "read once per visit"
            read.extend(pages if wanted is None else wanted)
            return {page: pages[page] for page in read if page in pages}

        held = len(self.keys())
        before = shard.load(self.stored.get(number), self.shards)
        outcome = self.twin.visit(
            self.rule, before, new, self.watermark, load, width=self.width, firing=firing
        )
        self.visits += 1
        self.reads.append(
            (bool(new), sum(len(shard.load_page(pages[p])) for p in read if p in pages), held)
        )
        old_timer = None if before is None or before.timer == firing else before.timer
        new_timer = None if outcome.shard is None else outcome.shard.timer
        if old_timer != new_timer:
            self.timer_moves += 1
        self.emitted.extend(outcome.expiries)
        inline_before = {} if before is None else before.inline
        inline_after = {} if outcome.shard is None else outcome.shard.inline
        rewritten = [
            shard.load_page((value,))
            for page, value in inline_after.items()
            if inline_before.get(page) != value
        ]
        self.writes.append(
            sum(len(shard.load_page(row)) for row in outcome.pages.values() if row)
            + sum(map(len, rewritten))
        )
        self.calls.append((1 if read else 0) + len(outcome.pages))
        for page, row in outcome.pages.items():
            assert page in read or row is not None  # a page is removed only once read
            if row is None:
                del pages[page]
            else:
                pages[page] = row
        if outcome.shard is None:
            assert not pages
            self.stored.pop(number, None)
        else:
            # A stored shard always has a timer, at or before its keys' first wake-up, and
            # its index holds each page's first wake-up.
            assert outcome.shard.timer is not None
            # Each page is in the map state or in the index, small ones in the index.
            assert set(outcome.shard.wakes) == set(pages) | set(outcome.shard.inline)
            assert not set(pages) & set(outcome.shard.inline)
            for value in outcome.shard.inline.values():
                assert 0 < len(shard.load_page((value,))) <= shard.INLINE_MAX
            for row in pages.values():
                assert len(shard.load_page(row)) > shard.INLINE_MAX
            self.stored[number] = shard.dump(outcome.shard, self.shards)
            for page, wake in outcome.shard.wakes.items():
                assert wake == min(state[4] for state in self.page(number, page).values())
            assert outcome.shard.timer <= min(outcome.shard.wakes.values())

    def page(self, number: int, page: int) -> shard.Page:
        row = self.pages[number].get(page)
        if row is None:
            index = shard.load(self.stored.get(number), self.shards)
            if index is None or page not in index.inline:
                return {}
            row = (index.inline[page],)
        return shard.load_page(row)

    def rows(self) -> list[shard.PageRow]:
        """Every page's row, in the map state or in the index."""
        rows = [row for pages in self.pages.values() for row in pages.values()]
        for stored in self.stored.values():
            index = shard.load(stored, self.shards)
            assert index is not None
            rows += [(value,) for value in index.inline.values()]
        return rows

    def keys(self) -> set[str]:
        """Every key with state, in the map state or in the index."""
        return {key for row in self.rows() for key in shard.load_page(row)}

    def idle(self) -> None:
        """A batch without data: the watermark catches up with the last events."""
        self.batch([])

    def advance(self, ts: float) -> None:
        """A batch without data after events up to ``ts`` elsewhere (another shard's)."""
        self.max_ts = max(self.max_ts, ts)
        self.batch([])

    @property
    def horizon(self) -> float:
        return self.watermark / 1000.0


def run(
    arrivals: list[list[Event]],
    *,
    timeouts: list[float],
    tick: float,
    delay: float,
    shards: int = 3,
) -> Model:
    model = Model(make_rule(timeouts, tick, delay), shards)
    for batch in arrivals:
        model.batch(batch)
    model.idle()
    return model


def test_basic_expiry_across_batches() -> None:
    model = run(
        [
            [("a", 0.0, "open", None), ("a", 10.0, "data", None)],
            [("b", 60.0, "data", None)],
            [("b", 120.0, "data", None)],
        ],
        timeouts=[30.0],
        tick=1.0,
        delay=5.0,
    )
    # Watermark after the last batch: 120 - 5 = 115; b's touch at 60 expired at 90.
    assert model.horizon == 115.0
    assert sorted(model.emitted) == [("a", 30.0, 40.0, 10.0), ("b", 30.0, 90.0, 60.0)]
    # a and b expired, b's last touch (120) is pending: one key left in the state store.
    assert model.keys() == {"b"}


def test_several_timeouts_fire_in_order_from_one_clock() -> None:
    model = run(
        [[("a", 0.0, "open", None)], [("z", 100.0, "data", None)]],
        timeouts=[10.0, 20.0, 45.0],
        tick=1.0,
        delay=0.0,
    )
    assert sorted(model.emitted) == [
        ("a", 10.0, 10.0, 0.0),
        ("a", 20.0, 20.0, 0.0),
        ("a", 45.0, 45.0, 0.0),
    ]
    assert model.keys() == {"z"}


def test_a_late_copy_within_the_delay_counts_once() -> None:
    model = run(
        [
            [("a", 0.0, "open", "o"), ("a", 20.0, "data", "d")],
            [("a", 20.0, "data", "d"), ("a", 25.0, "data", None)],  # the copy arrives later
            [("z", 200.0, "data", None)],
        ],
        timeouts=[30.0],
        tick=1.0,
        delay=10.0,
    )
    assert sorted(model.emitted) == [("a", 30.0, 55.0, 25.0)]


def test_pending_events_are_kept_in_rule_order_and_applied_once_passed() -> None:
    rule = make_rule([30.0], 1.0, 10.0)
    # Arrived out of order, none passed by the watermark (5 s): all pending, in (ts, kind)
    # order; the key wakes at the first expiry they lead to.
    first = rule.visit(None, [(9.0, 1, "x"), (7.0, 2, None), (7.0, 0, "y"), (8.0, 1, None)], 5_000)
    assert first.expiries == []
    assert first.state is not None
    assert first.state.applied == 0
    assert first.state.recent == [(7.0, 0, "y"), (7.0, 2, None), (8.0, 1, None), (9.0, 1, "x")]
    assert first.state.wake == 39_000  # the touch at 9 s, if nothing follows, expires at 39 s
    # More arrive, one of them a copy of y: the watermark (8 s) passes the first three in rule
    # order, the copy counts once, and only y (with an id, within the delay) is remembered.
    second = rule.visit(first.state, [(7.5, 1, "y"), (12.0, 1, None)], 8_000)
    assert second.expiries == []
    assert second.state is not None
    assert second.state.last_seen == 8.0
    assert second.state.recent[: second.state.applied] == [(7.0, 0, "y")]
    assert second.state.recent[second.state.applied :] == [(9.0, 1, "x"), (12.0, 1, None)]
    # The key is touched at 12 last: it wakes at its deadline, 12 + 30.
    assert second.state.wake == 42_000


def test_wake_ms_is_the_first_millisecond_at_or_after() -> None:
    for t in (0.0, 0.001, 0.0015, 1.1, 30.001, 1e6 + 0.001, 1.7e9 + 0.123, -2.5):
        m = _impl.edge_twin("rule").wake_ms(t)
        assert m / 1000.0 >= t
        assert (m - 1) / 1000.0 < t


def test_a_shard_keeps_its_timer_while_its_clients_keep_talking() -> None:
    # One client, a keepalive every 5 s, one micro-batch per 5 s, 30 s timeout: the shard's
    # timer moves about once every few batches, not on every one.
    batches = [[("a", 5.0 * i, "data", None)] for i in range(60)]
    model = run(batches, timeouts=[30.0], tick=0.001, delay=2.0, shards=1)
    assert model.emitted == []
    assert model.timer_moves <= 60 // 3


def test_a_checkpoint_of_another_shard_count_is_refused() -> None:
    model = run([[("a", 0.0, "open", None)]], timeouts=[30.0], tick=1.0, delay=0.0, shards=1)
    (row,) = model.stored.values()
    with pytest.raises(ValueError, match="split into 1 shards, not 8: restart with shards=1"):
        shard.load(row, 8)


def test_a_visit_without_input_reads_the_due_keys_pages_not_the_shard() -> None:
    # 2,000 keys in one shard opened at 0 s; all but ten talk again at 20 s. When the
    # watermark reaches the ten's expiry, the visit reads the page of those ten, not the
    # 1,990 other keys (which moved to the page of their new wake-up at 20 s). That page, ten
    # keys, is kept in the index: the visit makes no call to the map state at all.
    model = Model(make_rule([30.0], 0.001, 0.0), shards=1)
    model.batch([(f"k{n}", 0.0, "open", None) for n in range(2_000)])
    model.batch([(f"k{n}", 20.0, "data", None) for n in range(10, 2_000)])
    model.advance(30.0)
    assert sorted(model.emitted) == sorted((f"k{n}", 30.0, 30.0, 0.0) for n in range(10))
    with_input, read, held = model.reads[-1]
    assert (with_input, read, held) == (False, 0, 2_000)
    assert model.calls[-1] == 0
    # The others expire at 50 s, in their own page, and nothing is left.
    model.advance(50.0)
    assert len(model.emitted) == 2_000
    assert model.reads[-1] == (False, 1_990, 1_990)
    assert model.keys() == set()
    assert model.stored == {}


def test_a_page_of_at_most_inline_max_keys_is_kept_in_the_index() -> None:
    # Pages of up to INLINE_MAX keys live in the index, larger ones in the map state; a page
    # moves between them as it grows or shrinks, and the keys' expiries do not change.
    limit = shard.INLINE_MAX
    model = Model(make_rule([30.0], 0.001, 0.0), shards=1)
    small, large = 30_000 // model.width, 40_000 // model.width
    model.batch([(f"a{n}", 0.0, "open", None) for n in range(limit)])
    index = shard.load(model.stored[0], 1)
    assert index is not None
    assert list(index.inline) == [small]
    assert dict(model.pages[0]) == {}
    assert model.calls[-1] == 0  # no map state call at all
    # One key more for that page: it moves to the map state.
    model.batch([(f"a{limit}", 0.5, "open", None)])
    index = shard.load(model.stored[0], 1)
    assert index is not None
    assert index.inline == {}
    assert list(model.pages[0]) == [small]
    assert len(model.page(0, small)) == limit + 1
    model.batch([(f"b{n}", 10.0, "open", None) for n in range(limit + 2)])
    index = shard.load(model.stored[0], 1)
    assert index is not None
    assert sorted(model.pages[0]) == [small, large]
    # All but one of the large page's keys talk at 15 s and move to the page of 45 s (a large
    # one, in the map state): the one left behind is kept in the index, and its map entry goes.
    model.batch([(f"b{n}", 15.0, "data", None) for n in range(1, limit + 2)])
    index = shard.load(model.stored[0], 1)
    assert index is not None
    assert list(index.inline) == [large]
    assert sorted(model.pages[0]) == [small, 45_000 // model.width]
    assert model.page(0, large).keys() == {"b0"}
    model.advance(60.0)
    assert sorted(model.emitted) == sorted(
        [(f"a{n}", 30.0, 30.0, 0.0) for n in range(limit)]
        + [(f"a{limit}", 30.0, 30.5, 0.5)]
        + [("b0", 30.0, 40.0, 10.0)]
        + [(f"b{n}", 30.0, 45.0, 15.0) for n in range(1, limit + 2)]
    )
    assert model.keys() == set()
    assert model.stored == {}


def test_an_index_written_before_pages_were_kept_in_it_reads_the_same() -> None:
    # An index row whose `wakes` holds the wake-ups alone (before pages were kept in the
    # index): every page of it is in the map state, and visits go on from there.
    model = Model(make_rule([30.0], 0.001, 0.0), shards=1)
    model.batch([(f"k{n}", 0.0, "open", None) for n in range(2_000)])
    wakes, upto, timer, shards = model.stored[0]
    page_wakes, inline = pickle.loads(wakes)
    assert inline == {}
    model.stored[0] = (pickle.dumps(page_wakes), upto, timer, shards)
    assert shard.load(model.stored[0], 1) == shard.Shard(page_wakes, upto, timer, {})
    model.batch([(f"k{n}", 20.0, "data", None) for n in range(10, 2_000)])
    model.advance(60.0)
    assert sorted(model.emitted) == sorted(
        [(f"k{n}", 30.0, 30.0, 0.0) for n in range(10)]
        + [(f"k{n}", 30.0, 50.0, 20.0) for n in range(10, 2_000)]
    )
    assert model.stored == {}


def test_a_visit_with_input_decodes_the_states_of_the_pages_it_changes_only(
    monkeypatch: pytest.MonkeyPatch, implementation: str
) -> None:
    # 2,000 keys in one shard, opened over 20 s: pages of about 1.9 s each (30 s / 16). Ten
    # keys of the first page talk at 25 s: the visit reads every page (to find them) but
    # decodes the states of their page and of the page they move to, not of the other keys.
    # The compiled visit decodes no page whole: it takes the ten states from their page's
    # bytes, and copies the bytes of the others.
    model = Model(make_rule([30.0], 0.001, 0.0), shards=1)
    model.batch([(f"k{n}", n / 100.0, "open", None) for n in range(2_000)])
    decoded: list[int] = []
    twin = shard_visit()
    states, visit = shard.StoredPage.states, twin.visit
    visiting = False

    def counted(self: shard.StoredPage) -> shard.Page:
        page = states(self)
        if visiting:  # the model's own checks decode pages too
            decoded.append(len(page))
        return page

    def counting(*args: Any, **kwargs: Any) -> shard.ShardVisit:
        nonlocal visiting
        visiting = True
        try:
            return visit(*args, **kwargs)
        finally:
            visiting = False

    monkeypatch.setattr(shard.StoredPage, "states", counted)
    monkeypatch.setattr(twin, "visit", counting)
    model.batch([(f"k{n}", 25.0, "data", None) for n in range(10)])
    assert model.reads[-1][0]
    first_page = 30_000 // model.width
    if implementation == "pure":
        assert decoded == [len(model.page(0, first_page)) + 10]
        assert sum(decoded) < 2_000 // 10
    else:
        assert decoded == []
    # Nothing is lost: each key expires once, 30 s after its last event.
    model.advance(60.0)
    assert len(model.emitted) == 2_000
    assert model.keys() == set()


def test_a_late_event_does_not_rewrite_a_full_page_for_one_key() -> None:
    # 1,000 keys touched at 20 s share the page of their wake-up (50 s); x, opened at 5 s,
    # gets a late event at 19 s, whose wake-up (49 s) falls in that page. x stays in its own
    # page, which the visit writes anyway: one key written, not the full page.
    model = Model(make_rule([30.0], 0.001, 10.0), shards=1)
    model.batch([(f"k{n}", 20.0, "open", None) for n in range(1_000)] + [("x", 5.0, "open", None)])
    assert len(model.page(0, 50_000 // model.width)) == 1_000
    model.batch([("x", 19.0, "data", None)])
    assert model.writes[-1] == 1
    assert "x" in model.page(0, 35_000 // model.width)
    # Where x lives decides what is read, not what is emitted.
    model.advance(70.0)
    assert sorted(model.emitted) == sorted(
        [("x", 30.0, 49.0, 19.0)] + [(f"k{n}", 30.0, 50.0, 20.0) for n in range(1_000)]
    )


def test_a_large_page_is_stored_compressed_and_reads_back_the_same() -> None:
    small = {"a": (1.0, 0, 0, [], 31_000)}
    large = {
        f"conn-{n:07d}": (float(n), 0, 1, [(float(n), 1, f"conn-{n:07d}:1")], 30_000 + n)
        for n in range(200)
    }
    (stored_small,) = shard.dump_page(small)
    (stored_large,) = shard.dump_page(large)
    # Below COMPRESS_FROM, the two pickles as they are (pickle's PROTO byte first); above, the
    # compressed frame behind its tag and length, a fraction of the pickles' size.
    assert len(stored_small) < shard.COMPRESS_FROM and stored_small[:1] == b"\x80"
    pickles = shard._pickled(tuple(large)) + shard.pickled_states(tuple(large.values()))
    assert stored_large[:1] == b"Z"
    assert int.from_bytes(stored_large[1:9], "little") == len(pickles)
    assert len(stored_large) < len(pickles) / 2
    for page, stored in ((small, stored_small), (large, stored_large)):
        assert shard.load_page((stored,)) == page
        assert shard.StoredPage((stored,)).keys == tuple(page)
    # A large page written uncompressed (by an earlier version) reads the same, and so does
    # one whose states were pickled in protocol 5.
    assert shard.load_page((pickles,)) == large
    before = shard._pickled(tuple(large)) + shard._pickled(tuple(large.values()))
    assert before != pickles
    assert shard.load_page((before,)) == large


def _earliest_encoding(page: shard.Page) -> bytes:
    """A page as the first versions wrote it: one pickled {key: state} dict."""
    return pickle.dumps(page, protocol=5)


def _protocol_5_encoding(page: shard.Page) -> bytes:
    """A page as the versions before protocol 3 wrote it: the two pickles in protocol 5,
    compressed as now."""
    return shard.pack_page(tuple(page), shard._pickled(tuple(page.values())))


def _encode_pages_as(model: Model, encoding: Any) -> None:
    """Rewrite every page the model holds, in its map state and in its index, in
    ``encoding``."""
    for pages in model.pages.values():
        for page, row in pages.items():
            pages[page] = (encoding(shard.load_page(row)),)
    for number, row in model.stored.items():
        index = shard.load(row, model.shards)
        assert index is not None
        inline = {page: encoding(shard.load_page((value,))) for page, value in index.inline.items()}
        model.stored[number] = shard.dump(index._replace(inline=inline), model.shards)


@pytest.mark.parametrize("encoding", [_earliest_encoding, _protocol_5_encoding])
def test_a_page_written_by_an_earlier_encoding_reads_the_same(encoding: Any) -> None:
    # A checkpoint holding pages of an earlier encoding goes on: each visit reads them (the
    # compiled one decodes them whole, as it cannot copy their states' bytes) and writes the
    # pages it changes in today's. Some pages are map entries, some are kept in the index.
    events = [
        [(f"k{n}", float(n % 2), "open", f"o{n}") for n in range(300)],
        [(f"k{n}", 12.0 + n % 2, "data", None) for n in range(0, 300, 3)],
        [("z", 40.0, "data", None)],
    ]
    now = run(events, timeouts=[5.0, 30.0], tick=0.5, delay=2.0, shards=2)
    rewritten = Model(make_rule([5.0, 30.0], 0.5, 2.0), shards=2)
    mapped = 0
    for batch in events:
        _encode_pages_as(rewritten, encoding)
        mapped += sum(map(len, rewritten.pages.values()))
        rewritten.batch(batch)
    assert mapped, "some pages are map entries"
    _encode_pages_as(rewritten, encoding)
    rewritten.idle()
    assert sorted(rewritten.emitted) == sorted(now.emitted)
    assert rewritten.keys() == now.keys()
    page = {"a": (1.0, 0, 0, [], 31_000), "b": (None, 1, 1, [(2.0, 1, "x")], 12_000)}
    old = (encoding(page),)
    assert shard.load_page(old) == page == shard.load_page(shard.dump_page(page))
    assert shard.StoredPage(shard.dump_page(page)).keys == ("a", "b")


def test_a_page_read_as_any_bytes_like_value_reads_the_same() -> None:
    # The state store may hand a page back as a bytearray or a memoryview rather than bytes,
    # and a page may be stored uncompressed (by an earlier version): both twins read it the
    # same (the compiled one copies the runs of its states as well).
    events = [
        [(f"k{n}", float(n % 2), "open", f"o{n}") for n in range(300)],
        [(f"k{n}", 12.0 + n % 2, "data", None) for n in range(0, 300, 3)],
        [("z", 40.0, "data", None)],
    ]
    now = run(events, timeouts=[5.0, 30.0], tick=0.5, delay=2.0, shards=2)
    for kind in (bytearray, memoryview):
        model = Model(make_rule([5.0, 30.0], 0.5, 2.0), shards=2)
        mapped = 0
        for batch in events:
            for pages in model.pages.values():
                mapped += len(pages)
                for page, row in pages.items():
                    pickles = shard.StoredPage(row).pickles  # uncompressed
                    pages[page] = (kind(pickles),)  # type: ignore[arg-type]
            model.batch(batch)
        model.idle()
        assert mapped, "some pages are map entries"
        assert model.emitted == now.emitted
        assert model.keys() == now.keys()
        for number in range(2):
            assert {page: model.page(number, page) for page in model.pages[number]} == {
                page: now.page(number, page) for page in now.pages[number]
            }


def test_key_state_keeps_wake_where_shards_look_for_it() -> None:
    assert KeyState._fields.index("wake") == shard.WAKE


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[list[Event]], float, list[float], float]:
    """A log with copies, ties, closes and events at deadlines, cut into micro-batches in an
    arrival order that is late by at most the delay."""
    tick = draw(st.sampled_from([1.0, 0.5, 0.001]))
    timeouts = sorted(set(draw(st.lists(st.sampled_from([3.0, 5.0, 8.0]), min_size=1))))
    delay = draw(st.sampled_from([0.0, 2.0, 4.0]))
    keys = ["a", "b", "c"]
    events: list[Event] = []
    for n in range(draw(st.integers(1, 25))):
        key = draw(st.sampled_from(keys))
        ts = draw(st.integers(0, 60)) / 2
        kind = draw(st.sampled_from(["open", "data", "data", "close"]))
        event_id = draw(st.sampled_from([None, f"{key}{n}"]))
        events.append((key, ts, kind, event_id))
        if event_id is not None and draw(st.booleans()):
            # A redelivered copy: the same event, or one moved by less than the delay.
            shift = draw(st.sampled_from([0.0, 0.5, -0.5, 1.5, -1.5, 3.5]))
            if abs(shift) < delay or shift == 0.0:
                events.append((key, max(0.0, ts + shift), kind, event_id))
    # Arrival: ts plus a lateness below the delay; batches of random sizes in arrival order.
    lateness = [draw(st.floats(0, delay, exclude_max=delay > 0)) for _ in events]
    order = sorted(range(len(events)), key=lambda i: (events[i][1] + lateness[i], i))
    arrivals: list[list[Event]] = []
    i = 0
    while i < len(order):
        size = draw(st.integers(1, 6))
        arrivals.append([events[j] for j in order[i : i + size]])
        i += size
    return arrivals, tick, timeouts, delay


# The implementation fixture holds for every example: nothing of it changes between them.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(logs(), st.sampled_from([1, 2, 5]))
def test_visits_emit_what_replay_emits_up_to_the_watermark(
    case: tuple[list[list[Event]], float, list[float], float], shards: int
) -> None:
    arrivals, tick, timeouts, delay = case
    model = Model(make_rule(timeouts, tick, delay), shards)
    accepted: list[Event] = []
    for batch in [*arrivals, [], []]:
        late = model.watermark
        model.batch(batch)
        accepted.extend(e for e in batch if math.floor(e[1] * 1_000_000) > late * 1000)
        # After every batch: exactly the reference's expiries up to the watermark, once each.
        if model.watermark > -(2**62) and accepted:
            expected = reference_expiries(
                accepted, timeouts=timeouts, tick=tick, horizon=model.horizon
            )
            assert sorted(model.emitted) == sorted(expected)
            assert len(set(model.emitted)) == len(model.emitted)


def test_add_events_groups_the_rows_by_key_in_row_order() -> None:
    # Two frames of one visit: each key's events in the rows' order, across frames; any
    # sequences as columns; a dict subclass as the target, as the row processor's.
    twin = shard_visit()
    arrived: dict[str, list[tuple[float, int, str | None]]] = defaultdict(list)
    arrived["c"].append((1.0, 1, None))
    twin.add_events(arrived, ["a", "b", "a"], [3.0, 1.0, 2.0], [1, 0, 2], ["x", None, "y"])
    twin.add_events(arrived, ("b", "c"), (0.5, 4.0), (1, 1), (None, "z"))
    assert dict(arrived) == {
        "c": [(1.0, 1, None), (4.0, 1, "z")],
        "a": [(3.0, 1, "x"), (2.0, 2, "y")],
        "b": [(1.0, 0, None), (0.5, 1, None)],
    }
    empty: dict[str, list[tuple[float, int, str | None]]] = {}
    twin.add_events(empty, [], [], [], [])
    assert empty == {}


def test_add_events_refuses_columns_of_different_lengths() -> None:
    twin = shard_visit()
    arrived = {"a": [(1.0, 1, None)]}
    with pytest.raises(
        ValueError, match=r"key, ts, rank and event_id have 2, 2, 1 and 2 rows: they must have as"
    ):
        twin.add_events(arrived, ["a", "b"], [2.0, 3.0], [1], [None, None])
    assert arrived == {"a": [(1.0, 1, None)]}  # unchanged


def test_add_events_stops_at_a_key_a_dict_cannot_hold() -> None:
    # An unhashable key is the dict's TypeError, at its row: the rows before it are added.
    twin = shard_visit()
    arrived: dict[Any, list[tuple[float, int, str | None]]] = {}
    with pytest.raises(TypeError, match="unhashable type: 'list'"):
        twin.add_events(arrived, ["a", ["b"], "c"], [1.0, 2.0, 3.0], [1, 1, 1], [None] * 3)
    assert arrived == {"a": [(1.0, 1, None)]}


def test_a_visit_takes_any_mapping_of_events() -> None:
    # A read-only mapping visits as the dict it holds: the same outcome, the mapping untouched.
    rule = make_rule([30.0], 0.001, 0.0)
    events = {"a": [(1.0, 0, None)], "b": [(2.0, 1, "b1")]}
    outcomes = [
        shard_visit().visit(rule, None, given, 5_000, lambda pages: {}, width=1_875)
        for given in (events, MappingProxyType(events))
    ]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0].shard is not None
    assert sorted(
        key
        for value in outcomes[0].shard.inline.values()
        for key in shard.StoredPage((value,)).keys
    ) == ["a", "b"]
    assert events == {"a": [(1.0, 0, None)], "b": [(2.0, 1, "b1")]}


@needs_compiled
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(logs(), st.sampled_from([1, 2, 5]))
def test_the_compiled_visit_stores_and_emits_what_the_pure_one_does(
    case: tuple[list[list[Event]], float, list[float], float], shards: int
) -> None:
    # Step by step, with the same rule (the implementation under test's): the same expiries in
    # the same order, the same index rows and page entries, byte for byte.
    arrivals, tick, timeouts, delay = case
    compiled, pure = _twins(timeouts, tick, delay, shards)
    for batch in [*arrivals, [], []]:
        _batch_alike(compiled, pure, batch)


def _twins(timeouts: list[float], tick: float, delay: float, shards: int) -> tuple[Model, Model]:
    """The compiled visit and the pure one, each in a Model with the rule under test."""
    compiled, pure = (
        Model(make_rule(timeouts, tick, delay), shards, _impl.edge_twin("visit", name))
        for name in _impl.IMPLEMENTATIONS
    )
    assert (compiled.twin.__name__, pure.twin.__name__) == (
        "aiowheel.spark._cvisit",
        "aiowheel.spark._visit",
    )
    return compiled, pure


def _batch_alike(compiled: Model, pure: Model, batch: list[Event]) -> None:
    """One batch through both twins: the same expiries in the same order, the same index rows
    and page entries, byte for byte."""
    for model in (compiled, pure):
        model.batch(batch)
    assert compiled.emitted == pure.emitted
    assert compiled.stored == pure.stored
    assert compiled.pages == pure.pages


@needs_compiled
def test_the_compiled_visit_places_keys_of_records_and_of_objects_alike() -> None:
    # Keys the records take beside keys they do not (more events than a record holds: their
    # states come back as objects), interleaved, their wake-ups over several pages: the compiled
    # visit counts the keys each page receives across both kinds (which decides whether a key
    # moves, see MOVE_SHARE), and stores and emits what the pure one does, byte for byte.
    batches: list[list[Event]] = []
    for step in range(4):
        batch: list[Event] = []
        for number in range(60):
            key = f"k{number}"
            if number % 3 == 0 and step % 2 == 0:
                batch += [
                    (key, step * 10.0 + i / 8, "data", f"{key}-{step}-{i}") for i in range(20)
                ]
            elif (number + step) % 4:
                batch.append((key, step * 10.0 + number / 7, "data", f"{key}-{step}"))
        batches.append(sorted(batch, key=lambda event: event[1]))
    compiled, pure = _twins([8.0, 30.0], 0.001, 2.0, 2)
    most = 0  # the most events a stored state held: over 16, records did not hold it
    for batch in [*batches, [], []]:
        _batch_alike(compiled, pure, batch)
        for row in pure.rows():
            most = max([most, *(len(state[3]) for state in shard.load_page(row).values())])
    assert most > 16
    assert pure.emitted


# The compiled visit's own encoding of a page's states: pickle's bytes, found and decoded state
# by state (aiowheel.spark._cvisit).

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_TEXT = st.text(st.characters(blacklist_categories=()), max_size=8) | st.sampled_from(
    ["", "é", "\ud800", "x" * 300]
)
_ATOMS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    _INT64,
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, 255, 256, 65535, 65536, 2**31 - 1, 2**31, -1, -(2**31), -(2**31) - 1]),
    _TEXT,
)
_EVENTS = st.lists(
    st.tuples(st.floats(allow_nan=False), st.integers(0, 3), st.none() | _TEXT), max_size=4
) | st.integers(998, 2_002).map(lambda n: [(float(i), 1, None) for i in range(n)])
# StoredKey tuples, and what a malformed or foreign state may hold instead.
_STATES = st.one_of(
    st.tuples(st.none() | st.floats(), _INT64, _INT64, _EVENTS, _INT64),
    st.tuples(_ATOMS, _ATOMS, _ATOMS, _EVENTS, _ATOMS),
    st.recursive(
        _ATOMS | st.booleans(),
        lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=5).map(tuple),
        max_leaves=12,
    ),
)


def _plain(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is made of what the compiled visit reads state by state: None,
    floats, ints within 64 bits, strs, tuples and lists, exactly those types."""
    if depth > 14:
        return False
    if value is None or type(value) in (float, str):
        return True
    if type(value) is int:
        return -(2**63) <= value < 2**63  # type: ignore[operator]
    if type(value) in (tuple, list):
        return all(_plain(item, depth + 1) for item in value)  # type: ignore[attr-defined]
    return False


def _stored_shape(state: object) -> bool:
    """A StoredKey's shape: five plain values, the last (its wake-up) an int."""
    return type(state) is tuple and len(state) == 5 and type(state[4]) is int and _plain(state)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(_STATES, min_size=1, max_size=6))
def test_the_compiled_visit_writes_and_reads_states_byte_for_byte_as_pickle(
    states: list[Any],
) -> None:
    from aiowheel.spark import _cvisit

    pickled = shard.pickled_states(tuple(states))
    assert pickled[:2] == b"\x80\x03"  # protocol 3: no frames
    # Written: pickle's bytes, whatever the states hold (what it cannot write, pickle does).
    assert _cvisit._dump_states(tuple(states)) == pickled
    # Read: state by state, when every one has a StoredKey's shape; else the page is left to
    # pickle.
    found = _cvisit._load_states(pickled, len(states))
    if not all(map(_stored_shape, states)):
        assert found is None
        return
    assert found is not None
    loaded, wakes = found
    assert shard.pickled_states(loaded) == pickled  # equal, NaNs included
    assert [type(value) for state in loaded for value in state] == [
        type(value) for state in states for value in state
    ]
    assert wakes == [state[4] for state in states]


@needs_compiled
def test_the_compiled_visit_leaves_to_pickle_what_it_cannot_read_state_by_state() -> None:
    from aiowheel.spark import _cvisit

    states = ((1.0, 0, 0, [(1.0, 1, "e")], 31_000), (None, 1, 1, [], 12_000))
    pickled = shard.pickled_states(states)
    assert _cvisit._load_states(pickled, 2) == (states, [31_000, 12_000])
    # Another count of states, bytes cut short or trailing, protocol 5 (framed): None.
    assert _cvisit._load_states(pickled, 1) is None
    assert _cvisit._load_states(pickled, 3) is None
    for cut in range(len(pickled)):
        assert _cvisit._load_states(pickled[:cut], 2) is None
    assert _cvisit._load_states(pickled + b".", 2) is None
    assert _cvisit._load_states(shard._pickled(states), 2) is None
    # A wake-up that is not an int, or an int beyond 64 bits.
    for wake in (1.5, None, 2**64, True):
        odd = shard.pickled_states(((1.0, 0, 0, [], wake),))
        assert _cvisit._load_states(odd, 1) is None


# A visit with input by the keys' bytes (aiowheel.spark._cvisit): the keys found and written
# back as the bytes pickle gives them, or, where the shard is not as it writes it, on objects.


def _by_bytes() -> int:
    from aiowheel.spark import _cvisit

    count: int = _cvisit._visits_by_bytes()
    return count


@needs_compiled
def test_the_compiled_visit_finds_and_writes_keys_by_their_bytes_as_pickle_does() -> None:
    # Keys of every size pickle writes a str in (SHORT_BINUNICODE up to 255 bytes, BINUNICODE
    # above, and from 64 KiB on outside any frame, which pickle itself then writes), not ASCII,
    # and enough of them that a page's keys' pickle spans several frames: the compiled visit
    # stores and emits what the pure one does, byte for byte, by the keys' bytes.
    odd = ["é", "日本語", "k" * 255, "k" * 256, "ü" * 200, "x" * 70_000]
    many = [f"conn-{number:07d}" for number in range(6_000)]
    batches: list[list[Event]] = []
    for step in range(4):
        keys = odd + many[step % 2 :: 1 + step % 2]
        batches.append(
            [(key, step * 5.0 + i / len(keys), "data", f"{i}-{step}") for i, key in enumerate(keys)]
        )
    compiled, pure = _twins([8.0, 30.0], 0.001, 2.0, 1)
    before = _by_bytes()
    longest = 0  # the largest keys' pickle of a page: over 64 KiB, it spans several frames
    for batch in [*batches, [], []]:
        _batch_alike(compiled, pure, batch)
        for row in pure.rows():
            pickles = shard.page_pickles(row[0])  # type: ignore[arg-type]
            longest = max(longest, len(pickle.dumps(shard.StoredPage(row).keys)))
            assert pickles[:2] == b"\x80\x05"
    assert longest > 65_536
    assert _by_bytes() - before == 4  # every visit with input
    assert pure.emitted


@needs_compiled
def test_the_compiled_visit_finds_keys_with_lone_surrogates_by_their_bytes() -> None:
    # A str pickle writes with "surrogatepass" (a lone surrogate is no UTF-8): found and written
    # by those bytes, as the pure visit does by the str.
    from aiowheel.spark import _cvisit, _visit

    rule = make_rule([30.0], 0.001, 0.0)
    keys = ["\ud800", "a\udfffb", "plain", "é"]
    outcomes = []
    for twin in (_cvisit, _visit):
        stored: dict[int, shard.PageRow] = {}
        index = None
        emitted: list[ExpiryRow] = []
        for step, watermark in enumerate((1_000, 20_000, 60_000)):
            events = {key: [(step * 10.0 + i, 1, f"{key}{step}")] for i, key in enumerate(keys)}
            outcome = twin.visit(
                rule,
                index,
                events if step < 2 else {keys[0]: [(25.0, 1, None)]},
                watermark,
                lambda wanted, pages=stored: dict(pages),
                width=1_875,
            )
            for page, row in outcome.pages.items():
                if row is None:
                    stored.pop(page, None)
                else:
                    stored[page] = row
            index = outcome.shard
            emitted += outcome.expiries
        outcomes.append((index, stored, emitted))
    assert outcomes[0] == outcomes[1]
    assert {row[0] for row in outcomes[0][2]} >= set(keys[1:])


def _page_as(row: shard.PageRow, write_keys: Any) -> shard.PageRow:
    """The page stored as ``row``, its keys' pickle written by ``write_keys`` instead."""
    page = shard.StoredPage(row)
    assert page.states_at is not None
    return (shard.stored_pickles(write_keys(page.keys) + page.pickles[page.states_at :]),)


@needs_compiled
@pytest.mark.parametrize(
    "write_keys",
    [
        pytest.param(pickle.dumps, id="with a memo"),
        pytest.param(lambda keys: pickle.dumps(keys, protocol=3), id="protocol 3"),
    ],
)
def test_the_compiled_visit_leaves_to_objects_a_page_it_does_not_write(write_keys: Any) -> None:
    # A page whose keys' pickle is not the one this version writes (with a memo, or in another
    # protocol): the visit of the shard is made on objects, with the same outcome as
    # the pure visit's.
    from aiowheel.spark import _cvisit, _visit

    rule = make_rule([30.0], 0.001, 0.0)
    first = {f"k{i}": [(float(i) / 10, 1, None)] for i in range(100)}
    start = _visit.visit(rule, None, first, 1_000, lambda wanted: {}, width=1_875)
    assert start.shard is not None
    rows = {page: _page_as(row, write_keys) for page, row in start.pages.items() if row}
    inline = {page: _page_as((value,), write_keys)[0] for page, value in start.shard.inline.items()}
    shard_before = start.shard._replace(inline=inline)
    later = {f"k{i}": [(20.0 + i / 10, 1, None)] for i in range(0, 120, 3)}
    before = _by_bytes()
    outcomes = [
        twin.visit(rule, shard_before, later, 12_000, lambda wanted: dict(rows), width=1_875)
        for twin in (_cvisit, _visit)
    ]
    assert _by_bytes() == before
    assert outcomes[0] == outcomes[1]
    assert rows or inline  # what the visit read was rewritten as the test meant


@needs_compiled
def test_the_compiled_visit_leaves_to_objects_a_key_stored_twice() -> None:
    # Two pages that hold the same key (no visit writes that): the visit of the shard is made
    # on objects, as the pure one makes it.
    from aiowheel.spark import _cvisit, _visit

    rule = make_rule([30.0], 0.001, 0.0)
    state = (1.0, 0, 1, [(1.0, 1, None)], 31_000)
    page = shard.page_bytes({"twice": state, "once": state})
    index = shard.Shard({16: 31_000, 17: 31_000}, 1_000, 31_000, {16: page, 17: page})
    before = _by_bytes()
    outcomes = [
        twin.visit(rule, index, {"twice": [(2.0, 1, None)]}, 2_000, lambda wanted: {}, width=1_875)
        for twin in (_cvisit, _visit)
    ]
    assert _by_bytes() == before
    assert outcomes[0] == outcomes[1]


_KEYS = st.lists(
    st.text(st.characters(blacklist_categories=()), max_size=6)
    | st.integers(250, 66_000).map(lambda size: "k" * size)
    | st.sampled_from(["\ud800", "é" * 128, "x" * 65_535, "x" * 65_536]),
    max_size=8,
) | st.tuples(st.integers(0, 12_000), st.integers(1, 40)).map(
    lambda shape: [f"{number:0{shape[1]}d}" for number in range(shape[0])]
)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(_KEYS)
def test_the_compiled_visit_writes_a_pages_keys_as_pickle_does(keys: list[str]) -> None:
    # Pickle's bytes for the page's keys, frames and all (a frame closes before the object that
    # would start past 64 KiB); a key of 64 KiB or more, which pickle writes outside any frame,
    # is left to pickle.
    from aiowheel.spark import _cvisit

    written = _cvisit._keys_pickle(tuple(keys))
    if any(len(key.encode("utf-8", "surrogatepass")) >= 65_536 for key in keys):
        assert written is None
    else:
        assert written == shard._pickled(tuple(keys))
