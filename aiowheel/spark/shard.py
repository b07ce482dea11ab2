"""Many keys in one group: the streaming service's unit of state, of timers and of state calls.

This module owns how :func:`aiowheel.spark.stream` packs keys into *shards*, in plain Python.
Spark's Python stateful operators (``transformWithState`` and its pandas twin) pay for every
group they visit in a micro-batch: a round trip to the JVM's state server to select the group,
one per state read, write and timer change, and the framework's own work around each call. At
one group per key that is about five round trips for every key with events in the batch,
which is where the streaming job's time went. Hashing keys into a fixed number of shards
(``pmod(xxhash64(key), shards)``) makes the group a shard instead: one visit per shard and
micro-batch costs one read and one write of one value, and at most one timer move, whatever
the number of keys in it. Inside, each key keeps its own :class:`KeyState` and is visited by
:class:`IdleRule` only when it has new events or its own wake-up time has come.

The shard's row (:data:`SHARD_FIELDS`):

* ``keys`` -- every key of the shard with state, ``{key: KeyState as a tuple}``, pickled
  (protocol 5); read and written whole, once per visit;
* ``upto`` -- the watermark (ms) of the last visit;
* ``timer`` -- the shard's one registered event-time timer (ms): at or before the earliest
  wake-up of its keys;
* ``shards`` -- the number of shards the query was started with. Keys are placed by it, so a
  restart with a different number would look keys up in the wrong shard; :func:`load`
  refuses it.

The timer moves lazily. A timer that fires early does no harm (the visit finds nothing due and
sets a new one), so a registered timer at or before the earliest wake-up is kept unless it
would fire before the shard's next visit at its current pace: a shard that has events in every
micro-batch moves its timer about once per ``timeout / batch interval`` batches, not on every
batch.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Final, NamedTuple

from aiowheel.spark.keystate import Event, IdleRule, StoredKey

__all__ = ["SHARD_FIELDS", "Expiry", "Shard", "ShardVisit", "StoredKey", "dump", "load", "visit"]

# The state store row of a shard, field for field (see the module documentation).
SHARD_FIELDS = ("keys", "upto", "timer", "shards")

# An expiry as the stream emits it: (key, timeout, expired_at, last_seen).
Expiry = tuple[str, float, float, float]
# Where KeyState (and so StoredKey) keeps `wake`.
_WAKE: Final = 4


class Shard(NamedTuple):
    """A shard between visits: its keys' states and its timer."""

    # Every key of the shard with state.
    keys: dict[str, StoredKey]
    # The watermark (ms) of the last visit.
    upto: int
    # The shard's registered timer (ms), or None.
    timer: int | None


class ShardVisit(NamedTuple):
    """The outcome of :func:`visit`."""

    # The shard to store, or None to clear its row (no key has state left).
    shard: Shard | None
    expiries: list[Expiry]


def load(row: tuple[object, ...] | None, shards: int) -> Shard | None:
    """The shard stored as ``row`` (fields :data:`SHARD_FIELDS`), or None for no row.

    Raises ValueError if the row was written by a query started with another number of shards.
    """
    if row is None:
        return None
    keys, upto, timer, stored = row
    if stored != shards:
        raise ValueError(
            f"this checkpoint's state is split into {stored} shards, not {shards}: restart "
            f"with shards={stored}, or start a new checkpoint"
        )
    return Shard(pickle.loads(keys), upto, timer)  # type: ignore[arg-type]


def dump(shard: Shard, shards: int) -> tuple[bytes, int, int | None, int]:
    """``shard`` as its state store row (fields :data:`SHARD_FIELDS`)."""
    return pickle.dumps(shard.keys, protocol=5), shard.upto, shard.timer, shards


def visit(
    rule: IdleRule,
    shard: Shard | None,
    arrived: Mapping[str, list[Event]],
    watermark: int,
    *,
    firing: int | None = None,
) -> ShardVisit:
    """Visit the keys of ``shard`` that have new events (``arrived``) or whose wake-up time the
    watermark (ms) has reached; emit their expiries and set the shard's timer.

    ``firing`` is the timer (ms) that triggered this visit, which Spark deletes afterwards.
    O(keys in the shard) for finding the due keys, plus a :meth:`IdleRule.visit` per key
    visited.
    """
    if shard is None:
        keys: dict[str, StoredKey] = {}
        timer = pace = None
    else:
        keys = shard.keys
        timer = None if shard.timer == firing else shard.timer
        pace = watermark - shard.upto
    due = [key for key, state in keys.items() if state[_WAKE] <= watermark]
    expiries: list[Expiry] = []
    for key, events in [*arrived.items(), *((key, []) for key in due if key not in arrived)]:
        state, emitted = rule.visit_stored(keys.get(key), events, watermark)
        if emitted:
            expiries.extend((key, *expiry) for expiry in emitted)
        if state is None:
            keys.pop(key, None)
        else:
            keys[key] = state
    if not keys:
        return ShardVisit(None, expiries)
    need = min(state[_WAKE] for state in keys.values())
    if (
        timer is None
        or timer <= watermark
        or timer > need
        or pace is None
        or timer - watermark <= pace
    ):
        timer = need
    return ShardVisit(Shard(keys, watermark, timer), expiries)
