"""Many keys in one group, kept in pages by wake-up time: the streaming service's state.

This module owns how :func:`aiowheel.spark.stream` packs keys into *shards* and a shard's keys
into *pages*: what a shard stores and how it is encoded, in plain Python. The visit that reads
and rewrites it is the ``visit`` twin of :data:`aiowheel._impl.EDGE_TWINS`
(:mod:`aiowheel.spark._visit`, compiled :mod:`aiowheel.spark._cvisit`), which both import what
they share from here. Spark's Python stateful operators (``transformWithState`` and
its pandas twin) pay for every group they visit in a micro-batch, and for every state call: a
round trip to the JVM's state server (from about 50 µs on a quiet machine to ten times that on
a loaded one). At one group per key, or one state entry per key, that is several round trips
for every key with events in a batch. Hashing keys into a fixed number of shards
(``pmod(xxhash64(key), shards)``, done by Spark) makes the group a shard instead.

Inside a shard, keys live in *pages*, and a page holds the keys whose wake-up time fell into
the same slot of :func:`slot_width` when they last had input: its keys come due together. The
shard's *index* (one value state, :data:`INDEX_FIELDS`) keeps each page's earliest wake-up, and
the small pages themselves (:data:`INLINE_MAX` keys or fewer); the larger ones are the entries
of one map state. Every visit reads and writes the index once anyway, while each map entry read,
written or removed is a round trip to the state server: a visit without input typically finds
its due keys in many small pages (keys left behind when the others of their page moved on),
which cost it nothing more in the index. So:

* a visit without input (the shard's timer fired) reads and rewrites only the pages the index
  says are due, and visits only their due keys: a micro-batch that only moves the watermark
  costs what comes due, whatever the number of keys held. A key stays in its page when such a
  visit changes its wake-up (moving it would mean rewriting the page it moves to); the index
  keeps the page's new earliest wake-up;
* a visit with input must find its keys, wherever they live: it reads every page of the shard
  (in bulk: one pass of the map's iterator), visits the keys with new events and the due ones,
  and writes only the pages that changed. A key it visited moves to the page of its new wake-up
  if that page is written anyway (:data:`MOVE_SHARE`); else it stays in its page, which the
  visit writes anyway: most keys of a micro-batch go to the few pages of its new wake-ups,
  while a late event does not rewrite a full page for one key.

The index row, field for field (:data:`INDEX_FIELDS`):

* ``wakes`` -- ``{page: earliest wake (ms) of its keys}`` and ``{page: its keys, encoded as a
  map entry's value}`` for the pages kept in the index, pickled together as a pair (an index
  written before pages were kept in it holds the first alone);
* ``upto`` -- the watermark (ms) of the last visit;
* ``timer`` -- the shard's one registered event-time timer (ms): at or before the earliest
  wake-up of its pages;
* ``shards`` -- the number of shards the query was started with. Keys are placed by it, so a
  restart with a different number would look keys up in the wrong shard; :func:`load`
  refuses it.

A page's entry (:data:`PAGE_FIELDS`) is ``keys``: two pickles without a memo (a page holds no
object twice) one after the other, the page's keys (a tuple, protocol 5) and then their states
(a tuple of KeyState tuples, in the same order, protocol 3: :func:`pickled_states`). Protocol 3
has no frames, so that each state's bytes are one contiguous run of the second pickle, the
same wherever the state stands: the compiled visit copies the runs of the states it does not
change instead of decoding and re-encoding them. From :data:`COMPRESS_FROM` bytes on,
the two pickles are stored compressed (Zstandard, through pyarrow, level 1): ``Z``, their
length (8 bytes, little-endian), then the compressed frame. The bytes a page costs are moved
between the Python worker and the JVM's state server at every read and write, and are what
RocksDB writes; compressed, the benchmark's pages keep 28 % of their size (docs/spark.md). A
visit with input reads every page, but decodes only the keys of most of them: the states of a
page are decoded only if the visit changes it (one of its keys has events or is due), and, in
the compiled visit, only the states it takes, the others copied as stored. A page written by
an earlier version (one pickled ``{key: state}`` dict, the two pickles uncompressed, or the
states in protocol 5) reads the same. Which page a key lives in decides only what a visit
reads, never what it emits: a restart may change the slot width (it follows the timeouts).

The timer moves lazily. A timer that fires early does no harm (the visit finds nothing due and
sets a new one), so a registered timer at or before the earliest wake-up is kept unless it
would fire before the shard's next visit at its current pace: a shard that has events in every
micro-batch moves its timer about once per ``timeout / batch interval`` batches, not on every
batch.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Set, Sized
from operator import itemgetter
from typing import Final, NamedTuple, TypeVar

import pyarrow  # type: ignore[import-untyped]

from aiowheel.spark._keystate import StoredKey

__all__ = [
    "COMPRESS_FROM",
    "INDEX_FIELDS",
    "INLINE_MAX",
    "PAGE_FIELDS",
    "WAKE",
    "ExpiryRow",
    "Page",
    "PageRow",
    "Shard",
    "ShardVisit",
    "StoredPage",
    "check_columns",
    "dump",
    "dump_page",
    "earliest",
    "load",
    "load_page",
    "pack_page",
    "page_bytes",
    "page_pickles",
    "pickled_states",
    "slot_width",
    "stored_pickles",
    "write_back",
]

# The state store rows of a shard, field for field (see the module documentation).
INDEX_FIELDS = ("wakes", "upto", "timer", "shards")
PAGE_FIELDS = ("keys",)

# Pages across the shortest timeout: enough that the keys of one page come due within a small
# part of a timeout, few enough that a visit with input writes few pages (one state call each).
SLOTS_PER_TIMEOUT: Final = 16
# A key a visit with input changes moves to the page of its new wake-up only if that page is
# written anyway: new, already changing, or receiving at least a MOVE_SHARE-th of its keys in
# this visit. Otherwise it stays in its page, which the visit writes anyway, so that a few late
# events do not rewrite a full page (see the module documentation).
MOVE_SHARE: Final = 8
# A page of at most this many keys is kept in the shard's index rather than in an entry of
# the map state (see the module documentation): small enough that the index, read and written
# at every visit, stays small.
INLINE_MAX: Final = 64
# A page's two pickles of at least this many bytes are stored compressed (see the module
# documentation); below it, the frame's own bytes and the call would cost more than they save.
COMPRESS_FROM: Final = 512
# The first byte of a compressed page; an uncompressed one starts with pickle's PROTO (0x80).
_ZSTD: Final = b"Z"
_CODEC: Final = "zstd"

# An expiry as the stream emits it: (key, timeout, expired_at, last_seen).
ExpiryRow = tuple[str, float, float, float]
# One page: its keys' states.
Page = dict[str, StoredKey]
# A page's map state value as stored (fields PAGE_FIELDS).
PageRow = tuple[object, ...]
# Reads the stored pages among the given ones (all of them for None), as stored; a page
# without an entry is left out.
PageReader = Callable[[Collection[int] | None], Mapping[int, PageRow]]
#: Where KeyState (and so StoredKey) keeps ``wake``.
WAKE: Final = 4
# A C-level getter of a state's wake-up.
_wake_of: Callable[[StoredKey], int] = itemgetter(WAKE)
# A page as write_back takes it.
_P = TypeVar("_P", bound=Sized)


class Shard(NamedTuple):
    """A shard's index between visits."""

    # For each page, the earliest wake (ms) of its keys; a page without keys has no entry.
    wakes: dict[int, int]
    # The watermark (ms) of the last visit.
    upto: int
    # The shard's registered timer (ms); never None while a page holds keys.
    timer: int | None
    # The pages kept in the index (INLINE_MAX keys or fewer): each as the bytes dump_page
    # gives; the pages of `wakes` not here are entries of the map state.
    inline: dict[int, bytes]


class ShardVisit(NamedTuple):
    """The outcome of :func:`visit`."""

    # The index to store, or None to clear it (no key has state left).
    shard: Shard | None
    # The map state's entries to write, as stored (fields PAGE_FIELDS), or None to remove one
    # (the pages kept in the index travel in `shard`).
    pages: dict[int, PageRow | None]
    expiries: list[ExpiryRow]


def slot_width(timeouts: Sequence[float]) -> int:
    """The span of wake-up times (ms) one page gathers: a :data:`SLOTS_PER_TIMEOUT`-th of the
    shortest timeout, at least 1 ms."""
    return max(1, math.ceil(min(timeouts) * 1000.0 / SLOTS_PER_TIMEOUT))


def load(row: tuple[object, ...] | None, shards: int) -> Shard | None:
    """The index stored as ``row`` (fields :data:`INDEX_FIELDS`), or None for no row.

    Raises ValueError if the row was written by a query started with another number of shards.
    """
    if row is None:
        return None
    wakes, upto, timer, stored = row
    if stored != shards:
        raise ValueError(
            f"this checkpoint's state is split into {stored} shards, not {shards}: restart "
            f"with shards={stored}, or start a new checkpoint"
        )
    stored = pickle.loads(wakes)  # type: ignore[arg-type]
    if isinstance(stored, dict):  # written before pages were kept in the index
        return Shard(stored, upto, timer, {})  # type: ignore[arg-type]
    page_wakes, inline = stored
    return Shard(page_wakes, upto, timer, inline)  # type: ignore[arg-type]


def dump(shard: Shard, shards: int) -> tuple[bytes, int, int | None, int]:
    """``shard`` as its state store row (fields :data:`INDEX_FIELDS`)."""
    return _pickled((shard.wakes, shard.inline)), shard.upto, shard.timer, shards


class StoredPage:
    """A page as read from the state store: its keys decoded at once, their states only when
    :meth:`states` is called."""

    __slots__ = ("_states", "keys", "pickles", "states_at")

    def __init__(self, row: PageRow) -> None:
        #: The page's two pickles, decompressed (as bytes, whatever bytes-like value the state
        #: store gave: the compiled visit reads them in place).
        self.pickles: bytes = page_pickles(row[0])  # type: ignore[arg-type]
        stream = io.BytesIO(self.pickles)
        unpickler = pickle.Unpickler(stream)
        first = unpickler.load()
        #: Where the states' pickle starts in :attr:`pickles` (None: a page of an earlier
        #: version, one pickled dict).
        self.states_at: int | None
        # The states, once decoded (a page of an earlier version: at once).
        self._states: Page | None
        if isinstance(first, dict):  # written by an earlier version: one {key: state} dict
            self.keys: tuple[str, ...] = tuple(first)
            self._states = first
            self.states_at = None
        else:
            self.keys = first
            self._states = None
            self.states_at = stream.tell()

    def states(self) -> Page:
        """The page's keys and their states (decoded at the first call; later calls return the
        same dict, as the visit changed it)."""
        if self._states is None:
            # From the bytes, not the stream: an unpickler reads a file opcode by opcode where
            # the pickle has no frames (protocol 3).
            states = pickle.loads(memoryview(self.pickles)[self.states_at :])
            self._states = dict(zip(self.keys, states, strict=True))
        return self._states


def load_page(row: PageRow) -> Page:
    """The page stored as ``row`` (fields :data:`PAGE_FIELDS`)."""
    return StoredPage(row).states()


def dump_page(page: Page) -> tuple[bytes]:
    """``page`` as its map state value (fields :data:`PAGE_FIELDS`)."""
    return (pack_page(tuple(page), pickled_states(tuple(page.values()))),)


def pack_page(keys: tuple[str, ...], states: bytes) -> bytes:
    """A page as stored, from its keys and their states' pickle (:func:`pickled_states`): the
    two pickles, compressed from :data:`COMPRESS_FROM` bytes on."""
    return stored_pickles(_pickled(keys) + states)


def stored_pickles(pickles: bytes) -> bytes:
    """A page's two pickles as stored: compressed from :data:`COMPRESS_FROM` bytes on."""
    if len(pickles) < COMPRESS_FROM:
        return pickles
    frame = pyarrow.compress(pickles, codec=_CODEC, asbytes=True)
    return _ZSTD + len(pickles).to_bytes(8, "little") + frame  # type: ignore[no-any-return]


def pickled_states(states: tuple[StoredKey, ...]) -> bytes:
    """A page's states as stored: pickled in protocol 3 (no frames), without a memo, so that
    each state's bytes are the same wherever it stands (see the module documentation)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=3)
    pickler.fast = True
    pickler.dump(states)
    return out.getvalue()


def page_pickles(value: bytes) -> bytes:
    """A page's two pickles from its stored bytes (any bytes-like value), decompressed if they
    were stored compressed: :func:`stored_pickles` undone."""
    if value[:1] != _ZSTD:
        return bytes(value)
    size = int.from_bytes(value[1:9], "little")
    return pyarrow.decompress(  # type: ignore[no-any-return]
        memoryview(value)[9:], decompressed_size=size, codec=_CODEC, asbytes=True
    )


def _pickled(value: object) -> bytes:
    """``value`` pickled without a memo: smaller and faster for values that hold no object
    twice (a page's keys are distinct, and states share nothing)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.fast = True
    pickler.dump(value)
    return out.getvalue()


def check_columns(names: Sized, ts: Sized, ranks: Sized, event_ids: Sized) -> None:
    """Raise ValueError unless the columns of a visit's rows have as many rows each."""
    if not len(names) == len(ts) == len(ranks) == len(event_ids):
        raise ValueError(
            f"the columns key, ts, rank and event_id have {len(names)}, {len(ts)}, "
            f"{len(ranks)} and {len(event_ids)} rows: they must have as many"
        )


def earliest(page: Page) -> int:
    """The earliest wake-up (ms) of a page's keys (it has some)."""
    return min(map(_wake_of, page.values()))


def page_bytes(page: Page) -> bytes:
    """``page`` as stored: the one field of :func:`dump_page`."""
    return dump_page(page)[0]


def write_back(
    changed: Iterable[int],
    pages: Mapping[int, _P],
    wakes: dict[int, int],
    inline: dict[int, bytes],
    mapped: Set[int],
    *,
    expiries: list[ExpiryRow],
    watermark: int,
    timer: int | None,
    pace: int | None,
    earliest: Callable[[_P], int],
    encode: Callable[[_P], bytes],
) -> ShardVisit:
    """The end of a visit at ``watermark`` (ms) that changed the pages ``changed``, whose keys
    are now in ``pages`` (a page missing there, or without keys, is emptied).

    ``earliest`` and ``encode`` take a page of ``pages``: its keys' earliest wake-up (ms), and
    its value as stored; for a :data:`Page` (its keys' states, in its order), :func:`earliest`
    and :func:`page_bytes`. Each changed page's earliest wake-up goes into ``wakes``; a page of
    :data:`INLINE_MAX` keys or fewer is encoded into ``inline``, a larger one is encoded as a
    map entry, and the entry of a page in ``mapped`` (the pages that were map entries) that is
    now kept in the index, or emptied, is removed. ``wakes`` and ``inline`` are the visit's
    own copies, changed in place. The shard's timer: ``timer`` (None: none left, the one that
    fired included) is kept if it is at or before the earliest wake-up and would not fire
    before the shard's next visit at its current ``pace`` (ms since its last visit; None: no
    visit before), else it moves to that wake-up. O(keys of the changed pages).
    """
    written: dict[int, PageRow | None] = {}
    # In page order: a set's order depends on how it was filled, and the index's bytes must
    # not (the twins write the same bytes).
    for page in sorted(changed):
        keys = pages.get(page)
        if keys is not None and len(keys):
            wakes[page] = earliest(keys)
            if len(keys) > INLINE_MAX:
                written[page] = (encode(keys),)
                inline.pop(page, None)
                continue
            inline[page] = encode(keys)
        elif page in wakes:
            del wakes[page]
            inline.pop(page, None)
        if page in mapped:
            written[page] = None  # kept in the index now, or emptied
    if not wakes:
        return ShardVisit(None, written, expiries)
    need = min(wakes.values())
    if (
        timer is None
        or timer <= watermark
        or timer > need
        or pace is None
        or timer - watermark <= pace
    ):
        timer = need
    return ShardVisit(Shard(wakes, watermark, timer, inline), written, expiries)
