"""A shard's visit: its keys with new events or due, the rule applied, its pages rewritten.

This module is the pure twin of ``visit`` in :data:`aiowheel._impl.EDGE_TWINS`: :func:`visit`
and :func:`add_events`, what a Spark worker runs for every shard it visits, around the rule
(the ``rule`` twin). Its compiled twin, :mod:`aiowheel.spark._cvisit`, is the same code in
Cython, typed, and this module is its specification: same results, same errors; the shard and
stream tests run on each. What a shard stores, and how it is encoded, is
:mod:`aiowheel.spark._shard`'s, which both twins import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiowheel.spark._keystate import Event, IdleRule, StoredKey
from aiowheel.spark._shard import (
    MOVE_SHARE,
    WAKE,
    ExpiryRow,
    PageReader,
    Shard,
    ShardVisit,
    StoredPage,
    check_columns,
    earliest,
    load_page,
    page_bytes,
    write_back,
)

__all__ = ["add_events", "visit"]


def add_events(
    arrived: dict[str, list[Event]],
    names: Sequence[str],
    ts: Sequence[float],
    ranks: Sequence[int],
    event_ids: Sequence[str | None],
) -> None:
    """Add the events of a visit's rows, given column by column, to ``arrived``: row ``i``'s
    event ``(ts[i], ranks[i], event_ids[i])`` goes to the end of key ``names[i]``'s list, so a
    key's events keep the rows' order. O(rows).

    Raises ValueError if the columns' lengths differ (``arrived`` is then unchanged).
    """
    check_columns(names, ts, ranks, event_ids)
    for name, event in zip(names, zip(ts, ranks, event_ids, strict=True), strict=True):
        events = arrived.get(name)
        if events is None:
            arrived[name] = [event]
        else:
            events.append(event)


def visit(
    rule: IdleRule,
    shard: Shard | None,
    arrived: Mapping[str, list[Event]],
    watermark: int,
    read: PageReader,
    *,
    width: int,
    firing: int | None = None,
) -> ShardVisit:
    """Visit the keys of the shard that have new events (``arrived``) or whose wake-up time
    the watermark (ms) has reached; emit their expiries and set the shard's timer.

    ``read`` (the map state) is called at most once: for all its pages when keys arrived, else
    for its due ones; not at all when the pages it would read are all kept in the index.
    ``width`` is the slot width of new pages (:func:`aiowheel.spark._shard.slot_width`).
    ``firing`` is the timer (ms) that triggered this visit, which Spark deletes afterwards.
    Without input: O(keys in the due pages), plus an :meth:`IdleRule.visit` per due key. With
    input: O(keys held) to find them (their names only), O(keys) of the pages it changes, plus
    a visit per key with events or due.
    """
    if shard is None:
        wakes: dict[int, int] = {}
        inline: dict[int, bytes] = {}
        timer = pace = None
    else:
        wakes = dict(shard.wakes)
        inline = dict(shard.inline)
        timer = None if shard.timer == firing else shard.timer
        pace = watermark - shard.upto
    # The pages that are entries of the map state before this visit.
    mapped = wakes.keys() - inline.keys()
    due = [page for page, wake in wakes.items() if wake <= watermark]
    expiries: list[ExpiryRow] = []
    changed: set[int] = set()
    if arrived:
        held = {page: StoredPage(row) for page, row in read(None).items()} if mapped else {}
        held.update((page, StoredPage((value,))) for page, value in inline.items())
        # Where each key with events lives (the others' pages do not matter).
        home = {key: page for page, found in held.items() for key in found.keys if key in arrived}
        visiting: dict[str, int | None] = {key: home.get(key) for key in arrived}
        # The states of the pages this visit changes: those of the keys with events, and the
        # due ones.
        opened = {home_page for home_page in visiting.values() if home_page is not None}
        pages = {page: held[page].states() for page in opened.union(due)}
        for due_page in due:
            for key, state in pages[due_page].items():
                if state[WAKE] <= watermark and key not in visiting:
                    visiting[key] = due_page
        placed: list[tuple[str, int | None, StoredKey]] = []
        incoming: dict[int, int] = {}
        for key, home_page in visiting.items():
            stored = None if home_page is None else pages[home_page].pop(key)
            if home_page is not None:
                changed.add(home_page)
            after, emitted = rule.visit_stored(stored, arrived.get(key, []), watermark)
            if emitted:
                expiries.extend((key, *expiry) for expiry in emitted)
            if after is not None:
                placed.append((key, home_page, after))
                slot = after[WAKE] // width
                incoming[slot] = incoming.get(slot, 0) + 1
        for key, home_page, after in placed:
            slot = after[WAKE] // width
            if (
                home_page is not None
                and slot in held
                and slot not in changed
                and incoming[slot] * MOVE_SHARE < len(held[slot].keys)
            ):
                pages[home_page][key] = after  # stays: see MOVE_SHARE
                continue
            # The key moves to the page of its new wake-up.
            if slot not in pages:
                pages[slot] = held[slot].states() if slot in held else {}
            pages[slot][key] = after
            changed.add(slot)
    else:
        from_map = [page for page in due if page in mapped]
        rows = dict(read(from_map)) if from_map else {}
        rows.update((page, (inline[page],)) for page in due if page in inline)
        pages = {page: load_page(row) for page, row in rows.items()}
        for page in due:
            keys = pages.setdefault(page, {})
            for key in [key for key, state in keys.items() if state[WAKE] <= watermark]:
                after, emitted = rule.visit_stored(keys[key], [], watermark)
                if emitted:
                    expiries.extend((key, *expiry) for expiry in emitted)
                if after is None:
                    del keys[key]
                else:
                    keys[key] = after  # stays in its page: see aiowheel.spark._shard
            changed.add(page)
    return write_back(
        changed,
        pages,
        wakes,
        inline,
        mapped,
        expiries=expiries,
        watermark=watermark,
        timer=timer,
        pace=pace,
        earliest=earliest,
        encode=page_bytes,
    )
