# cython: language_level=3, initializedcheck=False
# cython: binding=False, embedsignature=True, embedsignature.format=clinic
# cython: auto_pickle=False
"""The compiled twin of :mod:`aiowheel.spark._visit`: a shard's visit, :func:`visit` and
:func:`add_events`, in Cython.

:mod:`aiowheel.spark._visit` is the specification: same API, same results, same errors;
tests/spark/test_shard.py drives each twin through the same visits, and the stream's tests run
on each. After the rule (compiled in :mod:`aiowheel.spark._ckeystate`), this is what a Spark
worker spends a visit with input in: grouping the rows by key, finding the keys in the pages,
and placing them in their new ones, one dict or list operation at a time.

What is different is how, never what: the same code with its containers typed, so that each of
their operations is a call into CPython's C API instead of the interpreter's; what the shard
stores, and how it is encoded, is :mod:`aiowheel.spark._shard`'s, as for the pure twin.
Bounds stay checked: a malformed state raises the pure twin's IndexError or TypeError.
"""

from aiowheel._ccpython cimport AW_CPYTHON_FALLBACK

from aiowheel.spark._shard import MOVE_SHARE as _MOVE_SHARE_OBJECT
from aiowheel.spark._shard import WAKE as _WAKE_OBJECT
from aiowheel.spark._shard import StoredPage, check_columns, load_page, write_back

__all__ = ["add_events", "visit"]

#: True if this part was built with AIOWHEEL_CPYTHON_FALLBACK=1 (see _ccpython.pxd); it uses no
#: CPython internal either way, but reports the build as every compiled part does.
CPYTHON_FALLBACK = bool(AW_CPYTHON_FALLBACK)

cdef Py_ssize_t MOVE_SHARE = _MOVE_SHARE_OBJECT
cdef Py_ssize_t WAKE = _WAKE_OBJECT


cdef inline list _as_list(object column):
    return column if type(column) is list else list(column)


def add_events(arrived, names, ts, ranks, event_ids):
    """Add the events of a visit's rows, given column by column, to ``arrived``: row ``i``'s
    event ``(ts[i], ranks[i], event_ids[i])`` goes to the end of key ``names[i]``'s list, so a
    key's events keep the rows' order. O(rows).

    Raises ValueError if the columns' lengths differ (``arrived`` is then unchanged).
    """
    check_columns(names, ts, ranks, event_ids)
    cdef list name_column = _as_list(names)
    cdef list ts_column = _as_list(ts)
    cdef list rank_column = _as_list(ranks)
    cdef list id_column = _as_list(event_ids)
    cdef bint exact = type(arrived) is dict
    cdef Py_ssize_t row
    cdef object name, event, events
    for row in range(len(name_column)):
        name = name_column[row]
        event = (ts_column[row], rank_column[row], id_column[row])
        events = (<dict>arrived).get(name) if exact else arrived.get(name)
        if events is None:
            arrived[name] = [event]
        else:
            events.append(event)


def visit(rule, shard, arrived, watermark, read, *, width, firing=None):
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
    cdef dict wakes, inline, held, home, visiting, pages, incoming, keys, rows
    cdef dict events = arrived if type(arrived) is dict else dict(arrived)
    cdef set changed = set()
    cdef set opened
    cdef list due, expiries = [], placed, from_map, ready
    cdef tuple found_keys, entry
    cdef object timer, pace, page, key, home_page, stored, after, emitted, expiry, slot
    cdef object visit_stored = rule.visit_stored
    if shard is None:
        wakes = {}
        inline = {}
        timer = pace = None
    else:
        wakes = dict(shard.wakes)
        inline = dict(shard.inline)
        timer = None if shard.timer == firing else shard.timer
        pace = watermark - shard.upto
    # The pages that are entries of the map state before this visit.
    mapped = wakes.keys() - inline.keys()
    due = [page for page, wake in wakes.items() if wake <= watermark]
    if events:
        held = {page: StoredPage(row) for page, row in read(None).items()} if mapped else {}
        for page, value in inline.items():
            held[page] = StoredPage((value,))
        home = {}
        for page, found in held.items():
            found_keys = found.keys
            for key in found_keys:
                home[key] = page
        visiting = {}
        opened = set()
        for key in events:
            home_page = home.get(key)
            visiting[key] = home_page
            if home_page is not None:
                opened.add(home_page)
        # The states of the pages this visit changes: those of the keys with events, and the
        # due ones.
        pages = {page: held[page].states() for page in opened.union(due)}
        for page in due:
            for key, stored in (<dict?>pages[page]).items():
                if stored[WAKE] <= watermark and key not in visiting:
                    visiting[key] = page
        placed = []
        incoming = {}
        for key, home_page in visiting.items():
            if home_page is None:
                stored = None
            else:
                stored = (<dict?>pages[home_page]).pop(key)
                changed.add(home_page)
            after, emitted = visit_stored(stored, events.get(key, []), watermark)
            if emitted:
                for expiry in emitted:
                    expiries.append((key, *expiry))
            if after is not None:
                slot = after[WAKE] // width
                placed.append((key, home_page, after, slot))
                incoming[slot] = incoming.get(slot, 0) + 1
        for entry in placed:
            key, home_page, after, slot = entry
            if (
                home_page is not None
                and slot in held
                and slot not in changed
                and incoming[slot] * MOVE_SHARE < len(held[slot].keys)
            ):
                (<dict?>pages[home_page])[key] = after  # stays: see MOVE_SHARE
                continue
            # The key moves to the page of its new wake-up.
            keys = pages.get(slot)
            if keys is None:
                keys = held[slot].states() if slot in held else {}
                pages[slot] = keys
            keys[key] = after
            changed.add(slot)
    else:
        from_map = [page for page in due if page in mapped]
        rows = dict(read(from_map)) if from_map else {}
        for page in due:
            if page in inline:
                rows[page] = (inline[page],)
        pages = {page: load_page(row) for page, row in rows.items()}
        for page in due:
            keys = pages.setdefault(page, {})
            ready = [key for key, stored in keys.items() if stored[WAKE] <= watermark]
            for key in ready:
                after, emitted = visit_stored(keys[key], [], watermark)
                if emitted:
                    for expiry in emitted:
                        expiries.append((key, *expiry))
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
    )
