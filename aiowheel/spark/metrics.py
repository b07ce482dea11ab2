"""Capacity metrics of a replay: how many timers the service holds, and how often they fire.

This module owns the capacity view of :func:`aiowheel.spark.replay._timer_periods`. Per timeout
and per time bucket (``bucket`` seconds, aligned to multiples of it):

* ``pending`` — keys tracked (timers pending) at the end of the bucket;
* ``peak_pending`` — the most keys tracked at any instant inside the bucket (exact: changes at
  one instant are applied ends first, so a re-touch never counts a key twice);
* ``expirations`` and ``expirations_per_second`` — expiries whose ``expired_at`` is in the bucket.

A key is tracked from a touch at ``t`` until its next event or its deadline, whichever comes
first (``least(next_ts, expired_at)``); a key still tracked at the horizon counts until it.
The summary holds one row per timeout: the what-if table.

The running count is computed without a global sort: a window per ``(timeout, bucket)`` orders
the +1/-1 changes inside each bucket, and only the per-bucket totals (a few thousand rows) are
summed in bucket order. The whole series comes from one pass over the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from aiowheel.spark.replay import _check_timeouts, _timer_periods

__all__ = ["CapacityMetrics", "metrics"]


@dataclass(frozen=True)
class CapacityMetrics:
    """The two views :func:`metrics` returns, both lazy DataFrames.

    ``series``: ``timeout``, ``bucket_start`` (seconds), ``pending``, ``peak_pending``,
    ``expirations``, ``expirations_per_second``; one row per timeout and bucket from the
    log's first event to the horizon.

    ``summary``: ``timeout``, ``touches``, ``expirations``, ``peak_pending``,
    ``peak_pending_at`` (start of the first bucket reaching it), ``mean_pending`` (over
    buckets), ``peak_expirations_per_second``, ``pending_at_horizon`` and ``end`` (end of the
    last bucket); one row per timeout, computed from ``series`` (cache it to read both).
    """

    series: DataFrame
    summary: DataFrame


def metrics(
    spark: SparkSession,
    events: DataFrame,
    *,
    timeouts: Sequence[float],
    tick: float,
    horizon: float | None = None,
    bucket: float = 1.0,
) -> CapacityMetrics:
    """Pending timers over time, expirations per second and their peaks, per timeout.

    Same arguments and rule as :func:`aiowheel.spark.replay`, plus ``bucket``: the width of a
    time bucket in seconds (finite, > 0). Cache ``events`` first if it is expensive to read:
    the series is one pass over it, and the summary is computed from the series.
    """
    width = F.lit(_check_bucket(bucket))
    timeouts = _check_timeouts(timeouts)
    periods = _timer_periods(events, timeouts=timeouts, tick=tick, horizon=horizon)

    def bucket_of(t: Column) -> Column:
        return F.floor(t / width)

    # Each period is a +1 when it starts and a -1 when it ends; the -1 of an expired period is
    # at its expired_at, so the expirations per bucket come out of the same single pass.
    ends = F.least(F.col("next_ts"), F.col("expired_at"))
    change = F.explode(
        F.array(
            F.struct(
                F.col("last_seen").alias("time"),
                F.lit(1).alias("delta"),
                F.lit(False).alias("fired"),
            ),
            F.struct(ends.alias("time"), F.lit(-1).alias("delta"), F.col("expired").alias("fired")),
        )
    )
    changes = (
        periods.select("timeout", "horizon", change.alias("change"))
        .select("timeout", "horizon", "change.*")
        # A period still open at the horizon has no end inside the log.
        .filter(F.col("time") <= F.col("horizon"))
        .withColumn("bucket", bucket_of(F.col("time")))
    )
    within = Window.partitionBy("timeout", "bucket").orderBy("time", "delta")
    per_bucket = (
        changes.withColumn("running", F.sum("delta").over(within))
        .groupBy("timeout", "bucket")
        .agg(
            F.sum("delta").alias("net"),
            F.max("running").alias("local_peak"),
            F.count(F.when(F.col("fired"), True)).alias("expirations"),
            F.count(F.when(F.col("delta") == 1, True)).alias("touches"),
            F.max("horizon").alias("horizon"),
        )
    )
    span = per_bucket.agg(F.min("bucket").alias("first"), bucket_of(F.max("horizon")).alias("last"))
    grid = span.select(F.explode(F.sequence(F.col("first"), F.col("last"))).alias("bucket")).select(
        "bucket", F.explode(F.array(*[F.lit(t) for t in timeouts])).alias("timeout")
    )
    before = (
        Window.partitionBy("timeout").orderBy("bucket").rowsBetween(Window.unboundedPreceding, -1)
    )
    series = (
        grid.join(per_bucket.drop("horizon"), ["timeout", "bucket"], "left")
        .fillna(0, subset=["net", "local_peak", "expirations", "touches"])
        .withColumn("offset", F.coalesce(F.sum("net").over(before), F.lit(0)))
        .select(
            "timeout",
            (F.col("bucket") * width).alias("bucket_start"),
            (F.col("offset") + F.col("net")).alias("pending"),
            (F.col("offset") + F.greatest(F.col("local_peak"), F.lit(0))).alias("peak_pending"),
            F.col("expirations"),
            (F.col("expirations") / width).alias("expirations_per_second"),
            F.col("touches"),
        )
    )
    summary = series.groupBy("timeout").agg(
        F.sum("touches").alias("touches"),
        F.sum("expirations").alias("expirations"),
        F.max("peak_pending").alias("peak_pending"),
        # The first bucket that reaches the peak: ties broken by the earlier bucket.
        F.max_by("bucket_start", F.struct(F.col("peak_pending"), -F.col("bucket_start"))).alias(
            "peak_pending_at"
        ),
        F.avg("pending").alias("mean_pending"),
        F.max("expirations_per_second").alias("peak_expirations_per_second"),
        F.max_by("pending", "bucket_start").alias("pending_at_horizon"),
        (F.max("bucket_start") + width).alias("end"),
    )
    return CapacityMetrics(
        series=series.drop("touches").orderBy("timeout", "bucket_start"),
        summary=summary.orderBy("timeout"),
    )


def _check_bucket(bucket: float) -> float:
    """Return ``bucket`` (seconds) as a float; it must be a real number, finite and > 0."""
    if isinstance(bucket, bool) or not isinstance(bucket, (int, float)):
        raise TypeError(f"bucket must be an int or a float, got {bucket!r}")
    if not (bucket > 0 and bucket != float("inf")):
        raise ValueError(f"bucket must be finite and > 0, got {bucket!r}")
    return float(bucket)
