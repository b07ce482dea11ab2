"""Replay an event log through the idle-expiry rule: what would the timer service have done?

This module owns the expiry rule on Spark and its one Python twin (:func:`deadline`), which the
streaming job shares. The rule is :class:`aiowheel.IdleTimeouts`'s, per key:

* events are applied in ``(ts, kind)`` order, ``open`` < ``data`` < ``close`` at equal ``ts``,
  whatever order they arrived in; copies with the same non-null ``event_id`` (per key) count
  once: the first by that order is kept;
* ``open`` and ``data`` are touches, ``close`` stops tracking; a touch on an untracked key
  starts tracking it;
* a key touched last at ``t`` expires at ``E = deadline(t, timeout, tick)``: ``t + timeout``
  rounded up to a whole multiple of ``tick`` (the wheel's never-early rule, with its float
  corrections), unless it is touched or closed strictly before ``E``. An event at ``ts >= E``
  comes too late: the key expires at ``E`` first, then the event applies (a touch starts a new
  period, a close does nothing more);
* the log ends at a horizon (default: its largest ``ts``); events after it are ignored, expiries
  with ``E <= horizon`` are emitted, keys still tracked with ``E > horizon`` are pending.

Because the state after any event depends on that event alone (tracked since ``ts`` after a
touch, untracked after a close), every expiry is decided by one pair of neighbours: a touch at
``t`` expires iff the next event of its key has ``ts >= E``, or there is none and
``E <= horizon``. So the hot path is one ``lead`` window per key, after one shuffle by key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from aiowheel._checks import check_length
from aiowheel._impl import ceil_ticks
from aiowheel.spark.events import _CLOSE_RANK, KINDS, _kind_rank, normalize_events

__all__ = ["Expiry", "collect_expiries", "deadline", "replay", "unique_events"]


class Expiry(NamedTuple):
    """One expiry, as :func:`replay` emits it and ``IdleTimeouts`` fires it."""

    key: str
    timeout: float
    expired_at: float
    last_seen: float


def deadline(last_seen: float, timeout: float, tick: float) -> float:
    """``last_seen + timeout`` rounded up to a whole multiple of ``tick``, as the wheel files it:
    the time the wheel fires it (the wheel's own ``ceil_ticks``, through :mod:`aiowheel._impl`)."""
    return ceil_ticks(last_seen + timeout, tick) * tick


def _deadline_column(last_seen: Column, timeout: Column, tick: float) -> Column:
    """:func:`deadline` as a Spark SQL expression (same double arithmetic, same corrections)."""
    when = last_seen + timeout
    step = F.lit(float(tick))
    q = F.ceil(when / step)
    q = F.when(q * step < when, q + 1).when((q - 1) * step >= when, q - 1).otherwise(q)
    return q * step


def _check_timeouts(timeouts: Iterable[float]) -> list[float]:
    """Return the distinct ``timeouts`` as sorted floats; each must be a real number, finite
    and > 0 (the checks and messages of :mod:`aiowheel._checks`)."""
    checked = {float(check_length(timeout, "each timeout")) for timeout in timeouts}
    if not checked:
        raise ValueError("timeouts must hold at least one timeout, got none")
    return sorted(checked)


def _check_tick(tick: float) -> float:
    """Return ``tick`` as a float; it must be a real number, finite and > 0, as the wheel
    requires."""
    return float(check_length(tick, "tick"))


def _check_horizon(horizon: float | None) -> float | None:
    """Return ``horizon`` as a float, or None; it must be a real number and finite."""
    if horizon is None:
        return None
    if isinstance(horizon, bool) or not isinstance(horizon, (int, float)):
        raise TypeError(f"horizon must be an int, a float or None, got {horizon!r}")
    if not math.isfinite(horizon):
        raise ValueError(f"horizon must be finite, got {horizon!r}")
    return float(horizon)


def unique_events(events: DataFrame, *, horizon: float | None = None) -> DataFrame:
    """The log as the rule applies it: normalised, copies dropped, events after ``horizon`` too.

    Columns ``key``, ``ts``, ``kind``, ``event_id`` and ``rank`` (0 open, 1 data, 2 close),
    hash-partitioned by key, not sorted. Ordered by ``(ts, rank)`` it is the exact sequence of
    touches and closes to drive ``IdleTimeouts`` with in virtual time (advance the clock to
    ``ts``, then ``touch`` or ``discard``); the order of different keys at one ``ts`` does not
    matter.
    """
    bound = _check_horizon(horizon)
    unique = _unique(_bounded(normalize_events(events), bound))
    return unique.select(
        "key",
        "ts",
        F.element_at(F.array(*[F.lit(kind) for kind in KINDS]), F.col("rank") + 1).alias("kind"),
        "event_id",
        "rank",
    )


def _bounded(log: DataFrame, bound: float | None) -> DataFrame:
    return log if bound is None else log.filter(F.col("ts") <= F.lit(bound))


def _unique(log: DataFrame) -> DataFrame:
    """``hash``, ``key``, ``ts``, ``rank`` and ``event_id`` of the normalised ``log``, one row
    per copy group, hash-partitioned by ``(hash, key)``; ``hash`` is ``xxhash64(key)``.

    The de-duplication and the rule's window (:func:`_timer_periods`) partition alike, by
    ``(hash, key)`` with the same ``hash`` column, so the plan has a single shuffle, which
    Spark's adaptive execution may coalesce (an explicit ``repartition`` would keep it from
    that). The hash in front gives each sort an 8-byte prefix that tells keys apart (keys such
    as "conn-0000123" share their first 8 bytes). Within a key, ordered by ``(event_id, ts,
    rank)``, the copies of one id are neighbours and the first by ``(ts, rank)`` leads: a row
    whose predecessor has its (non-null) id is a copy. An event without an id is never one.
    """
    ranked = log.select(
        F.xxhash64("key").alias("hash"),
        "key",
        "ts",
        _kind_rank(F.col("kind")).alias("rank"),
        "event_id",
    )
    copies = Window.partitionBy("hash", "key").orderBy("event_id", "ts", "rank")
    previous = F.lag("event_id").over(copies)
    return (
        ranked.withColumn("previous", previous)
        .filter(
            F.col("event_id").isNull()
            | F.col("previous").isNull()
            | (F.col("previous") != F.col("event_id"))
        )
        .drop("previous")
    )


def _timer_periods(
    events: DataFrame,
    *,
    timeouts: Sequence[float],
    tick: float,
    horizon: float | None = None,
) -> DataFrame:
    """Every touch of the log, once per timeout, with what became of its timer.

    Columns: ``key``, ``timeout``, ``last_seen`` (the touch's ts), ``expired_at`` (its deadline
    E), ``next_ts`` (ts of the key's next event, null for its last), ``horizon`` and
    ``expired`` (True iff this touch's period ends in an expiry at ``expired_at``). A touch's
    timer is pending from ``last_seen`` until ``least(next_ts, expired_at)``; a last touch with
    ``expired_at > horizon`` is still pending at the horizon. :func:`replay` and the capacity
    metrics are both views of this DataFrame.

    Without ``horizon``, the log's largest ``ts`` is a scalar subquery: one more (column-pruned)
    read of ``events``; cache ``events`` first if it is expensive to compute.
    """
    timeouts = _check_timeouts(timeouts)
    tick = _check_tick(tick)
    bound = _check_horizon(horizon)
    log = normalize_events(events)
    unique = _unique(_bounded(log, bound))
    # The same partitioning as the de-duplication's: no second shuffle (see _unique).
    order = Window.partitionBy("hash", "key").orderBy("ts", "rank")
    touches = unique.select("key", "ts", "rank", F.lead("ts").over(order).alias("next_ts")).filter(
        F.col("rank") != F.lit(_CLOSE_RANK)
    )
    end = F.lit(bound) if bound is not None else log.agg(F.max("ts")).scalar()
    expired_at = _deadline_column(F.col("last_seen"), F.col("timeout"), tick)
    return (
        touches.select(
            "key",
            _each(timeouts).alias("timeout"),
            F.col("ts").alias("last_seen"),
            "next_ts",
            end.alias("horizon"),
        )
        .withColumn("expired_at", expired_at)
        .withColumn(
            "expired",
            F.when(F.col("next_ts").isNull(), F.col("expired_at") <= F.col("horizon")).otherwise(
                F.col("next_ts") >= F.col("expired_at")
            ),
        )
    )


def _each(timeouts: Sequence[float]) -> Column:
    """A row per timeout: one literal, or an explode when there are several."""
    if len(timeouts) == 1:
        return F.lit(timeouts[0])
    return F.explode(F.array(*[F.lit(t) for t in timeouts]))


def replay(
    spark: SparkSession,
    events: DataFrame,
    *,
    timeouts: Sequence[float],
    tick: float,
    horizon: float | None = None,
) -> DataFrame:
    """Every expiry ``IdleTimeouts`` would produce on ``events``, for each of ``timeouts``.

    Returns a lazy DataFrame with columns ``key`` (string), ``timeout``, ``expired_at`` and
    ``last_seen`` (doubles, seconds); one row per idle period that ended in an expiry at or
    before the horizon (default: the log's largest ``ts``). ``events`` is a DataFrame in the
    event log format (see :mod:`aiowheel.spark.events`); ``tick`` is the timer's tick, seconds.
    Built-in Spark SQL only: one shuffle by key, a de-duplication window and a ``lead``.
    ``spark`` is not needed (``events`` carries its session); it keeps the API's shape uniform.
    """
    periods = _timer_periods(events, timeouts=timeouts, tick=tick, horizon=horizon)
    return periods.filter(F.col("expired")).select("key", "timeout", "expired_at", "last_seen")


def collect_expiries(expiries: DataFrame) -> set[Expiry]:
    """Collect a (small) expiry DataFrame to the driver as a set, for comparing implementations."""
    rows = expiries.select("key", "timeout", "expired_at", "last_seen").collect()
    return {Expiry(row[0], row[1], row[2], row[3]) for row in rows}
