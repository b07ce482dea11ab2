"""metrics: pending timers, peaks and expirations per bucket, against a plain sweep."""

from __future__ import annotations

import pytest
from idle_reference import reference_series
from pyspark.sql import DataFrame, SparkSession

from aiowheel.spark import EVENT_SCHEMA, metrics

pytestmark = pytest.mark.spark

Rows = list[tuple[str, float, str, str | None]]


def series_of(frame: DataFrame, timeout: float, bucket: float) -> dict[int, tuple[int, int, int]]:
    rows = frame.filter(frame.timeout == timeout).collect()
    return {
        round(row.bucket_start / bucket): (row.pending, row.peak_pending, row.expirations)
        for row in rows
    }


def test_small_log_series_and_summary(spark: SparkSession) -> None:
    rows = [
        ("a", 0.5, "open", None),
        ("b", 1.0, "open", None),
        ("a", 2.0, "data", None),  # a re-touch: still one timer
        ("b", 3.5, "close", None),
        ("c", 4.0, "open", None),
        ("c", 9.0, "data", None),
    ]
    events = spark.createDataFrame(rows, EVENT_SCHEMA)
    result = metrics(spark, events, timeouts=[5.0], tick=1.0, bucket=1.0)
    got = series_of(result.series, 5.0, 1.0)
    assert got == reference_series(rows, timeout=5.0, tick=1.0, bucket=1.0)
    # a: 0.5..7 (expires at 7), b: 1..3.5, c: 4..9 (expires at 9, at the horizon) then 9..
    assert got[1] == (2, 2, 0)
    assert got[3] == (1, 2, 0)
    assert got[7] == (1, 2, 1)
    assert got[9] == (1, 1, 1)
    (summary,) = result.summary.collect()
    assert summary.touches == 5
    assert summary.expirations == 2
    assert summary.peak_pending == 2
    assert summary.peak_pending_at == 1.0
    assert summary.pending_at_horizon == 1
    assert summary.end == 10.0


def test_generated_log_matches_the_sweep(
    spark: SparkSession, generated_log: tuple[DataFrame, Rows]
) -> None:
    events, rows = generated_log
    result = metrics(spark, events, timeouts=[20.0, 30.0], tick=0.001, bucket=5.0)
    series = result.series.cache()
    for timeout in (20.0, 30.0):
        expected = reference_series(rows, timeout=timeout, tick=0.001, bucket=5.0)
        assert series_of(series, timeout, 5.0) == expected
    summary = {row.timeout: row for row in result.summary.collect()}
    assert summary[30.0].touches == sum(1 for _k, _t, kind, _i in set(rows) if kind != "close")
    assert summary[30.0].peak_pending > 3_600
    assert summary[20.0].expirations > summary[30.0].expirations
    series.unpersist()
